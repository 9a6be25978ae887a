//! Who is calling, established by the controller and never taken from the request:
//! users by a MUNGE credential (or, on a `--dev-local` cluster, by the kernel's owner of
//! their loopback socket), node agents and peer controllers by their certificates (or, on
//! a `--dev-local` cluster, by running as this controller's own uid). Also the rules of
//! what a caller may do: privileges (user, operator, admin) and whom a job may run as.

pub mod conn;
pub mod digest;
pub mod token;

use conn::ConnInfo;
use gsched_proto::MUNGE_CREDENTIAL;
use gsched_proto::munge::Munge;
use gsched_proto::tls::{PeerIdentity, peer_identity};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tonic::{Request, Status};

/// How callers prove who they are.
pub enum Mode {
    /// A single-host development cluster: loopback only, no certificates, no munged;
    /// a caller is the uid owning its end of the loopback connection.
    DevLocal,
    /// A real cluster: TLS with the cluster CA; users present a MUNGE credential made
    /// for this cluster (`cluster`: its CA's fingerprint) and this controller (one of
    /// `addresses`), daemons their certificate.
    Cluster {
        munge: Munge,
        cluster: String,
        addresses: Vec<String>,
    },
}

/// What a caller may do beyond their own jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Privilege {
    User,
    /// May act on anyone's jobs (cancel, hold, release, requeue, signal, read details).
    Operator,
    /// Operator, and may change nodes (drain, resume) and the controller membership.
    Admin,
}

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub privilege: Privilege,
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        self.privilege == Privilege::Admin
    }

    /// May act on (and see the details of) jobs that are not theirs.
    pub fn acts_for_others(&self) -> bool {
        self.privilege >= Privilege::Operator
    }

    /// May see `owner`'s job's environment, arguments and output paths.
    pub fn may_see_details_of(&self, owner: &str) -> bool {
        self.acts_for_others() || self.user == owner
    }
}

/// A verified daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Daemon {
    /// Proven by certificate.
    Certified(PeerIdentity),
    /// A `--dev-local` process running as this controller's own uid.
    SameUid,
}

/// Who is privileged, and the lowest uid an ordinary job may run as.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Users with every privilege (root and the controller's own user always are).
    pub admins: Vec<String>,
    /// Users who may act on anyone's jobs.
    pub operators: Vec<String>,
    /// Jobs run as uid 0 or below this only when that very user submitted them.
    pub min_uid: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            admins: vec!["root".into()],
            operators: Vec::new(),
            min_uid: 1000,
        }
    }
}

/// How long a seen MUNGE credential is remembered (munge's default time-to-live).
const CREDENTIAL_TTL: Duration = Duration::from_secs(300);

pub struct Auth {
    mode: Mode,
    policy: Policy,
    /// The uid this controller runs as.
    own_uid: u32,
    /// Credentials already used here, until they expire.
    seen: Mutex<HashMap<String, Instant>>,
    names: Mutex<HashMap<u32, (String, u32, Instant)>>,
    tokens: token::TokenKey,
}

fn unauthenticated(why: impl Into<String>) -> Status {
    Status::unauthenticated(why.into())
}

impl Auth {
    pub fn new(mode: Mode, policy: Policy, tokens: token::TokenKey) -> Auth {
        Auth {
            mode,
            policy,
            own_uid: nix::unistd::getuid().as_raw(),
            seen: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            tokens,
        }
    }

    /// A bearer token for `caller`, good until `expires_ms` (`gctl token`).
    pub fn issue_token(&self, caller: &Caller, issued_ms: u64, expires_ms: u64) -> String {
        self.tokens
            .issue(caller.uid, caller.gid, issued_ms, expires_ms)
    }

    /// The verified user behind a bearer token (the HTTP API's `Authorization` header),
    /// unless that user's tokens issued before `revoked_before(uid)` were revoked.
    pub fn caller_of_token(
        &self,
        token: &str,
        now_ms: u64,
        revoked_before: impl Fn(u32) -> u64,
    ) -> Result<Caller, Status> {
        let claims = self
            .tokens
            .verify(token, now_ms)
            .map_err(|e| unauthenticated(e.to_string()))?;
        if claims.issued_ms < revoked_before(claims.uid) {
            return Err(unauthenticated(
                "this token was revoked (gctl token revoke): get a new one with gctl token",
            ));
        }
        Ok(self.caller_from(claims.uid, claims.gid))
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn is_dev_local(&self) -> bool {
        matches!(self.mode, Mode::DevLocal)
    }

    fn conn<T>(req: &Request<T>) -> Option<&ConnInfo> {
        req.extensions().get::<ConnInfo>()
    }

    /// The client's address.
    pub fn remote_of<T>(req: &Request<T>) -> Option<std::net::SocketAddr> {
        Self::conn(req).and_then(|c| c.remote)
    }

    /// The user name and primary group of `uid` on this host (cached for a minute).
    pub fn account_of(&self, uid: u32) -> (String, u32) {
        if let Some((name, gid, at)) = self.names.lock().get(&uid)
            && at.elapsed() < Duration::from_secs(60)
        {
            return (name.clone(), *gid);
        }
        let (name, gid) = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => (u.name, u.gid.as_raw()),
            _ => (format!("uid{uid}"), uid),
        };
        self.names
            .lock()
            .insert(uid, (name.clone(), gid, Instant::now()));
        (name, gid)
    }

    fn privilege_of(&self, uid: u32, user: &str) -> Privilege {
        if uid == 0 || uid == self.own_uid || self.policy.admins.iter().any(|a| a == user) {
            Privilege::Admin
        } else if self.policy.operators.iter().any(|o| o == user) {
            Privilege::Operator
        } else {
            Privilege::User
        }
    }

    fn caller_from(&self, uid: u32, gid: u32) -> Caller {
        let (user, primary) = self.account_of(uid);
        let gid = if gid == u32::MAX { primary } else { gid };
        Caller {
            uid,
            gid,
            privilege: self.privilege_of(uid, &user),
            user,
        }
    }

    /// The verified user behind a client request (whose MUNGE credential must name this
    /// request's body).
    pub fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        let peer_uid = Self::conn(req).and_then(|c| c.peer_uid);
        let cred = req
            .metadata()
            .get(MUNGE_CREDENTIAL)
            .and_then(|v| v.to_str().ok());
        let digest = req
            .extensions()
            .get::<digest::RequestDigest>()
            .map(|d| d.0.as_str());
        let caller = self.verify(peer_uid, cred, digest)?;
        // The connection now counts against its user (it counted against its address).
        if let Some(slot) = Self::conn(req).and_then(|c| c.slot.as_ref())
            && let Err(why) = slot.identify(crate::accept::Peer::Uid(caller.uid))
        {
            return Err(Status::resource_exhausted(format!(
                "{} holds too many connections to this controller ({why:?}): close some (each gsched command needs one)",
                caller.user
            )));
        }
        Ok(caller)
    }

    /// The verified user from what a connection carries: on a --dev-local cluster the
    /// owner of its loopback socket, else a MUNGE credential (gRPC metadata, or the HTTP
    /// API's `X-Gsched-Munge` header).
    pub fn caller_of(&self, peer_uid: Option<u32>, cred: Option<&str>) -> Result<Caller, Status> {
        self.verify(peer_uid, cred, None)
    }

    /// [`Auth::caller_of`], with the digest of the request's body when it is known.
    fn verify(
        &self,
        peer_uid: Option<u32>,
        cred: Option<&str>,
        body: Option<&str>,
    ) -> Result<Caller, Status> {
        match &self.mode {
            Mode::DevLocal => {
                let uid = peer_uid.ok_or_else(|| {
                    unauthenticated(
                        "cannot tell who you are: this --dev-local controller identifies callers by their loopback socket, and this connection's owner could not be found",
                    )
                })?;
                Ok(self.caller_from(uid, u32::MAX))
            }
            Mode::Cluster {
                munge,
                cluster,
                addresses,
            } => {
                let cred = cred.ok_or_else(|| {
                        unauthenticated(
                            "no MUNGE credential: run gsched's tools on a host of the cluster with munged running (and the cluster's munge key)",
                        )
                    })?;
                let verified = munge
                    .decode(cred)
                    .map_err(|e| unauthenticated(e.to_string()))?;
                gsched_proto::munge::check_payload(&verified.payload, cluster, addresses, body)
                    .map_err(|e| unauthenticated(e.to_string()))?;
                let mut seen = self.seen.lock();
                seen.retain(|_, at| at.elapsed() < CREDENTIAL_TTL);
                if seen.insert(cred.to_string(), Instant::now()).is_some() {
                    return Err(unauthenticated(
                        "this MUNGE credential was already used (replayed); every request needs a fresh one",
                    ));
                }
                drop(seen);
                Ok(self.caller_from(verified.uid, verified.gid))
            }
        }
    }

    /// The verified daemon behind an agent or peer request.
    pub fn daemon<T>(&self, req: &Request<T>) -> Result<Daemon, Status> {
        match &self.mode {
            Mode::DevLocal => {
                let uid = Self::conn(req).and_then(|c| c.peer_uid);
                if uid == Some(self.own_uid) {
                    Ok(Daemon::SameUid)
                } else {
                    Err(Status::permission_denied(format!(
                        "only processes of uid {} (this --dev-local controller's own user) may speak for agents and controllers; this connection belongs to {}",
                        self.own_uid,
                        uid.map(|u| format!("uid {u}"))
                            .unwrap_or_else(|| "an unknown user".into())
                    )))
                }
            }
            Mode::Cluster { .. } => {
                let certs = Self::conn(req)
                    .and_then(|c| c.peer_certs.clone())
                    .ok_or_else(|| {
                        Status::permission_denied(
                            "agents and controllers must present a certificate of this cluster (gctl certs issue)",
                        )
                    })?;
                let identity = certs
                    .first()
                    .and_then(|c| peer_identity(c.as_ref()))
                    .ok_or_else(|| {
                        Status::permission_denied(
                            "the client certificate names no gsched node or controller",
                        )
                    })?;
                Ok(Daemon::Certified(identity))
            }
        }
    }

    /// Refuses a daemon that may not register as node `name`.
    pub fn check_node(daemon: &Daemon, name: &str) -> Result<(), Status> {
        match daemon {
            Daemon::SameUid => Ok(()),
            Daemon::Certified(PeerIdentity::Node(n)) if n == name => Ok(()),
            Daemon::Certified(who) => Err(Status::permission_denied(format!(
                "a certificate for {who} cannot register as node {name}"
            ))),
        }
    }

    /// Refuses a daemon that is not controller `id`.
    pub fn check_controller(daemon: &Daemon, id: u64) -> Result<(), Status> {
        match daemon {
            Daemon::SameUid => Ok(()),
            Daemon::Certified(PeerIdentity::Controller(c)) if *c == id => Ok(()),
            Daemon::Certified(who) => Err(Status::permission_denied(format!(
                "a certificate for {who} cannot speak for controller {id}"
            ))),
        }
    }

    /// Requires the caller to be controller `id`.
    pub fn require_controller<T>(&self, req: &Request<T>, id: u64) -> Result<(), Status> {
        Self::check_controller(&self.daemon(req)?, id)
    }

    /// Whom a job submitted by `caller` runs as: the caller, unless they asked for
    /// another user (`--uid`), which only root and admins may, and never for uid 0 or a
    /// system uid (below `min_uid`) that is not the caller's own.
    pub fn run_as(
        &self,
        caller: &Caller,
        uid: Option<u32>,
        user: &str,
    ) -> Result<(String, u32, u32), Status> {
        let target = match uid {
            Some(u) => u,
            None if user.is_empty() || user == caller.user => caller.uid,
            None => nix::unistd::User::from_name(user)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "--uid={user}: no such user on the controller"
                    ))
                })?,
        };
        if target == caller.uid {
            return Ok((caller.user.clone(), caller.uid, caller.gid));
        }
        if !caller.is_admin() {
            return Err(Status::permission_denied(format!(
                "permission denied: you are {} (uid {}); only root or an admin may submit a job to run as another user (--uid={target})",
                caller.user, caller.uid
            )));
        }
        if target < self.policy.min_uid {
            return Err(Status::permission_denied(format!(
                "permission denied: a job runs as uid {target} (below min_uid {}) only when that user submits it",
                self.policy.min_uid
            )));
        }
        let (name, gid) = self.account_of(target);
        Ok((name, target, gid))
    }
}
