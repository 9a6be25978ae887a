//! Controller settings: command-line flags plus an optional TOML file whose `[scheduler]`
//! table is the scheduler configuration (partitions, QOS, limits, switches, weights).

use crate::auth::Policy;
use gsched_proto::tls::CertDir;
use gsched_scheduler::SchedConfig;
use gsched_state::decide::{DispatchConfig, Liveness};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How the controller authenticates callers and talks to its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Security {
    /// `--dev-local`: loopback only, plaintext, callers known by their socket's owner.
    DevLocal,
    /// TLS with the cluster's certificates; users prove who they are with MUNGE.
    Cluster {
        certs: CertDir,
        /// munged's socket when it is not the default.
        munge_socket: Option<PathBuf>,
    },
}

/// Everything `gctld` runs with.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub id: u64,
    /// Address other controllers, agents and clients use to reach this one.
    pub advertise: String,
    /// Other addresses it is reached at (its `--listen`): a client's MUNGE credential
    /// must name one of these or `advertise`.
    pub aliases: Vec<String>,
    /// Raft peers (including this controller) to bootstrap a new cluster with.
    pub peers: BTreeMap<u64, String>,
    pub data_dir: PathBuf,
    /// Start with an empty membership and wait to be added (`gctl controllers add`).
    pub join: bool,
    pub scheduler: SchedConfig,
    /// No heartbeat for `not_responding` (`--node-timeout`, 6 s): the node takes no new
    /// job; for `lost` (`--dead-node-timeout`, 60 s): it is lost and its jobs end.
    pub liveness: Liveness,
    /// Kill graces and the dispatcher's timings.
    pub dispatch: DispatchConfig,
    /// How notifications are delivered (`[notify]`: the mail program, webhooks).
    pub notify: crate::notify::NotifyConfig,
    /// What agents do about processes using GPUs outside jobs (`[outside_jobs]`).
    pub outside_jobs: gsched_types::outside::OutsidePolicy,
    pub raft_tick: Duration,
    pub election_ticks: usize,
    pub snapshot_every: u64,
    /// sled's page cache (`--store-cache-mb`).
    pub store_cache_bytes: u64,
    /// Where `/metrics` is served (`--http`), if anywhere.
    pub http: Option<String>,
    /// The key `gctl token`'s tokens are signed with (`--token-key`), the same file on
    /// every controller; `None`: a key of this process alone.
    pub token_key: Option<PathBuf>,
    /// Who may act on other users' jobs, nodes and membership; the lowest ordinary uid.
    pub policy: Policy,
    pub security: Security,
}

impl ControllerConfig {
    pub fn new(id: u64, advertise: &str, data_dir: PathBuf) -> ControllerConfig {
        let mut peers = BTreeMap::new();
        peers.insert(id, advertise.to_string());
        ControllerConfig {
            id,
            advertise: advertise.to_string(),
            aliases: Vec::new(),
            peers,
            data_dir,
            join: false,
            scheduler: SchedConfig::default(),
            liveness: Liveness {
                not_responding: Duration::from_secs(6),
                lost: Duration::from_secs(60),
            },
            dispatch: DispatchConfig::default(),
            notify: crate::notify::NotifyConfig::default(),
            outside_jobs: Default::default(),
            raft_tick: Duration::from_millis(50),
            election_ticks: 5,
            snapshot_every: 5_000,
            store_cache_bytes: gsched_raft::sled_store::DEFAULT_CACHE_BYTES,
            http: None,
            token_key: None,
            policy: Policy::default(),
            security: Security::DevLocal,
        }
    }
}

/// The TOML file (`gctld --config FILE`).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub scheduler: Option<SchedConfig>,
    /// Users with every privilege (root and the controllers' own user always have it).
    #[serde(default)]
    pub admins: Option<Vec<String>>,
    /// Users who may act on anyone's jobs.
    #[serde(default)]
    pub operators: Option<Vec<String>>,
    /// Jobs run as a uid below this (or as root) only when that user submits them.
    #[serde(default)]
    pub min_uid: Option<u32>,
    /// Seconds without a heartbeat before a node takes no new job.
    #[serde(default)]
    pub node_timeout_s: Option<f64>,
    /// Seconds without a heartbeat before a node is lost and its jobs end.
    #[serde(default)]
    pub dead_node_timeout_s: Option<f64>,
    #[serde(default)]
    pub kill_grace_s: Option<u64>,
    #[serde(default)]
    pub gang_stop_grace_s: Option<u64>,
    #[serde(default)]
    pub peer_report_wait_s: Option<f64>,
    #[serde(default)]
    pub snapshot_every: Option<u64>,
    /// `[idle_gpu]`: warn about, or cancel, running jobs whose GPUs all stay idle.
    #[serde(default)]
    pub idle_gpu: Option<gsched_state::idle::IdlePolicy>,
    /// `[notify]`: the mail program (Slurm's MailProg) and webhook delivery.
    #[serde(default)]
    pub notify: Option<crate::notify::NotifyConfig>,
    /// `[outside_jobs]`: report, warn or kill processes using GPUs outside jobs.
    #[serde(default)]
    pub outside_jobs: Option<gsched_types::outside::OutsidePolicy>,
}

/// Why the controller's configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Syntax {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("{path}: [scheduler] {source}")]
    Scheduler {
        path: String,
        source: gsched_scheduler::config::SchedConfigError,
    },
    #[error("{path}: {source}")]
    IdlePolicy {
        path: String,
        source: gsched_state::idle::IdlePolicyError,
    },
    #[error("{path}: {source}")]
    Notify {
        path: String,
        source: crate::notify::NotifyConfigError,
    },
    #[error("invalid peer '{0}': use ID=HOST:PORT")]
    Peer(String),
    #[error("invalid peer id in '{0}': use a positive number")]
    PeerId(String),
    #[error("controller ids start at 1")]
    PeerIdZero,
    #[error("invalid peer address '{0}': use HOST:PORT")]
    PeerAddress(String),
    #[error("controller id {0} is listed twice in --peers")]
    PeerTwice(u64),
}

impl ConfigFile {
    pub fn load(path: &std::path::Path) -> Result<ConfigFile, ConfigError> {
        let shown = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown(),
            source,
        })?;
        let mut file: ConfigFile = toml::from_str(&text).map_err(|e| ConfigError::Syntax {
            path: shown(),
            source: Box::new(e),
        })?;
        if let Some(s) = &mut file.scheduler {
            s.names_in_slurm_case();
            s.validate().map_err(|source| ConfigError::Scheduler {
                path: shown(),
                source,
            })?;
        }
        if let Some(p) = &file.idle_gpu {
            p.validate().map_err(|source| ConfigError::IdlePolicy {
                path: shown(),
                source,
            })?;
        }
        if let Some(n) = &file.notify {
            n.validate().map_err(|source| ConfigError::Notify {
                path: shown(),
                source,
            })?;
        }
        Ok(file)
    }

    pub fn apply_to(self, cfg: &mut ControllerConfig) {
        if let Some(s) = self.scheduler {
            cfg.scheduler = s;
        }
        if let Some(a) = self.admins {
            cfg.policy.admins = a;
        }
        if let Some(o) = self.operators {
            cfg.policy.operators = o;
        }
        if let Some(m) = self.min_uid {
            cfg.policy.min_uid = m;
        }
        if let Some(t) = self.node_timeout_s {
            cfg.liveness.not_responding = Duration::from_secs_f64(t.max(0.5));
        }
        if let Some(t) = self.dead_node_timeout_s {
            cfg.liveness.lost = Duration::from_secs_f64(t.max(1.0));
        }
        if let Some(g) = self.kill_grace_s {
            cfg.dispatch.kill_grace_s = g;
        }
        if let Some(g) = self.gang_stop_grace_s {
            cfg.dispatch.gang_stop_grace_s = g;
        }
        if let Some(w) = self.peer_report_wait_s {
            cfg.dispatch.peer_report_wait = Duration::from_secs_f64(w.clamp(0.0, 30.0));
        }
        if let Some(s) = self.snapshot_every {
            cfg.snapshot_every = s.max(10);
        }
        if let Some(p) = self.idle_gpu {
            cfg.dispatch.idle = Some(p);
        }
        if let Some(n) = self.notify {
            cfg.notify = n;
        }
        if let Some(o) = self.outside_jobs {
            cfg.outside_jobs = o;
        }
    }
}

/// Parses `--peers 1=host:port,2=host:port`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| ConfigError::Peer(part.to_string()))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| ConfigError::PeerId(part.to_string()))?;
        if id == 0 {
            return Err(ConfigError::PeerIdZero);
        }
        if !addr.contains(':') {
            return Err(ConfigError::PeerAddress(addr.to_string()));
        }
        if out.insert(id, addr.trim().to_string()).is_some() {
            return Err(ConfigError::PeerTwice(id));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn peers_parse_and_refuse_garbage() {
        let p = super::parse_peers("1=127.0.0.1:7001, 2=h:2").unwrap();
        assert_eq!(p[&2], "h:2");
        assert!(super::parse_peers("x=1:2").is_err());
        assert!(super::parse_peers("1=a:1,1=b:2").is_err());
        assert!(super::parse_peers("1=nohostport").is_err());
    }

    #[test]
    fn the_example_configuration_loads_with_what_it_documents() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/config/gctld.example.toml");
        let file = super::ConfigFile::load(&path).unwrap();
        let notify = file.notify.clone().expect("a [notify] section");
        assert_eq!(
            notify.mail_prog.as_deref(),
            Some(std::path::Path::new("/usr/bin/mail"))
        );
        let scheduler = file.scheduler.expect("a [scheduler] section");
        assert_eq!(scheduler.topology_wait_s, 43_200);
        assert_eq!(scheduler.topology_wait_share, None);
    }

    #[test]
    fn a_relative_mail_program_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gctld.toml");
        std::fs::write(&path, "[notify]\nmail_prog = \"mail\"\n").unwrap();
        let err = super::ConfigFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("absolute path"), "{err}");
    }

    #[test]
    fn a_negative_topology_wait_share_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gctld.toml");
        std::fs::write(&path, "[scheduler]\ntopology_wait_share = -1.0\n").unwrap();
        let err = super::ConfigFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("topology_wait_share"), "{err}");
    }
}
