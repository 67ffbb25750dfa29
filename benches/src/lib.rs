//! Helpers the benchmarks in `benches/` share: statistics, the test network's DNS server as
//! a hickory resolver, and the glue a hyper-util user writes (a `lookup_ip` resolver and a
//! TLS connector with ALPN), so every peer is set up the way its users set it up, and the warm
//! request path's contenders ([`warm`]).

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
pub mod warm;

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

/// The median, over the turns, of `a`'s value divided by `b`'s value in the same turn.
///
/// When contenders take turns, the two values of one turn were measured moments apart. This
/// VM's speed drifts by up to 2× from one second to the next (docs/benchmarks.md); a ratio of
/// two overall medians keeps the part of that drift the two medians happen to sample
/// differently, and a ratio within each turn cancels it.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> f64 {
    median(a.iter().zip(b).map(|(x, y)| x / y).collect())
}

/// The median of each `block` values of `v`, in order.
pub fn block_medians(v: &[f64], block: usize) -> Vec<f64> {
    v.chunks(block.max(1)).map(|c| median(c.to_vec())).collect()
}

/// The total of `event` (`Ir`, `I1mr`, …) in callgrind's output `text`.
///
/// # Panics
///
/// If the text names no such event or has no total line (not callgrind's output).
pub fn callgrind_total(text: &str, event: &str) -> f64 {
    let line = |prefix: &str| text.lines().find_map(|l| l.strip_prefix(prefix));
    let events = line("events: ").expect("callgrind names its events");
    let i = events
        .split_whitespace()
        .position(|e| e == event)
        .expect("the event is counted");
    line("summary: ")
        .or_else(|| line("totals: "))
        .expect("a total")
        .split_whitespace()
        .nth(i)
        .and_then(|v| v.parse().ok())
        .expect("a count")
}

/// Row `k` of a Williams square of order `n` (`n` even): the order in which `n` contenders
/// take turn `k`. Over any `n` consecutive turns each contender comes first once and right
/// after each other contender exactly once, so what one contender's round leaves behind
/// (sockets still to be accepted, TIME_WAIT entries, evicted caches) weighs on all alike. A
/// rotation of one order keeps every contender's neighbours; a random shuffle balances them
/// only on average.
pub fn williams_row(n: usize, k: usize) -> impl Iterator<Item = usize> {
    // The first row runs 0, 1, n-1, 2, n-2, …; row k adds k to each (mod n).
    (0..n).map(move |j| {
        let first = if j % 2 == 1 {
            j.div_ceil(2)
        } else {
            (n - j / 2) % n
        };
        (first + k) % n
    })
}

/// The test network's DNS server.
pub fn dns_server() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(DNS_V4), 53)
}

/// A hickory resolver asking the test network's DNS server.
pub fn hickory() -> TokioResolver {
    hickory_at(dns_server())
}

/// A hickory resolver asking `server` (UDP, TCP fallback), with hickory's default options:
/// set up as `fastfallback_net::HickoryResolver::with_name_server` sets up its own.
pub fn hickory_at(server: SocketAddr) -> TokioResolver {
    let mut ns = NameServerConfig::udp_and_tcp(server.ip());
    for c in &mut ns.connections {
        c.port = server.port();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_williams_row_is_an_order_of_all_contenders() {
        for n in [2, 4, 6, 8] {
            for k in 0..n {
                let mut row: Vec<usize> = williams_row(n, k).collect();
                row.sort_unstable();
                assert_eq!(row, (0..n).collect::<Vec<_>>(), "n={n} k={k}");
            }
        }
    }

    #[test]
    fn over_n_turns_every_contender_follows_every_other_exactly_once_and_leads_once() {
        for n in [2, 4, 6, 8] {
            let mut follows = vec![vec![0; n]; n];
            let mut leads = vec![0; n];
            for k in 0..n {
                let row: Vec<usize> = williams_row(n, k).collect();
                leads[row[0]] += 1;
                for pair in row.windows(2) {
                    follows[pair[0]][pair[1]] += 1;
                }
            }
            assert!(leads.iter().all(|&c| c == 1), "n={n}: {leads:?}");
            for (a, row) in follows.iter().enumerate() {
                for (b, &c) in row.iter().enumerate() {
                    assert_eq!(c, usize::from(a != b), "n={n}: {b} after {a}");
                }
            }
        }
    }

    #[test]
    fn a_drift_common_to_both_contenders_cancels_in_the_paired_ratio() {
        // b is 10% slower than a in every turn; the machine slows 3× over the run.
        let a: Vec<f64> = (0..9)
            .map(|k| 100.0 * (1.0 + f64::from(k) * 0.25))
            .collect();
        let b: Vec<f64> = a.iter().map(|x| x / 1.1).collect();
        assert!((paired_ratio(&a, &b) - 1.1).abs() < 1e-12);
        // Unpaired, the medians of half the turns each say otherwise.
        assert!(median(a[..4].to_vec()) / median(b[5..].to_vec()) < 1.0);
    }

    #[test]
    fn the_ratio_is_taken_within_each_turn_not_between_two_medians() {
        // In two turns of three a is twice b; the two overall medians (400 and 450) say
        // that a is the smaller.
        let a = [100.0, 400.0, 900.0];
        let b = [50.0, 800.0, 450.0];
        assert_eq!(paired_ratio(&a, &b), 2.0);
        assert!(median(a.to_vec()) / median(b.to_vec()) < 1.0);
    }

    #[test]
    fn block_medians_take_each_stretch_in_order() {
        let v = [5.0, 1.0, 3.0, 10.0, 30.0, 20.0, 7.0];
        assert_eq!(block_medians(&v, 3), vec![3.0, 20.0, 7.0]);
    }
}
