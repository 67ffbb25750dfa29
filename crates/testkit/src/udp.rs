//! UDP stand-ins for a QUIC path, on loopback: a port that hears QUIC and never answers
//! ([`SilentUdp`]: where nothing drops packets, it stands for a path that blackholes UDP), and
//! a relay in front of a real server ([`UdpRelay`]). Both read the long-header packets of each
//! datagram a client sends (RFC 9000 §17.2), so a test can tell that a client sent 0-RTT data.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// What a client sent: datagrams, and the 0-RTT packets among them.
#[derive(Debug, Default)]
struct Heard {
    datagrams: AtomicUsize,
    zero_rtt: AtomicUsize,
}

impl Heard {
    fn hear(&self, datagram: &[u8]) {
        self.datagrams.fetch_add(1, Ordering::SeqCst);
        let early = long_header_types(datagram)
            .iter()
            .filter(|&&t| t == ZERO_RTT)
            .count();
        self.zero_rtt.fetch_add(early, Ordering::SeqCst);
    }
}

/// A UDP socket on 127.0.0.1 that reads every datagram and answers none. Dropping it closes
/// the socket.
#[derive(Debug)]
pub struct SilentUdp {
    heard: Arc<Heard>,
    task: JoinHandle<()>,
}

impl SilentUdp {
    /// Binds 127.0.0.1:`port` (UDP) and starts reading, on the current runtime.
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
        let heard = Arc::new(Heard::default());
        let h = Arc::clone(&heard);
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, _)) = socket.recv_from(&mut buf).await {
                h.hear(&buf[..n]);
            }
        });
        Ok(Self { heard, task })
    }

    /// Datagrams received.
    pub fn datagrams(&self) -> usize {
        self.heard.datagrams.load(Ordering::SeqCst)
    }

    /// QUIC 0-RTT packets received (long-header type 1 in QUIC version 1).
    pub fn zero_rtt_packets(&self) -> usize {
        self.heard.zero_rtt.load(Ordering::SeqCst)
    }
}

impl Drop for SilentUdp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A UDP relay on 127.0.0.1 in front of a server, as a NAT would be: each client gets a
/// socket of its own towards the server, and the server's answers go back to that client,
/// each after a delay. The delay gives the path a round trip, as a real one has: on bare
/// loopback a handshake can end before a client has written what it meant to send in 0-RTT.
/// Dropping it closes all its sockets.
#[derive(Debug)]
pub struct UdpRelay {
    heard: Arc<Heard>,
    task: JoinHandle<()>,
}

impl UdpRelay {
    /// Binds 127.0.0.1:`port` (UDP) for clients, relaying to `server` and delaying its answers
    /// by `delay`, on the current runtime.
    pub async fn bind(port: u16, server: SocketAddr, delay: Duration) -> std::io::Result<Self> {
        let front = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
        let front = Arc::new(front);
        let heard = Arc::new(Heard::default());
        let h = Arc::clone(&heard);
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 65_536];
            let mut clients = std::collections::HashMap::new();
            // Each client's way back; dropped (and so aborted) with this task.
            let mut back_ways = tokio::task::JoinSet::new();
            while let Ok((n, client)) = front.recv_from(&mut buf).await {
                h.hear(&buf[..n]);
                let back = match clients.get(&client) {
                    Some(back) => Arc::clone(back),
                    None => {
                        let Ok(back) = towards(server).await else {
                            continue;
                        };
                        let back = Arc::new(back);
                        clients.insert(client, Arc::clone(&back));
                        back_ways.spawn(way_back(
                            Arc::clone(&back),
                            Arc::clone(&front),
                            client,
                            delay,
                        ));
                        back
                    }
                };
                let _ = back.send(&buf[..n]).await;
            }
        });
        Ok(Self { heard, task })
    }

    /// QUIC 0-RTT packets the clients sent through the relay.
    pub fn zero_rtt_packets(&self) -> usize {
        self.heard.zero_rtt.load(Ordering::SeqCst)
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A socket on 127.0.0.1 connected to `server`.
async fn towards(server: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
    socket.connect(server).await?;
    Ok(socket)
}

/// Sends what the server answers on `back` to `client` through `front`, each datagram
/// `delay` after it arrived, in order.
async fn way_back(
    back: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    delay: Duration,
) {
    let mut buf = vec![0u8; 65_536];
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            got = back.recv(&mut buf) => {
                let Ok(n) = got else { return };
                let (front, datagram) = (Arc::clone(&front), buf[..n].to_vec());
                let at = tokio::time::Instant::now() + delay;
                in_flight.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    let _ = front.send_to(&datagram, client).await;
                });
            }
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
        }
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
