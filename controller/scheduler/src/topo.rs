//! A node's GPU wiring reduced to what placement needs, and the choice of the best GPU set
//! of a given size among the free GPUs.
//!
//! Quality of a GPU set, compared lexicographically (lower is better):
//! 1. the worst link tier between any two chosen GPUs (NVLink, PIX, PXB, PHB, NODE, SYS),
//! 2. the worst exact link rank (NV18 beats NV4),
//! 3. how many NUMA nodes the set spans,
//! 4. the sum of link ranks over all pairs.
//!
//! Among sets of equal quality the one that leaves the best-connected free blocks wins
//! (anti-fragmentation): for each block size from the largest down, the best quality still
//! achievable with the GPUs left free.

use gsched_types::topology::{LinkClass, Topology};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Largest GPU count for which every subset's quality is tabulated; bigger nodes use a
/// greedy choice.
const TABLE_MAX_GPUS: usize = 12;

/// The quality of a GPU set; lower is better. `Ord` is the comparison placement uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SetQuality {
    pub worst_tier: u8,
    pub worst_rank: u16,
    pub numa_span: u8,
    pub rank_sum: u32,
}

/// A node's wiring, as placement sees it.
#[derive(Debug)]
pub struct TopoModel {
    n: usize,
    rank: Vec<Vec<u16>>,
    tier: Vec<Vec<u8>>,
    numa: Vec<Option<u32>>,
    /// Quality of every subset (bit i = GPU i), when `n <= TABLE_MAX_GPUS`.
    table: Vec<SetQuality>,
    /// Memo of `best_set(free_mask, k)`; pure memoisation, it never changes a result.
    memo: Mutex<ChoiceMemo>,
}

/// `(free GPU mask, set size)` -> the best choice, if any.
type ChoiceMemo = FxHashMap<(u64, u32), Option<Arc<Choice>>>;

/// A chosen GPU set with its quality and the fragmentation it leaves behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub mask: u64,
    pub quality: SetQuality,
    /// Best achievable quality of the remaining free GPUs for block sizes from the largest
    /// down (shorter vectors compare smaller, which is fine: they come from equal sets).
    pub leftover: Vec<SetQuality>,
}

impl TopoModel {
    pub fn from_topology(topo: &Topology) -> TopoModel {
        let n = topo.gpus.len();
        let numa = (0..n).map(|i| topo.gpu_numa(i)).collect();
        let link = |i: usize, j: usize| topo.link(i, j);
        Self::build(n, link, numa)
    }

    /// A model where every pair has the same link: pooled GPUs with no wiring known.
    pub fn uniform(n: usize, class: LinkClass) -> TopoModel {
        Self::build(
            n,
            |i, j| if i == j { LinkClass::SameDevice } else { class },
            vec![None; n],
        )
    }

    fn build(
        n: usize,
        link: impl Fn(usize, usize) -> LinkClass,
        numa: Vec<Option<u32>>,
    ) -> TopoModel {
        let mut rank = vec![vec![0u16; n]; n];
        let mut tier = vec![vec![0u8; n]; n];
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    let l = link(i, j);
                    rank[i][j] = l.rank();
                    tier[i][j] = l.tier();
                }
            }
        }
        let mut model = TopoModel {
            n,
            rank,
            tier,
            numa,
            table: Vec::new(),
            memo: Mutex::new(FxHashMap::default()),
        };
        if n <= TABLE_MAX_GPUS {
            model.table = (0..1u64 << n).map(|m| model.compute_quality(m)).collect();
        }
        model
    }

    pub fn gpu_count(&self) -> usize {
        self.n
    }

    pub fn numa_of(&self, gpu: u32) -> Option<u32> {
        self.numa.get(gpu as usize).copied().flatten()
    }

    fn compute_quality(&self, mask: u64) -> SetQuality {
        let gpus: Vec<usize> = (0..self.n).filter(|i| mask & (1 << i) != 0).collect();
        let mut q = SetQuality::default();
        for (a, &i) in gpus.iter().enumerate() {
            for &j in &gpus[a + 1..] {
                q.worst_tier = q.worst_tier.max(self.tier[i][j]);
                q.worst_rank = q.worst_rank.max(self.rank[i][j]);
                q.rank_sum += u32::from(self.rank[i][j]);
            }
        }
        let mut numas: Vec<u32> = gpus.iter().filter_map(|&i| self.numa[i]).collect();
        numas.sort_unstable();
        numas.dedup();
        q.numa_span = numas.len().min(255) as u8;
        q
    }

    /// Quality of an arbitrary set of GPU indices.
    pub fn quality(&self, mask: u64) -> SetQuality {
        self.table
            .get(mask as usize)
            .copied()
            .unwrap_or_else(|| self.compute_quality(mask))
    }

    /// The best achievable quality for a `k`-subset of `mask` (best set's quality).
    fn best_quality_of_size(&self, mask: u64, k: u32) -> Option<SetQuality> {
        if mask.count_ones() < k {
            return None;
        }
        let mut best: Option<SetQuality> = None;
        for_each_subset_of_size(mask, k, |s| {
            let q = self.quality(s);
            if best.is_none_or(|b| q < b) {
                best = Some(q);
            }
        });
        best
    }

    fn leftover_profile(&self, remaining: u64) -> Vec<SetQuality> {
        let left = remaining.count_ones();
        (2..=left)
            .rev()
            .filter_map(|k| self.best_quality_of_size(remaining, k))
            .collect()
    }

    /// The best set of `k` GPUs among `free_mask`, or `None` if fewer are free.
    pub fn best_set(&self, free_mask: u64, k: u32) -> Option<Arc<Choice>> {
        if free_mask.count_ones() < k {
            return None;
        }
        if let Some(hit) = self.memo.lock().get(&(free_mask, k)).cloned() {
            return hit;
        }
        let choice = if k == 0 {
            Some(Choice {
                mask: 0,
                quality: SetQuality::default(),
                leftover: self.leftover_profile(free_mask),
            })
        } else if self.n <= TABLE_MAX_GPUS {
            self.exhaustive(free_mask, k)
        } else {
            self.greedy(free_mask, k)
        }
        .map(Arc::new);
        let mut memo = self.memo.lock();
        if memo.len() > 100_000 {
            memo.clear();
        }
        memo.insert((free_mask, k), choice.clone());
        drop(memo);
        choice
    }

    fn exhaustive(&self, free_mask: u64, k: u32) -> Option<Choice> {
        let mut best: Option<Choice> = None;
        // Leftover profiles are only computed for sets tied on quality with the best so far.
        for_each_subset_of_size(free_mask, k, |s| {
            let q = self.quality(s);
            match &best {
                Some(b) if q > b.quality => {}
                Some(b) if q == b.quality => {
                    let leftover = self.leftover_profile(free_mask & !s);
                    if leftover < b.leftover {
                        best = Some(Choice {
                            mask: s,
                            quality: q,
                            leftover,
                        });
                    }
                }
                _ => {
                    let leftover = self.leftover_profile(free_mask & !s);
                    best = Some(Choice {
                        mask: s,
                        quality: q,
                        leftover,
                    });
                }
            }
        });
        best
    }

    /// For large nodes: grow from each starting GPU by adding the GPU whose worst link to the
    /// set is best, keep the best result.
    fn greedy(&self, free_mask: u64, k: u32) -> Option<Choice> {
        let free: Vec<usize> = (0..self.n).filter(|i| free_mask & (1 << i) != 0).collect();
        let mut best: Option<Choice> = None;
        for &start in &free {
            let mut set = vec![start];
            while set.len() < k as usize {
                let next = free
                    .iter()
                    .filter(|g| !set.contains(g))
                    .min_by_key(|&&g| {
                        (
                            set.iter().map(|&s| self.rank[s][g]).max().unwrap_or(0),
                            set.iter().map(|&s| u32::from(self.rank[s][g])).sum::<u32>(),
                            g,
                        )
                    })
                    .copied()?;
                set.push(next);
            }
            let mask = set.iter().fold(0u64, |m, &g| m | (1 << g));
            let q = self.compute_quality(mask);
            if best.as_ref().is_none_or(|b| q < b.quality) {
                best = Some(Choice {
                    mask,
                    quality: q,
                    leftover: Vec::new(),
                });
            }
        }
        best
    }
}

/// Calls `f` for every subset of `mask` with exactly `k` bits set.
pub fn for_each_subset_of_size(mask: u64, k: u32, mut f: impl FnMut(u64)) {
    let bits: Vec<u32> = (0..64).filter(|b| mask & (1u64 << b) != 0).collect();
    let n = bits.len();
    let k = k as usize;
    if k > n {
        return;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        f(idx.iter().fold(0u64, |m, &i| m | (1u64 << bits[i])));
        // Advance to the next combination in lexicographic order.
        let mut i = k;
        while i > 0 && idx[i - 1] == n - k + (i - 1) {
            i -= 1;
        }
        if i == 0 {
            return;
        }
        idx[i - 1] += 1;
        for j in i..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// GPU indices of a mask, ascending (PCI order).
pub fn mask_to_ids(mask: u64) -> Vec<u32> {
    (0..64).filter(|b| mask & (1u64 << b) != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_are_complete() {
        let mut n = 0;
        for_each_subset_of_size(0b1111_1111, 4, |m| {
            assert_eq!(m.count_ones(), 4);
            n += 1;
        });
        assert_eq!(n, 70);
        let mut one = Vec::new();
        for_each_subset_of_size(0b1010, 1, |m| one.push(m));
        assert_eq!(one, vec![0b10, 0b1000]);
        let mut all = 0;
        for_each_subset_of_size(0b111, 3, |_| all += 1);
        assert_eq!(all, 1);
        let mut none = 0;
        for_each_subset_of_size(0b11, 3, |_| none += 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn prefers_nvlink_pair_and_keeps_blocks() {
        // GPUs 0-1 NVLinked, 2-3 NVLinked, everything else SYS.
        let mut topo = Topology::empty("test");
        for i in 0..4 {
            topo.gpus.push(gsched_types::Gpu::new(i));
        }
        topo.gpu_links = (0..4)
            .map(|i| {
                (0..4)
                    .map(|j| {
                        if i == j {
                            LinkClass::SameDevice
                        } else if i / 2 == j / 2 {
                            LinkClass::NvLink(4)
                        } else {
                            LinkClass::Sys
                        }
                    })
                    .collect()
            })
            .collect();
        let m = TopoModel::from_topology(&topo);
        let c = m.best_set(0b1111, 2).unwrap();
        assert!(c.mask == 0b0011 || c.mask == 0b1100);
        // With GPU 0 busy, a 1-GPU job takes GPU 1 (the orphan), leaving the 2-3 pair whole.
        let c = m.best_set(0b1110, 1).unwrap();
        assert_eq!(c.mask, 0b0010);
    }
}
