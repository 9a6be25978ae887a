//! State shared by the controller's services and leader loops.

use crate::auth::Auth;
use crate::config::ControllerConfig;
use crate::hub::AgentHub;
use crate::transport::{AddressBook, Faults};
use gsched_proto::LEADER_HINT;
use gsched_proto::clock::now_ms;
use gsched_proto::tls::Dialer;
use gsched_raft::{ProposeError, RaftHandle};
use gsched_state::view::{ViewCache, snapshot};
use gsched_state::{Command, Envelope, Outcome};
use gsched_types::job::JobId;
use parking_lot::RwLock;
use std::collections::HashMap;
use tonic::Status;

/// How long a proposal waits through an election for a new leader before the client is
/// told to try elsewhere (with the default tick a failover took 0.17-0.37 s in the HA bench).
const ELECTION_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub struct Ctx {
    pub cfg: ControllerConfig,
    /// Who callers are and what they may do.
    pub auth: Auth,
    /// How this controller dials its peers (and a controller about to join).
    pub dialer: Dialer,
    pub raft: RaftHandle,
    pub book: AddressBook,
    pub hub: AgentHub,
    /// Expected start times (not replicated): the leader's from its last scheduling pass;
    /// a follower's from the same pure plan run on its replica when a read asks for them.
    pub estimates: RwLock<HashMap<JobId, u64>>,
    /// What a follower last planned its estimates from, and the view cache it plans with.
    pub follower_estimates: tokio::sync::Mutex<FollowerEstimates>,
    pub faults: Faults,
    /// Scheduler, queue-wait and proposal figures for `/metrics`.
    pub telemetry: crate::telemetry::Telemetry,
    /// Which connections the gRPC listener keeps.
    pub admission: std::sync::Arc<crate::accept::Admission>,
    /// The accounting archive of ended jobs (`None` when its file cannot be used).
    pub archive: Option<std::sync::Arc<crate::archiver::Archiver>>,
}

/// A follower's record of its last estimate pass.
#[derive(Default)]
pub struct FollowerEstimates {
    /// When it ran and the applied index it planned from.
    at: Option<(std::time::Instant, u64)>,
    cache: ViewCache,
}

impl Ctx {
    /// The leader's client address, when one is known.
    pub fn leader_address(&self) -> Option<String> {
        let leader = self.raft.status.borrow().leader_id;
        if leader == 0 {
            return None;
        }
        if leader == self.cfg.id {
            return Some(self.cfg.advertise.clone());
        }
        self.book.read().get(&leader).cloned()
    }

    /// Makes `estimates` current on a follower (planned from its latest applied state, at
    /// most a second ago) by running the
    /// scheduler's pure plan on this replica's state, as the leader does; the leader's own
    /// loop keeps its estimates current.
    pub async fn refresh_estimates(&self) {
        if self.raft.status.borrow().leader_id == self.cfg.id {
            return;
        }
        let mut planned = self.follower_estimates.lock().await;
        let snap = {
            let r = self.raft.replica.read();
            let fresh = planned.at.is_some_and(|(t, applied)| {
                applied == r.applied && t.elapsed() < std::time::Duration::from_secs(1)
            });
            if fresh {
                return;
            }
            planned.at = Some((std::time::Instant::now(), r.applied));
            snapshot(&r.state, &mut planned.cache)
        };
        let now = now_ms();
        let Ok(estimates) =
            tokio::task::spawn_blocking(move || gsched_scheduler::plan(&snap, now).estimates).await
        else {
            return;
        };
        *self.estimates.write() = estimates.into_iter().collect();
    }

    /// A gRPC `Unavailable` that carries the leader's address so clients can follow it.
    pub fn unavailable(&self, message: String) -> Status {
        let mut status = Status::unavailable(message);
        if let Some(addr) = self.leader_address()
            && let Ok(v) = addr.parse()
        {
            status.metadata_mut().insert(LEADER_HINT, v);
        }
        status
    }

    /// Waits (up to a few seconds, through an election) until this replica has applied
    /// every write committed before the call. When it cannot (no leader within reach), the
    /// read is refused as `Unavailable`, which sends clients to another controller: a
    /// reply that might miss an acknowledged write is never given as an answer.
    pub async fn read_barrier(&self) -> Result<(), Status> {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(5) {
            if self.raft.read_barrier().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        Err(self.unavailable(format!(
            "controller {} cannot confirm it has every acknowledged write (no leader within reach for 5 s); ask another controller, or read this one's possibly older state with gqueue --stale-ok",
            self.cfg.id
        )))
    }

    /// Proposes a command stamped with this controller's clock.
    pub async fn propose(
        &self,
        cmd: Command,
        request_id: Option<String>,
    ) -> Result<Outcome, Status> {
        let env = Envelope::new(cmd, now_ms(), request_id);
        let began = std::time::Instant::now();
        let r = self
            .propose_through_election(&env)
            .await
            .map_err(|e| self.propose_error(e));
        self.telemetry
            .proposal_seconds
            .observe(began.elapsed().as_secs_f64());
        r
    }

    /// Proposes `env`; when no leader is known (an election is on), waits for one and
    /// proposes again instead of sending the client away empty-handed. An entry that may
    /// already be in a log is proposed again only under a request id, which the state
    /// machine applies once.
    async fn propose_through_election(&self, env: &Envelope) -> Result<Outcome, ProposeError> {
        let deadline = std::time::Instant::now() + ELECTION_WAIT;
        loop {
            let err = match self.raft.propose(env).await {
                Ok(outcome) => return Ok(outcome),
                Err(e) => e,
            };
            let again = err.never_appended()
                || (env.request_id.is_some() && err == ProposeError::LeadershipChanged);
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !again || left.is_zero() || !self.raft.wait_for_leader(left).await {
                return Err(err);
            }
            if err.never_appended() {
                // The status may still name the old leader for a moment after the term moved.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
    }

    pub fn propose_error(&self, e: ProposeError) -> Status {
        match e {
            ProposeError::BadConfChange(m) => Status::failed_precondition(m),
            other => self.unavailable(format!("controller {}: {other}", self.cfg.id)),
        }
    }
}

/// Maps a state-machine outcome to a gRPC result.
pub fn outcome_to_status(outcome: Outcome) -> Result<Outcome, Status> {
    match outcome {
        Outcome::Rejected { message } => Err(Status::failed_precondition(message)),
        Outcome::NotFound { message } => Err(Status::not_found(message)),
        Outcome::PermissionDenied { message } => Err(Status::permission_denied(message)),
        ok => Ok(ok),
    }
}
