//! `gsched-forge`: a hand-made gRPC client for the security tests. It sends whatever a
//! hostile process could (claimed identities, forged agent registrations, forged Raft
//! messages, replayed credentials) and prints one JSON line with the outcome, so a test
//! can run it as another Unix user and check that the controller refused it.
//!
//! Usage: `gsched-forge HOST:PORT '{"call": ..., ...}'`.

use gsched_proto::contract::Carries;
use gsched_proto::munge::Munge;
use gsched_proto::pb::agent_client::AgentClient;
use gsched_proto::pb::jobs_client::JobsClient;
use gsched_proto::pb::peer_client::PeerClient;
use gsched_proto::pb::*;
use serde_json::{Value, json};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

fn field<'a>(v: &'a Value, k: &str) -> &'a Value {
    &v[k]
}

fn text(v: &Value, k: &str) -> String {
    field(v, k).as_str().unwrap_or_default().to_string()
}

fn num(v: &Value, k: &str) -> u64 {
    field(v, k).as_u64().unwrap_or_default()
}

async fn channel(addr: &str, req: &Value) -> Result<tonic::transport::Channel, String> {
    let tls = &req["tls"];
    let ep = if tls.is_object() {
        let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(
            std::fs::read(text(tls, "ca")).map_err(|e| e.to_string())?,
        ));
        if tls["cert"].is_string() {
            cfg = cfg.identity(Identity::from_pem(
                std::fs::read(text(tls, "cert")).map_err(|e| e.to_string())?,
                std::fs::read(text(tls, "key")).map_err(|e| e.to_string())?,
            ));
        }
        Endpoint::from_shared(format!("https://{addr}"))
            .map_err(|e| e.to_string())?
            .tls_config(cfg)
            .map_err(|e| e.to_string())?
    } else {
        Endpoint::from_shared(format!("http://{addr}")).map_err(|e| e.to_string())?
    };
    ep.connect().await.map_err(|e| e.to_string())
}

/// The payload of a forged credential: `"munge_payload"` as given, else what gsched's
/// tools send, for the cluster of `tls.ca` and the controller `"munge_to"` (default: the
/// address dialled).
fn payload(req: &Value, body: &str) -> Vec<u8> {
    if let Some(p) = req["munge_payload"].as_str() {
        return p.as_bytes().to_vec();
    }
    let cluster = std::fs::read(text(&req["tls"], "ca"))
        .ok()
        .and_then(|pem| gsched_proto::tls::cluster_id(&pem).ok())
        .unwrap_or_default();
    let to = req["munge_to"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| text(req, "addr"));
    let body = req["munge_body"].as_str().unwrap_or(body);
    gsched_proto::munge::request_payload(&cluster, &to, body)
}

/// The digest of `msg` as a gRPC body (one uncompressed frame), as the controller takes
/// it.
fn frame_digest<T: prost::Message>(msg: &T) -> String {
    let bytes = msg.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    frame.extend_from_slice(&bytes);
    gsched_proto::munge::body_digest(&frame)
}

/// A request with a MUNGE credential when one was asked for (`"munge_socket"`, with
/// `"restrict_uid"` naming who may decode it); with `"replay": true`, the credential of
/// the previous call is sent again.
fn request<T: prost::Message>(
    msg: T,
    req: &Value,
    last: &mut Option<String>,
) -> Result<tonic::Request<T>, String> {
    let digest = frame_digest(&msg);
    let mut r = tonic::Request::new(msg);
    if req["munge_socket"].is_string() {
        let cred = match (req["replay"].as_bool(), last.clone()) {
            (Some(true), Some(c)) => c,
            _ => Munge::load(Some(std::path::Path::new(&text(req, "munge_socket"))))
                .and_then(|m| {
                    m.encode(
                        &payload(req, &digest),
                        req["restrict_uid"].as_u64().map(|u| u as u32),
                    )
                })
                .map_err(|e| e.to_string())?,
        };
        *last = Some(cred.clone());
        r.metadata_mut().insert(
            gsched_proto::MUNGE_CREDENTIAL,
            cred.parse().map_err(|_| "bad credential")?,
        );
    }
    Ok(r)
}

fn outcome<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> Value {
    match r {
        Ok(reply) => json!({"ok": true, "reply": format!("{:?}", reply.into_inner())}),
        Err(s) => json!({"ok": false, "code": format!("{:?}", s.code()), "message": s.message()}),
    }
}

async fn run(addr: &str, req: &Value) -> Result<Value, String> {
    let ch = channel(addr, req).await?;
    let mut last = None;
    let times = if req["replay"].as_bool() == Some(true) {
        2
    } else {
        1
    };
    let mut result = Value::Null;
    for _ in 0..times {
        result = call(ch.clone(), req, &mut last).await?;
    }
    Ok(result)
}

async fn call(
    ch: tonic::transport::Channel,
    req: &Value,
    last: &mut Option<String>,
) -> Result<Value, String> {
    let mut jobs = JobsClient::new(ch.clone());
    let rid = uuid::Uuid::new_v4().to_string();
    Ok(match text(req, "call").as_str() {
        "submit" => {
            let spec_json = serde_json::to_vec(&req["spec"]).map_err(|e| e.to_string())?;
            let msg = SubmitRequest {
                request_id: rid,
                json: spec_json,
            };
            outcome(jobs.submit(request(msg, req, last)?).await)
        }
        // Every action on a job is one `ActOnJobs` naming it; its refusals come back
        // in the reply's summary, per job.
        action @ ("cancel" | "requeue" | "hold") => {
            let body = json!({"action": action, "select": {"jobs": [{"id": num(req, "job")}]}});
            let msg = ActOnJobsRequest {
                request_id: rid,
                json: serde_json::to_vec(&body).map_err(|e| e.to_string())?,
            };
            match jobs.act_on_jobs(request(msg, req, last)?).await {
                Ok(reply) => {
                    let summary: gsched_types::api::ActionSummary =
                        reply.into_inner().document().map_err(|e| e.to_string())?;
                    json!({"ok": true, "summary": summary})
                }
                Err(s) => outcome::<()>(Err(s)),
            }
        }
        "drain" => {
            let msg = NodeAdminRequest {
                request_id: rid,
                node: text(req, "node"),
                action: NodeAction::Drain as i32,
                reason: "forged".into(),
            };
            outcome(jobs.node_admin(request(msg, req, last)?).await)
        }
        "membership" => {
            let msg = MembershipRequest {
                action: MembershipAction::Add as i32,
                id: num(req, "id"),
                address: text(req, "address"),
            };
            outcome(jobs.membership(request(msg, req, last)?).await)
        }
        "status" => outcome(jobs.status(request(StatusRequest {}, req, last)?).await),
        "register" => register(ch, req).await,
        "report" => report(ch, req).await,
        "peer_append" => peer_append(ch, req).await,
        other => return Err(format!("unknown call {other}")),
    })
}

/// The registration a forged agent opens its session with.
fn register_as(name: &str) -> gsched_types::agent::AgentToController {
    gsched_types::agent::AgentToController::Register {
        name: name.to_string(),
        address: String::new(),
        training_addr: "127.0.0.1".into(),
        topology: Box::new(gsched_types::Topology::empty("forged")),
        features: vec![],
        agent_version: "forged".into(),
        known_runs: vec![],
        capabilities: Default::default(),
    }
}

/// Opens `Agent.Session` as node `name` and reports what the controller answered first.
async fn register(ch: tonic::transport::Channel, req: &Value) -> Value {
    let hello = register_as(&text(req, "name"));
    let first = AgentEnvelope::carrying(&hello);
    let stream = tokio_stream::iter(vec![first]);
    match AgentClient::new(ch).session(stream).await {
        Err(s) => json!({"ok": false, "code": format!("{:?}", s.code()), "message": s.message()}),
        Ok(resp) => {
            let mut inbound = resp.into_inner();
            match inbound.message().await {
                Ok(Some(m)) => json!({"ok": true, "reply": String::from_utf8_lossy(&m.json)}),
                Ok(None) => json!({"ok": false, "code": "Closed", "message": "closed"}),
                Err(s) => {
                    json!({"ok": false, "code": format!("{:?}", s.code()), "message": s.message()})
                }
            }
        }
    }
}

/// Registers as node `name`, then reports job `job` attempt `attempt` failed with a lost
/// GPU claimed to be on `claim_node`, and sends task output for it: what a node's
/// certificate (or a daemon's uid) could say about a job on another node.
async fn report(ch: tonic::transport::Channel, req: &Value) -> Value {
    use gsched_types::agent::{AgentToController, RunEvent};
    use gsched_types::{Failure, FailureKind, JobId};
    let hello = register_as(&text(req, "name"));
    let job = JobId(num(req, "job"));
    let attempt = num(req, "attempt") as u32;
    let failed = AgentToController::Run {
        seq: 1,
        event: RunEvent::Failed {
            job,
            attempt,
            failure: Failure {
                kind: FailureKind::GpuLost { gpu: Some(0) },
                node: Some(text(req, "claim_node")),
                evidence: "forged: GPU has fallen off the bus".into(),
                at_ms: 1,
            },
        },
    };
    let exited = AgentToController::Run {
        seq: 2,
        event: RunEvent::Exited {
            job,
            attempt,
            code: Some(1),
            signal: None,
            failure: None,
            usage: None,
        },
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for m in [hello, failed, exited] {
        let _ = tx.send(AgentEnvelope::carrying(&m));
    }
    let stream = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    match AgentClient::new(ch).session(stream).await {
        Err(s) => json!({"ok": false, "code": format!("{:?}", s.code()), "message": s.message()}),
        Ok(resp) => {
            // Read the controller's answers (registered, then an ack per report) for a
            // while, keeping the session open.
            let mut inbound = resp.into_inner();
            let mut seen = Vec::new();
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
            while let Ok(Ok(Some(m))) = tokio::time::timeout_at(until, inbound.message()).await {
                seen.push(String::from_utf8_lossy(&m.json).into_owned());
            }
            drop(tx);
            json!({"ok": true, "reply": seen})
        }
    }
}

/// Sends a MsgAppend from controller `from` to `to` at `term` carrying one entry of
/// `data`.
async fn peer_append(ch: tonic::transport::Channel, req: &Value) -> Value {
    use raft::eraftpb::{Entry, Message, MessageType};
    let entry = Entry {
        index: num(req, "index"),
        term: num(req, "term"),
        data: text(req, "data").into_bytes().into(),
        ..Default::default()
    };
    let mut msg = Message {
        from: num(req, "from"),
        to: num(req, "to"),
        term: num(req, "term"),
        log_term: num(req, "term"),
        index: num(req, "index").saturating_sub(1),
        commit: num(req, "index"),
        ..Default::default()
    };
    msg.set_msg_type(MessageType::MsgAppend);
    msg.set_entries(vec![entry].into());
    let batch = RaftBatch {
        from: num(req, "from"),
        from_address: String::new(),
        messages: vec![gsched_raft::encode_message(&msg)],
    };
    if req["stream"] != true {
        return outcome(PeerClient::new(ch).send(batch).await);
    }
    // On `Peer.Stream`, optionally after an empty batch that claims `lead_from`.
    let mut batches = Vec::new();
    if req.get("lead_from").is_some() {
        batches.push(RaftBatch {
            from: num(req, "lead_from"),
            from_address: String::new(),
            messages: vec![],
        });
    }
    batches.push(batch);
    outcome(
        PeerClient::new(ch)
            .stream(tokio_stream::iter(batches))
            .await,
    )
}

fn main() {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (Some(addr), Some(req)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: gsched-forge HOST:PORT JSON");
        std::process::exit(2);
    };
    let mut req: Value = serde_json::from_str(req).expect("a JSON request");
    req["addr"] = json!(addr);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt
        .block_on(run(addr, &req))
        .unwrap_or_else(|e| json!({"ok": false, "code": "ClientError", "message": e}));
    println!("{out}");
}
