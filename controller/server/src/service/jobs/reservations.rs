//! Admin reservations through the `Reservations` RPC: changes are one replicated command
//! each (the state machine checks who may and what is free); `show` reads this replica.

use super::JobsService;
use crate::auth::Caller;
use gsched_proto::clock::now_ms;
use gsched_state::{
    ClusterState, Command, CreateReservation, DeleteReservation, UpdateReservation,
};
use gsched_types::reservation::{
    Reservation, ReservationReply, ReservationRequest, ReservationRow,
};
use tonic::Status;

impl JobsService {
    pub async fn reservations_as(
        &self,
        caller: &Caller,
        request_id: &str,
        req: ReservationRequest,
    ) -> Result<ReservationReply, Status> {
        let by = caller.user.clone();
        let admin = caller.acts_for_others();
        let (cmd, message) = match req {
            ReservationRequest::Show { name } => {
                self.ctx.read_barrier().await?;
                let r = self.ctx.raft.replica.read();
                let rows = rows(&r.state, name.as_deref(), now_ms());
                if let Some(n) = name
                    && rows.is_empty()
                {
                    return Err(Status::not_found(format!(
                        "reservation '{n}' does not exist (gctl reservation show lists them)"
                    )));
                }
                return Ok(ReservationReply {
                    message: String::new(),
                    reservations: rows,
                });
            }
            ReservationRequest::Create { spec } => {
                let message = format!("Reservation created: {}", spec.name);
                (
                    Command::CreateReservation(CreateReservation { spec, by, admin }),
                    message,
                )
            }
            ReservationRequest::Update { spec } => {
                let message = format!("Reservation {} updated", spec.name);
                (
                    Command::UpdateReservation(UpdateReservation { spec, by, admin }),
                    message,
                )
            }
            ReservationRequest::Delete { name } => {
                let message = format!("Reservation {name} deleted");
                (
                    Command::DeleteReservation(DeleteReservation { name, by, admin }),
                    message,
                )
            }
        };
        self.propose_for(caller, request_id, cmd).await?;
        Ok(ReservationReply {
            message,
            reservations: Vec::new(),
        })
    }
}

/// The reservations that have not ended, as `show` prints them.
pub fn rows(state: &ClusterState, name: Option<&str>, now: u64) -> Vec<ReservationRow> {
    state
        .reservations
        .values()
        .filter(|r| r.end_ms > now && name.is_none_or(|n| n == r.name))
        .map(|r| row(state, r, now))
        .collect()
}

fn row(state: &ClusterState, r: &Reservation, now: u64) -> ReservationRow {
    let node = |n: &str| state.nodes.get(n);
    let gpus = r.gpu_count(|n| node(n).map_or(0, |x| x.topology.gpus.len() as u32));
    let cpus = r
        .nodes
        .iter()
        .filter(|n| n.whole)
        .filter_map(|n| node(&n.node))
        .map(|x| x.topology.all_cpus().len() as u32)
        .sum();
    ReservationRow {
        reservation: r.clone(),
        state: if r.active(now) { "ACTIVE" } else { "INACTIVE" }.into(),
        gpus,
        cpus,
    }
}
