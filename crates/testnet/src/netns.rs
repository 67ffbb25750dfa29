//! Anonymous network namespaces held by file descriptors, and the set-up done inside them.
//!
//! A namespace is made by `unshare(CLONE_NEWNET)` on a thread of its own and is then kept
//! alive by an open `/proc/thread-self/ns/net` descriptor (plus whatever still lives in it:
//! the TUN device, sockets, threads). It has no name, so nothing is left behind when the
//! process dies, and every test network can use the same addresses.
//!
//! Namespaces belong to threads, not to processes: sockets belong to the namespace of the
//! thread that creates them, and a child process starts in the namespace of the thread
//! that spawned it (so `ip` run from a thread inside configures that namespace).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};

use crate::sys;

/// An anonymous network namespace, kept alive by this descriptor.
#[derive(Debug)]
pub(crate) struct Netns {
    fd: OwnedFd,
}

impl Netns {
    /// Moves the calling thread into a new, empty network namespace and returns a handle to
    /// it. The calling thread stays inside for the rest of its life: call this only on a
    /// thread made for that namespace.
    pub(crate) fn unshare_this_thread() -> io::Result<Self> {
        sys::unshare_net()?;
        Self::of_this_thread()
    }

    /// The namespace the calling thread is in.
    pub(crate) fn of_this_thread() -> io::Result<Self> {
        let file = File::open("/proc/thread-self/ns/net")?;
        Ok(Self {
            fd: OwnedFd::from(file),
        })
    }

    /// Moves the calling thread into this namespace.
    pub(crate) fn enter(&self) -> io::Result<()> {
        sys::setns_net(self.fd.as_fd())
    }

    /// Runs `f` on a new thread named `name` that has joined this namespace, and returns its
    /// result; a panic in `f` is passed on to the caller.
    pub(crate) fn run<R: Send>(&self, name: &str, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|scope| {
            let handle = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn_scoped(scope, || {
                    if let Err(e) = self.enter() {
                        panic!("testnet: setns into the test namespace failed: {e}");
                    }
                    f()
                })
                .unwrap_or_else(|e| panic!("testnet: cannot spawn a thread: {e}"));
            match handle.join() {
                Ok(r) => r,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
    }
}

/// Runs `ip -batch -` with `batch` on its standard input, in the calling thread's namespace.
pub(crate) fn ip_batch(batch: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                "`ip` (iproute2) is not installed".to_owned()
            } else {
                format!("cannot run `ip`: {e}")
            }
        })?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(batch.as_bytes()));
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        // Best effort: the status below is what decides.
        let _ = err.read_to_string(&mut stderr);
    }
    let status = child.wait().map_err(|e| format!("waiting for `ip`: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`ip -batch -` failed ({status}): {}",
            stderr.trim()
        ));
    }
    match written {
        Some(Err(e)) => Err(format!("writing to `ip -batch -`: {e}")),
        _ => Ok(()),
    }
}

/// Writes `value` to the sysctl at `/proc/sys/<key>` (key with `/` separators) in the calling
/// thread's namespace, and reads it back to make sure it took.
///
/// Network sysctls are resolved against the namespace of the thread that opens the file, so
/// this must run on a thread inside the namespace to configure.
pub(crate) fn write_sysctl(key: &str, value: &str) -> Result<(), String> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value).map_err(|e| format!("writing {path}: {e}"))?;
    let back = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    if back.trim() == value {
        Ok(())
    } else {
        Err(format!(
            "{path} reads back {:?}, expected {value:?}",
            back.trim()
        ))
    }
}
