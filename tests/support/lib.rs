//! Test support for gsched's cross-process tests: builds the binaries once, starts real
//! `gctld` and `gagentd` processes on 127.0.0.1 with ephemeral ports and temporary
//! directories, drives them only through the CLI, and waits on conditions (never fixed
//! sleeps). Processes are killed when the cluster is dropped.

pub mod http;
pub mod junk;
pub mod netns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The outcome of building the binaries, shared by every test of the process: a failed
/// build is reported by each test that needs them, with cargo's own words, not as a
/// poisoned lock.
static BUILD: OnceLock<Result<(), String>> = OnceLock::new();

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Path of a gsched binary, building the binaries on first use.
pub fn bin(name: &str) -> PathBuf {
    let built = BUILD.get_or_init(|| match std::env::var_os("GSCHED_BIN_DIR") {
        None => build_binaries(&[]),
        Some(_) => Ok(()),
    });
    if let Err(why) = built {
        panic!("{why}");
    }
    match std::env::var_os("GSCHED_BIN_DIR") {
        Some(d) => PathBuf::from(d).join(name),
        None => target_dir().join("debug").join(name),
    }
}

/// For benchmarks: builds the release binaries (unless `GSCHED_BIN_DIR` already names
/// some) and points [`bin`] at them. Call first thing in `main`, before any thread starts.
pub fn use_release_binaries() {
    if std::env::var_os("GSCHED_BIN_DIR").is_some() {
        return;
    }
    if let Err(why) = build_binaries(&["--release"]) {
        panic!("{why}");
    }
    // SAFETY: the caller runs this before any thread or runtime starts.
    unsafe { std::env::set_var("GSCHED_BIN_DIR", target_dir().join("release")) };
}

/// `cargo build` of gctld, gagentd and the CLI tools, with `extra` arguments; on failure,
/// what cargo printed and how much room the target directory's disk had left.
fn build_binaries(extra: &[&str]) -> Result<(), String> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // Variables cargo sets for this test (CARGO_MANIFEST_DIR...) would make the build
    // below differ from a plain `cargo build` (ring's build script watches one), and
    // each would rebuild half the tree after the other.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let per_crate = [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| k.starts_with(p));
        if per_crate
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&k.as_ref())
        {
            cargo.env_remove(k.as_ref());
        }
    }
    let out = cargo
        .args(["build", "--quiet", "--bins"])
        .args(extra)
        .args([
            "-p",
            "gsched-controller",
            "-p",
            "gsched-agent",
            "-p",
            "gsched-cli",
        ])
        .current_dir(workspace())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run cargo build: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let room = Command::new("df")
        .args(["-h", "--output=avail,target"])
        .arg(target_dir())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    Err(format!(
        "building the gsched binaries failed ({}):\n{}{}\nroom left for the target directory:\n{room}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The stdout of a command that had to succeed; panics with `what` and its output if not.
pub fn success_stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free TCP port on 127.0.0.1, never handed out twice by this process and below the
/// kernel's ephemeral range (32768 up), so that neither another test's `free_port` nor a
/// client socket can take it between this call and the daemon's bind. (Ports from
/// `bind(0)` are ephemeral ones: an outgoing connection anywhere on the host could hold
/// one by the time the daemon binds it, and the daemon would exit refusing to start.)
/// Ports 20000 up are the clusters' MASTER_PORT ranges; these come from 10000-19999.
pub fn free_port() -> u16 {
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 10_000;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let offset = (std::process::id() * 397) % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (FIRST + (offset + n) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}

/// Polls `f` every 50 ms until it returns `Some`, or panics after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Options for an agent.
#[derive(Clone)]
pub struct AgentOpts {
    pub name: String,
    pub topology: PathBuf,
    pub extra: Vec<String>,
    /// A command line the agent runs under (`ip netns exec NS ...`), if any.
    pub prefix: Vec<String>,
}

/// `program` run under `prefix` (a command that ends by exec'ing its arguments, such as
/// `ip netns exec NS`), or alone.
pub fn prefixed(prefix: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match prefix.split_first() {
        None => Command::new(program),
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
    }
}

/// Where a cluster's processes run when they are not all on this host's loopback: each
/// controller's address and the command it runs under, and the command the CLI runs under.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub controllers: Vec<(String, Vec<String>)>,
    pub cli: Vec<String>,
}

/// A local cluster of real processes.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub controllers: Vec<(u64, String)>,
    pub ctl_procs: Vec<Option<Proc>>,
    pub agents: Vec<Option<Proc>>,
    pub agent_opts: Vec<AgentOpts>,
    pub ctl_extra: Vec<String>,
    /// How the controllers authenticate (`--dev-local` unless a test sets up
    /// certificates and munge).
    pub ctl_security: Vec<String>,
    /// How the agents authenticate.
    pub agent_security: Vec<String>,
    /// Environment for the CLI tools (`GSCHED_TLS_CA`, `GSCHED_MUNGE_SOCKET`...).
    pub cli_env: Vec<(String, String)>,
    /// The commands controllers (by index) and the CLI run under.
    pub ctl_prefix: Vec<Vec<String>>,
    pub cli_prefix: Vec<String>,
}

/// How a cluster's processes prove who they are.
#[derive(Clone, Debug)]
pub struct Security {
    pub controllers: Vec<String>,
    pub agents: Vec<String>,
    pub cli_env: Vec<(String, String)>,
    /// Controllers listen on Unix sockets in the cluster's (root-owned) directory rather
    /// than loopback ports: the one-server deployment.
    pub unix_sockets: bool,
}

impl Security {
    /// A single-host development cluster.
    pub fn dev_local() -> Security {
        Security {
            controllers: vec!["--dev-local".into()],
            agents: vec!["--dev-local".into()],
            cli_env: Vec::new(),
            unix_sockets: false,
        }
    }

    /// One server shared by its users: `--dev-local` over Unix sockets.
    pub fn one_host() -> Security {
        Security {
            unix_sockets: true,
            ..Security::dev_local()
        }
    }
}

pub fn topology(name: &str) -> PathBuf {
    workspace().join("deploy/local/topologies").join(name)
}

impl Cluster {
    /// `n` controllers (one Raft group) and no agents yet, on `--dev-local`.
    pub fn controllers(n: u64, extra: &[&str]) -> Cluster {
        Cluster::controllers_with(n, extra, Security::dev_local())
    }

    /// `n` controllers with the given security settings.
    pub fn controllers_with(n: u64, extra: &[&str], security: Security) -> Cluster {
        Cluster::controllers_placed(n, extra, security, Placement::default())
    }

    /// Controllers at the addresses and under the commands `placement` gives (network
    /// namespaces standing for hosts), with the given security settings.
    pub fn controllers_placed(
        n: u64,
        extra: &[&str],
        security: Security,
        placement: Placement,
    ) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("gsched-test")
            .tempdir()
            .expect("tempdir");
        // Other users (the multi-user tests) may pass through, not list.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("chmod the cluster directory");
        // Clusters of parallel tests share the host: give each its own MASTER_PORT range,
        // below the kernel's ephemeral ports (32768 up), which any client socket may hold.
        static NEXT_RANGE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let slot = (std::process::id()
            + NEXT_RANGE.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
            % 120;
        let base = 20_000 + slot * 100;
        let mut ctl_extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        ctl_extra.extend([
            "--master-ports".to_string(),
            format!("{base}-{}", base + 99),
        ]);
        let controllers: Vec<(u64, String)> = (1..=n)
            .map(|id| {
                if let Some((addr, _)) = placement.controllers.get(id as usize - 1) {
                    return (id, addr.clone());
                }
                let addr = if security.unix_sockets {
                    format!(
                        "unix:{}",
                        dir.path().join(format!("ctl{id}.sock")).display()
                    )
                } else {
                    format!("127.0.0.1:{}", free_port())
                };
                (id, addr)
            })
            .collect();
        let mut c = Cluster {
            dir,
            controllers,
            ctl_procs: Vec::new(),
            agents: Vec::new(),
            agent_opts: Vec::new(),
            ctl_extra,
            ctl_security: security.controllers,
            agent_security: security.agents,
            cli_env: security.cli_env,
            ctl_prefix: (0..n as usize)
                .map(|i| {
                    placement
                        .controllers
                        .get(i)
                        .map(|(_, p)| p.clone())
                        .unwrap_or_default()
                })
                .collect(),
            cli_prefix: placement.cli,
        };
        for i in 0..n as usize {
            let p = c.spawn_controller(i);
            c.ctl_procs.push(Some(p));
        }
        c
    }

    pub fn peers_arg(&self) -> String {
        self.controllers
            .iter()
            .map(|(id, a)| format!("{id}={a}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn controllers_arg(&self) -> String {
        self.controllers
            .iter()
            .map(|(_, a)| a.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn spawn_controller(&self, i: usize) -> Proc {
        let (id, addr) = &self.controllers[i];
        let log = self.path(&format!("ctl{id}.log"));
        let mut cmd = prefixed(&self.ctl_prefix[i], bin("gctld"));
        cmd.args([
            "--id",
            &id.to_string(),
            "--listen",
            addr,
            "--peers",
            &self.peers_arg(),
            "--data-dir",
        ])
        .arg(self.path(&format!("ctl{id}")))
        .args(&self.ctl_security)
        .args(&self.ctl_extra)
        .env(
            "GSCHED_LOG",
            "info,raft=warn,sled=warn,h2=warn,tower=warn,hyper=warn",
        )
        .env("GSCHED_FAULTS_FILE", self.path(&format!("faults{id}")))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
        Proc {
            name: format!("gctld{id}"),
            child: cmd.spawn().expect("spawn gctld"),
            log,
        }
    }

    pub fn restart_controller(&mut self, i: usize) {
        if let Some(mut p) = self.ctl_procs[i].take() {
            p.kill9();
        }
        let p = self.spawn_controller(i);
        self.ctl_procs[i] = Some(p);
    }

    /// SIGKILLs the controller that leads now (found within 10 s).
    pub fn kill_leader(&mut self) {
        let leader = self.leader(Duration::from_secs(10));
        let i = self
            .controllers
            .iter()
            .position(|(id, _)| *id == leader)
            .expect("the leader is one of this cluster's controllers");
        self.kill_controller(i);
    }

    pub fn kill_controller(&mut self, i: usize) {
        if let Some(mut p) = self.ctl_procs[i].take() {
            p.kill9();
        }
    }

    /// Stops controller `i` as an init system does (SIGTERM); how long it took to exit, or
    /// `None` (and a SIGKILL) when it was still running after `limit`.
    pub fn stop_controller(&mut self, i: usize, limit: Duration) -> Option<Duration> {
        let mut p = self.ctl_procs[i].take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let asked = Instant::now();
        while asked.elapsed() < limit {
            if !p.alive() {
                return Some(asked.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        p.kill9();
        None
    }

    pub fn start_controller(&mut self, i: usize) {
        let p = self.spawn_controller(i);
        self.ctl_procs[i] = Some(p);
    }

    /// Adds an agent with a shipped fake topology and waits until it is registered.
    pub fn add_agent(&mut self, name: &str, topo: &str, extra: &[&str]) -> usize {
        self.add_agent_with(name, topology(topo), extra)
    }

    /// Adds an agent with the topology file at `path`.
    pub fn add_agent_with(&mut self, name: &str, path: PathBuf, extra: &[&str]) -> usize {
        self.add_agent_under(Vec::new(), name, path, extra)
    }

    /// Adds an agent that runs under `prefix` (in a network namespace, say).
    pub fn add_agent_under(
        &mut self,
        prefix: Vec<String>,
        name: &str,
        path: PathBuf,
        extra: &[&str],
    ) -> usize {
        let opts = AgentOpts {
            name: name.to_string(),
            topology: path,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            prefix,
        };
        self.agent_opts.push(opts);
        let i = self.agent_opts.len() - 1;
        let p = self.spawn_agent(i);
        self.agents.push(Some(p));
        self.wait_node_online(name);
        i
    }

    /// The fake kernel log an agent watches for Xid lines. It is not created in advance:
    /// the agent waits for it, as it would for a log file that appears after it started.
    pub fn kmsg(&self, name: &str) -> PathBuf {
        self.path(&format!("kmsg-{name}"))
    }

    fn spawn_agent(&self, i: usize) -> Proc {
        let o = &self.agent_opts[i];
        let log = self.path(&format!("agent-{}.log", o.name));
        let mut cmd = prefixed(&o.prefix, bin("gagentd"));
        cmd.args([
            "--controllers",
            &self.controllers_arg(),
            "--name",
            &o.name,
            "--state-dir",
        ])
        .arg(self.path(&format!("agent-{}", o.name)))
        .arg("--fake-topology")
        .arg(&o.topology)
        .arg("--job-root")
        .arg(self.path(&format!("jobroot-{}", o.name)))
        .args(&self.agent_security)
        .arg("--kmsg")
        .arg(self.path(&format!("kmsg-{}", o.name)))
        .args(if o.extra.iter().any(|a| a == "--cgroup-root") {
            &[][..]
        } else {
            &["--cgroup-root", "off"][..]
        })
        .args(&o.extra)
        // The tests run jobs as root (the test runner's own user): a real node refuses
        // that unless its agent allows it.
        .args(if o.extra.iter().any(|a| a == "--min-uid") {
            &[][..]
        } else {
            &["--min-uid", "0"][..]
        })
        .args(if o.extra.iter().any(|a| a == "--training-addr") {
            &[][..]
        } else {
            &["--training-addr", "127.0.0.1"][..]
        })
        .env("GSCHED_LOG", "info,h2=warn,tower=warn,hyper=warn")
        .env("GSCHED_FAULTS_FILE", self.agent_faults(&o.name))
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("log"),
        );
        Proc {
            name: o.name.clone(),
            child: cmd.spawn().expect("spawn gagentd"),
            log,
        }
    }

    /// The fault file of agent `name`: while it says `controllers`, the agent is cut off
    /// from the controllers.
    pub fn agent_faults(&self, name: &str) -> PathBuf {
        self.path(&format!("agent-faults-{name}"))
    }

    /// Cuts agent `name` off from the controllers, or heals the cut.
    pub fn cut_agent(&self, name: &str, cut: bool) {
        std::fs::write(
            self.agent_faults(name),
            if cut { "controllers" } else { "" },
        )
        .expect("write the agent's fault file");
    }

    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut p) = self.agents[i].take() {
            p.kill9();
        }
    }

    pub fn start_agent(&mut self, i: usize) {
        let p = self.spawn_agent(i);
        self.agents[i] = Some(p);
    }

    /// Runs a CLI tool against this cluster.
    pub fn cli(&self, tool: &str, args: &[&str]) -> Output {
        self.cli_in(tool, args, self.dir.path())
    }

    pub fn cli_in(&self, tool: &str, args: &[&str], cwd: &Path) -> Output {
        self.command(tool, args, cwd).output().expect("run cli")
    }

    /// A CLI tool's command line against this cluster (not started).
    pub fn command(&self, tool: &str, args: &[&str], cwd: &Path) -> Command {
        self.command_under(&self.cli_prefix, tool, args, cwd)
    }

    fn command_under(&self, prefix: &[String], tool: &str, args: &[&str], cwd: &Path) -> Command {
        let mut cmd = prefixed(prefix, bin(tool));
        cmd.args(args)
            .current_dir(cwd)
            .env("GSCHED_CONTROLLERS", self.controllers_arg())
            .env("GSCHED_RETRY_S", "20")
            .envs(self.cli_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Links Slurm's names (`gctl slurm-names`) into this cluster's directory; returns
    /// the links' directory (give it to agents as `--slurm-names`).
    pub fn slurm_links(&self) -> String {
        let links = self.path("slurm-bin").to_string_lossy().into_owned();
        let out = Command::new(bin("gctl"))
            .args(["slurm-names", &links])
            .output()
            .expect("run gctl slurm-names");
        success_stdout(&out, "gctl slurm-names");
        links
    }

    /// Runs Slurm's name `name` from the links in `links` (`slurm_links`), with those
    /// links first on PATH, in this cluster's directory.
    pub fn slurm_name(&self, links: &str, name: &str, args: &[&str]) -> Output {
        let path = format!("{links}:{}", std::env::var("PATH").unwrap_or_default());
        Command::new(format!("{links}/{name}"))
            .args(args)
            .env("PATH", path)
            .current_dir(self.path(""))
            .env("GSCHED_CONTROLLERS", self.controllers_arg())
            .env("GSCHED_RETRY_S", "20")
            .output()
            .unwrap()
    }

    /// Runs a CLI tool as `user`, in their directory of this cluster.
    pub fn cli_as(&self, user: &TestUser, tool: &str, args: &[&str]) -> Output {
        let home = self.user_dir(user);
        let mut cmd = if self.cli_prefix.is_empty() {
            let mut cmd = self.command(tool, args, &home);
            std::os::unix::process::CommandExt::uid(&mut cmd, user.uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, user.gid);
            cmd
        } else {
            // Entering a namespace needs root: the user is taken on after it.
            let mut prefix = self.cli_prefix.clone();
            prefix.extend([
                "setpriv".to_string(),
                format!("--reuid={}", user.uid),
                format!("--regid={}", user.gid),
                "--clear-groups".to_string(),
            ]);
            self.command_under(&prefix, tool, args, &home)
        };
        cmd.env("HOME", &home)
            .env("USER", &user.name)
            .output()
            .expect("run cli as user")
    }

    /// A directory of this cluster owned by `user` (0700), made on first use.
    pub fn user_dir(&self, user: &TestUser) -> PathBuf {
        let d = self.path(&format!("home-{}", user.name));
        if !d.exists() {
            std::fs::create_dir(&d).expect("user dir");
            nix::unistd::chown(
                &d,
                Some(nix::unistd::Uid::from_raw(user.uid)),
                Some(nix::unistd::Gid::from_raw(user.gid)),
            )
            .expect("chown user dir");
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .expect("chmod user dir");
        }
        d
    }

    /// Runs a CLI tool that must succeed and returns its stdout.
    pub fn ok(&self, tool: &str, args: &[&str]) -> String {
        success_stdout(&self.cli(tool, args), &format!("{tool} {args:?}"))
    }

    pub fn json(&self, tool: &str, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.ok(tool, &a)).expect("json output")
    }

    /// Submits a script file with extra options; returns the job id.
    pub fn submit(&self, args: &[&str]) -> u64 {
        let mut a = vec!["--parsable"];
        a.extend_from_slice(args);
        let out = self.ok("gsub", &a);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("gsub printed {out:?}"))
    }

    /// Writes a script into the cluster directory and returns its path.
    pub fn script(&self, name: &str, body: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, body).expect("write script");
        p.to_string_lossy().into_owned()
    }

    /// The job as `gqueue -t all --json` shows it.
    pub fn job(&self, id: u64) -> Option<serde_json::Value> {
        let v = self.json("gqueue", &["-t", "all"]);
        v["jobs"]
            .as_array()?
            .iter()
            .find(|j| j["job_id"] == id)
            .cloned()
    }

    pub fn wait_state(&self, id: u64, states: &[&str], timeout: Duration) -> serde_json::Value {
        wait_for(&format!("job {id} to reach {states:?}"), timeout, || {
            self.job(id)
                .filter(|j| states.iter().any(|s| j["state"] == *s))
        })
    }

    pub fn wait_node_online(&self, name: &str) {
        wait_for(
            &format!("node {name} to register"),
            Duration::from_secs(30),
            || {
                let v = self.json("ginfo", &[]);
                v["nodes"]
                    .as_array()?
                    .iter()
                    .any(|n| n["name"] == name && n["online"] == true)
                    .then_some(())
            },
        );
    }

    pub fn node(&self, name: &str) -> Option<serde_json::Value> {
        let v = self.json("ginfo", &[]);
        v["nodes"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
    }

    /// The `gctl status --json` rows of reachable controllers.
    pub fn status(&self) -> Vec<serde_json::Value> {
        let v = self.json("gctl", &["status"]);
        v["controllers"].as_array().cloned().unwrap_or_default()
    }

    /// One failover trial for the benchmarks: SIGKILLs the leader, times until a
    /// submission of `spec_json` is accepted by the survivors, restarts the killed
    /// replica and waits until every replica has applied the same index.
    pub fn failover_trial(&mut self, rt: &tokio::runtime::Runtime, spec_json: &[u8]) -> Duration {
        use gsched_cli::client::Client;
        use gsched_proto::pb::SubmitRequest;
        let leader = self.leader(Duration::from_secs(30));
        let i = self
            .controllers
            .iter()
            .position(|(id, _)| *id == leader)
            .expect("the leader is one of the controllers");
        let survivors: Vec<String> = self
            .controllers
            .iter()
            .filter(|(id, _)| *id != leader)
            .map(|(_, a)| a.clone())
            .collect();
        self.kill_controller(i);
        let killed = Instant::now();
        let req = SubmitRequest {
            request_id: uuid::Uuid::new_v4().to_string(),
            json: spec_json.to_vec(),
        };
        let took = rt.block_on(async move {
            let mut client = Client::new(survivors).with_budget(Duration::from_secs(30));
            client
                .call(|mut j| {
                    let r = req.clone();
                    async move { j.submit(r).await }
                })
                .await
                .expect("a submission after the leader was killed");
            killed.elapsed()
        });
        self.start_controller(i);
        wait_for(
            "the restarted replica to catch up",
            Duration::from_secs(120),
            || {
                let rows = self.status();
                let applied: std::collections::HashSet<u64> = rows
                    .iter()
                    .filter_map(|r| r["applied_index"].as_u64())
                    .collect();
                (rows.len() == self.controllers.len() && applied.len() == 1).then_some(())
            },
        );
        took
    }

    pub fn leader(&self, timeout: Duration) -> u64 {
        wait_for("a leader", timeout, || {
            self.status()
                .iter()
                .find(|r| r["role"] == "leader")
                .and_then(|r| r["id"].as_u64())
        })
    }

    /// Waits until the `expect` reachable replicas report the same applied index, then
    /// checks that they report the same state digest.
    pub fn check_replicas_agree(&self, expect: usize) {
        let rows = wait_for(
            "all replicas at the same applied index",
            Duration::from_secs(60),
            || {
                let rows = self.status();
                let applied: std::collections::BTreeSet<u64> = rows
                    .iter()
                    .filter_map(|r| r["applied_index"].as_u64())
                    .collect();
                (rows.len() == expect && applied.len() == 1).then_some(rows)
            },
        );
        let digests: std::collections::BTreeSet<&str> = rows
            .iter()
            .filter_map(|r| r["state_digest"].as_str())
            .collect();
        assert_eq!(
            digests.len(),
            1,
            "replicas disagree at the same applied index: {rows:#?}"
        );
    }

    /// The pids of the controllers and of the agents now running.
    pub fn daemon_pids(&self) -> (Vec<u32>, Vec<u32>) {
        let pids = |procs: &[Option<Proc>]| procs.iter().flatten().map(Proc::pid).collect();
        (pids(&self.ctl_procs), pids(&self.agents))
    }

    /// Resident memory of controller `i` in MiB (`None` once it has exited).
    pub fn controller_rss_mib(&self, i: usize) -> Option<u64> {
        let pid = self.ctl_procs[i].as_ref()?.pid();
        rss_mib(pid)
    }

    /// Dumps every process log (for failing tests).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(d) = std::fs::read_dir(self.dir.path()) {
            let mut paths: Vec<_> = d
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect();
            paths.sort();
            for p in paths {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                out.push_str(&format!(
                    "==== {}\n{}\n",
                    p.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        }
        out
    }
}

/// Resident memory of a process in MiB, from `/proc/PID/status`.
pub fn rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024)
}

/// CPU time (user + system, all threads) a process has used so far, in seconds, from
/// `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after it do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    Some(ticks as f64 / hz as f64)
}

/// CPU milliseconds each of `pids` uses while `window` passes, scaled to 10 s.
pub fn cpu_ms_per_10s(pids: &[u32], window: Duration) -> Vec<f64> {
    let before: Vec<f64> = pids
        .iter()
        .map(|p| cpu_seconds(*p).unwrap_or(0.0))
        .collect();
    let start = Instant::now();
    std::thread::sleep(window);
    let scale = 10_000.0 / start.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(p, b)| (cpu_seconds(*p).unwrap_or(b) - b) * scale)
        .collect()
}

/// An ordinary Unix user the multi-user tests act as.
#[derive(Debug, Clone)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The test users `gsalice` and `gsbob` (made with useradd when missing), or `None`
/// when this process is not root. In CI (`GSCHED_REQUIRE_ROOT=1`) being root is required.
pub fn test_users() -> Option<(TestUser, TestUser)> {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("GSCHED_REQUIRE_ROOT").is_none(),
            "GSCHED_REQUIRE_ROOT is set but the tests do not run as root"
        );
        eprintln!("skipping: the multi-user tests need root (to create users)");
        return None;
    }
    // Tests of every area run in one process: one at a time through useradd, which
    // refuses to run while another holds /etc/passwd's lock.
    static MAKING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let make = |name: &str| -> TestUser {
        let _one_at_a_time = MAKING.lock();
        if nix::unistd::User::from_name(name).ok().flatten().is_none() {
            let _ = Command::new("useradd")
                .args(["--no-create-home", "--shell", "/bin/sh", name])
                .status();
        }
        let u = nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("cannot create the test user {name} (useradd)"));
        TestUser {
            name: name.to_string(),
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }
    };
    Some((make("gsalice"), make("gsbob")))
}

/// A private munged for tests, run as the `munge` user, stopped when dropped.
pub struct Munged {
    pub dir: tempfile::TempDir,
    pid: Option<i32>,
}

impl Munged {
    /// The key this munged uses (to start others of the same cluster).
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("munge.key")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("munge.socket")
    }

    /// Starts one with a fresh key; `None` when munge is not installed (required in CI).
    pub fn start() -> Option<Munged> {
        Munged::start_under(&[], None)
    }

    /// Starts one under `prefix` (`ip netns exec NS ...`: another "host"), with a copy of
    /// `key` (one key for a whole cluster) or a fresh one.
    pub fn start_under(prefix: &[String], key: Option<&Path>) -> Option<Munged> {
        let installed = Path::new("/usr/sbin/munged").exists()
            && nix::unistd::User::from_name("munge")
                .ok()
                .flatten()
                .is_some();
        if !installed {
            assert!(
                std::env::var_os("GSCHED_REQUIRE_ROOT").is_none(),
                "munge is not installed (apt-get install munge)"
            );
            eprintln!("skipping: munge is not installed");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("gsched-munge")
            .tempdir()
            .expect("tempdir");
        let munge = nix::unistd::User::from_name("munge").ok().flatten()?;
        nix::unistd::chown(dir.path(), Some(munge.uid), Some(munge.gid)).expect("chown");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let as_munge = |args: &[&str]| {
            let mut p: Vec<String> = prefix.to_vec();
            p.extend([
                "setpriv".to_string(),
                format!("--reuid={}", munge.uid),
                format!("--regid={}", munge.gid),
                "--clear-groups".to_string(),
            ]);
            let mut c = prefixed(&p, args[0]);
            c.args(&args[1..]);
            c.status().expect("run munge tool")
        };
        let key_path = dir.path().join("munge.key");
        let key_s = key_path.to_string_lossy().into_owned();
        match key {
            Some(k) => {
                std::fs::copy(k, &key_path).expect("copy the munge key");
                nix::unistd::chown(&key_path, Some(munge.uid), Some(munge.gid)).expect("chown");
                std::fs::set_permissions(
                    &key_path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .expect("chmod");
            }
            None => assert!(
                as_munge(&["/usr/sbin/mungekey", "-c", "-k", &key_s, "-b", "1024"]).success()
            ),
        }
        let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
        let socket = p("munge.socket");
        assert!(
            as_munge(&[
                "/usr/sbin/munged",
                &format!("--socket={socket}"),
                &format!("--key-file={key_s}"),
                &format!("--pid-file={}", p("munged.pid")),
                &format!("--log-file={}", p("munged.log")),
                &format!("--seed-file={}", p("munged.seed")),
            ])
            .success(),
            "munged did not start"
        );
        let pid = wait_for("munged's pid file", Duration::from_secs(10), || {
            std::fs::read_to_string(p("munged.pid"))
                .ok()?
                .trim()
                .parse::<i32>()
                .ok()
        });
        wait_for("munged's socket", Duration::from_secs(10), || {
            Path::new(&socket).exists().then_some(())
        });
        Some(Munged {
            dir,
            pid: Some(pid),
        })
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// Reads `KEY=VALUE` lines into a map.
pub fn env_file(path: &Path) -> std::collections::BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Is PyTorch (with torchrun) available to jobs? In CI (`GSCHED_REQUIRE_TORCH=1`) it must be.
pub fn torch_available() -> bool {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import torch"])
        .status()
        .is_ok_and(|s| s.success())
        && Path::new("/usr/bin/torchrun").exists();
    if !ok {
        assert!(
            std::env::var_os("GSCHED_REQUIRE_TORCH").is_none(),
            "GSCHED_REQUIRE_TORCH is set but /usr/bin/python3 cannot import torch"
        );
        eprintln!(
            "skipping: PyTorch is not installed for /usr/bin/python3 (apt-get install python3-torch)"
        );
    }
    ok
}

/// Is a process with this pid alive?
pub fn pid_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

impl Cluster {
    /// The last lines of each daemon's log, for a failing test's output (which cargo
    /// shows only for failures).
    fn print_log_tails(&self) {
        for p in self.ctl_procs.iter().chain(self.agents.iter()).flatten() {
            let text = std::fs::read_to_string(&p.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            eprintln!("--- last lines of {} ({}) ---", p.name, p.log.display());
            for l in tail {
                eprintln!("{l}");
            }
        }
    }
}

impl Drop for Cluster {
    /// A failing test leaves its cluster directory (logs, state) behind when
    /// `GSCHED_TEST_KEEP` is set, and says where.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log_tails();
        }
        if std::thread::panicking() && std::env::var_os("GSCHED_TEST_KEEP").is_some() {
            for p in self.ctl_procs.iter_mut().chain(self.agents.iter_mut()) {
                if let Some(mut p) = p.take() {
                    p.kill9();
                }
            }
            let kept =
                std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir")).keep();
            eprintln!("cluster directory kept: {}", kept.display());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_seconds_counts_the_time_a_process_spends_computing() {
        // Spin until this thread has had 300 ms of CPU by the kernel's own clock, however
        // long that takes on a loaded machine (a wall-clock spin reads less there).
        let thread_cpu = || {
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
                .map(|t| std::time::Duration::from(t).as_secs_f64())
                .expect("this thread's CPU clock")
        };
        let me = std::process::id();
        let before = super::cpu_seconds(me).expect("own /proc/PID/stat");
        let start = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - start < 0.3 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = super::cpu_seconds(me).unwrap() - before;
        // /proc counts in clock ticks (10 ms), and other threads of this test binary may
        // add their own.
        assert!(
            (0.25..5.0).contains(&used),
            "300 ms of this thread's CPU read as {used} s"
        );
    }
}
