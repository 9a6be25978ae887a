//! Admin reservations as one pass sees them: per node, the GPUs each window holds, and
//! from those the GPUs a job may not touch over the time it would run.

use crate::input::Snapshot;
use crate::place::CLOSED;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// One reservation that has not ended.
#[derive(Debug, Clone)]
pub struct Window {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub maint: bool,
    /// Node index -> GPUs held ([`CLOSED`] for a whole node).
    masks: HashMap<usize, u64>,
}

impl Window {
    fn mask(&self, ni: usize) -> u64 {
        self.masks.get(&ni).copied().unwrap_or(0)
    }

    fn overlaps(&self, from_ms: u64, to_ms: Option<u64>) -> bool {
        self.start_ms < to_ms.unwrap_or(u64::MAX) && self.end_ms > from_ms
    }
}

/// Every window of a pass, and the nodes any of them touches.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    list: Vec<Window>,
    nodes: BTreeSet<usize>,
}

impl Windows {
    /// The snapshot's reservations that have not ended at `now_ms`, on registered nodes.
    pub fn new(snap: &Snapshot, node_index: &HashMap<&str, usize>, now_ms: u64) -> Windows {
        let mut w = Windows::default();
        for r in snap.reservations.iter().filter(|r| r.end_ms > now_ms) {
            let mut masks = HashMap::default();
            for n in &r.nodes {
                let Some(&ni) = node_index.get(n.node.as_str()) else {
                    continue;
                };
                let m = if n.whole {
                    CLOSED
                } else {
                    n.gpus
                        .iter()
                        .filter(|g| **g < 64)
                        .fold(0u64, |m, g| m | (1 << g))
                };
                *masks.entry(ni).or_default() |= m;
                w.nodes.insert(ni);
            }
            w.list.push(Window {
                name: r.name.clone(),
                start_ms: r.start_ms,
                end_ms: r.end_ms,
                maint: r.flags.maint,
                masks,
            });
        }
        w
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Window> {
        self.list.iter().find(|w| w.name == name)
    }

    /// Nodes some window holds GPUs of.
    pub fn nodes(&self) -> &BTreeSet<usize> {
        &self.nodes
    }

    /// Times at which a window ends, after `after_ms`, with the nodes it frees.
    pub fn ends_after(&self, after_ms: u64) -> Vec<(u64, Vec<usize>)> {
        let mut ends: Vec<(u64, Vec<usize>)> = self
            .list
            .iter()
            .filter(|w| w.end_ms > after_ms)
            .map(|w| (w.end_ms, w.masks.keys().copied().collect()))
            .collect();
        ends.sort();
        ends
    }

    /// GPUs of node `ni` that a job in reservation `own` (or none) running over
    /// `[from_ms, to_ms)` (`None`: no end) must not touch: every other window it would
    /// overlap, and, inside its own, everything outside that window.
    pub fn mask(&self, own: Option<&str>, ni: usize, from_ms: u64, to_ms: Option<u64>) -> u64 {
        let mut mask = 0u64;
        for w in &self.list {
            if Some(w.name.as_str()) == own {
                mask |= !w.mask(ni);
            } else if w.overlaps(from_ms, to_ms) {
                mask |= w.mask(ni);
            }
            if mask == CLOSED {
                break;
            }
        }
        if own.is_some_and(|o| self.get(o).is_none()) {
            return CLOSED;
        }
        mask
    }

    /// Whether a maintenance window is among those a job outside it would overlap.
    pub fn maint_in_the_way(&self, own: Option<&str>, from_ms: u64, to_ms: Option<u64>) -> bool {
        self.list
            .iter()
            .any(|w| w.maint && Some(w.name.as_str()) != own && w.overlaps(from_ms, to_ms))
    }
}
