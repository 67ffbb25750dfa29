//! Tunnels through proxies: HTTP `CONNECT` (RFC 9110 §9.3.6, Basic credentials per RFC 7617)
//! and SOCKS5 (RFC 1928, username/password per RFC 1929).
//!
//! A tunnel runs on an attempt's transport right after its TCP handshake to the proxy; TLS to
//! the origin, if any, runs inside it. Every failure is an [`AttemptError`] in
//! [`Phase::Tunnel`]. Credentials are written to the proxy and nowhere else: no error, detail
//! or log line carries them.

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use fastfallback_proto::{AttemptError, AttemptErrorKind, DnsAnswer, Phase, QueryKind};
use fastfallback_route::{Host, Proxy, ProxyDns, ProxyKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::Resolve;
use crate::attempt::Transport;

/// The longest `CONNECT` response head we read (status line and headers).
const MAX_RESPONSE_HEAD: usize = 8 * 1024;

/// Opens a tunnel to `host:port` through `proxy` over `transport` (already connected to the
/// proxy). `resolver` resolves the origin when a SOCKS5 proxy wants an address
/// ([`ProxyDns::Local`]).
pub(crate) async fn open(
    mut transport: Transport,
    proxy: &Proxy,
    host: &Host,
    port: u16,
    resolver: &dyn Resolve,
) -> Result<Transport, AttemptError> {
    match proxy.kind {
        ProxyKind::Http => http_connect(transport, proxy, host, port).await,
        ProxyKind::Socks5 => {
            socks5(&mut transport, proxy, host, port, resolver).await?;
            Ok(transport)
        }
    }
}

fn tunnel_error(kind: AttemptErrorKind, detail: impl Into<String>) -> AttemptError {
    AttemptError::new(kind, Phase::Tunnel, detail)
}

fn io_error(e: &io::Error, proxy: &Proxy) -> AttemptError {
    let detail = if e.kind() == io::ErrorKind::UnexpectedEof {
        format!("{proxy} closed the connection during the handshake")
    } else {
        format!("{proxy}: {e}")
    };
    let kind = match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof => AttemptErrorKind::Reset,
        _ => AttemptErrorKind::Io,
    };
    tunnel_error(kind, detail).with_io_kind(e.kind())
}

/// `host:port` as a request target: IPv6 literals in brackets (RFC 9110 §7.2, RFC 3986).
fn authority(host: &Host, port: u16) -> String {
    match host {
        Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        other => format!("{other}:{port}"),
    }
}

async fn http_connect(
    mut transport: Transport,
    proxy: &Proxy,
    host: &Host,
    port: u16,
) -> Result<Transport, AttemptError> {
    let target = authority(host, port);
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(c) = &proxy.credentials {
        let token = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            c.user(),
            c.password()
        ));
        request.push_str("Proxy-Authorization: Basic ");
        request.push_str(&token);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    transport
        .write_all(request.as_bytes())
        .await
        .map_err(|e| io_error(&e, proxy))?;
    drop(request);

    // Read the response head; bytes past it (a server that speaks first) are kept. Interim
    // 1xx responses come before the final one and are skipped (RFC 9110 §15.2); the bound on
    // the head counts them too, so a proxy cannot keep us reading interim heads forever.
    let mut head = Vec::with_capacity(256);
    let mut read_before = 0;
    let (status, end) = loop {
        let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
            if read_before + head.len() >= MAX_RESPONSE_HEAD {
                return Err(tunnel_error(
                    AttemptErrorKind::Io,
                    format!("{proxy} sent a CONNECT response head over {MAX_RESPONSE_HEAD} bytes"),
                ));
            }
            let mut chunk = [0u8; 1024];
            let n = transport
                .read(&mut chunk)
                .await
                .map_err(|e| io_error(&e, proxy))?;
            if n == 0 {
                return Err(io_error(
                    &io::Error::from(io::ErrorKind::UnexpectedEof),
                    proxy,
                ));
            }
            head.extend_from_slice(&chunk[..n]);
            continue;
        };
        let end = i + 4;
        let status = parse_status(&head[..end]).ok_or_else(|| {
            tunnel_error(
                AttemptErrorKind::Io,
                format!("{proxy} answered CONNECT with something that is not HTTP/1.x"),
            )
        })?;
        // 101 Switching Protocols is no answer to CONNECT: it stays a refusal below.
        if (100..200).contains(&status.0) && status.0 != 101 {
            read_before += end;
            head.drain(..end);
            continue;
        }
        break (status, end);
    };
    if !(200..300).contains(&status.0) {
        let kind = match status.0 {
            // The proxy could not reach the origin.
            502 | 504 => AttemptErrorKind::Unreachable,
            _ => AttemptErrorKind::Refused,
        };
        let what = if status.0 == 407 {
            if proxy.credentials.is_some() {
                "rejected the credentials"
            } else {
                "requires credentials"
            }
        } else {
            "refused the tunnel"
        };
        return Err(tunnel_error(
            kind,
            format!(
                "{proxy} {what}: CONNECT {target} answered {} {}",
                status.0, status.1
            ),
        ));
    }
    let rest = head.split_off(end);
    Ok(if rest.is_empty() {
        transport
    } else {
        Transport::other(Prefixed {
            rest,
            at: 0,
            inner: transport,
        })
    })
}

/// The status code and reason of an HTTP/1.x response head.
fn parse_status(head: &[u8]) -> Option<(u16, String)> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.splitn(3, ' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?.parse().ok()?;
    let reason: String = parts
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect();
    Some((code, reason))
}

async fn socks5(
    t: &mut Transport,
    proxy: &Proxy,
    host: &Host,
    port: u16,
    resolver: &dyn Resolve,
) -> Result<(), AttemptError> {
    let io = |e: io::Error| io_error(&e, proxy);
    // RFC 1928 §3: offer no authentication, and username/password when we have credentials.
    let greeting: &[u8] = if proxy.credentials.is_some() {
        &[5, 2, 0x00, 0x02]
    } else {
        &[5, 1, 0x00]
    };
    t.write_all(greeting).await.map_err(io)?;
    let mut choice = [0u8; 2];
    t.read_exact(&mut choice).await.map_err(io)?;
    if choice[0] != 5 {
        return Err(tunnel_error(
            AttemptErrorKind::Io,
            format!("{proxy} does not speak SOCKS5 (version byte {})", choice[0]),
        ));
    }
    match (choice[1], &proxy.credentials) {
        (0x00, _) => {}
        (0x02, Some(c)) => {
            // RFC 1929 §2: VER=1, ULEN, UNAME, PLEN, PASSWD; each at most 255 bytes.
            let (user, pass) = (c.user().as_bytes(), c.password().as_bytes());
            let (Ok(ulen), Ok(plen)) = (u8::try_from(user.len()), u8::try_from(pass.len())) else {
                return Err(tunnel_error(
                    AttemptErrorKind::Io,
                    format!("{proxy}: SOCKS5 user names and passwords are at most 255 bytes"),
                ));
            };
            let mut auth = Vec::with_capacity(3 + user.len() + pass.len());
            auth.extend_from_slice(&[1, ulen]);
            auth.extend_from_slice(user);
            auth.push(plen);
            auth.extend_from_slice(pass);
            let sent = t.write_all(&auth).await;
            auth.fill(0);
            sent.map_err(io)?;
            let mut status = [0u8; 2];
            t.read_exact(&mut status).await.map_err(io)?;
            if status[1] != 0 {
                return Err(tunnel_error(
                    AttemptErrorKind::Refused,
                    format!("{proxy} rejected the credentials (status {})", status[1]),
                ));
            }
        }
        (0xFF, _) | (0x02, None) => {
            let needs = if proxy.credentials.is_some() {
                "accepts none of our authentication methods"
            } else {
                "requires credentials"
            };
            return Err(tunnel_error(
                AttemptErrorKind::Refused,
                format!("{proxy} {needs}"),
            ));
        }
        (other, _) => {
            return Err(tunnel_error(
                AttemptErrorKind::Io,
                format!("{proxy} chose authentication method {other}, which we did not offer"),
            ));
        }
    }
    // RFC 1928 §4: VER, CMD=CONNECT, RSV, then the address.
    let mut request = vec![5, 1, 0];
    match socks_target(proxy, host, resolver).await? {
        Target::Ip(IpAddr::V4(ip)) => {
            request.push(1);
            request.extend_from_slice(&ip.octets());
        }
        Target::Ip(IpAddr::V6(ip)) => {
            request.push(4);
            request.extend_from_slice(&ip.octets());
        }
        Target::Name(name) => {
            let len = u8::try_from(name.len()).map_err(|_| {
                tunnel_error(
                    AttemptErrorKind::Io,
                    "SOCKS5 carries names of at most 255 bytes",
                )
            })?;
            request.push(3);
            request.push(len);
            request.extend_from_slice(name.as_bytes());
        }
    }
    request.extend_from_slice(&port.to_be_bytes());
    t.write_all(&request).await.map_err(io)?;
    // The reply: VER, REP, RSV, ATYP, BND.ADDR, BND.PORT.
    let mut reply = [0u8; 4];
    t.read_exact(&mut reply).await.map_err(io)?;
    if reply[1] != 0 {
        let (kind, why) = match reply[1] {
            2 => (
                AttemptErrorKind::Refused,
                "connection not allowed by ruleset",
            ),
            3 => (AttemptErrorKind::Unreachable, "network unreachable"),
            4 => (AttemptErrorKind::Unreachable, "host unreachable"),
            5 => (AttemptErrorKind::Refused, "connection refused"),
            6 => (AttemptErrorKind::TimedOut, "TTL expired"),
            7 => (AttemptErrorKind::Io, "command not supported"),
            8 => (AttemptErrorKind::Io, "address type not supported"),
            _ => (AttemptErrorKind::Io, "general failure"),
        };
        return Err(tunnel_error(
            kind,
            format!(
                "{proxy} could not reach {}: {why} (reply {})",
                authority(host, port),
                reply[1]
            ),
        ));
    }
    let skip = match reply[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut len = [0u8; 1];
            t.read_exact(&mut len).await.map_err(io)?;
            usize::from(len[0]) + 2
        }
        other => {
            return Err(tunnel_error(
                AttemptErrorKind::Io,
                format!("{proxy} replied with unknown address type {other}"),
            ));
        }
    };
    let mut bound = [0u8; 257];
    t.read_exact(&mut bound[..skip]).await.map_err(io)?;
    Ok(())
}

enum Target {
    Ip(IpAddr),
    Name(String),
}

/// What a SOCKS5 request names: an IP literal as is; a name as is when the proxy resolves it,
/// else the first address of our A answer, or failing that of our AAAA answer.
async fn socks_target(
    proxy: &Proxy,
    host: &Host,
    resolver: &dyn Resolve,
) -> Result<Target, AttemptError> {
    let name = match host {
        Host::Ip(ip) => return Ok(Target::Ip(*ip)),
        Host::Name(name) => name.to_string(),
    };
    if proxy.dns == ProxyDns::Proxy {
        return Ok(Target::Name(name));
    }
    for kind in [QueryKind::A, QueryKind::Aaaa] {
        if let DnsAnswer::Addresses(a) = resolver.query(&name, kind).await
            && let Some(ip) = a.first()
        {
            return Ok(Target::Ip(*ip));
        }
    }
    Err(tunnel_error(
        AttemptErrorKind::Unreachable,
        format!("{name} did not resolve here, so {proxy} cannot be asked to reach it"),
    ))
}

/// A transport with bytes already read from it in front (what a proxy sent right after its
/// `CONNECT` response).
struct Prefixed {
    rest: Vec<u8>,
    at: usize,
    inner: Transport,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.rest.len() {
            let n = (this.rest.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.rest[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_and_garbage_is_not_http() {
        assert_eq!(
            parse_status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some((200, "Connection established".to_owned()))
        );
        assert_eq!(
            parse_status(b"HTTP/1.0 407 Proxy Authentication Required\r\n"),
            Some((407, "Proxy Authentication Required".to_owned()))
        );
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status(b"HTTP/1.1 abc\r\n"), None);
        assert_eq!(
            parse_status(b"HTTP/1.1 200 \x1b[31mred\r\n").unwrap().1,
            "[31mred"
        );
    }

    #[test]
    fn ipv6_targets_are_bracketed() {
        let v6: Host = "2001:db8::1".parse().unwrap();
        assert_eq!(authority(&v6, 443), "[2001:db8::1]:443");
        let name: Host = "example.com".parse().unwrap();
        assert_eq!(authority(&name, 80), "example.com:80");
    }
}
