//! Servers on 127.0.0.1 for tests that need no test network: an HTTPS origin speaking h2 and
//! http/1.1 ([`TlsOrigin`]), and an HTTP `CONNECT` proxy ([`http_proxy`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use fastfallback_net::{Connector, StaticResolver};
use fastfallback_route::{Host, Proxy};
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::{HttpOptions, HttpStats, serve};
use fastfallback_testnet::proxy::{ProxyOptions, ProxyStats, serve_http_connect};
use tokio::net::TcpListener;

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
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stats = serve(
            listener,
            HttpOptions {
                tls: Some(tls.with_alpn(&[b"h2".to_vec(), b"http/1.1".to_vec()])),
                ..HttpOptions::default()
            },
        );
        Self { tls, port, stats }
    }

    /// Root certificates that trust the origin's CA only.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.tls.ca_der()).unwrap();
        roots
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

/// An HTTP `CONNECT` proxy on 127.0.0.1 with `options`, and what it counts.
pub async fn http_proxy(options: ProxyOptions) -> (Proxy, Arc<ProxyStats>) {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
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
        let probe = std::net::TcpListener::bind((LOCALHOST, 0)).unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
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
