//! GPU use outside jobs: which processes use each GPU (NVML's compute and graphics process
//! lists; the `/proc/*/fd` links to the GPU's device node where NVML cannot say, as on
//! fake nodes), which job each belongs to (its cgroup, else its process group, session or
//! ancestry against the node's runs), and what the `[outside_jobs]` policy does about the
//! rest. [`judge`] is the decision, pure; [`scan`], [`facts`] and [`act`] read and do.

use gsched_types::job::JobId;
use gsched_types::outside::{OutsideAction, OutsidePolicy, OutsideUse};
use std::collections::BTreeMap;
use std::path::Path;

/// A process on a GPU, as NVML or the device node's open files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProc {
    pub gpu: u32,
    pub pid: u32,
    pub mem_mib: Option<u64>,
}

/// What `/proc` says of a process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcFacts {
    pub uid: u32,
    pub user: String,
    pub command: String,
    /// Its cgroup v2 path (`/gsched/job-5-0/...`), if any.
    pub cgroup: Option<String>,
    pub pgid: Option<i32>,
    pub sid: Option<i32>,
    /// Its parent, the parent's parent, ... (up to init).
    pub ancestors: Vec<u32>,
}

/// What the judge needs of one of the node's runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub job: JobId,
    pub gpus: Vec<u32>,
    /// Its cgroup, relative to the cgroup v2 root (`/gsched/job-5-0`).
    pub cgroup: Option<String>,
    pub pgid: Option<i32>,
    pub supervisor: Option<u32>,
}

/// What the agent remembers of a process on a GPU between looks (by GPU and pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub since_ms: u64,
    pub acted: Option<OutsideAction>,
}

/// What the policy asks the agent to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Write `text` to the terminals of `uid`.
    Warn {
        uid: u32,
        text: String,
    },
    /// SIGTERM (the first time), SIGKILL (a process still there at the next look).
    Term(u32),
    Kill(u32),
}

/// The outcome of one look.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    pub uses: Vec<OutsideUse>,
    pub acts: Vec<Act>,
    /// What to remember for the next look (processes gone are forgotten).
    pub seen: BTreeMap<(u32, u32), Seen>,
}

/// Driver and monitoring daemons that hold every GPU's device node open.
const DRIVER_DAEMONS: &[&str] = &["nvidia-persistenced", "nv-hostengine", "nvidia-smi", "dcgm"];

/// The run `p` belongs to: the one whose cgroup holds it, else whose process group or
/// session it is in, else whose supervisor is one of its ancestors.
fn run_of<'r>(p: &ProcFacts, pid: u32, runs: &'r [RunFacts]) -> Option<&'r RunFacts> {
    let in_cgroup = |r: &&RunFacts| {
        matches!((&r.cgroup, &p.cgroup), (Some(run), Some(mine))
            if mine == run || mine.starts_with(&format!("{}/", run.trim_end_matches('/'))))
    };
    runs.iter().find(in_cgroup).or_else(|| {
        runs.iter().find(|r| {
            r.pgid
                .is_some_and(|g| Some(g) == p.pgid || Some(g) == p.sid)
                || r.supervisor
                    .is_some_and(|s| s == pid || p.ancestors.contains(&s))
        })
    })
}

/// Judges one look: `procs` are the processes on the GPUs with their facts, `runs` the
/// node's runs, `me` the agent's pid, `seen` what the last look remembered. A process in
/// a run that holds its GPU is fine; any other (outside every run, or in a run without
/// that GPU) is a use outside jobs, acted on once it has lasted `grace_s` (and was seen
/// by an earlier look) unless its user is exempt: `warn` once, `kill` with SIGTERM and
/// then SIGKILL.
pub fn judge(
    procs: &[(GpuProc, ProcFacts)],
    runs: &[RunFacts],
    policy: &OutsidePolicy,
    me: u32,
    now_ms: u64,
    seen: &BTreeMap<(u32, u32), Seen>,
    node: &str,
) -> Verdict {
    let mut v = Verdict::default();
    for (g, p) in procs {
        if g.pid == me || DRIVER_DAEMONS.iter().any(|d| p.command.starts_with(d)) {
            continue;
        }
        let run = run_of(p, g.pid, runs);
        // The agent's own helpers (a run's supervisor starting or ending, a GPU probe)
        // belong to no run but are the agent's.
        if run.is_some_and(|r| r.gpus.contains(&g.gpu))
            || run.is_none() && p.ancestors.contains(&me)
        {
            continue;
        }
        let before = seen.get(&(g.gpu, g.pid)).copied();
        let mut mem = Seen {
            since_ms: before.map_or(now_ms, |s| s.since_ms),
            acted: before.and_then(|s| s.acted),
        };
        // Never on a first sighting: a run that started since the runs were read would
        // look like no job's for one look.
        let due = before.is_some()
            && now_ms.saturating_sub(mem.since_ms) >= policy.grace_s * 1000
            && !policy.exempt_users.contains(&p.user);
        if due {
            match (policy.action, mem.acted) {
                (OutsideAction::Warn, None) => {
                    v.acts.push(Act::Warn {
                        uid: p.uid,
                        text: format!(
                            "\r\ngsched: your process {} ({}) is using GPU {} of {node} outside any job that holds it; the scheduler may give this GPU to someone else's job. Please end it and run it as a job (gsub, grun, galloc).\r\n",
                            g.pid, p.command, g.gpu
                        ),
                    });
                    mem.acted = Some(OutsideAction::Warn);
                }
                (OutsideAction::Kill, None) => {
                    v.acts.push(Act::Term(g.pid));
                    mem.acted = Some(OutsideAction::Kill);
                }
                (OutsideAction::Kill, Some(OutsideAction::Kill)) => v.acts.push(Act::Kill(g.pid)),
                _ => {}
            }
        }
        v.seen.insert((g.gpu, g.pid), mem);
        v.uses.push(OutsideUse {
            gpu: g.gpu,
            pid: g.pid,
            user: p.user.clone(),
            uid: p.uid,
            command: p.command.clone(),
            gpu_mem_mib: g.mem_mib,
            job: run.map(|r| r.job),
            since_ms: mem.since_ms,
            acted: mem.acted,
        });
    }
    v.uses.sort_by_key(|u| (u.gpu, u.pid));
    v.acts.dedup();
    v
}

/// The processes holding `devices` (agent GPU index, device node path) open, from
/// `proc_root`'s `PID/fd` links.
pub fn scan(proc_root: &Path, devices: &[(u32, String)]) -> Vec<GpuProc> {
    let targets: Vec<(u32, std::path::PathBuf)> = devices
        .iter()
        .map(|(g, p)| (*g, std::fs::canonicalize(p).unwrap_or_else(|_| p.into())))
        .collect();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        let mut on: Vec<u32> = Vec::new();
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path())
                && let Some((g, _)) = targets.iter().find(|(_, t)| *t == link)
                && !on.contains(g)
            {
                on.push(*g);
            }
        }
        out.extend(on.into_iter().map(|gpu| GpuProc {
            gpu,
            pid,
            mem_mib: None,
        }));
    }
    out.sort_by_key(|p| (p.gpu, p.pid));
    out
}

/// `/proc/PID`'s facts, or `None` once the process is gone.
pub fn facts(proc_root: &Path, pid: u32) -> Option<ProcFacts> {
    let dir = proc_root.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
    };
    let uid = field("Uid:")?;
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string());
    let mut command = std::fs::read(dir.join("cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if command.is_empty() {
        command = std::fs::read_to_string(dir.join("comm"))
            .map(|c| format!("[{}]", c.trim()))
            .unwrap_or_default();
    }
    if command.chars().count() > 200 {
        command = command.chars().take(200).collect();
    }
    let cgroup = std::fs::read_to_string(dir.join("cgroup"))
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        });
    // `stat`: "pid (comm) state ppid pgrp session ..."; comm may hold spaces.
    let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let num = |i: usize| rest.get(i).and_then(|v| v.parse::<i32>().ok());
    let mut ancestors = Vec::new();
    let mut next = field("PPid:");
    while let Some(pp) = next.filter(|p| *p > 1 && ancestors.len() < 64) {
        ancestors.push(pp);
        next = std::fs::read_to_string(proc_root.join(pp.to_string()).join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .and_then(|v| v.trim().parse().ok())
            });
    }
    Some(ProcFacts {
        uid,
        user,
        command,
        cgroup,
        pgid: num(2),
        sid: num(3),
        ancestors,
    })
}

/// One look, gathered under the run manager's lock
/// (`RunManager::outside_look`) and taken without it: the `/proc` reads, the judgement
/// and the acts.
pub struct Look {
    pub policy: OutsidePolicy,
    /// What NVML listed.
    pub procs: Vec<GpuProc>,
    /// GPUs NVML could not say about, with their device nodes.
    pub by_files: Vec<(u32, String)>,
    pub runs: Vec<RunFacts>,
    pub seen: BTreeMap<(u32, u32), Seen>,
    pub node: String,
}

impl Look {
    /// Reads `/proc`, judges, carries out the acts; returns the verdict.
    pub fn take(mut self, me: u32, now_ms: u64) -> Verdict {
        let proc_root = Path::new("/proc");
        if !self.by_files.is_empty() {
            self.procs.extend(scan(proc_root, &self.by_files));
        }
        let with_facts: Vec<(GpuProc, ProcFacts)> = self
            .procs
            .into_iter()
            .filter_map(|p| {
                let f = facts(proc_root, p.pid)?;
                Some((p, f))
            })
            .collect();
        let verdict = judge(
            &with_facts,
            &self.runs,
            &self.policy,
            me,
            now_ms,
            &self.seen,
            &self.node,
        );
        act(&verdict.acts);
        verdict
    }
}

/// Carries out the policy's acts: a message to each terminal (`/dev/pts/N`) the user
/// owns, SIGTERM or SIGKILL to a process.
pub fn act(acts: &[Act]) {
    use std::os::unix::fs::MetadataExt;
    for a in acts {
        match a {
            Act::Warn { uid, text } => {
                let Ok(ttys) = std::fs::read_dir("/dev/pts") else {
                    continue;
                };
                for t in ttys.flatten() {
                    let owned = t.metadata().is_ok_and(|m| m.uid() == *uid);
                    if !owned || t.file_name() == "ptmx" {
                        continue;
                    }
                    let opened = std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
                        .open(t.path());
                    if let Ok(mut f) = opened {
                        let _ = std::io::Write::write_all(&mut f, text.as_bytes());
                    }
                }
            }
            Act::Term(pid) | Act::Kill(pid) => {
                let sig = if matches!(a, Act::Term(_)) {
                    nix::sys::signal::Signal::SIGTERM
                } else {
                    nix::sys::signal::Signal::SIGKILL
                };
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), sig);
                tracing::warn!("killed process {pid} (GPU used outside jobs) with {sig}");
            }
        }
    }
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_on(gpu: u32, pid: u32, user: &str, cgroup: Option<&str>) -> (GpuProc, ProcFacts) {
        (
            GpuProc {
                gpu,
                pid,
                mem_mib: Some(2048),
            },
            ProcFacts {
                uid: 1002,
                user: user.into(),
                command: "python train.py".into(),
                cgroup: cgroup.map(str::to_string),
                pgid: Some(pid as i32),
                sid: Some(pid as i32),
                ancestors: vec![1000],
            },
        )
    }

    fn run(job: u64, gpus: &[u32], cgroup: &str) -> RunFacts {
        RunFacts {
            job: JobId(job),
            gpus: gpus.to_vec(),
            cgroup: Some(cgroup.into()),
            pgid: None,
            supervisor: None,
        }
    }

    #[test]
    fn processes_outside_jobs_or_on_another_jobs_gpu_are_findings() {
        let runs = [run(5, &[0], "/gsched/job-5-0")];
        let procs = [
            // alice's job on its own GPU: fine.
            proc_on(0, 10, "alice", Some("/gsched/job-5-0/task-0")),
            // bob's shell on GPU 0: outside any job.
            proc_on(
                0,
                20,
                "bob",
                Some("/user.slice/user-1002.slice/session-3.scope"),
            ),
            // alice's job reaching GPU 1, which it does not hold.
            proc_on(1, 11, "alice", Some("/gsched/job-5-0")),
        ];
        let v = judge(
            &procs,
            &runs,
            &OutsidePolicy::default(),
            1,
            5_000,
            &BTreeMap::new(),
            "n1",
        );
        let found: Vec<(u32, u32, Option<JobId>)> =
            v.uses.iter().map(|u| (u.gpu, u.pid, u.job)).collect();
        assert_eq!(found, vec![(0, 20, None), (1, 11, Some(JobId(5)))]);
        assert_eq!(v.uses[0].gpu_mem_mib, Some(2048));
        assert_eq!(v.uses[0].since_ms, 5_000);
        assert!(v.acts.is_empty(), "report only");
        assert!(
            v.uses[0]
                .line()
                .contains("pid 20 (bob) python train.py, 2048 MiB, outside any job")
        );
    }

    #[test]
    fn without_cgroups_the_process_group_or_ancestry_places_a_process() {
        let runs = [RunFacts {
            job: JobId(7),
            gpus: vec![0],
            cgroup: None,
            pgid: Some(300),
            supervisor: Some(299),
        }];
        let mut by_group = proc_on(0, 301, "alice", None);
        by_group.1.pgid = Some(300);
        let mut by_parent = proc_on(0, 400, "alice", None);
        by_parent.1.ancestors = vec![350, 299, 1];
        let v = judge(
            &[by_group, by_parent],
            &runs,
            &OutsidePolicy::default(),
            1,
            0,
            &BTreeMap::new(),
            "n1",
        );
        assert!(v.uses.is_empty(), "{:?}", v.uses);
    }

    #[test]
    fn warn_and_kill_wait_for_the_grace_and_spare_the_exempt() {
        let procs = [proc_on(0, 20, "bob", None), proc_on(0, 21, "carol", None)];
        let warn = OutsidePolicy {
            action: OutsideAction::Warn,
            grace_s: 30,
            exempt_users: vec!["carol".into()],
        };
        let first = judge(&procs, &[], &warn, 1, 1_000, &BTreeMap::new(), "n1");
        assert!(first.acts.is_empty(), "within the grace");
        let later = judge(&procs, &[], &warn, 1, 31_000, &first.seen, "n1");
        assert_eq!(later.acts.len(), 1);
        assert!(matches!(&later.acts[0], Act::Warn { text, .. } if text.contains("process 20")));
        assert_eq!(later.uses[0].acted, Some(OutsideAction::Warn));
        let again = judge(&procs, &[], &warn, 1, 61_000, &later.seen, "n1");
        assert!(again.acts.is_empty(), "warned once");

        let kill = OutsidePolicy {
            action: OutsideAction::Kill,
            grace_s: 0,
            exempt_users: vec![],
        };
        // Even with no grace, not on the first sighting.
        let first = judge(&procs[..1], &[], &kill, 1, 0, &BTreeMap::new(), "n1");
        assert!(first.acts.is_empty());
        let second = judge(&procs[..1], &[], &kill, 1, 1_000, &first.seen, "n1");
        assert_eq!(second.acts, vec![Act::Term(20)]);
        let third = judge(&procs[..1], &[], &kill, 1, 2_000, &second.seen, "n1");
        assert_eq!(third.acts, vec![Act::Kill(20)]);
        let second = third;
        // A process gone is forgotten.
        let gone = judge(&[], &[], &kill, 1, 2_000, &second.seen, "n1");
        assert!(gone.seen.is_empty() && gone.uses.is_empty());
    }

    #[test]
    fn the_agent_and_driver_daemons_are_not_findings() {
        let mut daemon = proc_on(0, 50, "nvidia-persistenced", None);
        daemon.1.command = "nvidia-persistenced --user nvidia-persistenced".into();
        let me = proc_on(0, 1, "root", None);
        let v = judge(
            &[daemon, me],
            &[],
            &OutsidePolicy::default(),
            1,
            0,
            &BTreeMap::new(),
            "n1",
        );
        assert!(v.uses.is_empty());
    }

    #[test]
    fn a_process_holding_a_device_node_is_found_through_proc() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("nvidia0");
        std::fs::write(&dev, b"").unwrap();
        let _held = std::fs::File::open(&dev).unwrap();
        let found = scan(
            Path::new("/proc"),
            &[(0, dev.to_string_lossy().into_owned())],
        );
        let me = std::process::id();
        assert!(found.iter().any(|p| p.pid == me && p.gpu == 0), "{found:?}");
        let f = facts(Path::new("/proc"), me).unwrap();
        assert_eq!(f.uid, nix::unistd::getuid().as_raw());
    }
}
