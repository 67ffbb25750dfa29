//! A UDP port that hears QUIC and never answers ([`SilentUdp`]): on loopback, where nothing
//! drops packets, it stands for a path that blackholes UDP. It reads the long-header packets
//! of each datagram (RFC 9000 §17.2), so a test can tell that a client sent 0-RTT data there.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// A UDP socket on 127.0.0.1 that reads every datagram and answers none. Dropping it closes
/// the socket.
#[derive(Debug)]
pub struct SilentUdp {
    datagrams: Arc<AtomicUsize>,
    zero_rtt: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SilentUdp {
    /// Binds 127.0.0.1:`port` (UDP) and starts reading, on the current runtime.
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
        let datagrams = Arc::new(AtomicUsize::new(0));
        let zero_rtt = Arc::new(AtomicUsize::new(0));
        let (d, z) = (Arc::clone(&datagrams), Arc::clone(&zero_rtt));
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, _)) = socket.recv_from(&mut buf).await {
                d.fetch_add(1, Ordering::SeqCst);
                let early = long_header_types(&buf[..n])
                    .iter()
                    .filter(|&&t| t == ZERO_RTT)
                    .count();
                z.fetch_add(early, Ordering::SeqCst);
            }
        });
        Ok(Self {
            datagrams,
            zero_rtt,
            task,
        })
    }

    /// Datagrams received.
    pub fn datagrams(&self) -> usize {
        self.datagrams.load(Ordering::SeqCst)
    }

    /// QUIC 0-RTT packets received (long-header type 1 in QUIC version 1).
    pub fn zero_rtt_packets(&self) -> usize {
        self.zero_rtt.load(Ordering::SeqCst)
    }
}

impl Drop for SilentUdp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The long-header packet type of 0-RTT in QUIC version 1 (RFC 9000 §17.2.3).
const ZERO_RTT: u8 = 1;

/// The types of the long-header packets coalesced in `datagram` (RFC 9000 §12.2), in order,
/// until a short-header packet or anything that does not parse. The type bits are not
/// covered by header protection (RFC 9001 §5.4.1).
pub fn long_header_types(datagram: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut rest = datagram;
    while let Some((&first, _)) = rest.split_first() {
        if first & 0x80 == 0 {
            break;
        }
        let kind = (first >> 4) & 0x03;
        let Some(after) = long_packet_len(rest, kind) else {
            break;
        };
        types.push(kind);
        rest = &rest[after..];
    }
    types
}

/// The length of the long-header packet at the start of `p`, of type `kind`.
fn long_packet_len(p: &[u8], kind: u8) -> Option<usize> {
    // Flags and version, then the connection ids, each after its length byte.
    let mut at = 5;
    for _ in 0..2 {
        let len = usize::from(*p.get(at)?);
        at += 1 + len;
    }
    if kind == 0 {
        // An Initial's token.
        let (token, n) = varint(p.get(at..)?)?;
        at += n + usize::try_from(token).ok()?;
    }
    let (length, n) = varint(p.get(at..)?)?;
    let end = at + n + usize::try_from(length).ok()?;
    (end <= p.len()).then_some(end)
}

/// A variable-length integer (RFC 9000 §16) and the bytes it took.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let n = 1usize << (first >> 6);
    let bytes = b.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for &byte in &bytes[1..] {
        v = (v << 8) | u64::from(byte);
    }
    Some((v, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesced_initial_and_zero_rtt_packets_are_both_read() {
        // An Initial (type 0) with a 1-byte token and 3 bytes of payload, then a 0-RTT packet
        // (type 1) with 2 bytes, then a short-header packet that ends the walk.
        let mut d = vec![
            0xc0, 0, 0, 0, 1, 2, 0xaa, 0xbb, 1, 0xcc, 1, 0x7f, 3, 1, 2, 3,
        ];
        d.extend([0xd0, 0, 0, 0, 1, 0, 0, 0x40, 2, 9, 9]);
        d.extend([0x40, 1, 2, 3]);
        assert_eq!(long_header_types(&d), [0, 1]);
    }

    #[test]
    fn a_truncated_packet_stops_the_walk() {
        let d = [0xd0, 0, 0, 0, 1, 0, 0, 5, 1];
        assert!(long_header_types(&d).is_empty());
        assert!(long_header_types(&[]).is_empty());
    }
}
