//! Proxies to reach the origin through: [`Proxy`], its [`ProxyKind`], [`ProxyDns`] and
//! [`Credentials`], and their URL form.

use std::fmt;
use std::net::IpAddr;

use super::{Address, AddressError, Host};

/// What kind of proxy.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum ProxyKind {
    /// An HTTP proxy: every connection is an HTTP `CONNECT` tunnel (RFC 9110 §9.3.6).
    Http,
    /// A SOCKS5 proxy (RFC 1928).
    Socks5,
}

/// Who resolves the origin's name when a SOCKS5 proxy carries the connection.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum ProxyDns {
    /// The proxy resolves it: the name is sent in the request (`socks5h://`, and always for
    /// HTTP proxies, whose `CONNECT` names the host).
    #[default]
    Proxy,
    /// We resolve it and send an address (`socks5://`, as curl reads that scheme).
    Local,
}

/// A user name and password for a proxy (HTTP Basic, RFC 7617; SOCKS5 username/password,
/// RFC 1929). Its `Debug` never shows the password, and nothing in fastfallback prints it:
/// not errors, reports, routes or logs.
#[derive(Clone, Eq, Hash, PartialEq)]
pub struct Credentials {
    user: String,
    password: String,
}

impl Credentials {
    /// A user name and password.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password, for the driver that sends it.
    pub fn password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A proxy to reach the origin through. The race resolves and races the proxy's addresses
/// (Happy Eyeballs applies to the proxy, as OkHttp's `RouteSelector` does it), then each
/// attempt opens a tunnel to the origin through it.
///
/// ```
/// use fastfallback_route::{Proxy, ProxyDns, ProxyKind};
///
/// let p = Proxy::parse("socks5h://alice:s3cret@proxy.example:1080").unwrap();
/// assert_eq!(p.kind, ProxyKind::Socks5);
/// assert_eq!(p.dns, ProxyDns::Proxy);
/// assert_eq!(p.credentials.as_ref().unwrap().user(), "alice");
/// assert!(!format!("{p:?} {p}").contains("s3cret"));
/// assert_eq!(Proxy::parse("http://proxy.example").unwrap().port, 80);
/// ```
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub struct Proxy {
    /// What kind.
    pub kind: ProxyKind,
    /// The proxy's host.
    pub host: Host,
    /// The proxy's port.
    pub port: u16,
    /// Credentials to present, if the proxy asks for them.
    pub credentials: Option<Credentials>,
    /// Who resolves the origin's name (SOCKS5 only).
    pub dns: ProxyDns,
}

impl Proxy {
    /// An HTTP proxy at `host:port`.
    pub fn http(host: Host, port: u16) -> Self {
        Self {
            kind: ProxyKind::Http,
            host,
            port,
            credentials: None,
            dns: ProxyDns::Proxy,
        }
    }

    /// A SOCKS5 proxy at `host:port` that resolves names itself.
    pub fn socks5(host: Host, port: u16) -> Self {
        Self {
            kind: ProxyKind::Socks5,
            ..Self::http(host, port)
        }
    }

    /// The same proxy, presenting `credentials`.
    #[must_use]
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The same proxy, with the origin's name resolved by `dns`.
    #[must_use]
    pub fn with_dns(mut self, dns: ProxyDns) -> Self {
        self.dns = dns;
        self
    }

    /// Parses `http://[user:password@]host[:port]` (port 80 by default),
    /// `socks5h://…` (the proxy resolves names) or `socks5://…` (we do; port 1080 by
    /// default). User and password are percent-decoded. Errors never echo the input, which
    /// may hold a password.
    pub fn parse(s: &str) -> Result<Self, AddressError> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| AddressError::UnsupportedProxyScheme(String::new()))?;
        let (kind, dns, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => (ProxyKind::Http, ProxyDns::Proxy, 80),
            "socks5h" => (ProxyKind::Socks5, ProxyDns::Proxy, 1080),
            "socks5" => (ProxyKind::Socks5, ProxyDns::Local, 1080),
            other => return Err(AddressError::UnsupportedProxyScheme(other.to_owned())),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let credentials = match userinfo {
            Some(u) => {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                Some(Credentials::new(
                    percent_decode(user)?,
                    percent_decode(password)?,
                ))
            }
            None => None,
        };
        // Reuse the origin parser for the host and port (brackets, IDNA rules, port range).
        let address = Address::parse(&format!("tcp://{hostport}")).or_else(|e| match e {
            AddressError::MissingPort => {
                Address::parse(&format!("tcp://{hostport}:{default_port}"))
            }
            other => Err(other),
        })?;
        Ok(Self {
            kind,
            host: address.0.host.clone(),
            port: address.0.port,
            credentials,
            dns,
        })
    }

    /// What pool keys record for this proxy: kind, host, port and who resolves names, and a
    /// fingerprint of the credentials (so connections made for different users are never
    /// shared), never the credentials themselves.
    pub fn pool_identity(&self) -> String {
        use std::hash::{Hash as _, Hasher as _};
        let mut id = format!("{:?} {}:{} {:?}", self.kind, self.host, self.port, self.dns);
        if let Some(c) = &self.credentials {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            c.hash(&mut h);
            id.push_str(&format!(" user#{:016x}", h.finish()));
        }
        id
    }
}

impl fmt::Display for Proxy {
    /// `http proxy host:port` or `socks5 proxy host:port`; never the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ProxyKind::Http => "http",
            ProxyKind::Socks5 => "socks5",
        };
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "{kind} proxy [{ip}]:{}", self.port),
            host => write!(f, "{kind} proxy {host}:{}", self.port),
        }
    }
}

/// Percent-decodes a userinfo part (RFC 3986 §2.1).
fn percent_decode(s: &str) -> Result<String, AddressError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or(AddressError::BadUserinfo)?;
            let hex = std::str::from_utf8(hex).map_err(|_| AddressError::BadUserinfo)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| AddressError::BadUserinfo)?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| AddressError::BadUserinfo)
}
