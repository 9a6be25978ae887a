//! What admins do to the cluster (drain and resume nodes, change the controller
//! membership) and the HTTP API's bearer tokens (issue, revoke).

use super::JobsService;
use crate::auth::Caller;
use gsched_proto::pb::{self, MembershipRequest};
use gsched_raft::Membership;
use gsched_state::{Command, DrainNode, ResumeNode, RevokeTokens};
use gsched_types::api::{
    MAX_TOKEN_LIFETIME_S, RevokeTokensReply, RevokeTokensRequest, TokenReply, TokenRequest,
};
use tonic::Status;

/// What an admin does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAction {
    Drain,
    Resume,
}

impl NodeAction {
    pub fn from_wire(action: i32) -> Result<NodeAction, Status> {
        match pb::NodeAction::try_from(action) {
            Ok(pb::NodeAction::Drain) => Ok(NodeAction::Drain),
            Ok(pb::NodeAction::Resume) => Ok(NodeAction::Resume),
            _ => Err(Status::invalid_argument(
                "no node action given (drain or resume): this client may be older than the controller",
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            NodeAction::Drain => "drain",
            NodeAction::Resume => "resume",
        }
    }
}

impl JobsService {
    /// Drains or resumes a node for the verified `caller` (an admin).
    pub async fn node_admin_as(
        &self,
        caller: &Caller,
        request_id: &str,
        node: &str,
        action: NodeAction,
        reason: String,
    ) -> Result<String, Status> {
        self.require_admin(caller, &format!("changing node {node} ({})", action.name()))?;
        let by = caller.user.clone();
        let node = node.to_string();
        let cmd = match action {
            NodeAction::Drain if reason.trim().is_empty() => {
                return Err(Status::invalid_argument(
                    "draining a node needs a reason (--reason)",
                ));
            }
            NodeAction::Drain => Command::DrainNode(DrainNode {
                node: node.clone(),
                reason,
                by,
            }),
            NodeAction::Resume => Command::ResumeNode(ResumeNode {
                node: node.clone(),
                by,
            }),
        };
        self.propose_for(caller, request_id, cmd).await?;
        Ok(format!("node {node} {}", action.name()))
    }

    /// Adds (after asking it who it is) or removes a controller.
    pub async fn membership_as(
        &self,
        caller: &Caller,
        req: MembershipRequest,
    ) -> Result<String, Status> {
        self.require_admin(caller, "changing the controller membership")?;
        let not_leader = || {
            self.ctx
                .unavailable("membership changes go to the leader".into())
        };
        let action =
            pb::MembershipAction::try_from(req.action).unwrap_or(pb::MembershipAction::Unspecified);
        let (change, done) = match action {
            pb::MembershipAction::Add => {
                if !req.address.contains(':') {
                    return Err(Status::invalid_argument(
                        "a controller address is HOST:PORT",
                    ));
                }
                if !self.ctx.raft.is_leader() {
                    return Err(not_leader());
                }
                crate::membership::verify_new_member(&self.ctx, req.id, &req.address).await?;
                self.ctx.book.write().insert(req.id, req.address.clone());
                let add = Membership::Add {
                    id: req.id,
                    address: req.address.clone(),
                };
                (add, "added")
            }
            pb::MembershipAction::Remove => (Membership::Remove { id: req.id }, "removed"),
            pb::MembershipAction::Unspecified => {
                return Err(Status::invalid_argument(
                    "no membership action given (add or remove): this client may be older than the controller",
                ));
            }
        };
        if !self.ctx.raft.is_leader() {
            return Err(not_leader());
        }
        self.ctx
            .raft
            .change_membership(change)
            .await
            .map_err(|e| self.ctx.propose_error(e))?;
        Ok(format!("controller {} {done}", req.id))
    }

    /// A bearer token for the caller, for the HTTP API and the dashboard.
    pub fn issue_token_as(
        &self,
        caller: &Caller,
        body: TokenRequest,
    ) -> Result<TokenReply, Status> {
        if body.lifetime_s == 0 || body.lifetime_s > MAX_TOKEN_LIFETIME_S {
            return Err(Status::invalid_argument(format!(
                "a token lives from 1 s to {MAX_TOKEN_LIFETIME_S} s (a week)"
            )));
        }
        let now = gsched_proto::clock::now_ms();
        let expires_ms = now + body.lifetime_s * 1000;
        Ok(TokenReply {
            token: self.ctx.auth.issue_token(caller, now, expires_ms),
            user: caller.user.clone(),
            expires_ms,
        })
    }

    /// Revokes the tokens issued so far: the caller's own, or (admins) a user's or
    /// everyone's.
    pub async fn revoke_tokens_as(
        &self,
        caller: &Caller,
        request_id: &str,
        body: RevokeTokensRequest,
    ) -> Result<RevokeTokensReply, Status> {
        let user = match (&body.user, body.all) {
            (Some(_), true) => {
                return Err(Status::invalid_argument(
                    "name a user or ask for everyone's tokens (--all), not both",
                ));
            }
            (_, true) => None,
            (Some(u), false) => Some(u.clone()),
            (None, false) => Some(caller.user.clone()),
        };
        if user.as_deref() != Some(caller.user.as_str()) && !caller.is_admin() {
            return Err(Status::permission_denied(format!(
                "revoking {} tokens is for admins (you are {}); gctl token revoke alone revokes your own",
                user.as_deref()
                    .map_or("everyone's".to_string(), |u| format!("{u}'s")),
                caller.user
            )));
        }
        let uid = match &user {
            None => None,
            Some(u) if *u == caller.user => Some(caller.uid),
            Some(u) => Some(gsched_proto::peer::uid_of(u).ok_or_else(|| {
                Status::not_found(format!("no user {u} on this controller's host"))
            })?),
        };
        self.propose_for(
            caller,
            request_id,
            Command::RevokeTokens(RevokeTokens { uid }),
        )
        .await?;
        let revoked_before_ms = {
            let replica = self.ctx.raft.replica.read();
            match uid {
                Some(u) => replica.state.token_revocations.revoked_before(u),
                None => replica.state.token_revocations.all_before_ms,
            }
        };
        Ok(RevokeTokensReply {
            user,
            revoked_before_ms,
        })
    }
}
