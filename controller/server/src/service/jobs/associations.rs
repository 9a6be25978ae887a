//! Accounts, users and QOS through the `Associations` RPC: an edit is checked against
//! this replica first (so the caller hears what it did or why not), then committed as one
//! replicated command that checks it again; `show` reads this replica.

use super::JobsService;
use crate::auth::Caller;
use gsched_state::machine::associations::edit;
use gsched_state::{Command, EditAssociations};
use gsched_types::assoc::{AssocEntity, AssocError, AssocReply, AssocRequest};
use tonic::Status;

impl JobsService {
    pub async fn associations_as(
        &self,
        caller: &Caller,
        request_id: &str,
        req: AssocRequest,
    ) -> Result<AssocReply, Status> {
        self.ctx.read_barrier().await?;
        match req {
            AssocRequest::Show { entity } => {
                let r = self.ctx.raft.replica.read();
                let c = &r.state.config;
                let mut reply = AssocReply::default();
                match entity {
                    AssocEntity::Account => reply.accounts = c.accounts.clone(),
                    AssocEntity::User => {
                        reply.users = c.users.clone();
                        // A webhook's URL is its password: only its user and admins
                        // see a user's notification settings.
                        if !caller.is_admin() {
                            for u in reply.users.iter_mut().filter(|u| u.name != caller.user) {
                                u.notify = None;
                            }
                        }
                    }
                    AssocEntity::Qos => reply.qos = c.qos.clone(),
                }
                Ok(reply)
            }
            AssocRequest::Edit { edit: e } => {
                let message = {
                    let r = self.ctx.raft.replica.read();
                    let mut config = r.state.config.clone();
                    edit(&mut config, &e).map_err(|err| match err {
                        AssocError::Missing(..) => Status::not_found(err.to_string()),
                        _ => Status::invalid_argument(err.to_string()),
                    })?
                };
                let cmd = Command::EditAssociations(EditAssociations {
                    edit: *e,
                    by: caller.user.clone(),
                    admin: caller.is_admin(),
                });
                self.propose_for(caller, request_id, cmd).await?;
                Ok(AssocReply {
                    message,
                    ..AssocReply::default()
                })
            }
        }
    }
}
