//! [`HyperConnector`]: the engine as a connector for hyper-util's legacy `Client`.
//!
//! hyper-util's client calls a `tower_service::Service<Uri>` for each new connection and
//! pools what it gets back itself. This connector runs one race per call and hands back the
//! winner. When ALPN chose h2 it says so (`negotiated_h2`), so the client speaks HTTP/2 on
//! it, and it attaches the race's report, which the caller reads from the response's
//! extensions.
//!
//! hyper-util needs its `http2` feature to speak HTTP/2 on such a connection (without it, it
//! panics). This crate turns that feature on through its own dependency on hyper-util, and
//! cargo unifies features, so a client declared with `features = ["client-legacy", "http1"]`
//! still works. To speak HTTP/1.1 only, offer only it: a policy whose `alpn` is
//! `AlpnOffer::Http11Only` ([`fastfallback_net::FallbackPolicy`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bytes::Bytes;
//! use fastfallback_http::{ConnectInfo, HyperConnector};
//! use fastfallback_net::Connector;
//! use http_body_util::Empty;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//!
//! let connector = HyperConnector::new(Connector::builder().build()?);
//! let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
//! let response = client.get("https://example.com/".parse()?).await?;
//! if let Some(info) = response.extensions().get::<ConnectInfo>() {
//!     println!("{}", info.report());
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use fastfallback_proto::Alpn;
use fastfallback_route::Address;
use hyper_util::client::legacy::connect::{Connected, Connection as HyperConnection};
use hyper_util::rt::TokioIo;

use fastfallback_net::link::Story;
use fastfallback_net::{ConnectError, Connector, RaceReport, Stream};

/// A hyper-util connector that races (see the module docs). Cheap to clone; clones share the
/// [`Connector`].
#[derive(Clone, Debug)]
pub struct HyperConnector {
    connector: Connector,
}

impl HyperConnector {
    /// A connector for hyper-util's client over `connector`.
    pub fn new(connector: Connector) -> Self {
        Self { connector }
    }
}

/// The future of [`HyperConnector`]'s `call`.
pub type HyperConnecting = Pin<Box<dyn Future<Output = Result<HyperIo, ConnectError>> + Send>>;

impl tower_service::Service<http::Uri> for HyperConnector {
    type Response = HyperIo;
    type Error = ConnectError;
    type Future = HyperConnecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> HyperConnecting {
        let connector = self.connector.clone();
        Box::pin(async move {
            if connector.policy().quic {
                // hyper-util's client reads one byte stream; a QUIC winner carries many.
                return Err(ConnectError::Unsupported(
                    "HyperConnector speaks HTTP/1.1 and HTTP/2 over TCP: give it a connector \
                     without FallbackPolicy::quic",
                ));
            }
            let address = Address::parse(&uri.to_string()).map_err(ConnectError::InvalidAddress)?;
            let conn = connector.connect_to(address).await?;
            let (stream, story) = conn.into_story();
            let h2 = story.alpn() == Some(&Alpn::H2);
            let info = ConnectInfo {
                story: Arc::new(story),
            };
            Ok(HyperIo {
                io: TokioIo::new(stream),
                h2,
                info,
            })
        })
    }
}

/// What a race found, attached to every response hyper-util's client reads over the
/// connection (`response.extensions().get::<ConnectInfo>()`). The report is formatted the
/// first time it is asked for.
#[derive(Clone)]
pub struct ConnectInfo {
    /// The story holds the peer address, the ALPN and the report once formatted
    /// ([`Story::peer`], [`Story::report`]), so nothing is kept twice.
    story: Arc<Story>,
}

impl ConnectInfo {
    /// The race's report.
    pub fn report(&self) -> &RaceReport {
        self.story.report()
    }

    /// The address the connection went to.
    pub fn peer_addr(&self) -> std::net::SocketAddr {
        self.story.peer()
    }

    /// The protocol ALPN chose, if TLS negotiated one.
    pub fn alpn(&self) -> Option<&Alpn> {
        self.story.alpn()
    }
}

impl fmt::Debug for ConnectInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectInfo")
            .field("peer", &self.peer_addr())
            .field("alpn", &self.alpn())
            .finish_non_exhaustive()
    }
}

/// A raced connection as hyper sees it: hyper's `rt::Read`/`rt::Write` over the stream, and
/// hyper-util's `Connection` metadata.
pub struct HyperIo {
    io: TokioIo<Stream>,
    h2: bool,
    info: ConnectInfo,
}

impl fmt::Debug for HyperIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HyperIo")
            .field("h2", &self.h2)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl HyperIo {
    /// What the race found.
    pub fn info(&self) -> &ConnectInfo {
        &self.info
    }
}

impl HyperConnection for HyperIo {
    fn connected(&self) -> Connected {
        let connected = Connected::new().extra(self.info.clone());
        if self.h2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl hyper::rt::Read for HyperIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for HyperIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
