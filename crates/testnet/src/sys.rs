//! The only raw system calls of the crate, each behind a small safe function.
//!
//! Everything else in the crate is safe code: files and pipes go through `std`, and
//! namespaces are plain [`OwnedFd`](std::os::fd::OwnedFd)s opened from `/proc`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Turns the result of a libc call that returns `-1` and sets `errno` on failure into an
/// `io::Result`.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Moves the calling thread (only it) into a new, empty network namespace.
pub(crate) fn unshare_net() -> io::Result<()> {
    // SAFETY: unshare takes a flags integer and touches no memory of ours. CLONE_NEWNET only
    // changes the network namespace of the calling thread.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// Moves the calling thread into the network namespace that `ns` (an open
/// `/proc/.../ns/net` file) refers to.
pub(crate) fn setns_net(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `ns` is an open descriptor borrowed for the whole call; setns reads no memory of
    // ours and only changes the calling thread's network namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// `struct ifreq` as TUNSETIFF reads it: the interface name, then the flags member of the union
/// (the union is 24 bytes on every Linux ABI, which makes the struct 40 bytes).
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Attaches the open `/dev/net/tun` descriptor `tun` to a new layer-3 TUN device called
/// `name` (no packet-information header, no offloads) in the calling thread's namespace.
pub(crate) fn tun_set_iff(tun: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads a `struct ifreq` and may write the chosen name back into it.
    // `req` has that layout (16-byte name, then the 24-byte union whose first member is the
    // short flags) and lives, mutably borrowed, for the whole call; `tun` is an open
    // descriptor borrowed for the call.
    check(unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &raw mut req) }).map(drop)
}

/// Waits until one of `fds` is readable (or has an error or hang-up), or until `timeout`
/// passes (`None`: no limit). Returns the `revents` of each descriptor, in order.
///
/// Uses `ppoll`, whose timeout has nanosecond resolution (plain `poll` rounds to whole
/// milliseconds).
pub(crate) fn poll_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Option<Duration>,
) -> io::Result<[libc::c_short; N]> {
    let mut pfds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    // An hour is "forever" for a test network and keeps tv_sec far from any overflow.
    let ts = timeout.map(|d| {
        let d = d.min(Duration::from_secs(3600));
        libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        }
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `pfds` is an array of exactly N pollfd structs that stays alive and mutably
    // borrowed for the call; `ts_ptr` is null or points at `ts`, which outlives the call; a
    // null signal mask keeps the thread's mask. The descriptors are borrowed, so they stay
    // open for the call.
    check(unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            N as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    })?;
    Ok(pfds.map(|p| p.revents))
}

/// Sets the calling thread's timer slack (the kernel's allowance to wake it late) to `ns`
/// nanoseconds. The default is 50 µs; the wire thread asks for 1 ns to keep delays exact.
pub(crate) fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer argument and reads no memory of ours;
    // it only affects the calling thread.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) }).map(drop)
}
