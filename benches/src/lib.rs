//! Helpers the benchmarks in `benches/` share: statistics, the test network's DNS server as
//! a hickory resolver, and the glue a hyper-util user writes (a `lookup_ip` resolver and a
//! TLS connector with ALPN), so every peer is set up the way its users set it up.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use fastfallback_testnet::DNS_V4;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub mod chart;

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The test network's DNS server.
pub fn dns_server() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(DNS_V4), 53)
}

/// A hickory resolver asking the test network's DNS server.
pub fn hickory() -> TokioResolver {
    let mut ns = NameServerConfig::udp_and_tcp(dns_server().ip());
    for c in &mut ns.connections {
        c.port = dns_server().port();
    }
    TokioResolver::builder_with_config(
        ResolverConfig::from_name_servers(vec![ns]),
        TokioRuntimeProvider::default(),
    )
    .with_options(ResolverOpts::default())
    .build()
    .expect("resolver")
}

/// What a hyper-util user with hickory plugs in: `lookup_ip`, both families in one answer.
#[derive(Clone)]
pub struct LookupIp(pub TokioResolver);

impl tower_service::Service<Name> for LookupIp {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let r = self.0.clone();
        Box::pin(async move {
            let ips = r.lookup_ip(name.as_str()).await.map_err(io::Error::other)?;
            let addrs: Vec<SocketAddr> = ips.iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            Ok(addrs.into_iter())
        })
    }
}

/// hyper-util's `HttpConnector` with TLS on top (tokio-rustls, ALPN h2 and http/1.1): the
/// glue a hyper-util user writes without hyper-rustls. It reports `negotiated_h2` when ALPN
/// chose h2, so hyper-util's client speaks HTTP/2 on those connections.
#[derive(Clone)]
pub struct HyperTls<R: Clone> {
    http: HttpConnector<R>,
    tls: tokio_rustls::TlsConnector,
}

impl<R: Clone> HyperTls<R> {
    /// Wraps `http` (its `enforce_http` is turned off so `https://` URIs pass).
    pub fn new(mut http: HttpConnector<R>, roots: rustls::RootCertStore) -> Self {
        http.enforce_http(false);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self {
            http,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }
}

/// A TLS connection handed to hyper-util.
pub struct HyperTlsIo(TokioIo<TlsStream<TcpStream>>);

impl Connection for HyperTlsIo {
    fn connected(&self) -> Connected {
        let h2 = self.0.inner().get_ref().1.alpn_protocol() == Some(b"h2");
        let c = Connected::new();
        if h2 { c.negotiated_h2() } else { c }
    }
}

impl hyper::rt::Read for HyperTlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for HyperTlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<R> tower_service::Service<http::Uri> for HyperTls<R>
where
    R: tower_service::Service<Name> + Clone + Send + Sync + 'static,
    R::Response: Iterator<Item = SocketAddr>,
    R::Error: Into<BoxError>,
    R::Future: Send,
{
    type Response = HyperTlsIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<HyperTlsIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("URI without a host")?.to_owned();
            let tcp = http.call(uri).await?.into_inner();
            let name = rustls::pki_types::ServerName::try_from(host)?;
            let stream = tls.connect(name, tcp).await?;
            Ok(HyperTlsIo(TokioIo::new(stream)))
        })
    }
}
