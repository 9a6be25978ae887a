//! What admins change: drain and resume nodes, add and remove controllers.

use clap::Subcommand;
use gsched_cli::client::{Client, describe, die, request_id};
use gsched_cli::outln;
use gsched_proto::pb::{self, MembershipRequest, NodeAdminRequest};

#[derive(Subcommand, Debug)]
pub enum NodeAction {
    Drain {
        node: String,
        #[arg(long)]
        reason: String,
    },
    Resume {
        node: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum Members {
    /// ID=HOST:PORT
    Add {
        member: String,
    },
    Remove {
        id: u64,
    },
}

pub fn node(rt: &tokio::runtime::Runtime, client: &mut Client, action: NodeAction) {
    let (node, act, reason) = match action {
        NodeAction::Drain { node, reason } => (node, pb::NodeAction::Drain, reason),
        NodeAction::Resume { node } => (node, pb::NodeAction::Resume, String::new()),
    };
    let req = NodeAdminRequest {
        request_id: request_id(),
        node: node.clone(),
        action: act as i32,
        reason,
    };
    let r = rt.block_on(client.call(|mut c| {
        let req = req.clone();
        async move { c.node_admin(req).await }
    }));
    match r {
        Ok(r) => outln!("{}", r.message),
        Err(s) => die("gctl", describe(&s)),
    }
}

pub fn controllers(rt: &tokio::runtime::Runtime, client: &mut Client, action: Members) {
    let req = match action {
        Members::Add { member } => {
            let (id, addr) = member
                .split_once('=')
                .unwrap_or_else(|| die("gctl", "use gctl controllers add ID=HOST:PORT"));
            let id: u64 = id
                .parse()
                .unwrap_or_else(|_| die("gctl", format!("invalid controller id '{id}'")));
            MembershipRequest {
                action: pb::MembershipAction::Add as i32,
                id,
                address: addr.into(),
            }
        }
        Members::Remove { id } => MembershipRequest {
            action: pb::MembershipAction::Remove as i32,
            id,
            address: String::new(),
        },
    };
    let r = rt.block_on(client.call(|mut c| {
        let req = req.clone();
        async move { c.membership(req).await }
    }));
    match r {
        Ok(r) => outln!("{}", r.message),
        Err(s) => die("gctl", describe(&s)),
    }
}
