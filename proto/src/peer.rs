//! What the kernel says about the other end of a local connection: the uid owning a
//! loopback TCP socket (one exact `NETLINK_SOCK_DIAG` lookup by its four-tuple, no scan of
//! `/proc/net/tcp`) or a Unix socket's peer (`SO_PEERCRED`), and which server uids a
//! client on this host trusts.

use std::io;
use std::net::{IpAddr, SocketAddr};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;

/// The owner of an established TCP socket whose local end is `local` and remote end is
/// `remote`, as the kernel has it (the listener's uid for a server's accepted socket).
/// `Ok(None)`: no such established socket (a half-open one, still in the handshake or in
/// a full accept queue, reports no owner and is not taken as anyone's).
pub fn tcp_socket_uid(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u32>> {
    let first = query(local, remote)?;
    if first.is_some() {
        return Ok(first);
    }
    // A v4 connection made from an AF_INET6 socket (v4-mapped, as dual-stack clients
    // such as grpcio make them) is found through its v6 spelling as well.
    match (local, remote) {
        (SocketAddr::V4(l), SocketAddr::V4(r)) => query(
            SocketAddr::new(IpAddr::V6(l.ip().to_ipv6_mapped()), l.port()),
            SocketAddr::new(IpAddr::V6(r.ip().to_ipv6_mapped()), r.port()),
        ),
        _ => Ok(None),
    }
}

/// `struct inet_diag_req_v2` after its netlink header, for one socket.
fn request(local: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let family = match local {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    } as u8;
    let addr = |a: &SocketAddr| -> [u8; 16] {
        let mut out = [0u8; 16];
        match a.ip() {
            IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
        }
        out
    };
    let mut body = Vec::with_capacity(56);
    body.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    body.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    body.extend_from_slice(&local.port().to_be_bytes());
    body.extend_from_slice(&remote.port().to_be_bytes());
    body.extend_from_slice(&addr(&local));
    body.extend_from_slice(&addr(&remote));
    body.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    body.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    let len = 16 + body.len() as u32;
    let mut msg = Vec::with_capacity(len as usize);
    msg.extend_from_slice(&len.to_ne_bytes());
    msg.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&body);
    msg
}

/// Reads the owner from a reply: `struct inet_diag_msg` (state at byte 1, uid at 64 of the
/// payload), or a netlink error (`ENOENT`: no such socket). Only an established socket
/// counts: one still in the handshake (`TCP_NEW_SYN_RECV`) reports no owner of its own.
/// A server's socket not yet accepted has no inode yet, but its uid is already the
/// listener's.
fn owner_in_reply(reply: &[u8]) -> io::Result<Option<u32>> {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        b.get(at..at + 4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
    };
    let kind = reply
        .get(4..6)
        .map(|t| u16::from_ne_bytes([t[0], t[1]]))
        .ok_or_else(|| io::Error::other("short sock_diag reply"))?;
    let payload = &reply[16.min(reply.len())..];
    match kind {
        NLMSG_ERROR => {
            let errno = word(payload, 0).map(|e| e as i32).unwrap_or(0);
            if errno == 0 || -errno == libc::ENOENT {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(-errno))
            }
        }
        SOCK_DIAG_BY_FAMILY => {
            let state = payload.get(1).copied().unwrap_or(0);
            let established = state == TCP_ESTABLISHED || state == TCP_CLOSE_WAIT;
            Ok(word(payload, 64).filter(|_| established))
        }
        other => Err(io::Error::other(format!(
            "unexpected sock_diag reply type {other}"
        ))),
    }
}

fn query(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u32>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) has no memory arguments; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor we just opened and own alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let msg = request(local, remote);
    // SAFETY: `msg` is a live buffer of `msg.len()` bytes for the duration of the call.
    let sent = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 8192];
    // SAFETY: `buf` is writable for `buf.len()` bytes for the duration of the call.
    let got = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    owner_in_reply(&buf[..got as usize])
}

/// The uid of a connected Unix socket's peer (`SO_PEERCRED`: who held the other end when
/// the connection was made).
pub fn unix_peer_uid(stream: &tokio::net::UnixStream) -> io::Result<u32> {
    stream.peer_cred().map(|c| c.uid())
}

/// The server uids a plaintext client on this host accepts: root, the client's own uid,
/// and the daemons' user named by `GSCHED_DAEMON_USER` (a name or a uid). Anyone else
/// holding a controller's address (a port taken after the controller stopped) is refused.
pub fn trusted_server_uids() -> Vec<u32> {
    let mut uids = vec![0, nix_getuid()];
    if let Some(u) = std::env::var("GSCHED_DAEMON_USER")
        .ok()
        .and_then(|v| uid_of(v.trim()))
    {
        uids.push(u);
    }
    uids.sort_unstable();
    uids.dedup();
    uids
}

fn nix_getuid() -> u32 {
    // SAFETY: getuid(2) cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// A user name or number as a uid.
pub fn uid_of(user: &str) -> Option<u32> {
    if let Ok(n) = user.parse() {
        return Some(n);
    }
    let name = std::ffi::CString::new(user).ok()?;
    // SAFETY: getpwnam(3) reads a NUL-terminated string and returns NULL or a pointer
    // into static storage, read at once before any other passwd call on this thread.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    // SAFETY: checked non-null just above; pw_uid is a plain field.
    (!pw.is_null()).then(|| unsafe { (*pw).pw_uid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_of_a_loopback_connection_are_ours() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let me = nix_getuid();
        let (cl, cr) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        assert_eq!(tcp_socket_uid(cl, cr).unwrap(), Some(me), "client end");
        let (sl, sr) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        assert_eq!(tcp_socket_uid(sl, sr).unwrap(), Some(me), "server end");
        // A closed connection (TIME_WAIT on the side that closed first) is nobody's.
        drop(c);
        drop(s);
        assert_eq!(tcp_socket_uid(cl, cr).unwrap(), None, "closed client end");
    }

    #[test]
    fn a_server_socket_not_yet_accepted_is_already_the_listeners() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, theirs) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        // Nothing accepted yet: the connection sits in the listener's queue, established
        // (a few microseconds after connect returns on loopback).
        let found = (0..10_000).find_map(|_| {
            let r = tcp_socket_uid(theirs, ours).unwrap();
            if r.is_none() {
                std::thread::yield_now();
            }
            r
        });
        assert_eq!(found, Some(nix_getuid()));
        drop(l);
    }

    #[test]
    fn a_dual_stack_client_is_found_from_the_v4_side() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(format!("[::ffff:127.0.0.1]:{port}"));
        let Ok(_c) = c else {
            return; // no IPv6 in this sandbox: nothing to check
        };
        let (s, _) = l.accept().unwrap();
        // The server sees a v4 peer; the client's socket is AF_INET6.
        let (sl, sr) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        assert!(sr.is_ipv4());
        assert_eq!(tcp_socket_uid(sr, sl).unwrap(), Some(nix_getuid()));
    }

    #[test]
    fn replies_are_read_for_owner_state_and_errors() {
        let mut ok = vec![0u8; 16 + 72];
        ok[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        ok[17] = TCP_ESTABLISHED;
        ok[16 + 64..16 + 68].copy_from_slice(&1001u32.to_ne_bytes());
        ok[16 + 68..16 + 72].copy_from_slice(&77u32.to_ne_bytes());
        assert_eq!(owner_in_reply(&ok).unwrap(), Some(1001));
        // A socket still in the handshake (SYN_RECV) is nobody's, whatever uid it shows.
        let mut half = ok.clone();
        half[17] = 12;
        assert_eq!(owner_in_reply(&half).unwrap(), None);
        let mut err = vec![0u8; 20];
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(owner_in_reply(&err).unwrap(), None);
    }
}
