//! Mutual TLS between gsched's processes: where a cluster's certificates live, who a
//! certificate names (a node or a controller, written as a URI in its subject alternative
//! names), and the client configuration for dialing a controller.
//!
//! A certificate directory (`gctl certs init/issue` writes one) holds `ca.pem` and, per
//! identity, `controller-ID.pem`/`controller-ID.key` or `node-NAME.pem`/`node-NAME.key`.

use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Who a certificate was issued to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PeerIdentity {
    Node(String),
    Controller(u64),
}

impl PeerIdentity {
    /// The URI this identity is written as in a certificate's subject alternative names.
    pub fn uri(&self) -> String {
        match self {
            PeerIdentity::Node(n) => format!("urn:gsched:node:{n}"),
            PeerIdentity::Controller(id) => format!("urn:gsched:controller:{id}"),
        }
    }

    fn from_uri(uri: &str) -> Option<PeerIdentity> {
        if let Some(n) = uri.strip_prefix("urn:gsched:node:") {
            return (!n.is_empty()).then(|| PeerIdentity::Node(n.to_string()));
        }
        uri.strip_prefix("urn:gsched:controller:")
            .and_then(|id| id.parse().ok())
            .map(PeerIdentity::Controller)
    }

    /// The file stem of this identity's certificate and key in a certificate directory.
    pub fn file_stem(&self) -> String {
        match self {
            PeerIdentity::Node(n) => format!("node-{n}"),
            PeerIdentity::Controller(id) => format!("controller-{id}"),
        }
    }
}

impl std::fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerIdentity::Node(n) => write!(f, "node {n}"),
            PeerIdentity::Controller(id) => write!(f, "controller {id}"),
        }
    }
}

/// The gsched identity a (DER) certificate names, if any. The chain was already
/// verified against the cluster CA by the TLS handshake.
pub fn peer_identity(der: &[u8]) -> Option<PeerIdentity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) => PeerIdentity::from_uri(u),
        _ => None,
    })
}

/// A cluster certificate directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertDir(pub PathBuf);

impl CertDir {
    pub fn ca(&self) -> PathBuf {
        self.0.join("ca.pem")
    }

    pub fn cert(&self, who: &PeerIdentity) -> PathBuf {
        self.0.join(format!("{}.pem", who.file_stem()))
    }

    pub fn key(&self, who: &PeerIdentity) -> PathBuf {
        self.0.join(format!("{}.key", who.file_stem()))
    }

    fn read(path: &Path) -> Result<Vec<u8>, String> {
        std::fs::read(path).map_err(|e| {
            format!(
                "cannot read {}: {e} (make the cluster's certificates with `gctl certs init` and `gctl certs issue`)",
                path.display()
            )
        })
    }

    pub fn ca_certificate(&self) -> Result<Certificate, String> {
        Ok(Certificate::from_pem(Self::read(&self.ca())?))
    }

    pub fn identity(&self, who: &PeerIdentity) -> Result<Identity, String> {
        Ok(Identity::from_pem(
            Self::read(&self.cert(who))?,
            Self::read(&self.key(who))?,
        ))
    }

    /// A controller's server side: its own certificate; clients are verified against
    /// the cluster CA when they present a certificate (daemons must; users need not,
    /// they authenticate with MUNGE).
    pub fn server(&self, controller: u64) -> Result<ServerTlsConfig, String> {
        Ok(ServerTlsConfig::new()
            .identity(self.identity(&PeerIdentity::Controller(controller))?)
            .client_ca_root(self.ca_certificate()?)
            .client_auth_optional(true))
    }

    /// A daemon dialing a controller: verifies the controller against the cluster CA and
    /// presents `who`'s certificate.
    pub fn client(&self, who: &PeerIdentity) -> Result<ClientTlsConfig, String> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(self.ca_certificate()?)
            .identity(self.identity(who)?))
    }
}

/// How a process dials controllers: plaintext (loopback development clusters only) or
/// TLS with the cluster CA (and, for daemons, their own certificate).
#[derive(Debug, Clone, Default)]
pub struct Dialer {
    pub tls: Option<ClientTlsConfig>,
}

impl Dialer {
    /// A user's client: TLS with the CA at `ca`, no client certificate.
    pub fn user(ca: &Path) -> Result<Dialer, String> {
        let pem = std::fs::read(ca)
            .map_err(|e| format!("cannot read the cluster CA {}: {e}", ca.display()))?;
        Ok(Dialer {
            tls: Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))),
        })
    }

    /// The endpoint for `addr` (HOST:PORT). Plaintext is refused for anything but
    /// loopback addresses.
    pub fn endpoint(&self, addr: &str) -> Result<tonic::transport::Endpoint, String> {
        match &self.tls {
            Some(tls) => tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
                .map_err(|e| format!("bad controller address {addr}: {e}"))?
                .tls_config(tls.clone())
                .map_err(|e| format!("TLS setup for {addr}: {e}")),
            None => {
                if !is_loopback(addr) {
                    return Err(format!(
                        "refusing to talk to {addr} without TLS: only loopback controllers (a --dev-local cluster) are reached in plaintext; set GSCHED_TLS_CA to the cluster's ca.pem"
                    ));
                }
                tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("bad controller address {addr}: {e}"))
            }
        }
    }
}

/// Is `addr` (HOST:PORT, or HOST) on the loopback interface?
pub fn is_loopback(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_told_apart() {
        for a in [
            "127.0.0.1:6817",
            "127.1.2.3:1",
            "[::1]:6817",
            "localhost:6817",
            "::1",
        ] {
            assert!(is_loopback(a), "{a}");
        }
        for a in ["10.0.0.1:6817", "h1:6817", "0.0.0.0:6817", "[::]:1"] {
            assert!(!is_loopback(a), "{a}");
        }
    }

    #[test]
    fn identities_round_trip_through_their_uri() {
        for who in [
            PeerIdentity::Node("gpu-01".into()),
            PeerIdentity::Controller(3),
        ] {
            assert_eq!(PeerIdentity::from_uri(&who.uri()), Some(who));
        }
        assert_eq!(PeerIdentity::from_uri("urn:gsched:node:"), None);
        assert_eq!(PeerIdentity::from_uri("urn:gsched:controller:x"), None);
        assert_eq!(PeerIdentity::from_uri("https://example.org"), None);
    }
}
