//! The leader's registry of connected agents: their outgoing message queues, last
//! heartbeat and the steps they report running.

use gsched_proto::agent::{ControllerToAgent, StepRef, encode};
use gsched_proto::pb::ControllerEnvelope;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;
use tonic::Status;

pub type AgentTx = UnboundedSender<Result<ControllerEnvelope, Status>>;

pub struct AgentConn {
    pub conn_id: u64,
    pub tx: AgentTx,
    pub running: Vec<StepRef>,
}

#[derive(Default)]
pub struct AgentHub {
    conns: Mutex<HashMap<String, AgentConn>>,
    /// Last heartbeat (or registration) per node seen by this controller.
    last_seen: Mutex<HashMap<String, Instant>>,
    next_id: Mutex<u64>,
    pub changed: tokio::sync::Notify,
}

impl AgentHub {
    pub fn attach(&self, node: &str, tx: AgentTx) -> u64 {
        let id = {
            let mut n = self.next_id.lock();
            *n += 1;
            *n
        };
        self.conns.lock().insert(
            node.to_string(),
            AgentConn {
                conn_id: id,
                tx,
                running: Vec::new(),
            },
        );
        self.touch(node);
        id
    }

    pub fn detach(&self, node: &str, conn_id: u64) {
        let mut conns = self.conns.lock();
        if conns.get(node).is_some_and(|c| c.conn_id == conn_id) {
            conns.remove(node);
        }
    }

    pub fn touch(&self, node: &str) {
        self.last_seen
            .lock()
            .insert(node.to_string(), Instant::now());
    }

    pub fn heartbeat(&self, node: &str, running: Vec<StepRef>) {
        if let Some(c) = self.conns.lock().get_mut(node) {
            c.running = running;
        }
        self.touch(node);
        self.changed.notify_one();
    }

    pub fn last_seen(&self, node: &str) -> Option<Instant> {
        self.last_seen.lock().get(node).copied()
    }

    pub fn connected(&self) -> Vec<(String, Vec<StepRef>)> {
        self.conns
            .lock()
            .iter()
            .map(|(n, c)| (n.clone(), c.running.clone()))
            .collect()
    }

    pub fn is_connected(&self, node: &str) -> bool {
        self.conns.lock().contains_key(node)
    }

    pub fn send(&self, node: &str, msg: &ControllerToAgent) -> bool {
        let conns = self.conns.lock();
        match conns.get(node) {
            Some(c) => {
                c.tx.send(Ok(ControllerEnvelope { json: encode(msg) }))
                    .is_ok()
            }
            None => false,
        }
    }

    /// Drops every connection (this controller stopped being the leader).
    pub fn clear(&self) {
        self.conns.lock().clear();
        self.last_seen.lock().clear();
    }
}
