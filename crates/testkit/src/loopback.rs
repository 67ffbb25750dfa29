//! Servers on 127.0.0.1 for tests that need no test network: an HTTPS origin speaking h2 and
//! http/1.1 ([`TlsOrigin`]), an HTTP `CONNECT` proxy ([`http_proxy`]), an HTTPS server with a
//! configuration of the test's ([`https_server`]), listeners and accept loops ([`bind`],
//! [`serve_each`], [`accept_and_hold`], [`accept_one`]), and a port where nothing listens
//! ([`closed_port`]), and clients that trust a test CA ([`roots`], [`trusting_connector`]).

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fastfallback_net::{Connector, FallbackPolicy, Resolve, StaticResolver};
use fastfallback_route::{Host, Proxy};
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, HttpStats, serve};
use fastfallback_testnet::proxy::{ProxyOptions, ProxyStats, serve_http_connect};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The loopback address every server here listens on.
pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// An HTTPS origin on 127.0.0.1 for `localhost` and `origin.test`, speaking h2 and http/1.1.
pub struct TlsOrigin {
    /// Its certificate and CA.
    pub tls: TlsMaterial,
    /// The port it listens on.
    pub port: u16,
    /// What it served.
    pub stats: Arc<HttpStats>,
}

impl TlsOrigin {
    /// Starts the origin (its server runs on the current runtime).
    pub async fn start() -> Self {
        let names = ["localhost".to_owned(), "origin.test".to_owned()];
        let tls = TlsMaterial::new(&names, &[]).unwrap();
        let (port, stats) =
            https_server(tls.with_alpn(&[b"h2".to_vec(), b"http/1.1".to_vec()])).await;
        Self { tls, port, stats }
    }

    /// Root certificates that trust the origin's CA only.
    pub fn roots(&self) -> rustls::RootCertStore {
        roots(&self.tls)
    }

    /// A connector that trusts the origin, resolves `origin.test` to 127.0.0.1, and connects
    /// through `proxies` in turn.
    pub fn connector(&self, proxies: &[Proxy]) -> Connector {
        let mut b = Connector::builder()
            .root_certificates(self.roots())
            .resolver(StaticResolver::new().with("origin.test", [LOCALHOST]));
        for p in proxies {
            b = b.proxy(p.clone());
        }
        b.build().unwrap()
    }
}

/// Root certificates that trust `tls`'s CA only.
pub fn roots(tls: &TlsMaterial) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.ca_der()).unwrap();
    roots
}

/// A connector that trusts `tls`'s CA only, asks `resolver`, and races QUIC beside TCP when
/// `quic` (the QUIC and Alt-Svc tests' client).
pub fn trusting_connector(tls: &TlsMaterial, resolver: impl Resolve, quic: bool) -> Connector {
    Connector::builder()
        .root_certificates(roots(tls))
        .resolver(resolver)
        .policy(FallbackPolicy::builder().quic(quic).build().unwrap())
        .build()
        .unwrap()
}

/// An HTTP `CONNECT` proxy on 127.0.0.1 with `options`, and what it counts.
pub async fn http_proxy(options: ProxyOptions) -> (Proxy, Arc<ProxyStats>) {
    let (listener, port) = bind().await;
    (
        Proxy::http(Host::Ip(LOCALHOST), port),
        serve_http_connect(listener, options),
    )
}

/// Listeners on one port that is free on every address of `on`, and also free (but left
/// closed, so the kernel refuses connects) on every address of `closed`: the port and the
/// listeners, in the order of `on`. Tries 50 ports, then panics.
pub async fn listen_on_one_port(on: &[IpAddr], closed: &[IpAddr]) -> (u16, Vec<TcpListener>) {
    'search: for _ in 0..50 {
        let port = closed_port();
        let mut listeners = Vec::new();
        for ip in on {
            match TcpListener::bind(SocketAddr::new(*ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'search,
            }
        }
        // A closed address must not be taken by someone else either.
        let closed_free = closed
            .iter()
            .all(|ip| std::net::TcpListener::bind(SocketAddr::new(*ip, port)).is_ok());
        if closed_free {
            return (port, listeners);
        }
    }
    panic!("no port free on every loopback address asked for");
}

/// A listener on 127.0.0.1 on a port the kernel picks, and that port.
pub async fn bind() -> (TcpListener, u16) {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A port on 127.0.0.1 where nothing listens, so the kernel refuses a connect to it.
///
/// It is the port the kernel just gave a listener, which is then closed. Between that close
/// and the test's connect another socket could take the port (a small race: the window is
/// the test's own few steps, and a port just freed is not the next one the kernel picks);
/// the test would then see that socket instead of a refusal.
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind((LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An HTTPS server (crates/testnet's HTTP server) on 127.0.0.1 with the TLS configuration
/// `tls`: its port and what it served.
pub async fn https_server(tls: Arc<rustls::ServerConfig>) -> (u16, Arc<HttpStats>) {
    let (listener, port) = bind().await;
    let options = HttpOptions {
        tls: Some(tls),
        ..HttpOptions::default()
    };
    (port, serve(listener, options))
}

/// Accepts on `listener` until it fails, and hands each connection to `behave` on a task of
/// its own. Returns the number of connections accepted so far.
pub fn serve_each<F, Fut>(listener: TcpListener, behave: F) -> Arc<AtomicUsize>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(behave(stream));
        }
    });
    accepted
}

/// Accepts on `listener` and keeps every connection open, never reading or writing, until
/// the runtime ends: a server that completes TCP and then never answers.
pub fn accept_and_hold(listener: TcpListener) {
    serve_each(listener, |stream| async move {
        let _held = stream;
        std::future::pending::<()>().await;
    });
}

/// Accepts one connection on `listener` on a task; the task's result is the server's side of
/// it, for the test to hold.
pub fn accept_one(listener: TcpListener) -> JoinHandle<io::Result<TcpStream>> {
    tokio::spawn(async move { listener.accept().await.map(|(stream, _)| stream) })
}
