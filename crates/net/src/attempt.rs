//! One connection attempt: a transport from a [`Dial`]er (by default a TCP connect with the
//! socket options set first), then TLS.
//!
//! Each step is a plain future. The driver owns them and drops a loser's future to cancel it,
//! which closes its socket at once: no task is spawned, so nothing outlives the race.

use std::future::Future;
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
use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
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

    /// A non-blocking TCP socket for `target`, with these options set.
    fn socket_for(&self, target: SocketAddr) -> io::Result<Socket> {
        let socket = Socket::new(
            Domain::for_address(target),
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        )?;
        // A new socket has Nagle on and keepalive off: only a change costs a system call.
        if self.nodelay {
            socket.set_tcp_nodelay(true)?;
        }
        if let Some(idle) = self.keepalive {
            socket.set_tcp_keepalive(&TcpKeepalive::new().with_time(idle))?;
        }
        if let Some(dev) = &self.interface {
            socket.bind_device(Some(dev.as_bytes()))?;
        }
        let local = match target {
            SocketAddr::V4(_) => self.local_v4.map(IpAddr::V4),
            SocketAddr::V6(_) => self.local_v6.map(IpAddr::V6),
        };
        if let Some(ip) = local {
            socket.bind(&SocketAddr::new(ip, 0).into())?;
        }
        Ok(socket)
    }
}

/// A TCP connect in progress: the socket, registered with tokio, waiting to become writable
/// (the handshake is done, or has failed). A plain struct, so an attempt needs no boxed
/// future for it. Dropping it closes the socket.
pub(crate) struct TcpConnect(Option<Result<TcpStream, AttemptError>>);

impl TcpConnect {
    /// Whether the connect has handed its stream over (or its failure): it holds nothing.
    pub(crate) fn is_spent(&self) -> bool {
        self.0.is_none()
    }

    /// Opens the socket and sends the SYN. Must run inside a tokio runtime. A failure to
    /// start is kept and reported at the first poll, like any other failure.
    pub(crate) fn start(target: SocketAddr, options: &SocketOptions) -> Self {
        Self(Some(Self::open(target, options)))
    }

    fn open(target: SocketAddr, options: &SocketOptions) -> Result<TcpStream, AttemptError> {
        let socket = options
            .socket_for(target)
            .map_err(|e| attempt_error(&e, Phase::Tcp, "socket setup"))?;
        match socket.connect(&target.into()) {
            Err(e) if connect_in_progress(&e) => {}
            Err(e) => return Err(attempt_error(&e, Phase::Tcp, "connect")),
            Ok(()) => {}
        }
        TcpStream::from_std(socket.into()).map_err(|e| attempt_error(&e, Phase::Tcp, "connect"))
    }
}

/// Whether a non-blocking `connect` said it is under way (`EINPROGRESS`; Windows says
/// `WSAEWOULDBLOCK`).
fn connect_in_progress(e: &io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::EINPROGRESS);
    #[cfg(not(unix))]
    return e.kind() == io::ErrorKind::WouldBlock;
}

impl Future for TcpConnect {
    type Output = Result<Transport, AttemptError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(Ok(stream)) = &self.0
            && let Err(e) = std::task::ready!(stream.poll_write_ready(cx))
        {
            self.0 = None;
            return Poll::Ready(Err(attempt_error(&e, Phase::Tcp, "connect")));
        }
        Poll::Ready(match self.0.take() {
            // Writable: connected, unless the socket holds an error (refused, unreachable).
            Some(Ok(stream)) if !may_hold_error(&stream) => Ok(Transport::Tcp(stream)),
            Some(Ok(stream)) => match stream.take_error() {
                Ok(None) => Ok(Transport::Tcp(stream)),
                Ok(Some(e)) | Err(e) => Err(attempt_error(&e, Phase::Tcp, "connect")),
            },
            Some(Err(e)) => Err(e),
            None => Err(attempt_error(
                &io::Error::other("polled after it finished"),
                Phase::Tcp,
                "connect",
            )),
        })
    }
}

/// Whether a socket whose connect reported writable may hold an error, so that `SO_ERROR`
/// must be read to tell.
///
/// On Linux, `tcp_poll` sets `EPOLLERR` whenever the socket holds an error, and reports a
/// connecting socket writable only once it has left `SYN_SENT`. tokio keeps the bits of the
/// events it saw, so a socket with no error bit among them has connected, and the system call
/// a connect would spend on `SO_ERROR` is saved (tokio's own connect always makes it).
/// Elsewhere the error is always read.
fn may_hold_error(stream: &TcpStream) -> bool {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        // `try_io` runs the closure only if a readiness in the interest was seen.
        stream.try_io(tokio::io::Interest::ERROR, || Ok(())).is_ok()
    } else {
        true
    }
}

/// The future a [`Dial`] implementation returns: one connected transport, or why not.
pub type Dialing = Pin<Box<dyn Future<Output = io::Result<Transport>> + Send + 'static>>;

/// Opens the transport of one attempt: the seam where a user supplies their own sockets (a
/// socket with marks or a VPN binding, a tunnel, an in-memory pipe in tests). The default is a
/// TCP connect with [`SocketOptions`] set first.
///
/// Dropping the returned future must close whatever it opened: that is how the race cancels a
/// loser. Errors are classified by their [`io::ErrorKind`] (refused, unreachable, timed out…).
///
/// ```
/// use fastfallback_net::{Dial, Dialing, SocketOptions, Transport};
/// use std::net::SocketAddr;
///
/// /// Every attempt gets one end of an in-memory pipe.
/// struct Pipes;
///
/// impl Dial for Pipes {
///     fn dial(&self, _target: SocketAddr, _options: &SocketOptions) -> Dialing {
///         let (ours, _theirs) = tokio::io::duplex(4096);
///         Box::pin(async move { Ok(Transport::other(ours)) })
///     }
/// }
/// ```
pub trait Dial: Send + Sync + 'static {
    /// Starts connecting to `target`.
    fn dial(&self, target: SocketAddr, options: &SocketOptions) -> Dialing;
}

/// A byte stream a [`Dial`] can hand back instead of a `TcpStream`.
///
/// `Sync` as well as `Send` (as tokio's and rustls's streams are), so that a [`Stream`](crate::Stream) and a
/// [`Connection`](crate::Connection) are `Sync`: they can sit behind an `Arc` or in a
/// struct shared between tasks. A stream that is not `Sync` can be wrapped in a
/// `std::sync::Mutex` or a `sync_wrapper`-style cell.
pub trait Io: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Io for T {}

/// What an attempt connected: a TCP stream, or a stream from a custom [`Dial`].
pub enum Transport {
    /// A TCP connection (the default dialer).
    Tcp(TcpStream),
    /// Anything else a dialer supplied.
    Other(Box<dyn Io>),
}

impl Transport {
    /// Wraps any stream.
    pub fn other(io: impl Io) -> Self {
        Self::Other(Box::new(io))
    }

    /// The TCP stream, if this is one.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Self::Tcp(s) => Some(s),
            Self::Other(_) => None,
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Self::Other(_) => f.write_str("Other(..)"),
        }
    }
}

/// Runs the TLS handshake of `step` over `transport`: SNI and certificate check against the
/// origin's name, and ALPN offering the step's ids.
pub(crate) async fn handshake(
    transport: Transport,
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
        .connect(name, transport)
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
        let detail =
            crate::ech::describe_rejection(tls).map_or_else(|| tls.to_string(), str::to_owned);
        return AttemptError::new(kind, Phase::Tls, detail)
            .with_io_kind(e.kind())
            .with_source(tls.clone());
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
    // The kind already names the failure; the detail adds where and the errno, by its name.
    let detail = match (kind, e.raw_os_error()) {
        (AttemptErrorKind::Io, _) | (_, None) => format!("{during}: {e}"),
        (_, Some(code)) => format!("{during}: {}", errno_name(code)),
    };
    AttemptError::new(kind, phase, detail)
        .with_io_kind(e.kind())
        .with_source(match e.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(e.kind(), e.to_string()),
        })
}

/// The symbolic name of an errno the kinds above stand for (`ECONNREFUSED`), as `connect(2)`
/// documents them; another one as `errno N`.
fn errno_name(code: i32) -> std::borrow::Cow<'static, str> {
    let name = match code {
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNRESET => "ECONNRESET",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EPIPE => "EPIPE",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        _ => return format!("errno {code}").into(),
    };
    name.into()
}

macro_rules! delegate_io {
    ($ty:ty { $($variant:ident($s:ident) => $pin:expr),+ $(,)? }) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $(Self::$variant($s) => $pin.poll_read(cx, buf),)+
                }
            }
        }

        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $(Self::$variant($s) => $pin.poll_write(cx, buf),)+
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $(Self::$variant($s) => $pin.poll_flush(cx),)+
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $(Self::$variant($s) => $pin.poll_shutdown(cx),)+
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $(Self::$variant($s) => $pin.poll_write_vectored(cx, bufs),)+
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $(Self::$variant($s) => $s.is_write_vectored(),)+
                }
            }
        }
    };
}

delegate_io!(Transport {
    Tcp(s) => Pin::new(s),
    Other(s) => Pin::new(s.as_mut()),
});

/// What a winner connected: the transport, TLS over it, or (with the `quic` feature) a QUIC
/// connection.
#[derive(Debug)]
pub enum Stream {
    /// No TLS (`tcp://` and `http://` origins).
    Plain(Transport),
    /// TLS over the transport (`https://` origins).
    Tls(Box<TlsStream<Transport>>),
    /// A QUIC connection (HEv3 §6): many streams, not one, so reading or writing it as a
    /// byte stream fails with [`io::ErrorKind::Unsupported`]; see [`Self::quic`].
    #[cfg(feature = "quic")]
    Quic(Box<crate::quic::QuicConnection>),
}

impl Stream {
    /// The TCP connection underneath, unless a custom [`Dial`] supplied the transport (or the
    /// winner is a QUIC connection).
    pub fn tcp(&self) -> Option<&TcpStream> {
        self.transport().and_then(Transport::tcp)
    }

    /// The transport underneath: none under a QUIC connection.
    pub fn transport(&self) -> Option<&Transport> {
        match self {
            Self::Plain(t) => Some(t),
            Self::Tls(s) => Some(s.get_ref().0),
            #[cfg(feature = "quic")]
            Self::Quic(_) => None,
        }
    }

    /// The TLS session, for TLS over TCP (peer certificates, protocol version, ALPN).
    pub fn tls(&self) -> Option<&rustls::ClientConnection> {
        match self {
            Self::Tls(s) => Some(s.get_ref().1),
            _ => None,
        }
    }

    /// The QUIC connection, when a QUIC attempt won.
    #[cfg(feature = "quic")]
    pub fn quic(&self) -> Option<&crate::quic::QuicConnection> {
        match self {
            Self::Quic(q) => Some(q),
            _ => None,
        }
    }
}

#[cfg(not(feature = "quic"))]
delegate_io!(Stream {
    Plain(s) => Pin::new(s),
    Tls(s) => Pin::new(s.as_mut()),
});

#[cfg(feature = "quic")]
delegate_io!(Stream {
    Plain(s) => Pin::new(s),
    Tls(s) => Pin::new(s.as_mut()),
    Quic(s) => Pin::new(s.as_mut()),
});
