//! Bearer tokens for the HTTP API and the dashboard (`gctl token`, as `scontrol token`):
//! a verified user's uid and gid, when it was issued and when it expires, signed with HMAC-SHA256 under a key every
//! controller shares (`gctld --token-key FILE`; without it, a key of this process alone,
//! so its tokens are good only here and until it restarts).

use hmac::{Hmac, Mac};
use sha2::Sha256;

const PREFIX: &str = "gst2";
/// Tokens issued before revocation existed: no issue time.
const OLD_PREFIX: &str = "gst1";
/// The shortest key accepted from a file.
const MIN_KEY_BYTES: usize = 32;

pub struct TokenKey(Vec<u8>);

/// Why a token key cannot be loaded or a token is not accepted.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token key {path}: {source}")]
    ReadKey {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the token key {path} has {len} bytes; it needs {MIN_KEY_BYTES} or more (head -c 32 /dev/urandom > FILE, the same file on every controller)"
    )]
    ShortKey { path: String, len: usize },
    #[error(
        "the token key {path} can be read by others (mode {mode:04o}): whoever reads it can make tokens for any user; chmod 600 {path} (owned by the user gctld runs as)"
    )]
    ExposedKey { path: String, mode: u32 },
    #[error("not a gsched token (get one with gctl token)")]
    Malformed,
    #[error("this token was not issued by this cluster's controllers (or was altered)")]
    Forged,
    #[error("this token has expired: get a new one with gctl token")]
    Expired,
}

impl TokenKey {
    /// The key in `path` (at least 32 bytes; `head -c 32 /dev/urandom > FILE` makes one).
    pub fn from_file(path: &std::path::Path) -> Result<TokenKey, TokenError> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|source| TokenError::ReadKey {
                path: path.display().to_string(),
                source,
            })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(TokenError::ExposedKey {
                path: path.display().to_string(),
                mode: mode & 0o7777,
            });
        }
        let bytes = std::fs::read(path).map_err(|source| TokenError::ReadKey {
            path: path.display().to_string(),
            source,
        })?;
        if bytes.len() < MIN_KEY_BYTES {
            return Err(TokenError::ShortKey {
                path: path.display().to_string(),
                len: bytes.len(),
            });
        }
        Ok(TokenKey(bytes))
    }

    /// A key of this process alone.
    pub fn random() -> TokenKey {
        let mut key = vec![0u8; MIN_KEY_BYTES];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let _ = std::io::Read::read_exact(&mut f, &mut key);
        }
        TokenKey(key)
    }

    fn mac(&self, body: &str) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(body.as_bytes());
        m
    }

    /// A token for `uid`/`gid` good until `expires_ms`.
    /// A token for `uid`/`gid`, issued at `issued_ms` (so a revocation can name the
    /// tokens issued before it) and good until `expires_ms`.
    pub fn issue(&self, uid: u32, gid: u32, issued_ms: u64, expires_ms: u64) -> String {
        let body = format!("{PREFIX}.{uid}.{gid}.{issued_ms}.{expires_ms}");
        let tag: String = self
            .mac(&body)
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{body}.{tag}")
    }

    /// What a token vouches for, if this cluster's key signed it and it has not expired.
    /// Tokens of the first format (`gst1`, no issue time) count as issued at 0, so any
    /// revocation covers them.
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, TokenError> {
        let bad = || TokenError::Malformed;
        let (body, tag) = token.trim().rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = body.split('.').collect();
        let (uid, gid, issued, expires) = match parts[..] {
            [PREFIX, uid, gid, issued, expires] => (uid, gid, issued, expires),
            [OLD_PREFIX, uid, gid, expires] => (uid, gid, "0", expires),
            _ => return Err(bad()),
        };
        let tag: Vec<u8> = (0..tag.len())
            .step_by(2)
            .map(|i| {
                tag.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        self.mac(body)
            .verify_slice(&tag)
            .map_err(|_| TokenError::Forged)?;
        let expires: u64 = expires.parse().map_err(|_| bad())?;
        if expires <= now_ms {
            return Err(TokenError::Expired);
        }
        Ok(Claims {
            uid: uid.parse().map_err(|_| bad())?,
            gid: gid.parse().map_err(|_| bad())?,
            issued_ms: issued.parse().map_err(|_| bad())?,
        })
    }
}

/// What a valid token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    pub uid: u32,
    pub gid: u32,
    pub issued_ms: u64,
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_key_others_can_read_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.key");
        std::fs::write(&path, [7u8; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let Err(e) = TokenKey::from_file(&path) else {
            panic!("a world-readable key was used");
        };
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(TokenKey::from_file(&path).is_ok());
    }
    use super::*;

    #[test]
    fn tokens_verify_until_they_expire_and_not_when_altered_or_foreign() {
        let k = TokenKey(vec![7; 32]);
        let t = k.issue(1001, 1001, 1_000, 5_000);
        let claims = Claims {
            uid: 1001,
            gid: 1001,
            issued_ms: 1_000,
        };
        assert_eq!(k.verify(&t, 4_999).unwrap(), claims);
        assert!(matches!(k.verify(&t, 5_000), Err(TokenError::Expired)));
        let forged = t.replacen("gst2.1001", "gst2.0", 1);
        assert!(matches!(k.verify(&forged, 0), Err(TokenError::Forged)));
        let later = t.replacen(".1000.", ".9000.", 1);
        assert!(matches!(k.verify(&later, 0), Err(TokenError::Forged)));
        let other = TokenKey(vec![8; 32]);
        assert!(matches!(other.verify(&t, 0), Err(TokenError::Forged)));
        for junk in [
            "",
            "gst2",
            "a.b.c.d.e",
            "gst2.1.1.1.1.zz",
            "gst2.x.1.1.9.00",
        ] {
            assert!(k.verify(junk, 0).is_err(), "{junk}");
        }
        // A token of the first format still works, as issued at 0.
        let body = "gst1.1001.1001.5000";
        let tag: String = k
            .mac(body)
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let old = k.verify(&format!("{body}.{tag}"), 0).unwrap();
        assert_eq!(old.issued_ms, 0);
    }
}
