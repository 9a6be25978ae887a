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

/// Writes `contents` to a new file (never over an existing one) with `mode`.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!(
                "{} already exists; remove it first if you mean to replace it",
                path.display()
            ),
            _ => format!("cannot create {}: {e}", path.display()),
        })?;
    f.write_all(contents.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn rcgen_error(e: rcgen::Error) -> String {
    format!("cannot make the certificate: {e}")
}

/// Makes a new cluster CA in `dir`: `ca.pem` (give it to every host) and `ca.key` (keep
/// it on the admin's machine, 0600).
pub fn init(dir: &Path, cluster: &str) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let key = KeyPair::generate().map_err(rcgen_error)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
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
    let cert = params.self_signed(&key).map_err(rcgen_error)?;
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
pub fn issue(dir: &Path, who: &PeerIdentity, hosts: &[String]) -> Result<Vec<String>, String> {
    let certs = CertDir(dir.to_path_buf());
    let ca_pem = std::fs::read_to_string(certs.ca()).map_err(|e| {
        format!(
            "cannot read {}: {e} (run `gctl certs init` first)",
            certs.ca().display()
        )
    })?;
    let ca_key_path = dir.join("ca.key");
    let ca_key = std::fs::read_to_string(&ca_key_path)
        .map_err(|e| format!("cannot read the CA key {}: {e}", ca_key_path.display()))?;
    let ca_key = KeyPair::from_pem(&ca_key).map_err(rcgen_error)?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(rcgen_error)?;
    let key = KeyPair::generate().map_err(rcgen_error)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
    params
        .distinguished_name
        .push(DnType::CommonName, who.to_string());
    params
        .subject_alt_names
        .push(SanType::URI(who.uri().try_into().map_err(rcgen_error)?));
    let mut hosts = hosts.to_vec();
    if matches!(who, PeerIdentity::Controller(_)) {
        hosts.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    }
    hosts.sort();
    hosts.dedup();
    for h in &hosts {
        let san = match h.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(h.as_str().try_into().map_err(rcgen_error)?),
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
    let cert = params.signed_by(&key, &issuer).map_err(rcgen_error)?;
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
        assert!(
            init(dir.path(), "test")
                .unwrap_err()
                .contains("already exists")
        );
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
