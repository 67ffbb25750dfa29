//! One connection attempt: a TCP connect with the socket options set first, then TLS.
//!
//! Each step is a plain future. The driver owns them and drops a loser's future to cancel it,
//! which closes its socket at once: no task is spawned, so nothing outlives the race.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fastfallback_plan::TlsStep;
use fastfallback_proto::{Alpn, AttemptError, AttemptErrorKind, Phase};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Socket options set on every attempt's socket before it connects.
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub struct SocketOptions {
    /// `TCP_NODELAY`. On by default: requests and TLS records go out at once.
    pub nodelay: bool,
    /// TCP keepalive idle time, or `None` for the system default (off). Default 60 s, so a
    /// pooled connection whose peer vanished is found out.
    pub keepalive: Option<Duration>,
    /// The local IPv4 address to bind, if any.
    pub local_v4: Option<Ipv4Addr>,
    /// The local IPv6 address to bind, if any.
    pub local_v6: Option<Ipv6Addr>,
    /// The interface to bind to (`SO_BINDTODEVICE`), if any.
    pub interface: Option<String>,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            nodelay: true,
            keepalive: Some(Duration::from_secs(60)),
            local_v4: None,
            local_v6: None,
            interface: None,
        }
    }
}

impl SocketOptions {
    /// Sets [`Self::nodelay`].
    pub fn nodelay(mut self, on: bool) -> Self {
        self.nodelay = on;
        self
    }

    /// Sets [`Self::keepalive`].
    pub fn keepalive(mut self, idle: Option<Duration>) -> Self {
        self.keepalive = idle;
        self
    }

    /// Sets [`Self::local_v4`].
    pub fn local_v4(mut self, ip: Option<Ipv4Addr>) -> Self {
        self.local_v4 = ip;
        self
    }

    /// Sets [`Self::local_v6`].
    pub fn local_v6(mut self, ip: Option<Ipv6Addr>) -> Self {
        self.local_v6 = ip;
        self
    }

    /// Sets [`Self::interface`].
    pub fn interface(mut self, name: Option<String>) -> Self {
        self.interface = name;
        self
    }

    fn socket_for(&self, target: SocketAddr) -> io::Result<TcpSocket> {
        let socket = match target {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        // A new socket has Nagle on and keepalive off: only a change costs a system call.
        if self.nodelay {
            socket.set_nodelay(true)?;
        }
        if let Some(idle) = self.keepalive {
            SockRef::from(&socket).set_tcp_keepalive(&TcpKeepalive::new().with_time(idle))?;
        }
        if let Some(dev) = &self.interface {
            socket.bind_device(Some(dev.as_bytes()))?;
        }
        let local = match target {
            SocketAddr::V4(_) => self.local_v4.map(IpAddr::V4),
            SocketAddr::V6(_) => self.local_v6.map(IpAddr::V6),
        };
        if let Some(ip) = local {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        Ok(socket)
    }
}

/// Opens a TCP connection to `target`. The socket is closed if the future is dropped.
pub(crate) async fn connect_tcp(
    target: SocketAddr,
    options: &SocketOptions,
) -> Result<TcpStream, AttemptError> {
    let socket = options
        .socket_for(target)
        .map_err(|e| attempt_error(&e, Phase::Tcp, "socket setup"))?;
    socket
        .connect(target)
        .await
        .map_err(|e| attempt_error(&e, Phase::Tcp, "connect"))
}

/// Runs the TLS handshake of `step` over `tcp`: SNI and certificate check against the origin's
/// name, and ALPN offering the step's ids.
pub(crate) async fn handshake(
    tcp: TcpStream,
    step: &TlsStep,
    config: &Arc<ClientConfig>,
) -> Result<(Stream, Option<Alpn>), AttemptError> {
    let name = ServerName::try_from(step.server_name.clone()).map_err(|e| {
        AttemptError::new(
            AttemptErrorKind::Tls,
            Phase::Tls,
            format!("invalid TLS server name {:?}: {e}", step.server_name),
        )
    })?;
    let offered: Vec<Vec<u8>> = step.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    let config = if config.alpn_protocols == offered {
        Arc::clone(config)
    } else {
        let mut c = ClientConfig::clone(config);
        c.alpn_protocols = offered;
        Arc::new(c)
    };
    let tls = TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| attempt_error(&e, Phase::Tls, "handshake"))?;
    let alpn = tls.get_ref().1.alpn_protocol().map(Alpn::from_bytes);
    Ok((Stream::Tls(Box::new(tls)), alpn))
}

/// Classifies an I/O error of one step, keeping rustls' own words for TLS failures.
pub(crate) fn attempt_error(e: &io::Error, phase: Phase, during: &str) -> AttemptError {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        let kind = match tls {
            rustls::Error::NoApplicationProtocol => AttemptErrorKind::AlpnMismatch,
            _ => AttemptErrorKind::Tls,
        };
        return AttemptError::new(kind, Phase::Tls, tls.to_string());
    }
    let kind = match e.kind() {
        io::ErrorKind::ConnectionRefused => AttemptErrorKind::Refused,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            AttemptErrorKind::Unreachable
        }
        io::ErrorKind::TimedOut => AttemptErrorKind::TimedOut,
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => AttemptErrorKind::Reset,
        // An ICMPv6 "administratively prohibited" arrives as EACCES (and as EPERM from a local
        // firewall): the path is closed, not the port.
        io::ErrorKind::PermissionDenied => AttemptErrorKind::Unreachable,
        // The peer closed before the handshake finished.
        io::ErrorKind::UnexpectedEof if phase == Phase::Tls => AttemptErrorKind::Reset,
        _ => AttemptErrorKind::Io,
    };
    // The kind already names the failure; the detail adds where and the raw errno.
    let detail = match (kind, e.raw_os_error()) {
        (AttemptErrorKind::Io, _) | (_, None) => format!("{during}: {e}"),
        (_, Some(code)) => format!("{during}: os error {code}"),
    };
    AttemptError::new(kind, phase, detail)
}

/// The connected byte stream of a winner: plain TCP or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    /// A plain TCP connection (`tcp://` and `http://` origins).
    Tcp(TcpStream),
    /// TLS over TCP (`https://` origins).
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Self::Tcp(s) => s,
            Self::Tls(s) => s.get_ref().0,
        }
    }

    /// The TLS session, for TLS streams (peer certificates, protocol version, ALPN).
    pub fn tls(&self) -> Option<&rustls::ClientConnection> {
        match self {
            Self::Tcp(_) => None,
            Self::Tls(s) => Some(s.get_ref().1),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }
}
