//! Listing the sockets of a namespace from `/proc/thread-self/net/{tcp,tcp6,udp,udp6}`.
//!
//! `/proc/thread-self/net` shows the namespace of the reading *thread* (unlike
//! `/proc/net`, which shows the process's main thread's), so these files must be read from a
//! thread inside the namespace.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The transport protocol of a [`SocketEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketProto {
    /// A TCP socket (listening, connecting or connected).
    Tcp,
    /// A UDP socket.
    Udp,
}

/// One socket of the client namespace that is still owned by a process (see
/// [`TestNet::client_sockets`](crate::TestNet::client_sockets)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketEntry {
    /// TCP or UDP (the family shows in the addresses).
    pub proto: SocketProto,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port (unspecified, port 0, if not connected).
    pub remote: SocketAddr,
    /// The kernel's state name: `ESTABLISHED`, `SYN_SENT`, `LISTEN`, `CLOSE_WAIT`, ...;
    /// for UDP, `ESTABLISHED` means connected and `CLOSE` unconnected.
    pub state: &'static str,
    /// The socket's inode number (never 0: entries with inode 0, such as TIME_WAIT and
    /// orphaned sockets, are left out).
    pub inode: u64,
}

impl fmt::Display for SocketEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.proto {
            SocketProto::Tcp => "tcp",
            SocketProto::Udp => "udp",
        };
        write!(
            f,
            "{proto} {} -> {} {} (inode {})",
            self.local, self.remote, self.state, self.inode
        )
    }
}

/// The kernel's names for `/proc/net/tcp` state codes (`include/net/tcp_states.h`).
fn state_name(code: u8) -> &'static str {
    match code {
        0x01 => "ESTABLISHED",
        0x02 => "SYN_SENT",
        0x03 => "SYN_RECV",
        0x04 => "FIN_WAIT1",
        0x05 => "FIN_WAIT2",
        0x06 => "TIME_WAIT",
        0x07 => "CLOSE",
        0x08 => "CLOSE_WAIT",
        0x09 => "LAST_ACK",
        0x0a => "LISTEN",
        0x0b => "CLOSING",
        0x0c => "NEW_SYN_RECV",
        0x0d => "BOUND_INACTIVE",
        _ => "UNKNOWN",
    }
}

/// Parses `ADDR:PORT` as printed in `/proc/net/{tcp,udp}{,6}`: the address as 32-bit words
/// in the kernel's byte order, printed in hex; the port in hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        // The kernel prints each 32-bit word of the network-order address as a native
        // integer, so the native bytes of the printed value are the address bytes.
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Parses the text of one of those files. Lines that do not parse are skipped.
pub(crate) fn parse_table(proto: SocketProto, text: &str) -> Vec<SocketEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            let local = parse_addr(f.get(1)?)?;
            let remote = parse_addr(f.get(2)?)?;
            let state = state_name(u8::from_str_radix(f.get(3)?, 16).ok()?);
            let inode = f.get(9)?.parse().ok()?;
            Some(SocketEntry {
                proto,
                local,
                remote,
                state,
                inode,
            })
        })
        .collect()
}

/// The sockets of the calling thread's namespace that a process still owns (inode != 0).
pub(crate) fn owned_sockets_of_this_thread() -> io::Result<Vec<SocketEntry>> {
    let mut all = Vec::new();
    for (file, proto) in [
        ("tcp", SocketProto::Tcp),
        ("tcp6", SocketProto::Tcp),
        ("udp", SocketProto::Udp),
        ("udp6", SocketProto::Udp),
    ] {
        let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}"))?;
        all.extend(
            parse_table(proto, &text)
                .into_iter()
                .filter(|e| e.inode != 0),
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_and_v6_lines() {
        let v4 = u32::from_ne_bytes([10, 200, 0, 1]);
        let text = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: {v4:08X}:9C40 0100C90A:01BB 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000 20 4 30 10 -1\n   \
             1: 00000000:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 0 1\n\
             garbage\n"
        );
        let t = parse_table(SocketProto::Tcp, &text);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0].local,
            "10.200.0.1:40000".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(t[0].state, "ESTABLISHED");
        assert_eq!(t[0].inode, 4242);
        assert_eq!(t[1].state, "LISTEN");
        assert_eq!(t[1].inode, 0);

        let ip: Ipv6Addr = "2001:db8:200::1".parse().expect("ip");
        let o = ip.octets();
        let hex: String = (0..4)
            .map(|i| {
                let w = u32::from_ne_bytes([o[i * 4], o[i * 4 + 1], o[i * 4 + 2], o[i * 4 + 3]]);
                format!("{w:08X}")
            })
            .collect();
        let line = format!("hdr\n 0: {hex}:01BB {hex}:0000 07 0:0 0:0 0 0 0 77\n");
        let u = parse_table(SocketProto::Udp, &line);
        assert_eq!(u[0].local, SocketAddr::new(ip.into(), 443));
        assert_eq!(u[0].state, "CLOSE");
        assert!(u[0].to_string().starts_with("udp [2001:db8:200::1]:443"));
    }
}
