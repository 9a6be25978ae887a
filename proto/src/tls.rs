//! Mutual TLS between gsched's processes: where a cluster's certificates live, who a
//! certificate names (a node or a controller, written as a URI in its subject alternative
//! names), and the client configuration for dialing a controller.
//!
//! A certificate directory (`gctl certs init/issue` writes one) holds `ca.pem` and, per
//! identity, `controller-ID.pem`/`controller-ID.key` or `node-NAME.pem`/`node-NAME.key`.

use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

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

/// Why a cluster certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "cannot read {path}: {source} (make the cluster's certificates with `gctl certs init` and `gctl certs issue`)"
    )]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the cluster CA is not a PEM certificate: {0}")]
    NotPem(String),
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

    fn read(path: &Path) -> Result<Vec<u8>, CertError> {
        std::fs::read(path).map_err(|source| CertError::Read {
            path: path.display().to_string(),
            source,
        })
    }

    /// The cluster's name in MUNGE payloads: its CA's fingerprint.
    pub fn cluster_id(&self) -> Result<String, CertError> {
        cluster_id(&Self::read(&self.ca())?)
    }

    pub fn ca_certificate(&self) -> Result<Certificate, CertError> {
        Ok(Certificate::from_pem(Self::read(&self.ca())?))
    }

    pub fn identity(&self, who: &PeerIdentity) -> Result<Identity, CertError> {
        Ok(Identity::from_pem(
            Self::read(&self.cert(who))?,
            Self::read(&self.key(who))?,
        ))
    }

    /// A daemon dialing a controller: verifies the controller against the cluster CA and
    /// presents `who`'s certificate.
    pub fn client(&self, who: &PeerIdentity) -> Result<ClientTlsConfig, CertError> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(self.ca_certificate()?)
            .identity(self.identity(who)?))
    }
}

/// A CA certificate's fingerprint (SHA-256 of its DER, first 16 hex digits): how a
/// cluster is named in MUNGE payloads, known to every host that has `ca.pem`.
pub fn cluster_id(ca_pem: &[u8]) -> Result<String, CertError> {
    use sha2::Digest;
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(ca_pem).map_err(|e| CertError::NotPem(e.to_string()))?;
    let digest = sha2::Sha256::digest(&pem.contents);
    Ok(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

pub use crate::dial::{Dialer, is_loopback};

#[cfg(test)]
mod tests {
    use super::*;

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
