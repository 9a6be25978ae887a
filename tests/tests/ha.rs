//! Controller high availability through real processes: three `gctld` replicas on sled,
//! clients submitting over gRPC (with the CLI's failover client, as `gsub` does) while
//! controllers are SIGKILLed, the whole cluster restarted, or the leader cut off; and a
//! controller joining at run time, caught up from a snapshot, then removed.
//!
//! After each: every acknowledged job exists exactly once, no GPU was ever held by two
//! live jobs, job states only moved forward, and all replicas report the same state digest
//! at the same applied index.

use gsched_cli::client::Client;
use gsched_proto::pb::{ListJobsRequest, SubmitRequest};
use gsched_tests::{Cluster, wait_for};
use gsched_types::api::{JobList, JobRow};
use gsched_types::job::{JobSpec, JobState};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn user() -> String {
    gsched_cli::client::current_user()
}

fn spec(c: &Cluster, name: &str, gpus: u32, script: &str) -> JobSpec {
    let mut s = JobSpec::simple(name, &user(), script);
    s.gpus_per_node = gpus;
    s.workdir = c.path("out").to_string_lossy().into_owned();
    s.submit_dir = s.workdir.clone();
    s.env.insert("PATH".into(), "/usr/bin:/bin".into());
    s
}

/// What the clients were told: name -> job id, for every acknowledged submission.
#[derive(Default)]
struct Acks {
    acked: Mutex<BTreeMap<String, u64>>,
    failed: Mutex<Vec<(String, String)>>,
    count: AtomicUsize,
}

/// `clients` tasks, each submitting `per_client` jobs named `c{k}-{i}`; every submission
/// is retried with the same request id until it is acknowledged or 90 s have passed.
fn start_clients(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    clients: usize,
    per_client: usize,
    gpus: u32,
    script: &str,
    acks: &Arc<Acks>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|k| {
            let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
            let specs: Vec<(String, Vec<u8>)> = (0..per_client)
                .map(|i| {
                    let name = format!("c{k}-{i}");
                    let json = serde_json::to_vec(&spec(c, &name, gpus, script)).unwrap();
                    (name, json)
                })
                .collect();
            let acks = acks.clone();
            rt.spawn(async move {
                let mut client = Client::new(addrs).with_budget(Duration::from_secs(90));
                for (name, json) in specs {
                    let rid = uuid::Uuid::new_v4().to_string();
                    let r = client
                        .call(|mut j| {
                            let r = SubmitRequest {
                                request_id: rid.clone(),
                                json: json.clone(),
                            };
                            async move { j.submit(r).await }
                        })
                        .await;
                    match r {
                        Ok(reply) => {
                            acks.acked.lock().insert(name, reply.job_ids[0]);
                            acks.count.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => acks.failed.lock().push((name, e.to_string())),
                    }
                }
            })
        })
        .collect()
}

fn parse_jobs(doc: &[u8]) -> Vec<JobRow> {
    serde_json::from_slice::<JobList>(doc)
        .expect("a job list")
        .jobs
}

fn list_jobs(rt: &tokio::runtime::Runtime, c: &Cluster) -> Vec<JobRow> {
    let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
    rt.block_on(async move {
        let mut client = Client::new(addrs).with_budget(Duration::from_secs(30));
        let doc = client
            .call(|mut j| {
                let r = ListJobsRequest {
                    include_finished: true,
                    detail: true,
                    ..Default::default()
                };
                async move { j.list_jobs(r).await }
            })
            .await
            .expect("list jobs");
        parse_jobs(doc.json())
    })
}

fn rank(state: JobState) -> u8 {
    match state {
        JobState::Pending => 0,
        JobState::Running => 1,
        JobState::Completing => 2,
        _ => 3,
    }
}

fn live(state: JobState) -> bool {
    matches!(state, JobState::Running | JobState::Completing)
}

/// Watches the job table while the chaos runs: records each job's states and checks, on
/// every snapshot, that no GPU is held by two live jobs.
#[derive(Default)]
struct Monitor {
    history: Mutex<HashMap<u64, Vec<(JobState, u32)>>>,
    violations: Mutex<Vec<String>>,
    snapshots: AtomicUsize,
}

impl Monitor {
    fn observe(&self, jobs: &[JobRow]) {
        let mut held: HashMap<(String, u32), u64> = HashMap::new();
        let mut history = self.history.lock();
        for j in jobs {
            let h = history.entry(j.job_id.0).or_default();
            if h.last()
                .is_none_or(|(s, r)| *s != j.state || *r != j.attempt)
            {
                h.push((j.state, j.attempt));
            }
            if live(j.state) {
                for n in j.allocation.iter().flat_map(|a| a.nodes.iter()) {
                    for g in &n.gpus {
                        if let Some(other) = held.insert((n.node.clone(), *g), j.job_id.0) {
                            self.violations.lock().push(format!(
                                "GPU {g} of {} held by jobs {other} and {}",
                                n.node, j.job_id.0
                            ));
                        }
                    }
                }
            }
        }
        self.snapshots.fetch_add(1, Ordering::SeqCst);
    }

    fn spawn(
        self: &Arc<Self>,
        rt: &tokio::runtime::Runtime,
        c: &Cluster,
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let addrs: Vec<String> = c.controllers.iter().map(|(_, a)| a.clone()).collect();
        let me = self.clone();
        rt.spawn(async move {
            let mut client = Client::new(addrs).with_budget(Duration::from_secs(30));
            while !stop.load(Ordering::SeqCst) {
                if let Ok(doc) = client
                    .call(|mut j| {
                        let r = ListJobsRequest {
                            include_finished: true,
                            detail: true,
                            ..Default::default()
                        };
                        async move { j.list_jobs(r).await }
                    })
                    .await
                {
                    me.observe(&parse_jobs(doc.json()));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    }

    /// States only move forward; going back to PENDING is allowed only as a requeue
    /// (the restart count grows).
    fn check_forward(&self) {
        for (id, h) in self.history.lock().iter() {
            for w in h.windows(2) {
                let ((s0, r0), (s1, r1)) = (&w[0], &w[1]);
                let ok = if r1 > r0 {
                    true
                } else {
                    r1 == r0 && rank(*s1) >= rank(*s0) && !(rank(*s0) == 3 && s0 != s1)
                };
                assert!(
                    ok,
                    "job {id} went {s0}(restart {r0}) -> {s1}(restart {r1}); history {h:?}"
                );
            }
        }
        let v = self.violations.lock();
        assert!(v.is_empty(), "double-held GPUs: {v:?}");
    }
}

/// Every acknowledged job exists once, with the id the client was given; nothing else
/// was created (an unacknowledged submission may exist at most once).
fn check_exactly_once(jobs: &[JobRow], acks: &Acks) {
    let acked = acks.acked.lock();
    let failed: HashSet<String> = acks.failed.lock().iter().map(|(n, _)| n.clone()).collect();
    let mut by_name: HashMap<&str, Vec<u64>> = HashMap::new();
    for j in jobs {
        by_name.entry(j.name.as_str()).or_default().push(j.job_id.0);
    }
    for (name, id) in acked.iter() {
        let ids = by_name
            .get(name.as_str())
            .unwrap_or_else(|| panic!("acknowledged job {name} (id {id}) is missing"));
        assert_eq!(
            ids,
            &vec![*id],
            "job {name} must exist exactly once with id {id}"
        );
    }
    for (name, ids) in &by_name {
        assert!(
            acked.contains_key(*name) || failed.contains(*name),
            "job {name} {ids:?} was never submitted"
        );
        assert_eq!(ids.len(), 1, "job {name} exists {} times", ids.len());
    }
}

fn index_of(c: &Cluster, id: u64) -> usize {
    c.controllers.iter().position(|(i, _)| *i == id).unwrap()
}

/// Stops scheduling (drains every node) and waits until nothing runs, so the state stops
/// changing and replicas can be compared.
fn quiesce(c: &Cluster, rt: &tokio::runtime::Runtime, nodes: &[&str]) {
    for n in nodes {
        c.ok("gctl", &["node", "drain", n, "--reason", "test quiesce"]);
    }
    wait_for("running jobs to end", Duration::from_secs(60), || {
        list_jobs(rt, c)
            .iter()
            .all(|j| !live(j.state))
            .then_some(())
    });
}

#[test]
fn t10_submissions_survive_repeated_leader_kills_and_a_follower_restart() {
    let mut c = Cluster::controllers(3, &["--node-timeout", "10"]);
    std::fs::create_dir_all(c.path("out")).unwrap();
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.add_agent("n2", "rtx4090-8gpu.json", &[]);
    let rt = runtime();
    let acks = Arc::new(Acks::default());
    let monitor = Arc::new(Monitor::default());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = monitor.spawn(&rt, &c, stop.clone());
    let clients = start_clients(&rt, &c, 8, 250, 1, "#!/bin/sh\nsleep 1\n", &acks);
    let total = 8 * 250;

    let mut kills = Vec::new();
    for round in 1..=5 {
        let threshold = round * total / 7;
        wait_for(
            &format!("{threshold} acknowledged submissions"),
            Duration::from_secs(120),
            || (acks.count.load(Ordering::SeqCst) >= threshold).then_some(()),
        );
        let leader = c.leader(Duration::from_secs(30));
        let i = index_of(&c, leader);
        c.kill_controller(i);
        let next = wait_for("a new leader", Duration::from_secs(30), || {
            c.status()
                .iter()
                .find(|r| r["role"] == "leader" && r["id"].as_u64() != Some(leader))
                .and_then(|r| r["id"].as_u64())
        });
        kills.push((leader, next));
        c.start_controller(i);
    }
    // A follower restarts too.
    wait_for("more submissions", Duration::from_secs(120), || {
        (acks.count.load(Ordering::SeqCst) >= 6 * total / 7).then_some(())
    });
    let leader = c.leader(Duration::from_secs(30));
    let follower = c
        .controllers
        .iter()
        .map(|(id, _)| *id)
        .find(|id| *id != leader)
        .unwrap();
    c.restart_controller(index_of(&c, follower));

    rt.block_on(async {
        for h in clients {
            h.await.unwrap();
        }
    });
    assert!(
        acks.failed.lock().is_empty(),
        "submissions failed past the retry budget: {:?}",
        acks.failed.lock()
    );
    assert_eq!(acks.count.load(Ordering::SeqCst), total);
    assert_eq!(kills.len(), 5, "leaders killed: {kills:?}");

    // Let some of the queue run across the last failovers, then stop scheduling and compare.
    quiesce(&c, &rt, &["n1", "n2"]);
    stop.store(true, Ordering::SeqCst);
    rt.block_on(watcher).unwrap();
    let jobs = list_jobs(&rt, &c);
    monitor.observe(&jobs);
    check_exactly_once(&jobs, &acks);
    monitor.check_forward();
    assert!(monitor.snapshots.load(Ordering::SeqCst) > 10);
    // No running job was disturbed by the failovers: every job that ran completed.
    let ran: Vec<&JobRow> = jobs
        .iter()
        .filter(|j| j.state != JobState::Pending)
        .collect();
    assert!(ran.len() >= 16, "jobs ran during the test: {}", ran.len());
    for j in &ran {
        assert_eq!(
            j.state,
            JobState::Completed,
            "a failover disturbed job {}: {:?}",
            j.job_id.0,
            j.failure
        );
    }
    c.check_replicas_agree(3);
    eprintln!(
        "leaders killed (old -> new): {kills:?}; follower {follower} restarted; {} jobs ran; {} snapshots watched",
        ran.len(),
        monitor.snapshots.load(Ordering::SeqCst)
    );
}

#[test]
fn t20_a_whole_cluster_restart_keeps_every_acknowledged_job() {
    let mut c = Cluster::controllers(3, &["--node-timeout", "10"]);
    std::fs::create_dir_all(c.path("out")).unwrap();
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let rt = runtime();
    let acks = Arc::new(Acks::default());
    let monitor = Arc::new(Monitor::default());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = monitor.spawn(&rt, &c, stop.clone());
    let clients = start_clients(&rt, &c, 4, 100, 1, "#!/bin/sh\nsleep 1\n", &acks);
    wait_for(
        "150 acknowledged submissions",
        Duration::from_secs(120),
        || (acks.count.load(Ordering::SeqCst) >= 150).then_some(()),
    );
    for i in 0..3 {
        c.kill_controller(i);
    }
    let before: BTreeMap<String, u64> = acks.acked.lock().clone();
    assert!(
        before.len() < 400,
        "the restart must fall in the middle of the submissions"
    );
    for i in 0..3 {
        c.start_controller(i);
    }
    rt.block_on(async {
        for h in clients {
            h.await.unwrap();
        }
    });
    assert!(acks.failed.lock().is_empty(), "{:?}", acks.failed.lock());
    quiesce(&c, &rt, &["n1"]);
    stop.store(true, Ordering::SeqCst);
    rt.block_on(watcher).unwrap();
    let jobs = list_jobs(&rt, &c);
    monitor.observe(&jobs);
    check_exactly_once(&jobs, &acks);
    for (name, id) in &before {
        assert_eq!(
            acks.acked.lock()[name],
            *id,
            "ids acknowledged before the restart are kept"
        );
    }
    monitor.check_forward();
    for j in jobs.iter().filter(|j| j.state != JobState::Pending) {
        assert_eq!(
            j.state,
            JobState::Completed,
            "job {} across the restart: {:?}",
            j.job_id.0,
            j.failure
        );
    }
    c.check_replicas_agree(3);
}

#[test]
fn t30_an_isolated_leader_accepts_no_writes_and_the_majority_goes_on() {
    let mut c = Cluster::controllers(3, &["--node-timeout", "30"]);
    std::fs::create_dir_all(c.path("out")).unwrap();
    c.add_agent("n1", "ws-2gpu-nvlink.json", &[]);
    let rt = runtime();
    let id0 = c.submit(&["--hold", "--wrap", "true", "-J", "before"]);
    let old = c.leader(Duration::from_secs(30));
    let others: Vec<u64> = c
        .controllers
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| *i != old)
        .collect();
    // Cut the leader off from both followers, in both directions.
    std::fs::write(
        c.path(&format!("faults{old}")),
        others
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    )
    .unwrap();
    for o in &others {
        std::fs::write(c.path(&format!("faults{o}")), old.to_string()).unwrap();
    }
    let old_addr = c.controllers[index_of(&c, old)].1.clone();
    // Controllers re-read their faults file every 200 ms; wait until the cut is in force.
    let one = std::cell::RefCell::new(Client::new(Vec::new()));
    let status_of = |addr: &str| -> Option<Value> {
        serde_json::from_slice(
            &rt.block_on(one.borrow_mut().call_on(addr, |mut j| async move {
                j.status(gsched_proto::pb::StatusRequest {}).await
            }))
            .ok()?
            .json,
        )
        .ok()
    };
    wait_for(
        "the partition to take effect",
        Duration::from_secs(10),
        || {
            c.controllers
                .iter()
                .all(|(_, addr)| {
                    status_of(addr).is_some_and(|v| {
                        v["fault_blocked_peers"]
                            .as_array()
                            .is_some_and(|b| !b.is_empty())
                    })
                })
                .then_some(())
        },
    );
    // A write sent to the isolated leader is never acknowledged.
    let json = serde_json::to_vec(&spec(&c, "minority", 0, "#!/bin/sh\ntrue\n")).unwrap();
    let t0 = std::time::Instant::now();
    let minority = rt.block_on(one.borrow_mut().call_on(&old_addr, |mut j| {
        let r = SubmitRequest {
            request_id: "minority-1".into(),
            json,
        };
        async move { j.submit(r).await }
    }));
    let err = minority.expect_err("the isolated leader acknowledged a write");
    assert_eq!(
        err.code(),
        tonic::Code::Unavailable,
        "refused for lack of a quorum, not for the request: {err:?} after {:?}",
        t0.elapsed()
    );
    // The majority elects a new leader and takes writes.
    let new = wait_for(
        "a leader on the majority side",
        Duration::from_secs(30),
        || {
            c.status()
                .iter()
                .find(|r| r["role"] == "leader" && r["id"].as_u64() != Some(old))
                .and_then(|r| r["id"].as_u64())
        },
    );
    assert_ne!(new, old);
    let majority_addrs: Vec<String> = others
        .iter()
        .map(|o| c.controllers[index_of(&c, *o)].1.clone())
        .collect();
    let json = serde_json::to_vec(&spec(&c, "majority", 0, "#!/bin/sh\ntrue\n")).unwrap();
    let reply = rt
        .block_on(async move {
            let mut client = Client::new(majority_addrs).with_budget(Duration::from_secs(30));
            client
                .call(|mut j| {
                    let r = SubmitRequest {
                        request_id: "majority-1".into(),
                        json: json.clone(),
                    };
                    async move { j.submit(r).await }
                })
                .await
        })
        .expect("the majority accepts writes");
    assert!(reply.job_ids[0] > id0);
    // The old leader no longer claims to lead once its check-quorum lapses.
    let old_row = wait_for(
        "the isolated controller to step down",
        Duration::from_secs(30),
        || status_of(&old_addr).filter(|v| v["role"] != "leader"),
    );
    assert_ne!(old_row["role"], "leader");
    // Heal: everyone converges on the majority's history; the minority's write is gone.
    for (i, _) in &c.controllers {
        std::fs::write(c.path(&format!("faults{i}")), "").unwrap();
    }
    c.check_replicas_agree(3);
    let jobs = list_jobs(&rt, &c);
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert!(
        names.contains(&"majority") && names.contains(&"before"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"minority"),
        "a write the minority never committed appeared: {names:?}"
    );
}

#[test]
fn t40_a_new_controller_joins_catches_up_from_a_snapshot_and_is_removed() {
    // Snapshots every 50 entries, so by the time the new member joins, the log it needs
    // is compacted away and it must be sent a snapshot (over gRPC, in chunks).
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), "snapshot_every = 50\n").unwrap();
    let cfg_path = cfg.path().to_string_lossy().into_owned();
    let mut c = Cluster::controllers(3, &["--config", &cfg_path]);
    std::fs::create_dir_all(c.path("out")).unwrap();
    c.add_agent("n1", "ws-2gpu-nvlink.json", &[]);
    let rt = runtime();
    let acks = Arc::new(Acks::default());
    rt.block_on(async {
        for h in start_clients(&rt, &c, 4, 50, 0, "#!/bin/sh\ntrue\n", &acks) {
            h.await.unwrap();
        }
    });
    assert_eq!(acks.count.load(Ordering::SeqCst), 200);
    let leader_row = c
        .status()
        .into_iter()
        .find(|r| r["role"] == "leader")
        .unwrap();
    assert!(
        leader_row["first_index"].as_u64().unwrap() > 1,
        "the leader's log was compacted: {leader_row}"
    );

    // Start controller 4 empty, then add it.
    let addr4 = format!("127.0.0.1:{}", gsched_tests::free_port());
    let log4 = std::fs::File::create(c.path("ctl4.log")).unwrap();
    let mut ctl4 = gsched_tests::Proc {
        name: "gctld4".into(),
        child: std::process::Command::new(gsched_tests::bin("gctld"))
            .args([
                "--id",
                "4",
                "--listen",
                &addr4,
                "--join",
                "--dev-local",
                "--config",
                &cfg_path,
                "--data-dir",
            ])
            .arg(c.path("ctl4"))
            .env(
                "GSCHED_LOG",
                "info,raft=warn,sled=warn,h2=warn,tower=warn,hyper=warn",
            )
            .stdout(std::process::Stdio::null())
            .stderr(log4)
            .spawn()
            .unwrap(),
        log: c.path("ctl4.log"),
    };
    // An admin adds it once it is up (a member that does not answer is refused).
    wait_for("controller 4 to listen", Duration::from_secs(30), || {
        std::net::TcpStream::connect(&addr4).ok().map(drop)
    });
    c.ok("gctl", &["controllers", "add", &format!("4={addr4}")]);
    c.controllers.push((4, addr4.clone()));
    let rows = wait_for("controller 4 to catch up", Duration::from_secs(60), || {
        let rows = c.status();
        let four = rows.iter().find(|r| r["id"] == 4)?;
        let leader = rows.iter().find(|r| r["role"] == "leader")?;
        (four["applied_index"] == leader["applied_index"]
            && four["state_digest"] == leader["state_digest"])
            .then_some(rows)
    });
    let four = rows.iter().find(|r| r["id"] == 4).unwrap();
    assert_eq!(four["role"], "follower");
    assert!(
        four["snapshot_index"].as_u64().unwrap() > 0,
        "controller 4 was brought up from a snapshot: {four}"
    );
    assert!(
        std::fs::read_to_string(c.path("ctl4.log"))
            .unwrap()
            .contains("installed snapshot"),
        "controller 4 installed a snapshot sent by the leader: {}",
        std::fs::read_to_string(c.path("ctl4.log")).unwrap()
    );
    // Its copy serves reads like any replica.
    let jobs = rt.block_on(async {
        let mut client = Client::new(vec![addr4.clone()]).with_budget(Duration::from_secs(10));
        let doc = client
            .call(|mut j| async move {
                j.list_jobs(ListJobsRequest {
                    include_finished: true,
                    detail: true,
                    ..Default::default()
                })
                .await
            })
            .await
            .unwrap();
        parse_jobs(doc.json())
    });
    check_exactly_once(&jobs, &acks);

    // Remove it again: the other three go on and agree.
    c.ok("gctl", &["controllers", "remove", "4"]);
    c.controllers.pop();
    wait_for(
        "controller 4 to leave the voters",
        Duration::from_secs(30),
        || {
            c.status()
                .iter()
                .find(|r| r["role"] == "leader")
                .filter(|r| !r["voters"].as_array().unwrap().iter().any(|v| v == 4))
                .map(|_| ())
        },
    );
    ctl4.kill9();
    let _ = c.submit(&["--wrap", "true", "-J", "after-remove"]);
    c.check_replicas_agree(3);
}

#[test]
fn t50_a_write_sent_once_to_a_follower_during_an_election_is_accepted_and_applied_once() {
    let rt = runtime();
    let mut c = Cluster::controllers(3, &[]);
    let leader = c.leader(Duration::from_secs(30));
    let follower = c
        .controllers
        .iter()
        .find(|(id, _)| *id != leader)
        .map(|(_, a)| a.clone())
        .unwrap();
    let json = serde_json::to_vec(&spec(&c, "mid-election", 1, "#!/bin/sh\ntrue\n")).unwrap();
    let request_id = uuid::Uuid::new_v4().to_string();
    c.kill_controller(index_of(&c, leader));
    // One call, no client retry: the follower has to carry the write through the election.
    let mut one = Client::new(Vec::new());
    let reply = rt
        .block_on(one.call_on(&follower, |mut j| {
            let req = SubmitRequest {
                request_id: request_id.clone(),
                json: json.clone(),
            };
            async move { j.submit(req).await }
        }))
        .expect("the follower accepts a write while a new leader is elected");
    assert_eq!(reply.job_ids.len(), 1, "the reply names one job: {reply:?}");
    let jobs = list_jobs(&rt, &c);
    let named: Vec<u64> = jobs
        .iter()
        .filter(|j| j.name == "mid-election")
        .map(|j| j.job_id.0)
        .collect();
    assert_eq!(named, reply.job_ids, "the write is applied once");
}

#[test]
fn t60_a_controller_stopped_with_sigterm_exits_though_peers_and_agents_hold_streams_to_it() {
    let mut c = Cluster::controllers(3, &[]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let before = c.submit(&["--hold", "--wrap", "true", "-J", "before-stop"]);
    // The leader holds the agent's session and both peers' Peer.Stream calls.
    let leader = c.leader(Duration::from_secs(30));
    let i = index_of(&c, leader);
    let took = c
        .stop_controller(i, Duration::from_secs(10))
        .expect("a controller asked to stop exits while streams to it are open");
    assert!(
        took < Duration::from_secs(5),
        "stopping took {took:?}: open streams get a grace of a few seconds, not more"
    );
    let next = wait_for("a new leader", Duration::from_secs(30), || {
        c.status()
            .iter()
            .find(|r| r["role"] == "leader" && r["id"].as_u64() != Some(leader))
            .and_then(|r| r["id"].as_u64())
    });
    assert_ne!(next, leader);
    let after = c.submit(&["--hold", "--wrap", "true", "-J", "after-stop"]);
    c.start_controller(i);
    wait_for(
        "the stopped controller to catch up",
        Duration::from_secs(30),
        || {
            c.status()
                .iter()
                .find(|r| r["id"].as_u64() == Some(leader))
                .filter(|r| r["applied_index"].as_u64() >= r["commit_index"].as_u64())
                .filter(|r| r["jobs"].as_u64() == Some(2))
                .map(|_| ())
        },
    );
    for id in [before, after] {
        assert!(c.job(id).is_some(), "job {id} is kept");
    }
    c.check_replicas_agree(3);
}
