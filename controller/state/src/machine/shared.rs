//! Copy-on-write values: what a snapshot being written shares with the live state.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// A value that clones by reference count; the first change made to a clone still
/// shared copies it ([`Arc::make_mut`]). A clone of the state to serialise costs a
/// pointer per job, and the live state goes on changing beside it. Serialised as the
/// value itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub fn new(value: T) -> Shared<T> {
        Shared(Arc::new(value))
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shared<T>, D::Error> {
        T::deserialize(d).map(Shared::new)
    }
}

#[cfg(test)]
mod tests {
    use super::Shared;

    #[test]
    fn a_change_after_a_clone_copies_and_leaves_the_clone_alone() {
        let mut live = Shared::new(vec![1, 2]);
        let frozen = live.clone();
        live.push(3);
        assert_eq!(*frozen, vec![1, 2]);
        assert_eq!(*live, vec![1, 2, 3]);
        assert_eq!(serde_json::to_string(&live).unwrap(), "[1,2,3]");
        let back: Shared<Vec<i32>> = serde_json::from_str("[4]").unwrap();
        assert_eq!(*back, vec![4]);
    }
}
