//! MUNGE credentials (how Slurm knows who a request comes from), through `libmunge.so.2`
//! loaded at run time, as NVML is: builds need nothing, and hosts without munge get a
//! clear error only when they try to use it.
//!
//! The client encodes a credential per request (the local munged vouches for the calling
//! process's uid and gid); the controller decodes it with its own munged, which checks
//! the shared key, the time-to-live and that the credential was not decoded before.

use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;

/// `MUNGE_OPT_SOCKET` in munge.h (0.5.x).
const MUNGE_OPT_SOCKET: c_int = 8;
/// `MUNGE_OPT_UID_RESTRICTION` in munge.h (0.5.x): only this uid may decode.
const MUNGE_OPT_UID_RESTRICTION: c_int = 9;

/// What a gsched request's credential carries: the cluster (its CA's fingerprint), the
/// controller address the client dialled and the digest of the request's body
/// ([`body_digest`] of its gRPC frames), so a credential made for anything else
/// (`munge -n`, another cluster, another controller of this one, another request) is
/// refused.
pub fn request_payload(cluster: &str, to: &str, body: &str) -> Vec<u8> {
    format!("{PAYLOAD_TAG} cluster={cluster} to={to} body={body}").into_bytes()
}

/// The digest a credential names for a request body: SHA-256, first 32 hex digits.
pub fn body_digest(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body)
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

const PAYLOAD_TAG: &str = "gsched-request/1";

/// Why a credential's payload is not one for this controller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error(
        "this MUNGE credential was not made for a gsched request (its payload is {0:?}); gsched's tools make their own, one per request"
    )]
    NotForGsched(String),
    #[error(
        "this MUNGE credential was made for cluster {theirs}, not this one ({ours}): the client's GSCHED_TLS_CA is another cluster's CA"
    )]
    OtherCluster { theirs: String, ours: String },
    #[error(
        "this MUNGE credential was made for the controller at {to}, which is not this one (known as {known}); dial controllers by the addresses in --peers"
    )]
    OtherController { to: String, known: String },
    #[error(
        "this MUNGE credential was made for another request (a replay, or a request altered on its way); gsched's tools make one per request"
    )]
    OtherRequest,
}

/// Checks a decoded payload against this controller (its cluster and one of its
/// addresses) and, where the body's digest is known (gRPC), against the request.
pub fn check_payload(
    payload: &[u8],
    cluster: &str,
    addresses: &[String],
    body: Option<&str>,
) -> Result<(), PayloadError> {
    let text = String::from_utf8_lossy(payload);
    let mut words = text.split(' ');
    if words.next() != Some(PAYLOAD_TAG) {
        return Err(PayloadError::NotForGsched(text.chars().take(64).collect()));
    }
    let (mut theirs, mut to, mut digest) = (None, None, None);
    for w in words {
        if let Some(c) = w.strip_prefix("cluster=") {
            theirs = Some(c);
        } else if let Some(t) = w.strip_prefix("to=") {
            to = Some(t);
        } else if let Some(b) = w.strip_prefix("body=") {
            digest = Some(b);
        }
    }
    let (Some(theirs), Some(to)) = (theirs, to) else {
        return Err(PayloadError::NotForGsched(text.chars().take(64).collect()));
    };
    if theirs != cluster {
        return Err(PayloadError::OtherCluster {
            theirs: theirs.into(),
            ours: cluster.into(),
        });
    }
    if !addresses.iter().any(|a| a == to) {
        return Err(PayloadError::OtherController {
            to: to.into(),
            known: addresses.join(", "),
        });
    }
    if let Some(want) = body
        && digest != Some(want)
    {
        return Err(PayloadError::OtherRequest);
    }
    Ok(())
}

type CtxCreate = unsafe extern "C" fn() -> *mut c_void;
type CtxDestroy = unsafe extern "C" fn(*mut c_void);
type CtxSet = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
type Encode = unsafe extern "C" fn(*mut *mut c_char, *mut c_void, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(
    *const c_char,
    *mut c_void,
    *mut *mut c_void,
    *mut c_int,
    *mut libc::uid_t,
    *mut libc::gid_t,
) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

/// What a decoded credential vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub uid: u32,
    pub gid: u32,
    pub payload: Vec<u8>,
}

/// A loaded libmunge, talking to the munged at `socket` (or the default one).
pub struct Munge {
    _lib: Library,
    ctx_create: CtxCreate,
    ctx_destroy: CtxDestroy,
    ctx_set: CtxSet,
    encode: Encode,
    decode: Decode,
    strerror: StrError,
    socket: Option<CString>,
}

impl std::fmt::Debug for Munge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Munge")
            .field("socket", &self.socket)
            .finish()
    }
}

/// A munge context, destroyed when dropped.
struct Ctx<'a> {
    munge: &'a Munge,
    ptr: *mut c_void,
}

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from munge_ctx_create and is destroyed exactly once.
        unsafe { (self.munge.ctx_destroy)(self.ptr) }
    }
}

/// Why MUNGE could not make or check a credential.
#[derive(Debug, thiserror::Error)]
pub enum MungeError {
    #[error("cannot load libmunge.so.2 ({0}); install munge (Debian: apt install munge)")]
    Library(libloading::Error),
    #[error("libmunge.so.2 lacks a symbol gsched needs: {0}")]
    Symbol(libloading::Error),
    #[error("the munge socket path contains a NUL byte")]
    SocketPath,
    #[error("munge_ctx_create failed (out of memory)")]
    OutOfMemory,
    #[error("cannot point munge at {socket}: {why}")]
    Socket { socket: String, why: String },
    #[error("cannot restrict the credential to uid {uid}: {why}")]
    Restrict { uid: u32, why: String },
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("munge could not make a credential: {0} (is munged running?)")]
    Encode(String),
    #[error("the credential contains a NUL byte")]
    CredentialNul,
    #[error("invalid MUNGE credential: {0}")]
    Invalid(String),
}

impl Munge {
    /// Loads libmunge. `socket`: munged's socket when it is not the default
    /// (`/run/munge/munge.socket.2`).
    pub fn load(socket: Option<&Path>) -> Result<Munge, MungeError> {
        // SAFETY: loading libmunge runs its (trivial) initialisers; it is a plain C library.
        let lib = unsafe { Library::new("libmunge.so.2") }.map_err(MungeError::Library)?;
        // SAFETY: the symbol types match munge.h's declarations of these functions.
        let munge = unsafe {
            Munge {
                ctx_create: *lib.get::<CtxCreate>(b"munge_ctx_create\0").map_err(sym)?,
                ctx_destroy: *lib.get::<CtxDestroy>(b"munge_ctx_destroy\0").map_err(sym)?,
                ctx_set: *lib.get::<CtxSet>(b"munge_ctx_set\0").map_err(sym)?,
                encode: *lib.get::<Encode>(b"munge_encode\0").map_err(sym)?,
                decode: *lib.get::<Decode>(b"munge_decode\0").map_err(sym)?,
                strerror: *lib.get::<StrError>(b"munge_strerror\0").map_err(sym)?,
                socket: socket
                    .map(|p| CString::new(p.as_os_str().as_encoded_bytes()))
                    .transpose()
                    .map_err(|_| MungeError::SocketPath)?,
                _lib: lib,
            }
        };
        Ok(munge)
    }

    fn ctx(&self) -> Result<Ctx<'_>, MungeError> {
        // SAFETY: munge_ctx_create takes no arguments and returns a new context or NULL.
        let ptr = unsafe { (self.ctx_create)() };
        if ptr.is_null() {
            return Err(MungeError::OutOfMemory);
        }
        let ctx = Ctx { munge: self, ptr };
        if let Some(s) = &self.socket {
            // SAFETY: MUNGE_OPT_SOCKET takes one `const char *`; `s` outlives the call
            // (libmunge copies the string).
            let e = unsafe { (self.ctx_set)(ctx.ptr, MUNGE_OPT_SOCKET, s.as_ptr()) };
            if e != 0 {
                return Err(MungeError::Socket {
                    socket: format!("{s:?}"),
                    why: self.error(e),
                });
            }
        }
        Ok(ctx)
    }

    fn error(&self, code: c_int) -> String {
        // SAFETY: munge_strerror returns a pointer to a static string for any code.
        let p = unsafe { (self.strerror)(code) };
        if p.is_null() {
            return format!("munge error {code}");
        }
        // SAFETY: non-null results are NUL-terminated static strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// A credential for the calling process, carrying `payload`; with `decoder`, only
    /// that uid may decode it (the controllers' user).
    pub fn encode(&self, payload: &[u8], decoder: Option<u32>) -> Result<String, MungeError> {
        let ctx = self.ctx()?;
        if let Some(uid) = decoder {
            // SAFETY: MUNGE_OPT_UID_RESTRICTION takes one uid_t, passed by value.
            let e =
                unsafe { (self.ctx_set)(ctx.ptr, MUNGE_OPT_UID_RESTRICTION, uid as libc::uid_t) };
            if e != 0 {
                return Err(MungeError::Restrict {
                    uid,
                    why: self.error(e),
                });
            }
        }
        let mut cred: *mut c_char = std::ptr::null_mut();
        let len = c_int::try_from(payload.len()).map_err(|_| MungeError::PayloadTooLarge)?;
        // SAFETY: `cred` receives a malloc'd NUL-terminated string we free below;
        // `payload` is valid for `len` bytes.
        let e = unsafe { (self.encode)(&mut cred, ctx.ptr, payload.as_ptr().cast(), len) };
        if e != 0 || cred.is_null() {
            return Err(MungeError::Encode(self.error(e)));
        }
        // SAFETY: `cred` is a valid NUL-terminated string from libmunge.
        let text = unsafe { CStr::from_ptr(cred) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: libmunge allocated `cred` with malloc; it is freed once.
        unsafe { libc::free(cred.cast()) };
        Ok(text)
    }

    /// Checks a credential with munged and returns who made it.
    pub fn decode(&self, cred: &str) -> Result<Verified, MungeError> {
        let ctx = self.ctx()?;
        let c = CString::new(cred).map_err(|_| MungeError::CredentialNul)?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let (mut uid, mut gid): (libc::uid_t, libc::gid_t) = (0, 0);
        // SAFETY: every out-pointer is valid; `buf` receives a malloc'd payload (or NULL)
        // that we free below.
        let e =
            unsafe { (self.decode)(c.as_ptr(), ctx.ptr, &mut buf, &mut len, &mut uid, &mut gid) };
        let payload = if buf.is_null() {
            Vec::new()
        } else {
            // SAFETY: libmunge returned `len` bytes at `buf`.
            let v = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len.max(0) as usize) }
                .to_vec();
            // SAFETY: `buf` was malloc'd by libmunge and is freed once.
            unsafe { libc::free(buf) };
            v
        };
        if e != 0 {
            return Err(MungeError::Invalid(self.error(e)));
        }
        Ok(Verified { uid, gid, payload })
    }
}

fn sym(e: libloading::Error) -> MungeError {
    MungeError::Symbol(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_the_cluster_the_controller_and_the_request() {
        let here = vec!["h1:6817".to_string(), "10.0.0.1:6817".to_string()];
        let body = body_digest(b"a request");
        let p = request_payload("ab12", "h1:6817", &body);
        assert_eq!(check_payload(&p, "ab12", &here, Some(&body)), Ok(()));
        assert_eq!(
            check_payload(&p, "ab12", &here, Some(&body_digest(b"another"))),
            Err(PayloadError::OtherRequest)
        );
        assert!(matches!(
            check_payload(b"", "ab12", &here, None),
            Err(PayloadError::NotForGsched(_))
        ));
        assert!(matches!(
            check_payload(b"gsched", "ab12", &here, None),
            Err(PayloadError::NotForGsched(_))
        ));
        let foreign = request_payload("ffff", "h1:6817", &body);
        assert!(matches!(
            check_payload(&foreign, "ab12", &here, None),
            Err(PayloadError::OtherCluster { .. })
        ));
        let other = request_payload("ab12", "h2:6817", &body);
        let e = check_payload(&other, "ab12", &here, None).unwrap_err();
        assert!(e.to_string().contains("h2:6817"), "{e}");
    }
}
