//! `gctl certs`: the cluster's certificate authority and the certificates of its
//! controllers and nodes, made with rcgen (no openssl needed). Each certificate names its
//! holder as a URI in its subject alternative names (`urn:gsched:node:NAME`,
//! `urn:gsched:controller:ID`), which is what the controllers check; controllers' also
//! name the hosts clients dial them by.

use gsched_proto::tls::{CertDir, PeerIdentity};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How long certificates are valid, in days.
const VALID_DAYS: i64 = 3650;

fn validity(params: &mut CertificateParams) {
    let today = (gsched_proto::clock::now_ms() / 86_400_000) as i64;
    let (y, m, d) = gsched_types::parse::civil_date(today - 1);
    params.not_before = rcgen::date_time_ymd(y as i32, m as u8, d as u8);
    let (y, m, d) = gsched_types::parse::civil_date(today + VALID_DAYS);
    params.not_after = rcgen::date_time_ymd(y as i32, m as u8, d as u8);
}

/// Why a certificate or key could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertMakeError {
    #[error("{0} already exists; remove it first if you mean to replace it")]
    Exists(String),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source} (run `gctl certs init` first)")]
    NoCa {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot make the certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CertMakeError {
    let path = path.display().to_string();
    move |source| CertMakeError::Io {
        action,
        path,
        source,
    }
}

/// Writes `contents` to a new file (never over an existing one) with `mode`.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), CertMakeError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => CertMakeError::Exists(path.display().to_string()),
            _ => io_error("create", path)(e),
        })?;
    f.write_all(contents.as_bytes())
        .map_err(io_error("write", path))
}

/// Makes a new cluster CA in `dir`: `ca.pem` (give it to every host) and `ca.key` (keep
/// it on the admin's machine, 0600).
pub fn init(dir: &Path, cluster: &str) -> Result<Vec<String>, CertMakeError> {
    std::fs::create_dir_all(dir).map_err(io_error("create", dir))?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("gsched cluster CA ({cluster})"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params);
    let cert = params.self_signed(&key)?;
    let certs = CertDir(dir.to_path_buf());
    let key_path = dir.join("ca.key");
    write_new(&key_path, &key.serialize_pem(), 0o600)?;
    write_new(&certs.ca(), &cert.pem(), 0o644)?;
    Ok(vec![
        certs.ca().display().to_string(),
        key_path.display().to_string(),
    ])
}

/// Issues `who`'s certificate and key into `dir`, signed by the CA there. `hosts`: the
/// names and addresses the holder is dialed by (controllers).
pub fn issue(
    dir: &Path,
    who: &PeerIdentity,
    hosts: &[String],
) -> Result<Vec<String>, CertMakeError> {
    let certs = CertDir(dir.to_path_buf());
    let ca_pem = std::fs::read_to_string(certs.ca()).map_err(|source| CertMakeError::NoCa {
        path: certs.ca().display().to_string(),
        source,
    })?;
    let ca_key_path = dir.join("ca.key");
    let ca_key =
        std::fs::read_to_string(&ca_key_path).map_err(io_error("read the CA key", &ca_key_path))?;
    let ca_key = KeyPair::from_pem(&ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, who.to_string());
    params
        .subject_alt_names
        .push(SanType::URI(who.uri().try_into()?));
    let mut hosts = hosts.to_vec();
    if matches!(who, PeerIdentity::Controller(_)) {
        hosts.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    }
    hosts.sort();
    hosts.dedup();
    for h in &hosts {
        let san = match h.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(h.as_str().try_into()?),
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Only a controller's certificate may serve: a node's proves who dials, so whoever
    // holds a node's key cannot pose as a controller to agents or users.
    params.extended_key_usages = match who {
        PeerIdentity::Controller(_) => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        PeerIdentity::Node(_) => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    validity(&mut params);
    let cert = params.signed_by(&key, &issuer)?;
    write_new(&certs.key(who), &key.serialize_pem(), 0o600)?;
    write_new(&certs.cert(who), &cert.pem(), 0o644)?;
    Ok(vec![
        certs.cert(who).display().to_string(),
        certs.key(who).display().to_string(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_name_their_holder() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), "test").unwrap();
        assert!(matches!(
            init(dir.path(), "test"),
            Err(CertMakeError::Exists(_))
        ));
        let node = PeerIdentity::Node("gpu-01".into());
        issue(dir.path(), &node, &[]).unwrap();
        let ctl = PeerIdentity::Controller(2);
        issue(dir.path(), &ctl, &["10.0.0.2".into(), "ctl2".into()]).unwrap();
        let certs = CertDir(dir.path().to_path_buf());
        for who in [node, ctl] {
            let pem = std::fs::read_to_string(certs.cert(&who)).unwrap();
            let der = pem::parse(&pem).unwrap();
            assert_eq!(
                gsched_proto::tls::peer_identity(der.contents()),
                Some(who.clone())
            );
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(certs.key(&who)).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o600, "keys are private");
            let (_, cert) = x509_parser::parse_x509_certificate(der.contents()).unwrap();
            let eku = cert.extended_key_usage().unwrap().unwrap().value;
            assert!(eku.client_auth);
            assert_eq!(
                eku.server_auth,
                matches!(who, PeerIdentity::Controller(_)),
                "only controllers serve"
            );
        }
    }
}
