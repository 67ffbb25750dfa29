//! The test network's DNS server on loopback, for benches and tests that need a real DNS
//! server but no network namespace (and so no root).
//!
//! [`LoopbackDns`] runs the same hickory-server handler as the test network (the same
//! [`DnsZone`] records, delays, NODATA and NXDOMAIN answers, the same per-type counts) on
//! `127.0.0.1`, UDP and TCP on one port the kernel picks. It runs on an OS thread of its
//! own, with a current-thread runtime, so the client's runtime does none of its work.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};

use crate::dns::{self, DnsCounts, DnsState, DnsZone, Handler};
use crate::wire::lock;

/// A DNS server on `127.0.0.1` answering from the zones set on it. Dropping it stops the
/// server and closes its sockets.
///
/// ```no_run
/// use fastfallback_testnet::{DnsZone, LoopbackDns};
/// let dns = LoopbackDns::start()?;
/// dns.set_dns("origin.test", DnsZone { a: vec!["127.0.0.1".parse()?], ..DnsZone::default() });
/// println!("ask {}", dns.addr());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LoopbackDns {
    addr: SocketAddr,
    state: Arc<DnsState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LoopbackDns {
    /// Starts the server and waits until it listens.
    ///
    /// # Errors
    /// The error of building its runtime or binding its sockets.
    pub fn start() -> io::Result<Self> {
        let state = Arc::new(DnsState::default());
        let (ready, bound) = std::sync::mpsc::channel::<io::Result<SocketAddr>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handler_state = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("loopback-dns".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let server = match serve(handler_state).await {
                        Ok((server, addr)) => {
                            let _ = ready.send(Ok(addr));
                            server
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let _ = stopped.await;
                    drop(server);
                });
                // Dropping the runtime cancels the answer tasks and closes every socket.
                drop(rt);
            })?;
        let addr = bound
            .recv()
            .map_err(|_| io::Error::other("loopback DNS: the server thread ended"))??;
        Ok(Self {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the server listens (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the records of `name` (with or without the trailing dot; case does not matter),
    /// replacing earlier ones.
    pub fn set_dns(&self, name: &str, zone: DnsZone) {
        lock(&self.state.zones).insert(dns::normalise(name), zone);
    }

    /// How many A, AAAA and HTTPS queries the server has received for `name`.
    pub fn dns_queries(&self, name: &str) -> DnsCounts {
        lock(&self.state.counts)
            .get(&dns::normalise(name))
            .copied()
            .unwrap_or_default()
    }
}

impl Drop for LoopbackDns {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// hickory-server on `127.0.0.1`, UDP and TCP on the port the kernel gave the UDP socket.
///
/// That port may be taken for TCP (a client socket of this host uses it as its own port),
/// so a few UDP ports are tried.
async fn serve(state: Arc<DnsState>) -> io::Result<(hickory_server::Server<Handler>, SocketAddr)> {
    const TRIES: usize = 16;
    let mut last = None;
    for _ in 0..TRIES {
        let udp = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
        let addr = udp.local_addr()?;
        match TcpListener::bind(addr).await {
            Ok(tcp) => {
                let mut server = hickory_server::Server::new(Handler { state });
                server.register_socket(udp);
                server.register_listener(tcp, Duration::from_secs(30), 64 * 1024);
                return Ok((server, addr));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("loopback DNS: no port")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, RecordType};

    #[test]
    fn answers_a_query_over_udp_on_loopback_and_counts_it() {
        let dns = LoopbackDns::start().expect("server");
        dns.set_dns(
            "Origin.test.",
            DnsZone {
                a: vec![Ipv4Addr::new(127, 0, 0, 1)],
                ..DnsZone::default()
            },
        );
        let mut query = Message::query();
        query.add_query(Query::query(
            Name::from_ascii("origin.test.").expect("name"),
            RecordType::A,
        ));
        query.metadata.id = 7;
        let bytes = query.to_vec().expect("encode");
        let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        socket.send_to(&bytes, dns.addr()).expect("send");
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("an answer within 5 s");
        let answer = Message::from_vec(&buf[..n]).expect("decode");
        assert_eq!(answer.metadata.id, 7);
        let ips: Vec<_> = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect();
        assert_eq!(ips, [Ipv4Addr::new(127, 0, 0, 1)]);
        assert_eq!(dns.dns_queries("origin.test").a, 1);
        assert_eq!(dns.dns_queries("origin.test").aaaa, 0);
    }
}
