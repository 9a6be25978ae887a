//! `gsched-livefuzz`: sends random and malformed requests through every gRPC method of a
//! running cluster for a bounded time, as whichever Unix user runs it, and prints one JSON
//! line of counts. It never judges the replies: the test around it checks that the
//! controllers survived, agree, stayed within their memory bound and still do real work.
//!
//! Usage: `gsched-livefuzz --addrs A,B,C --secs N --seed S [--tasks T] [--admin]
//! [--topology FILE]`. With `--admin` (run as root) it also drains and resumes nodes and
//! registers fake agents, but never removes or adds a real controller.

use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb::agent_client::AgentClient;
use gsched_proto::pb::jobs_client::JobsClient;
use gsched_proto::pb::peer_client::PeerClient;
use gsched_proto::pb::*;
use gsched_tests::junk::{junk_bytes, junk_number, junk_string, junk_value, mutate};
use gsched_types::agent::{AgentToController, RunEvent, RunRef};
use gsched_types::failure::{Failure, FailureKind};
use gsched_types::job::{JobId, JobSpec};
use gsched_types::node::{HealthEvent, HealthKind, HealthSeverity};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

/// Passes bytes through unchanged, so a request body can be anything at all.
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

const METHODS: &[&str] = &[
    "/gsched.v1.Jobs/Submit",
    "/gsched.v1.Jobs/ListJobs",
    "/gsched.v1.Jobs/ListNodes",
    "/gsched.v1.Jobs/NodeAdmin",
    "/gsched.v1.Jobs/Status",
    "/gsched.v1.Jobs/Membership",
    "/gsched.v1.Jobs/Check",
    "/gsched.v1.Jobs/ActOnJobs",
    "/gsched.v1.Jobs/RunStep",
    "/gsched.v1.Jobs/StepInput",
    "/gsched.v1.Jobs/IssueToken",
    "/gsched.v1.Jobs/RevokeTokens",
    "/gsched.v1.Peer/Send",
    "/gsched.v1.Peer/Hello",
    "/gsched.v1.Jobs/NoSuchMethod",
];

fn spec_json(rng: &mut SmallRng) -> Vec<u8> {
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "nobody".to_string(), |u| u.name);
    let mut spec = JobSpec::simple("fuzz", &me, "#!/bin/sh\ntrue\n");
    spec.gpus_per_node = rng.gen_range(0..3);
    spec.time_limit_s = Some(60);
    spec.hold = true;
    let mut v = serde_json::to_value(&spec).unwrap();
    match rng.gen_range(0..10) {
        0 => junk_bytes(rng),
        1 => {
            let mut text = serde_json::to_vec(&v).unwrap();
            text.truncate(rng.gen_range(0..text.len()));
            text
        }
        2 => serde_json::to_vec(&junk_value(rng, 0)).unwrap(),
        3 => {
            v["array"] = json!((0..rng.gen_range(0..200_000)).collect::<Vec<u32>>());
            serde_json::to_vec(&v).unwrap()
        }
        _ => {
            mutate(&mut v, rng);
            serde_json::to_vec(&v).unwrap()
        }
    }
}

fn job_id(rng: &mut SmallRng) -> u64 {
    match rng.gen_range(0..4) {
        0 => 0,
        1 => u64::MAX,
        _ => rng.gen_range(1..400),
    }
}

/// Counts per method and outcome.
#[derive(Default)]
struct Tally(BTreeMap<String, BTreeMap<&'static str, u64>>);

impl Tally {
    fn add<T>(&mut self, method: &str, r: &Result<T, tonic::Status>) {
        let outcome = match r {
            Ok(_) => "ok",
            Err(s) if s.code() == tonic::Code::Unavailable || s.code() == tonic::Code::Unknown => {
                "transport"
            }
            Err(_) => "refused",
        };
        *self
            .0
            .entry(method.to_string())
            .or_default()
            .entry(outcome)
            .or_default() += 1;
    }
}

struct Fuzzer {
    admin: bool,
    topology: Option<Value>,
    tally: Mutex<Tally>,
}

impl Fuzzer {
    async fn one(&self, ch: Channel, rng: &mut SmallRng) {
        let mut jobs = JobsClient::new(ch.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(8 << 20);
        let rid = if rng.gen_bool(0.2) {
            junk_string(rng)
        } else {
            uuid::Uuid::new_v4().to_string()
        };
        let pick = rng.gen_range(0..15);
        let method = match pick {
            0..=2 => {
                let kind = if rng.gen_bool(0.3) { "Check" } else { "Submit" };
                let json = spec_json(rng);
                if kind == "Check" {
                    let r = jobs.check(CheckRequest::from_json(json)).await;
                    self.tally.lock().add(kind, &r);
                } else {
                    let r = jobs
                        .submit(SubmitRequest::from_json(json).with_request_id(rid))
                        .await;
                    self.tally.lock().add(kind, &r);
                }
                return;
            }
            3 | 4 => {
                // One job named, as the single-job calls that ActOnJobs replaced named it.
                let action = ["cancel", "requeue", "hold", "release"][rng.gen_range(0..4)];
                let body = json!({"action": action, "select": {"jobs": [{"id": job_id(rng)}]}});
                let r = jobs
                    .act_on_jobs(
                        ActOnJobsRequest::from_json(serde_json::to_vec(&body).unwrap())
                            .with_request_id(rid),
                    )
                    .await
                    .map(|_| ());
                self.tally.lock().add("ActOnJobs (one job)", &r);
                return;
            }
            5 | 6 => {
                let some = |rng: &mut SmallRng| -> Vec<String> {
                    (0..rng.gen_range(0..4)).map(|_| junk_string(rng)).collect()
                };
                let r = jobs
                    .list_jobs(ListJobsRequest {
                        include_finished: rng.gen_bool(0.5),
                        detail: rng.gen_bool(0.5),
                        users: some(rng),
                        states: if rng.gen_bool(0.5) {
                            vec!["PD".into(), "R".into()]
                        } else {
                            some(rng)
                        },
                        jobs: some(rng),
                        partition: if rng.gen_bool(0.7) {
                            String::new()
                        } else {
                            junk_string(rng)
                        },
                        limit: junk_number(rng).as_u64().unwrap_or(0) as u32,
                        after: job_id(rng),
                        stale_ok: rng.gen_bool(0.5),
                        archive: rng.gen_bool(0.5),
                        since_ms: job_id(rng),
                        until_ms: job_id(rng),
                        view: rng.gen_range(-1..3),
                    })
                    .await;
                self.tally.lock().add("ListJobs", &r);
                return;
            }
            7 => {
                let r = jobs
                    .list_nodes(ListNodesRequest {
                        detail: rng.gen_bool(0.5),
                    })
                    .await;
                self.tally.lock().add("ListNodes", &r);
                let r = jobs.status(StatusRequest {}).await;
                self.tally.lock().add("Status", &r);
                return;
            }
            8 => {
                let node = if rng.gen_bool(0.5) {
                    "n1".to_string()
                } else {
                    junk_string(rng)
                };
                let action = [0, 1, 2, 3, -1, i32::MAX][rng.gen_range(0..6)];
                let r = jobs
                    .node_admin(NodeAdminRequest {
                        request_id: rid,
                        node,
                        action,
                        reason: junk_string(rng),
                    })
                    .await;
                self.tally.lock().add("NodeAdmin", &r);
                return;
            }
            9 => {
                // Never a real controller (ids 1..=3), never a reachable address.
                let action = [0, 1, 2, 3, -1, i32::MIN][rng.gen_range(0..6)];
                let r = jobs
                    .membership(MembershipRequest {
                        action,
                        id: rng.gen_range(4..u64::MAX),
                        address: ["127.0.0.1:1", "", "not an address", "[::1]:99999"]
                            [rng.gen_range(0..4)]
                        .into(),
                    })
                    .await;
                self.tally.lock().add("Membership", &r);
                return;
            }
            10 => {
                let mut peer = PeerClient::new(ch.clone());
                let from = [0, 1, 2, 3, 77, u64::MAX][rng.gen_range(0..6)];
                let r = if rng.gen_bool(0.5) {
                    peer.send(RaftBatch {
                        from,
                        from_address: junk_string(rng),
                        messages: (0..rng.gen_range(0..4)).map(|_| junk_bytes(rng)).collect(),
                    })
                    .await
                    .map(|_| ())
                } else {
                    peer.hello(HelloRequest { from }).await.map(|_| ())
                };
                self.tally.lock().add("Peer", &r);
                return;
            }
            11 => {
                let mut peer = PeerClient::new(ch.clone());
                let chunks: Vec<SnapshotChunk> = (0..rng.gen_range(0..4))
                    .map(|_| SnapshotChunk {
                        from: rng.gen_range(0..5),
                        from_address: junk_string(rng),
                        message: junk_bytes(rng),
                        data: junk_bytes(rng),
                    })
                    .collect();
                let r = peer
                    .send_snapshot(tokio_stream::iter(chunks))
                    .await
                    .map(|_| ());
                self.tally.lock().add("Peer.SendSnapshot", &r);
                return;
            }
            13 => {
                // Bulk actions and signals: selections of real and made-up jobs, users,
                // states and nodes, sometimes mangled.
                let mut select = json!({
                    "jobs": (0..rng.gen_range(0..4)).map(|_| json!({"id": job_id(rng)})).collect::<Vec<_>>(),
                    "users": if rng.gen_bool(0.3) { vec![junk_string(rng)] } else { vec![] },
                    "states": if rng.gen_bool(0.3) { vec!["RUNNING"] } else { vec![] },
                    "nodes": if rng.gen_bool(0.2) { vec!["n1".to_string()] } else { vec![] },
                });
                if rng.gen_bool(0.3) {
                    mutate(&mut select, rng);
                }
                let signal = rng.gen_bool(0.5);
                let number = [10, 15, 0, 99, -1][rng.gen_range(0..5)];
                let action =
                    ["cancel", "hold", "release", "requeue", "explode"][rng.gen_range(0..5)];
                let batch_only = rng.gen_bool(0.5);
                let update = rng.gen_bool(0.2);
                let body = if signal {
                    json!({"action": {"signal": {"signal": number, "batch_only": batch_only}}, "select": select})
                } else if update {
                    json!({"action": {"update": {"time_limit_s": junk_number(rng)}}, "select": select})
                } else {
                    json!({"action": action, "select": select})
                };
                let json = serde_json::to_vec(&body).unwrap();
                let r = jobs
                    .act_on_jobs(ActOnJobsRequest::from_json(json).with_request_id(rid))
                    .await
                    .map(|_| ());
                self.tally.lock().add(
                    if signal {
                        "ActOnJobs (signal)"
                    } else {
                        "ActOnJobs"
                    },
                    &r,
                );
                return;
            }
            12 if rng.gen_bool(0.5) => {
                // Well-formed bodies with extreme numbers: a step's task counts, a token's
                // lifetime, a revocation.
                let which = rng.gen_range(0..3);
                let body = match which {
                    0 => json!({"job": job_id(rng), "nodelist": [], "nodes": junk_number(rng),
                        "ntasks": junk_number(rng), "ntasks_per_node": junk_number(rng),
                        "argv": ["true"], "env": {}, "cwd": "/"}),
                    1 => json!({"lifetime_s": junk_number(rng)}),
                    _ => json!({"user": junk_string(rng), "all": rng.gen_bool(0.5)}),
                };
                let json = serde_json::to_vec(&body).unwrap();
                let (name, r) = match which {
                    0 => {
                        let r = jobs.run_step(RunStepRequest::from_json(json)).await;
                        let r = match r {
                            Ok(reply) => {
                                let mut s = reply.into_inner();
                                let _ =
                                    tokio::time::timeout(Duration::from_millis(200), s.message())
                                        .await;
                                Ok(())
                            }
                            Err(e) => Err(e),
                        };
                        ("RunStep", r)
                    }
                    1 => (
                        "IssueToken",
                        jobs.issue_token(IssueTokenRequest::from_json(json))
                            .await
                            .map(|_| ()),
                    ),
                    _ => (
                        "RevokeTokens",
                        jobs.revoke_tokens(
                            RevokeTokensRequest::from_json(json).with_request_id(rid),
                        )
                        .await
                        .map(|_| ()),
                    ),
                };
                self.tally.lock().add(name, &r);
                return;
            }
            12 => "Agent.Session",
            _ => "raw",
        };
        if method == "Agent.Session" {
            let msgs = self.agent_messages(rng);
            let mut agent = AgentClient::new(ch);
            let r = agent.session(tokio_stream::iter(msgs)).await;
            let r = match r {
                Ok(reply) => {
                    let mut s = reply.into_inner();
                    let _ = tokio::time::timeout(Duration::from_millis(200), s.message()).await;
                    Ok(())
                }
                Err(e) => Err(e),
            };
            self.tally.lock().add(method, &r);
            return;
        }
        let path = METHODS[rng.gen_range(0..METHODS.len())];
        let mut grpc = tonic::client::Grpc::new(ch);
        if grpc.ready().await.is_err() {
            return;
        }
        let r = grpc
            .unary(
                tonic::Request::new(junk_bytes(rng)),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await;
        self.tally.lock().add("raw bytes", &r);
    }

    /// A session's worth of agent messages: a registration (of a fake node, for the
    /// admin) and node run and health reports about jobs it does not run, some mangled.
    fn agent_messages(&self, rng: &mut SmallRng) -> Vec<AgentEnvelope> {
        let mut out = Vec::new();
        let name = format!("fz{}", rng.gen_range(0..8));
        let mut register = json!({
            "type": "register",
            "name": name,
            "address": "127.0.0.1:1",
            "training_addr": "127.0.0.1",
            "topology": self.topology.clone().unwrap_or_else(|| junk_value(rng, 0)),
            "features": [],
            "agent_version": "fuzz",
            "known_steps": [RunRef { job: JobId(job_id(rng)), attempt: 0 }],
        });
        if !self.admin || rng.gen_bool(0.3) {
            mutate(&mut register, rng);
        }
        out.push(register);
        for seq in 0..rng.gen_range(0..6) {
            let job = JobId(job_id(rng));
            let failure = Failure::new(FailureKind::NcclError, junk_string(rng), 0);
            let mut m = match rng.gen_range(0..4) {
                0 => serde_json::to_value(AgentToController::Heartbeat {
                    running: vec![RunRef { job, attempt: 0 }],
                }),
                1 => serde_json::to_value(AgentToController::Run {
                    seq,
                    event: RunEvent::Exited {
                        job,
                        attempt: rng.gen_range(0..3),
                        code: Some(1),
                        signal: None,
                        failure: Some(failure),
                        usage: None,
                    },
                }),
                2 => serde_json::to_value(AgentToController::Run {
                    seq,
                    event: RunEvent::Started {
                        job,
                        attempt: 0,
                        pid: Some(1),
                    },
                }),
                _ => serde_json::to_value(AgentToController::Health {
                    seq,
                    events: vec![HealthEvent::new(
                        HealthSeverity::Critical,
                        HealthKind::Xid,
                        junk_string(rng),
                        0,
                    )],
                }),
            }
            .unwrap();
            if rng.gen_bool(0.5) {
                mutate(&mut m, rng);
            }
            out.push(m);
        }
        out.into_iter()
            .map(|m| AgentEnvelope {
                json: if rng.gen_bool(0.1) {
                    junk_bytes(rng)
                } else {
                    serde_json::to_vec(&m).unwrap()
                },
            })
            .collect()
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let addrs: Vec<String> = arg(&args, "--addrs")
        .expect("--addrs A,B,C")
        .split(',')
        .map(String::from)
        .collect();
    let secs: u64 = arg(&args, "--secs").map_or(10, |s| s.parse().expect("--secs"));
    let seed: u64 = arg(&args, "--seed").map_or(1, |s| s.parse().expect("--seed"));
    let tasks: u64 = arg(&args, "--tasks").map_or(8, |s| s.parse().expect("--tasks"));
    let topology = arg(&args, "--topology").map(|p| {
        serde_json::from_str(&std::fs::read_to_string(&p).expect("read --topology"))
            .expect("--topology is JSON")
    });
    let fuzzer = Arc::new(Fuzzer {
        admin: args.iter().any(|a| a == "--admin"),
        topology,
        tally: Mutex::new(Tally::default()),
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (fuzzer, addrs) = (fuzzer.clone(), addrs.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(t));
            let mut n = 0u64;
            while Instant::now() < deadline {
                let addr = &addrs[rng.gen_range(0..addrs.len())];
                let Ok(ep) = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                else {
                    continue;
                };
                let Ok(ch) = ep.connect().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                for _ in 0..20 {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let _ = tokio::time::timeout(
                        left.max(Duration::from_millis(1)),
                        fuzzer.one(ch.clone(), &mut rng),
                    )
                    .await;
                    n += 1;
                }
            }
            n
        }));
    }
    let mut requests = 0;
    for h in handles {
        requests += h.await.unwrap_or(0);
    }
    let tally = std::mem::take(&mut fuzzer.tally.lock().0);
    println!(
        "{}",
        json!({"requests": requests, "seed": seed, "secs": secs, "by_method": tally})
    );
}
