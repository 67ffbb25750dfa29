//! QUIC attempts (the `quic` feature): one step, the QUIC handshake with TLS 1.3 inside it
//! (RFC 9001), run by quinn.
//!
//! Each attempt has its own UDP socket (a quinn client endpoint bound to the unspecified
//! address of the target's family), as each TCP attempt has its own socket. The step is one
//! future. quinn runs an endpoint and a connection on tasks of their own, and left alone a
//! dropped connection lingers in QUIC's closing period (RFC 9000 §10.2: three probe
//! timeouts, about 3 s before the first RTT sample), holding the socket. So each attempt's
//! endpoint gets a runtime of its own ([`AttemptRuntime`]) that keeps a handle on every task
//! quinn spawns: when the step is dropped (the race cancelled the attempt) or fails, those
//! tasks are aborted, and the socket closes when the runtime next runs them, not seconds
//! later. A loser's server learns nothing (as of a TCP attempt dropped mid-handshake, it
//! times out). A winner's tasks run on; its connection closes as QUIC says.
//!
//! A QUIC winner is a [`QuicConnection`] ([`Stream::Quic`]): a connection that carries many
//! streams, not one byte stream. Success is the completed handshake (HEv3 §6.1, R-32); the
//! ALPN it agreed on is `h3`, the only id QUIC attempts offer (HEv3 §6.2, R-35).

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use fastfallback_proto::{Alpn, AttemptError, AttemptErrorKind, AttemptId, Phase, TransportKind};
use quinn::crypto::rustls::{HandshakeData, QuicClientConfig};
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc::UnboundedSender;

use crate::Stream;
use crate::link::EarlyQuic;

/// The QUIC client configuration for a connector whose TLS configuration is `tls`: the same
/// verifier, roots and session cache (so resumption tickets are shared with TCP), offering
/// ALPN `h3` alone. Fails when `tls` cannot carry QUIC (RFC 9001 §4.2: TLS 1.3 only, with
/// the cipher suite QUIC's Initial packets use).
pub(crate) fn client_config(tls: &ClientConfig) -> Result<quinn::ClientConfig, rustls::Error> {
    let mut tls = tls.clone();
    // Tickets may carry early data; 0-RTT is sent only when a race asks for it
    // (`RaceLink::early`), and a connection nobody writes to early sends none.
    tls.enable_early_data = true;
    tls.alpn_protocols = TransportKind::QUIC_ALPN
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
    let tls = Arc::new(tls);
    // rustls refuses a QUIC session on a configuration without TLS 1.3 (RFC 9001 §4.2), and
    // has no public way to ask beforehand: one session made here, where the answer is a
    // build error, rather than a failure of every QUIC attempt.
    let name = rustls::pki_types::ServerName::try_from("fastfallback.invalid")
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    rustls::quic::ClientConnection::new(Arc::clone(&tls), rustls::quic::Version::V1, name, vec![])
        .map_err(|e| rustls::Error::General(format!("QUIC needs TLS 1.3 (RFC 9001 §4.2): {e}")))?;
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| {
        rustls::Error::General(format!(
            "QUIC needs TLS 1.3 with TLS13_AES_128_GCM_SHA256 in the configuration: {e}"
        ))
    })?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

/// One QUIC attempt to `target`, naming `server_name` in its ClientHello: a new UDP socket,
/// the handshake, and the connection with the ALPN id the server chose.
///
/// With `early`, an attempt that resumes a session whose ticket allows early data hands its
/// connection there at once, in 0-RTT ([`EarlyQuic`]), and still finishes only when its
/// handshake does: 0-RTT proves nothing about the path.
pub(crate) async fn handshake(
    config: quinn::ClientConfig,
    target: SocketAddr,
    server_name: String,
    early: Option<(AttemptId, UnboundedSender<EarlyQuic>)>,
) -> Result<(Stream, Option<Alpn>), AttemptError> {
    let bind = match target {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let runtime = Arc::new(AttemptRuntime::default());
    // Declared before the endpoint: on an early return it aborts the tasks after the
    // endpoint and connection handles are gone.
    let mut tasks = AbortOnDrop(Some(Arc::clone(&runtime)));
    let endpoint = client_endpoint(bind, runtime)
        .map_err(|e| crate::attempt::attempt_error(&e, Phase::Tcp, "udp socket"))?;
    let connecting = endpoint
        .connect_with(config, target, &server_name)
        .map_err(|e| {
            AttemptError::new(AttemptErrorKind::Io, Phase::Tcp, format!("quic: {e}")).with_source(e)
        })?;
    let (connection, early_data) = match early {
        None => (connecting.await.map_err(|e| connection_error(&e))?, None),
        Some((attempt, sink)) => match connecting.into_0rtt() {
            // No ticket, or one without early data: a full handshake.
            Err(connecting) => (connecting.await.map_err(|e| connection_error(&e))?, None),
            Ok((connection, accepted)) => {
                let _ = sink.send(EarlyQuic {
                    attempt,
                    connection: connection.clone(),
                });
                // Resolves when the handshake completes: whether the server took the early
                // data. `false` also when the connection was lost first, which its close
                // reason tells apart.
                let accepted = accepted.await;
                if let Some(e) = connection.close_reason() {
                    return Err(connection_error(&e));
                }
                (connection, Some(accepted))
            }
        },
    };
    let alpn = connection
        .handshake_data()
        .and_then(|d| d.downcast::<HandshakeData>().ok())
        .and_then(|d| d.protocol)
        .map(|id| Alpn::from_bytes(&id));
    let quic = QuicConnection {
        connection,
        endpoint,
        early_data,
    };
    // The winner's tasks run on.
    tasks.0 = None;
    Ok((Stream::Quic(Box::new(quic)), alpn))
}

/// A client endpoint on a new UDP socket bound to `bind`, on `runtime`.
fn client_endpoint(bind: SocketAddr, runtime: Arc<AttemptRuntime>) -> io::Result<quinn::Endpoint> {
    let socket = std::net::UdpSocket::bind(bind)?;
    // The same socket, to change an option after quinn set its own.
    let handle = socket.try_clone()?;
    let socket = quinn::Runtime::wrap_udp_socket(&*runtime, socket)?;
    let socket: Arc<dyn quinn::AsyncUdpSocket> = match gro_off(&handle) {
        Ok(()) => Arc::new(OneDatagramPerRead(socket)),
        Err(_) => socket,
    };
    drop(handle);
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        socket,
        runtime,
    )
}

/// Turns UDP generic receive offload off on `socket` (quinn turns it on where it can).
///
/// An endpoint sizes its receive buffer for the largest batch a read may return:
/// 32 slots of 64 coalesced datagrams each with GRO, about 3 MB, allocated zeroed when the
/// endpoint is made. One per attempt put that allocation (and, when the allocator had to
/// clear reused memory, about 2 ms) on every QUIC attempt's way to its first packet, and
/// kept 3 MB per connection. Without GRO a slot holds one datagram: 47 KB, and reads are
/// still batched (`recvmmsg`, 32 datagrams). Bulk downloads pay more per datagram in the
/// kernel; a client's connections are many and mostly small.
#[cfg(target_os = "linux")]
fn gro_off(socket: &std::net::UdpSocket) -> io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt::UdpGroSegment};
    setsockopt(socket, UdpGroSegment, &false).map_err(io::Error::from)
}

/// Elsewhere quinn uses no receive offload.
#[cfg(not(target_os = "linux"))]
fn gro_off(_socket: &std::net::UdpSocket) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// quinn's socket, saying that a read returns one datagram per slot (GRO is off): the
/// endpoint's receive buffer is sized by it.
#[derive(Debug)]
struct OneDatagramPerRead(Arc<dyn quinn::AsyncUdpSocket>);

impl quinn::AsyncUdpSocket for OneDatagramPerRead {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Arc::clone(&self.0).create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> io::Result<()> {
        self.0.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.0.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

/// quinn's tokio runtime for one attempt's endpoint, with a handle on every task quinn
/// spawns for it (the endpoint's driver, the connection's).
#[derive(Debug, Default)]
struct AttemptRuntime {
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl quinn::Runtime for AttemptRuntime {
    fn new_timer(&self, at: std::time::Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
        quinn::TokioRuntime.new_timer(at)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        let task = tokio::spawn(future);
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        // Finished tasks need no handle (a winner's connection may spawn more over its life).
        tasks.retain(|t| !t.is_finished());
        tasks.push(task.abort_handle());
    }

    fn wrap_udp_socket(
        &self,
        socket: std::net::UdpSocket,
    ) -> io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        quinn::TokioRuntime.wrap_udp_socket(socket)
    }

    fn now(&self) -> std::time::Instant {
        quinn::TokioRuntime.now()
    }
}

/// Aborts an attempt's tasks when dropped, unless disarmed (`None`): the attempt won.
struct AbortOnDrop(Option<Arc<AttemptRuntime>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(runtime) = &self.0 {
            let tasks = runtime.tasks.lock().unwrap_or_else(|p| p.into_inner());
            for t in tasks.iter() {
                t.abort();
            }
        }
    }
}

/// Classifies a failed QUIC handshake. A TLS alert carried in a CRYPTO_ERROR (RFC 9001
/// §4.8: codes 0x0100–0x01ff) is a TLS failure; the rest failed the transport.
fn connection_error(e: &quinn::ConnectionError) -> AttemptError {
    use quinn::ConnectionError as E;
    let (kind, phase) = match e {
        E::TransportError(t) if (0x100..0x200).contains(&u64::from(t.code)) => {
            (AttemptErrorKind::Tls, Phase::Tls)
        }
        E::TimedOut => (AttemptErrorKind::TimedOut, Phase::Tcp),
        E::Reset | E::ConnectionClosed(_) | E::ApplicationClosed(_) => {
            (AttemptErrorKind::Reset, Phase::Tcp)
        }
        E::VersionMismatch => (AttemptErrorKind::Refused, Phase::Tcp),
        _ => (AttemptErrorKind::Io, Phase::Tcp),
    };
    AttemptError::new(kind, phase, format!("quic handshake: {e}")).with_source(e.clone())
}

/// The winner of a QUIC attempt: a connection that carries many streams.
///
/// It is not one byte stream: reading or writing it as one ([`Stream`]'s `AsyncRead` and
/// `AsyncWrite`) fails with [`io::ErrorKind::Unsupported`]. Open streams on
/// [`Self::connection`] (or hand it to an HTTP/3 client).
#[derive(Debug)]
pub struct QuicConnection {
    connection: quinn::Connection,
    /// Its endpoint (the UDP socket): dropped with the connection.
    endpoint: quinn::Endpoint,
    /// Whether the server took the 0-RTT data, if any was offered.
    early_data: Option<bool>,
}

impl QuicConnection {
    /// The QUIC connection.
    pub fn connection(&self) -> &quinn::Connection {
        &self.connection
    }

    /// The endpoint (UDP socket) the connection runs on.
    pub fn endpoint(&self) -> &quinn::Endpoint {
        &self.endpoint
    }

    /// Whether the handshake carried 0-RTT (RFC 9001 §4.6): `None` when the race asked for
    /// none or the attempt could not offer it (no ticket allowing early data), `Some(true)`
    /// when the server accepted it (so the session was resumed), `Some(false)` when it
    /// rejected it (what was sent early was lost and must be sent again).
    pub fn early_data(&self) -> Option<bool> {
        self.early_data
    }

    /// Takes the connection and its endpoint apart.
    pub fn into_parts(self) -> (quinn::Connection, quinn::Endpoint) {
        (self.connection, self.endpoint)
    }

    fn not_a_byte_stream() -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "a QUIC connection carries many streams, not one byte stream: \
             open streams on Stream::quic()",
        )
    }
}

impl AsyncRead for QuicConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(Self::not_a_byte_stream()))
    }
}

impl AsyncWrite for QuicConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(Self::not_a_byte_stream()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(Self::not_a_byte_stream()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing is always possible: the connection closes with code 0 (no error).
        self.connection.close(0u32.into(), b"");
        Poll::Ready(Ok(()))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use nix::sys::socket::{getsockopt, sockopt::UdpGroSegment};
    use quinn::AsyncUdpSocket;

    #[tokio::test]
    async fn an_attempt_socket_has_gro_off_after_quinn_turned_it_on() {
        let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let handle = socket.try_clone().unwrap();
        let wrapped = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket).unwrap();
        // quinn turns GRO on where the kernel has it, and sizes reads for it.
        if getsockopt(&handle, UdpGroSegment).unwrap() {
            assert!(wrapped.max_receive_segments() > 1);
        }
        gro_off(&handle).unwrap();
        assert!(!getsockopt(&handle, UdpGroSegment).unwrap());
        assert_eq!(OneDatagramPerRead(wrapped).max_receive_segments(), 1);
    }
}
