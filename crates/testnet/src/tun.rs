//! Layer-3 TUN devices: one end of the wire in each namespace.
//!
//! The device is created in the namespace of the thread that opens it and disappears when
//! the descriptor is closed. It has no packet-information header and no virtio-net header,
//! so every read returns exactly one IP packet of at most the MTU with its checksums already
//! filled in, and every write injects one IP packet into that namespace's stack.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::sys;

/// The TUN clone device.
pub(crate) const TUN_DEVICE: &str = "/dev/net/tun";

/// Whether the TUN clone device exists on this machine.
pub(crate) fn available() -> bool {
    Path::new(TUN_DEVICE).exists()
}

/// Creates the TUN device `name` in the calling thread's namespace and returns its
/// non-blocking, close-on-exec descriptor. The device is still down and has no address.
pub(crate) fn open(name: &str) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        // std adds O_CLOEXEC itself.
        .custom_flags(libc::O_NONBLOCK)
        .open(TUN_DEVICE)?;
    sys::tun_set_iff(file.as_fd(), name)?;
    Ok(file)
}
