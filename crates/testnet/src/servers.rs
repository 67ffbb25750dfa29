//! The server side: one OS thread inside the server namespace, running a tokio
//! current-thread runtime that hosts the DNS server and every [`ServerKind`] listener.
//!
//! The thread takes commands over a channel. When the [`TestNet`](crate::TestNet) drops the
//! channel, the thread's loop ends and it drops its runtime, which cancels every task and
//! closes every socket it held, then exits; the drop joins it.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::dns::{DnsState, Handler};
use crate::netns::{self, Netns};
use crate::tls::TlsMaterial;
use crate::wire::lock;
use crate::{DNS_V4, tun};

/// What a server started with [`TestNet::serve`](crate::TestNet::serve) does with the TCP
/// connections it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerKind {
    /// Accept and hold each connection open, never reading or writing. For a TLS client
    /// this is a stalled handshake: the ClientHello is never answered. The connections are
    /// closed when the `TestNet` drops.
    Accept,
    /// TLS with the test CA's leaf certificate (rustls, no client authentication),
    /// offering these ALPN ids in this order of preference (e.g. `[b"h2", b"http/1.1"]`).
    /// After the handshake the server reads (and discards) until EOF, then closes.
    Tls {
        /// ALPN protocol ids, most preferred first.
        alpn: Vec<Vec<u8>>,
    },
    /// HTTP over TLS with the test CA's leaf ([`crate::http`]): HTTP/2 when ALPN picks `h2`,
    /// HTTP/1.1 otherwise.
    Http {
        /// ALPN protocol ids, most preferred first.
        alpn: Vec<Vec<u8>>,
        /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, if limited.
        max_streams: Option<u32>,
        /// HTTP/2: the first this many connections send GOAWAY naming stream 0 as soon as
        /// they are set up ([`crate::http::HttpOptions::goaway_first`]).
        goaway_first: usize,
    },
    /// An HTTP `CONNECT` proxy ([`crate::proxy`]), reaching targets from the server namespace.
    HttpProxy,
    /// A SOCKS5 proxy ([`crate::proxy`]), reaching targets from the server namespace.
    Socks5Proxy,
    /// QUIC on UDP (quinn) with the test CA's leaf, offering these ALPN ids (e.g.
    /// `[b"h3"]`), serving HTTP/3 ([`crate::http3`]). [`TestNet::accepted`](crate::TestNet::accepted)
    /// counts handshakes.
    Quic {
        /// ALPN protocol ids, most preferred first.
        alpn: Vec<Vec<u8>>,
    },
}

/// Accepted-connection counters, per listening address.
pub(crate) type Accepted = Mutex<HashMap<SocketAddr, usize>>;

/// A command for the server thread.
enum Command {
    /// Listen on `addr` and serve `kind`; reply once listening (or with the bind error).
    Serve {
        addr: SocketAddr,
        kind: ServerKind,
        reply: mpsc::SyncSender<io::Result<()>>,
    },
    /// Listen on `from` and relay every connection to `to` (the NAT64 translator).
    Relay {
        from: SocketAddr,
        to: SocketAddr,
        reply: mpsc::SyncSender<io::Result<()>>,
    },
}

/// What the server thread needs to set itself up.
pub(crate) struct ServerConfig {
    /// The `ip -batch` script that configures the server namespace.
    pub(crate) ip_batch: String,
    /// Sysctls (key, value) to set in the server namespace.
    pub(crate) sysctls: Vec<(String, String)>,
    pub(crate) dns: Arc<DnsState>,
    pub(crate) tls: Arc<TlsMaterial>,
    pub(crate) accepted: Arc<Accepted>,
}

/// The running server thread. Dropping it stops the thread and joins it.
#[derive(Debug)]
pub(crate) struct ServerThread {
    commands: Option<UnboundedSender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Serve { addr, kind, .. } => write!(f, "Serve({addr}, {kind:?})"),
            Self::Relay { from, to, .. } => write!(f, "Relay({from} → {to})"),
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        drop(self.commands.take());
        if let Some(t) = self.thread.take() {
            // Nothing to add if it panicked (and we may be unwinding already).
            let _ = t.join();
        }
    }
}

impl ServerThread {
    /// Starts `kind` on `addr` and waits until it listens.
    pub(crate) fn serve(&self, addr: SocketAddr, kind: ServerKind) -> io::Result<()> {
        let gone = || io::Error::other("testnet: the server thread has stopped");
        let (reply, answer) = mpsc::sync_channel(1);
        self.commands
            .as_ref()
            .ok_or_else(gone)?
            .send(Command::Serve { addr, kind, reply })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    pub(crate) fn relay(&self, from: SocketAddr, to: SocketAddr) -> io::Result<()> {
        let gone = || io::Error::other("testnet: the server thread has stopped");
        let (reply, answer) = mpsc::sync_channel(1);
        self.commands
            .as_ref()
            .ok_or_else(gone)?
            .send(Command::Relay { from, to, reply })
            .map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

/// Sets up the server namespace on a new thread (unshare, TUN device `tns0`, addresses,
/// sysctls, DNS server) and leaves the thread serving there. Returns the thread, a handle
/// to its namespace and the TUN device's descriptor.
pub(crate) fn spawn(config: ServerConfig) -> Result<(ServerThread, Netns, File), String> {
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
    let thread = std::thread::Builder::new()
        .name("testnet-server".to_owned())
        .spawn(move || server_thread(config, &ready_tx, cmd_rx))
        .map_err(|e| format!("cannot spawn the server thread: {e}"))?;
    let mut handle = ServerThread {
        commands: Some(cmd_tx),
        thread: Some(thread),
    };
    match ready_rx.recv() {
        Ok(Ok((ns, tun))) => Ok((handle, ns, tun)),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let joined = handle.thread.take().map(JoinHandle::join);
            Err(match joined {
                Some(Err(_)) => "the server thread panicked during set-up".to_owned(),
                _ => "the server thread ended during set-up".to_owned(),
            })
        }
    }
}

type Ready = Result<(Netns, File), String>;

fn server_thread(
    config: ServerConfig,
    ready: &mpsc::SyncSender<Ready>,
    commands: UnboundedReceiver<Command>,
) {
    let setup = || -> Result<(Netns, File, tokio::runtime::Runtime), String> {
        let ns = Netns::unshare_this_thread().map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
        let tun = tun::open("tns0").map_err(|e| format!("creating TUN device tns0: {e}"))?;
        netns::ip_batch(&config.ip_batch)?;
        for (key, value) in &config.sysctls {
            netns::write_sysctl(key, value)?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        Ok((ns, tun, rt))
    };
    let (ns, tun, rt) = match setup() {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    rt.block_on(async move {
        let dns = match start_dns(&config.dns).await {
            Ok(server) => server,
            Err(e) => {
                let _ = ready.send(Err(format!(
                    "DNS server on {DNS_V4}:53 and [{}]:53: {e}",
                    crate::DNS_V6
                )));
                return;
            }
        };
        if ready.send(Ok((ns, tun))).is_err() {
            return;
        }
        run_commands(commands, &config).await;
        drop(dns);
    });
    // Dropping the runtime cancels every server task and closes every socket they held.
    drop(rt);
}

/// Starts hickory-server on DNS_V4:53 and DNS_V6:53, UDP and TCP.
async fn start_dns(state: &Arc<DnsState>) -> io::Result<hickory_server::Server<Handler>> {
    let mut server = hickory_server::Server::new(Handler {
        state: Arc::clone(state),
    });
    for addr in [
        SocketAddr::from((DNS_V4, 53)),
        SocketAddr::from((crate::DNS_V6, 53)),
    ] {
        server.register_socket(UdpSocket::bind(addr).await?);
        let tcp = TcpListener::bind(addr).await?;
        server.register_listener(tcp, Duration::from_secs(30), 64 * 1024);
    }
    Ok(server)
}

async fn run_commands(mut commands: UnboundedReceiver<Command>, config: &ServerConfig) {
    while let Some(command) = commands.recv().await {
        match command {
            Command::Relay { from, to, reply } => {
                let result = TcpListener::bind(from).await.map(|listener| {
                    tokio::spawn(relay(listener, to));
                });
                let _ = reply.send(result);
            }
            Command::Serve {
                addr,
                kind: ServerKind::Quic { alpn },
                reply,
            } => {
                let _ = reply.send(serve_quic(addr, &alpn, config));
            }
            Command::Serve { addr, kind, reply } => {
                let result = match TcpListener::bind(addr).await {
                    Ok(listener) => {
                        lock(&config.accepted).insert(addr, 0);
                        let counter = Arc::clone(&config.accepted);
                        match kind {
                            ServerKind::Accept => {
                                tokio::spawn(hold_open(listener, addr, counter));
                            }
                            ServerKind::Tls { alpn } => {
                                let tls = config.tls.with_alpn(&alpn);
                                tokio::spawn(serve_tls(listener, addr, counter, tls));
                            }
                            ServerKind::HttpProxy => {
                                crate::proxy::serve_http_connect(listener, Default::default());
                            }
                            ServerKind::Socks5Proxy => {
                                crate::proxy::serve_socks5(listener, Default::default());
                            }
                            // Served on UDP above.
                            ServerKind::Quic { .. } => {}
                            ServerKind::Http {
                                alpn,
                                max_streams,
                                goaway_first,
                            } => {
                                let options = crate::http::HttpOptions {
                                    tls: Some(config.tls.with_alpn(&alpn)),
                                    cleartext_h2: false,
                                    max_streams,
                                    goaway_first,
                                    ..Default::default()
                                };
                                crate::http::serve_counted(listener, options, move || {
                                    *lock(&counter).entry(addr).or_default() += 1;
                                });
                            }
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
        }
    }
}

/// [`ServerKind::Quic`]: a quinn endpoint on `addr` (UDP) serving HTTP/3, counting
/// handshakes. It runs until the server thread's runtime drops.
fn serve_quic(addr: SocketAddr, alpn: &[Vec<u8>], config: &ServerConfig) -> io::Result<()> {
    let server = config
        .tls
        .quic_server(alpn, true)
        .map_err(io::Error::other)?;
    let endpoint = quinn::Endpoint::server(server, addr)?;
    lock(&config.accepted).insert(addr, 0);
    let counter = Arc::clone(&config.accepted);
    crate::http3::serve_counted(endpoint, move || {
        *lock(&counter).entry(addr).or_default() += 1;
    });
    Ok(())
}

/// Accepts one connection, counting it; `None` if accept failed (after a short pause, so a
/// persistent error such as EMFILE cannot spin).
async fn accept_counted(
    listener: &TcpListener,
    addr: SocketAddr,
    counter: &Accepted,
) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((stream, _)) => {
            *lock(counter).entry(addr).or_default() += 1;
            Some(stream)
        }
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
    }
}

/// The NAT64 relay: every connection accepted on `listener` is joined to a new one to `to`.
async fn relay(listener: TcpListener, to: SocketAddr) {
    loop {
        let Ok((mut inside, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut outside) = TcpStream::connect(to).await {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        });
    }
}

/// [`ServerKind::Accept`]: accept and hold every connection, never reading or writing.
async fn hold_open(listener: TcpListener, addr: SocketAddr, counter: Arc<Accepted>) {
    let mut held = Vec::new();
    loop {
        if let Some(stream) = accept_counted(&listener, addr, &counter).await {
            held.push(stream);
        }
    }
}

/// [`ServerKind::Tls`]: handshake, then read until EOF and close.
async fn serve_tls(
    listener: TcpListener,
    addr: SocketAddr,
    counter: Arc<Accepted>,
    config: Arc<rustls::ServerConfig>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let Some(stream) = accept_counted(&listener, addr, &counter).await else {
            continue;
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(stream).await else {
                return;
            };
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n) = tls.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            let _ = tls.shutdown().await;
        });
    }
}
