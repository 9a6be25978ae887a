//! Admin reservations: create, update and delete them, choose the nodes or GPUs a
//! `NodeCnt=`/`TRES=gres/gpu=` request gets, refuse overlaps and busy resources as
//! Slurm does, and drop each one once its window has ended.

use super::ClusterState;
use crate::command::{CreateReservation, DeleteReservation, Outcome, UpdateReservation};
use gsched_types::JobSpec;
use gsched_types::job::JobId;
use gsched_types::reservation::{Reservation, ReservationSpec, ResvNode, ResvResources};
use std::collections::BTreeSet;

/// A reservation window may not be longer than this (Slurm allows "infinite"; a year
/// is as far as a lab plans).
const MAX_WINDOW_MS: u64 = 366 * 86_400_000;

impl ClusterState {
    pub(super) fn create_reservation(&mut self, c: &CreateReservation, at: u64) -> Outcome {
        if !c.admin {
            return denied(&c.by);
        }
        let spec = &c.spec;
        if let Err(message) = check_name(&spec.name) {
            return Outcome::Rejected { message };
        }
        if self.reservations.contains_key(&spec.name) {
            return Outcome::Rejected {
                message: format!(
                    "Duplicate reservation name: '{}' exists (gctl reservation update changes it)",
                    spec.name
                ),
            };
        }
        let start_ms = spec.start_ms.unwrap_or(at).max(at);
        let draft = Reservation {
            name: spec.name.clone(),
            start_ms,
            end_ms: 0,
            users: spec.users.clone().unwrap_or_default(),
            accounts: spec.accounts.clone().unwrap_or_default(),
            request: match &spec.resources {
                Some(r) => r.clone(),
                None => {
                    return Outcome::Rejected {
                        message: "say what to reserve: Nodes=, NodeCnt= or TRES=gres/gpu=N".into(),
                    };
                }
            },
            nodes: Vec::new(),
            flags: spec.flags.unwrap_or_default(),
            by: c.by.clone(),
        };
        self.settle(draft, spec, true)
    }

    pub(super) fn update_reservation(&mut self, c: &UpdateReservation, at: u64) -> Outcome {
        if !c.admin {
            return denied(&c.by);
        }
        let spec = &c.spec;
        let Some(old) = self.reservations.get(&spec.name).cloned() else {
            return not_found(&spec.name);
        };
        let mut draft = old.clone();
        if let Some(s) = spec.start_ms {
            draft.start_ms = s.max(at.min(old.start_ms));
        }
        if let Some(u) = &spec.users {
            draft.users = u.clone();
        }
        if let Some(a) = &spec.accounts {
            draft.accounts = a.clone();
        }
        if let Some(f) = spec.flags {
            draft.flags = f;
        }
        let rechoose = spec.resources.is_some();
        if let Some(r) = &spec.resources {
            draft.request = r.clone();
        }
        // Without new times the window keeps its length; an end or duration replaces it.
        let keep = ReservationSpec {
            end_ms: spec.end_ms.or_else(|| {
                spec.duration_s
                    .is_none()
                    .then_some(draft.start_ms + (old.end_ms - old.start_ms))
            }),
            duration_s: spec.duration_s,
            ..ReservationSpec::default()
        };
        if !rechoose {
            draft.nodes = old.nodes.clone();
        }
        self.settle(draft, &keep, rechoose)
    }

    pub(super) fn delete_reservation(&mut self, c: &DeleteReservation) -> Outcome {
        if !c.admin {
            return denied(&c.by);
        }
        if !self.reservations.contains_key(&c.name) {
            return not_found(&c.name);
        }
        let users: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| !j.state.is_terminal() && j.spec.reservation.as_deref() == Some(&c.name))
            .map(|j| j.id)
            .take(10)
            .collect();
        if !users.is_empty() {
            let ids: Vec<String> = users.iter().map(|j| j.to_string()).collect();
            return Outcome::Rejected {
                message: format!(
                    "Requested reservation is in use: job(s) {} run or wait in '{}'; cancel them or let them end first",
                    ids.join(", "),
                    c.name
                ),
            };
        }
        self.reservations.remove(&c.name);
        Outcome::Ok
    }

    /// Drops reservations whose window has ended at `now_ms`.
    pub(super) fn expire_reservations(&mut self, now_ms: u64) {
        if !self.reservations.is_empty() {
            self.reservations.retain(|_, r| r.end_ms > now_ms);
        }
    }

    /// Checks a reservation's window, users and resources, chooses what it holds (when
    /// `choose`), and stores it.
    fn settle(&mut self, mut r: Reservation, times: &ReservationSpec, choose: bool) -> Outcome {
        r.end_ms = match (times.end_ms, times.duration_s) {
            (Some(e), _) => e,
            (None, Some(d)) => r.start_ms.saturating_add(d.saturating_mul(1000)),
            (None, None) => {
                return Outcome::Rejected {
                    message: "give the reservation an end: Duration= or EndTime=".into(),
                };
            }
        };
        if r.end_ms <= r.start_ms {
            return Outcome::Rejected {
                message: "the reservation ends before it starts: EndTime must be after StartTime"
                    .into(),
            };
        }
        if r.end_ms - r.start_ms > MAX_WINDOW_MS {
            return Outcome::Rejected {
                message: "a reservation may last at most 366 days".into(),
            };
        }
        if r.users.is_empty() && r.accounts.is_empty() {
            return Outcome::Rejected {
                message: "Either Users and/or Accounts must be specified: no reservation created"
                    .into(),
            };
        }
        if choose {
            match self.choose_resources(&r) {
                Ok(nodes) => r.nodes = nodes,
                Err(message) => return Outcome::Rejected { message },
            }
        }
        if let Err(message) = self.check_free(&r) {
            return Outcome::Rejected { message };
        }
        self.reservations.insert(r.name.clone(), r);
        Outcome::Ok
    }

    /// What a request holds: the named nodes whole, the first free nodes by name, or
    /// GPUs on as few nodes as possible (the fullest that fits first).
    fn choose_resources(&self, r: &Reservation) -> Result<Vec<ResvNode>, String> {
        let whole = |node: &String| ResvNode {
            node: node.clone(),
            whole: true,
            gpus: Vec::new(),
        };
        match &r.request {
            ResvResources::Nodes(list) => {
                if list.is_empty() {
                    return Err("Nodes= names no node".into());
                }
                if let Some(n) = list.iter().find(|n| !self.nodes.contains_key(*n)) {
                    return Err(format!(
                        "node '{n}' is not registered (ginfo lists the nodes)"
                    ));
                }
                Ok(list.iter().map(whole).collect())
            }
            ResvResources::NodeCount(n) => {
                let free: Vec<&String> = self
                    .nodes
                    .keys()
                    .filter(|name| {
                        let trial = ResvNode {
                            node: (*name).clone(),
                            whole: true,
                            gpus: Vec::new(),
                        };
                        self.conflict(r, &trial).is_none()
                    })
                    .take(*n as usize)
                    .collect();
                if *n == 0 || free.len() < *n as usize {
                    return Err(format!(
                        "Requested nodes are busy: {} of {} nodes are free over the window (jobs or other reservations hold the rest)",
                        free.len(),
                        n
                    ));
                }
                Ok(free.into_iter().map(whole).collect())
            }
            ResvResources::Gpus(n) => self.choose_gpus(r, *n),
        }
    }

    fn choose_gpus(&self, r: &Reservation, n: u32) -> Result<Vec<ResvNode>, String> {
        if n == 0 {
            return Err("TRES=gres/gpu=N needs N of at least 1".into());
        }
        let mut free: Vec<(String, Vec<u32>)> = self
            .nodes
            .iter()
            .map(|(name, node)| {
                let gpus = (0..node.topology.gpus.len() as u32)
                    .filter(|g| !node.bad_gpus.contains(g))
                    .filter(|g| {
                        let trial = ResvNode {
                            node: name.clone(),
                            whole: false,
                            gpus: vec![*g],
                        };
                        self.conflict(r, &trial).is_none()
                    })
                    .collect();
                (name.clone(), gpus)
            })
            .filter(|(_, g): &(String, Vec<u32>)| !g.is_empty())
            .collect();
        let total: usize = free.iter().map(|(_, g)| g.len()).sum();
        if total < n as usize {
            return Err(format!(
                "Requested nodes are busy: {total} GPUs are free over the window, {n} asked"
            ));
        }
        // One node if one can hold them all (the one with the fewest spare), else the
        // nodes with the most free GPUs first.
        if let Some((name, gpus)) = free
            .iter()
            .filter(|(_, g)| g.len() >= n as usize)
            .min_by_key(|(name, g)| (g.len(), name.clone()))
        {
            return Ok(vec![ResvNode {
                node: name.clone(),
                whole: false,
                gpus: gpus[..n as usize].to_vec(),
            }]);
        }
        free.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut left = n as usize;
        let mut out = Vec::new();
        for (name, gpus) in free {
            if left == 0 {
                break;
            }
            let take = left.min(gpus.len());
            out.push(ResvNode {
                node: name,
                whole: false,
                gpus: gpus[..take].to_vec(),
            });
            left -= take;
        }
        Ok(out)
    }

    /// Refuses a reservation whose resources another reservation or a running job holds
    /// during its window (neither counts for a MAINT one; jobs not with IGNORE_JOBS).
    fn check_free(&self, r: &Reservation) -> Result<(), String> {
        for n in &r.nodes {
            if !self.nodes.contains_key(&n.node) {
                return Err(format!("node '{}' is not registered", n.node));
            }
            if let Some(why) = self.conflict(r, n) {
                return Err(why);
            }
        }
        Ok(())
    }

    /// Why `r` may not hold `held` (a node or some of its GPUs), if it may not.
    fn conflict(&self, r: &Reservation, held: &ResvNode) -> Option<String> {
        for other in self.reservations.values() {
            if other.name == r.name || r.flags.maint || other.flags.maint {
                continue;
            }
            if other.start_ms < r.end_ms
                && r.start_ms < other.end_ms
                && other
                    .nodes
                    .iter()
                    .any(|o| o.node == held.node && overlap(o, held))
            {
                return Some(format!(
                    "Requested reservation overlaps with another reservation: '{}' holds {} from {} to {}",
                    other.name,
                    held.node,
                    fmt_ms(other.start_ms),
                    fmt_ms(other.end_ms)
                ));
            }
        }
        if r.flags.ignore_jobs {
            return None;
        }
        let busy: BTreeSet<JobId> = self
            .allocated_jobs()
            .filter(|j| j.spec.reservation.as_deref() != Some(&r.name))
            .filter(|j| self.job_end_bound(j).is_none_or(|end| end > r.start_ms))
            .filter(|j| {
                j.allocation.as_ref().is_some_and(|a| {
                    a.nodes.iter().any(|na| {
                        na.node == held.node
                            && (held.whole || na.gpus.iter().any(|g| held.gpus.contains(g)))
                    })
                })
            })
            .map(|j| j.id)
            .collect();
        if busy.is_empty() {
            return None;
        }
        let ids: Vec<String> = busy.iter().take(5).map(|j| j.to_string()).collect();
        Some(format!(
            "Requested nodes are busy: job(s) {} on {} may run past the reservation's start; start it later or give Flags=IGNORE_JOBS",
            ids.join(", "),
            held.node
        ))
    }

    fn job_end_bound(&self, j: &gsched_types::JobRecord) -> Option<u64> {
        let limit = self.config.time_limit_for(&j.spec)?;
        Some(j.start_ms.unwrap_or(0) + limit * 1000)
    }

    /// Why a job may not name its reservation, if it may not (Slurm's words first).
    pub(super) fn reservation_refuses(&self, spec: &JobSpec) -> Option<String> {
        let name = spec.reservation.as_deref()?;
        let Some(r) = self.reservations.get(name) else {
            return Some(format!(
                "Requested reservation is invalid: '{name}' does not exist (gctl reservation show lists them)"
            ));
        };
        if !r.admits(&spec.user, spec.account_name()) {
            return Some(format!(
                "Access denied to requested reservation: '{name}' admits users [{}] and accounts [{}]",
                r.users.join(","),
                r.accounts.join(",")
            ));
        }
        None
    }
}

fn overlap(a: &ResvNode, b: &ResvNode) -> bool {
    a.whole || b.whole || a.gpus.iter().any(|g| b.gpus.contains(g))
}

fn check_name(name: &str) -> Result<(), String> {
    if gsched_types::parse::is_plain_name(name) {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a reservation name: use 1-64 letters, digits, '_', '-' or '.'"
        ))
    }
}

fn denied(by: &str) -> Outcome {
    Outcome::PermissionDenied {
        message: format!("{by} may not change reservations: operators and admins only"),
    }
}

fn not_found(name: &str) -> Outcome {
    Outcome::NotFound {
        message: format!("reservation '{name}' does not exist (gctl reservation show lists them)"),
    }
}

fn fmt_ms(ms: u64) -> String {
    gsched_types::parse::format_timestamp(ms)
}
