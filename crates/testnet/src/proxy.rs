//! Real proxies for tests: an HTTP `CONNECT` proxy (RFC 9110 §9.3.6, optional Basic
//! credentials) and a SOCKS5 proxy (RFC 1928, optional username/password per RFC 1929), on
//! any listener. Each resolves the target itself (`tokio::net::lookup_host`), connects to it,
//! and copies bytes both ways until either side closes. [`ProxyStats`] records what was asked.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a test proxy behaves.
#[derive(Clone, Debug, Default)]
pub struct ProxyOptions {
    /// Require this user and password.
    pub credentials: Option<(String, String)>,
}

/// What a test proxy has seen.
#[derive(Debug, Default)]
pub struct ProxyStats {
    connections: AtomicUsize,
    tunnels: AtomicUsize,
    targets: Mutex<Vec<String>>,
}

impl ProxyStats {
    /// Client connections accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Tunnels opened to a target.
    pub fn tunnels(&self) -> usize {
        self.tunnels.load(Ordering::SeqCst)
    }

    /// Every target asked for, as sent (`host:port`, a name or an address), in order.
    pub fn targets(&self) -> Vec<String> {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn asked(&self, target: &str) {
        self.targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(target.to_owned());
    }
}

/// Serves HTTP `CONNECT` on `listener` until the runtime ends.
pub fn serve_http_connect(listener: TcpListener, options: ProxyOptions) -> Arc<ProxyStats> {
    serve(listener, options, Kind::Http)
}

/// Serves SOCKS5 on `listener` until the runtime ends.
pub fn serve_socks5(listener: TcpListener, options: ProxyOptions) -> Arc<ProxyStats> {
    serve(listener, options, Kind::Socks5)
}

#[derive(Clone, Copy)]
enum Kind {
    Http,
    Socks5,
}

fn serve(listener: TcpListener, options: ProxyOptions, kind: Kind) -> Arc<ProxyStats> {
    let stats = Arc::new(ProxyStats::default());
    let s = Arc::clone(&stats);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            s.connections.fetch_add(1, Ordering::SeqCst);
            let (s, options) = (Arc::clone(&s), options.clone());
            tokio::spawn(async move {
                let upstream = match kind {
                    Kind::Http => http_handshake(client, &options, &s).await,
                    Kind::Socks5 => socks5_handshake(client, &options, &s).await,
                };
                if let Some((mut client, mut upstream)) = upstream {
                    s.tunnels.fetch_add(1, Ordering::SeqCst);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    stats
}

async fn http_handshake(
    mut client: TcpStream,
    options: &ProxyOptions,
    stats: &ProxyStats,
) -> Option<(TcpStream, TcpStream)> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return None;
        }
        let mut b = [0u8; 1];
        if client.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut request = lines.next()?.split(' ');
    let (method, target) = (request.next()?, request.next()?.to_owned());
    if method != "CONNECT" {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
        return None;
    }
    stats.asked(&target);
    if let Some((user, pass)) = &options.credentials {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        );
        let given = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("proxy-authorization")
                .then(|| value.trim().to_owned())
        });
        if given.as_deref() != Some(expected.as_str()) {
            let _ = client
                .write_all(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                      Proxy-Authenticate: Basic realm=\"test\"\r\n\r\n",
                )
                .await;
            return None;
        }
    }
    match TcpStream::connect(target.as_str()).await {
        Ok(upstream) => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .ok()?;
            Some((client, upstream))
        }
        Err(_) => {
            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
            None
        }
    }
}

async fn socks5_handshake(
    mut client: TcpStream,
    options: &ProxyOptions,
    stats: &ProxyStats,
) -> Option<(TcpStream, TcpStream)> {
    let mut head = [0u8; 2];
    client.read_exact(&mut head).await.ok()?;
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods).await.ok()?;
    let wanted = if options.credentials.is_some() { 2 } else { 0 };
    if head[0] != 5 || !methods.contains(&wanted) {
        let _ = client.write_all(&[5, 0xFF]).await;
        return None;
    }
    client.write_all(&[5, wanted]).await.ok()?;
    if let Some((user, pass)) = &options.credentials {
        let mut ver_len = [0u8; 2];
        client.read_exact(&mut ver_len).await.ok()?;
        let mut u = vec![0u8; usize::from(ver_len[1])];
        client.read_exact(&mut u).await.ok()?;
        let mut plen = [0u8; 1];
        client.read_exact(&mut plen).await.ok()?;
        let mut p = vec![0u8; usize::from(plen[0])];
        client.read_exact(&mut p).await.ok()?;
        let ok = u == user.as_bytes() && p == pass.as_bytes();
        client.write_all(&[1, u8::from(!ok)]).await.ok()?;
        if !ok {
            return None;
        }
    }
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await.ok()?;
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await.ok()?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await.ok()?;
            format!("[{}]", std::net::Ipv6Addr::from(a))
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await.ok()?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await.ok()?;
            String::from_utf8(name).ok()?
        }
        _ => return None,
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await.ok()?;
    let target = format!("{host}:{}", u16::from_be_bytes(port));
    stats.asked(&target);
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    match TcpStream::connect(target.as_str()).await {
        Ok(upstream) => {
            client.write_all(&reply(0)).await.ok()?;
            Some((client, upstream))
        }
        Err(_) => {
            let _ = client.write_all(&reply(5)).await;
            None
        }
    }
}
