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
            AssocRequest::Edit { edit: mut e } => {
                e.in_slurm_case();
                if !caller.is_admin() {
                    self.check_user_added_by_coordinator(&e)?;
                }
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

impl JobsService {
    /// A coordinator adds only users this host knows, at or above `min_uid`: never root
    /// or a system account, never a name nobody has (which a later user could take).
    fn check_user_added_by_coordinator(
        &self,
        e: &gsched_types::assoc::AssocEdit,
    ) -> Result<(), Status> {
        use gsched_types::assoc::AssocEdit;
        let (AssocEdit::Add {
            entity: AssocEntity::User,
            name,
            ..
        }
        | AssocEdit::Modify {
            entity: AssocEntity::User,
            name,
            ..
        }) = e
        else {
            return Ok(());
        };
        let min_uid = self.ctx.auth.policy().min_uid;
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) if u.uid.as_raw() >= min_uid => Ok(()),
            Ok(Some(u)) => Err(Status::permission_denied(format!(
                "{name} is a system user (uid {} below min_uid {min_uid}): only an admin may add it",
                u.uid
            ))),
            _ => Err(Status::permission_denied(format!(
                "there is no user {name} on this host: a coordinator adds existing users only (create the Unix user first, or ask an admin)"
            ))),
        }
    }
}
