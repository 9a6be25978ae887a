//! Which runs a burn-in makes: per node for the first two stages, node pairs in rounds
//! that never put one node in two runs at once, then every node together. Pure.

use super::{Run, Stage, expect};
use gsched_types::api::NodeRow;
use gsched_types::node::NodeAdminState;

/// GPUs the scheduler may hand out on `n`.
fn usable_gpus(n: &NodeRow) -> u32 {
    n.gpus_total.saturating_sub(n.bad_gpus.len() as u32)
}

/// The runs for `nodes`, and a line for each node or stage left out.
pub fn plan(nodes: &[NodeRow]) -> (Vec<Run>, Vec<String>) {
    let mut skipped = Vec::new();
    let mut ready: Vec<&NodeRow> = Vec::new();
    for n in nodes {
        let why = if !n.online || !n.responding {
            Some("its agent does not answer")
        } else if matches!(n.admin, NodeAdminState::Drain { .. }) {
            Some("it is drained (gctl node resume it first)")
        } else if usable_gpus(n) == 0 {
            Some("it has no usable GPU")
        } else {
            None
        };
        match why {
            Some(why) => skipped.push(format!("{}: left out, {why}", n.name)),
            None => ready.push(n),
        }
    }
    let mut runs = Vec::new();
    let mut add = |stage: Stage, group: &[&NodeRow], round: u32| {
        let gpus_per_node = group.iter().map(|n| usable_gpus(n)).min().unwrap_or(0);
        let expected = match stage {
            Stage::Gpu => None,
            _ => expect::expected(group, gpus_per_node),
        };
        runs.push(Run {
            stage,
            nodes: group.iter().map(|n| n.name.clone()).collect(),
            gpus_per_node,
            round,
            expected,
        });
    };
    for n in &ready {
        add(Stage::Gpu, &[n], 0);
    }
    for n in &ready {
        if usable_gpus(n) > 1 {
            add(Stage::Node, &[n], 0);
        } else {
            skipped.push(format!(
                "{}: no node all-reduce, it has one usable GPU",
                n.name
            ));
        }
    }
    for (round, pairs) in pair_rounds(ready.len()).iter().enumerate() {
        for &(a, b) in pairs {
            add(Stage::Pair, &[ready[a], ready[b]], round as u32);
        }
    }
    if ready.len() > 2 {
        add(Stage::All, &ready, 0);
    }
    if ready.len() < 2 {
        skipped.push("node pairs and the whole set: fewer than two nodes".into());
    } else if ready.len() == 2 {
        skipped.push("the whole set: it is the one pair".into());
    }
    (runs, skipped)
}

/// Each node with the next (a ring; one pair for two nodes), grouped into rounds in which
/// no node appears twice.
pub fn pair_rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    let pairs: Vec<(usize, usize)> = match n {
        0 | 1 => Vec::new(),
        2 => vec![(0, 1)],
        _ => (0..n).map(|i| (i, (i + 1) % n)).collect(),
    };
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for p in pairs {
        let free = rounds.iter().position(|r| {
            r.iter()
                .all(|&(a, b)| a != p.0 && a != p.1 && b != p.0 && b != p.1)
        });
        match free {
            Some(i) => rounds[i].push(p),
            None => rounds.push(vec![p]),
        }
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_form_a_ring_and_rounds_share_no_node() {
        assert!(pair_rounds(1).is_empty());
        assert_eq!(pair_rounds(2), vec![vec![(0, 1)]]);
        for n in 3..=8 {
            let rounds = pair_rounds(n);
            let all: Vec<_> = rounds.iter().flatten().collect();
            assert_eq!(all.len(), n, "{n} nodes: one pair per node");
            for i in 0..n {
                assert_eq!(
                    all.iter().filter(|(a, b)| *a == i || *b == i).count(),
                    2,
                    "node {i} of {n} is in two pairs"
                );
            }
            for r in &rounds {
                let mut seen: Vec<usize> = r.iter().flat_map(|&(a, b)| [a, b]).collect();
                seen.sort();
                seen.dedup();
                assert_eq!(seen.len(), r.len() * 2, "{r:?}");
            }
            assert!(rounds.len() <= 3, "{n}: {rounds:?}");
        }
    }
}
