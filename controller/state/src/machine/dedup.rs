//! Exactly-once client writes: the outcomes of recently applied request ids, so a retry
//! after a timeout or a failover gets the first outcome instead of a second job.

use super::Shared;
use crate::command::Outcome;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How many applied request ids are remembered.
pub const DEDUP_CAPACITY: usize = 200_000;

/// Request ids and outcomes, oldest first, with an index by id. Serialised as the list
/// alone (the index is rebuilt when a snapshot is read). Ids and outcomes are shared,
/// so a clone (a snapshot's) copies pointers, not 200,000 strings.
#[derive(Debug, Clone, Default)]
pub struct Dedup {
    entries: VecDeque<(Arc<str>, Shared<Outcome>)>,
    /// id -> position counted from the first entry ever remembered.
    index: BTreeMap<Arc<str>, usize>,
    /// How many entries were dropped from the front.
    base: usize,
}

impl PartialEq for Dedup {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Dedup {
    pub fn lookup(&self, request_id: &str) -> Option<&Outcome> {
        let i = *self.index.get(request_id)?;
        self.entries.get(i - self.base).map(|(_, o)| &**o)
    }

    pub fn remember(&mut self, request_id: String, outcome: Outcome) {
        let id: Arc<str> = request_id.into();
        self.index
            .insert(id.clone(), self.base + self.entries.len());
        self.entries.push_back((id, Shared::new(outcome)));
        while self.entries.len() > DEDUP_CAPACITY {
            if let Some((old, _)) = self.entries.pop_front() {
                self.index.remove(&old);
            }
            self.base += 1;
        }
    }
}

impl Serialize for Dedup {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.entries.iter().map(|(id, o)| (&**id, &**o)))
    }
}

impl<'de> Deserialize<'de> for Dedup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entries: VecDeque<(Arc<str>, Shared<Outcome>)> =
            VecDeque::<(String, Outcome)>::deserialize(d)?
                .into_iter()
                .map(|(id, o)| (id.into(), Shared::new(o)))
                .collect();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (id.clone(), i))
            .collect();
        Ok(Dedup {
            entries,
            index,
            base: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_id_answers_until_it_ages_out() {
        let mut d = Dedup::default();
        d.remember("a".into(), Outcome::Ok);
        assert_eq!(d.lookup("a"), Some(&Outcome::Ok));
        for i in 0..DEDUP_CAPACITY {
            d.remember(format!("r{i}"), Outcome::Ok);
        }
        assert_eq!(d.lookup("a"), None, "the oldest id is forgotten first");
        assert!(d.lookup("r1").is_some());
        let back: Dedup = serde_json::from_slice(&serde_json::to_vec(&d).unwrap()).unwrap();
        assert_eq!(back.lookup("r5"), Some(&Outcome::Ok));
        assert_eq!(back, d);
    }
}
