//! What to connect to: [`Host`], [`Address`], [`Proxy`] and [`Route`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// A validated host: a DNS name or an IP literal.
///
/// ```
/// use fastfallback_route::Host;
///
/// assert!(matches!("example.com".parse::<Host>(), Ok(Host::Name(_))));
/// assert!(matches!("[2001:db8::a]".parse::<Host>(), Ok(Host::Ip(_))));
/// assert!("bad..name".parse::<Host>().is_err());
/// ```
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub enum Host {
    /// A DNS name, lower-cased, without a trailing dot.
    Name(String),
    /// An IP literal. No DNS is done for it.
    Ip(IpAddr),
}

/// Why a host, port or URI was rejected.
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum AddressError {
    /// The host is empty.
    EmptyHost,
    /// The name is longer than 253 bytes (RFC 1035 §2.3.4).
    NameTooLong(usize),
    /// A label is empty (two dots in a row, or a leading dot).
    EmptyLabel,
    /// A label is longer than 63 bytes (RFC 1035 §2.3.4).
    LabelTooLong(String),
    /// A byte that may not appear in a host name (letters, digits, `-` and `_` only).
    InvalidCharacter(char),
    /// A label starts or ends with `-`.
    BadHyphen(String),
    /// Port 0 cannot be connected to.
    PortZero,
    /// The port is missing or not a number in 1..=65535.
    BadPort(String),
    /// The URI has no host.
    MissingHost,
    /// The scheme is not `http`, `https` or `tcp`.
    UnsupportedScheme(String),
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyHost => f.write_str("host is empty"),
            Self::NameTooLong(n) => write!(f, "host name is {n} bytes long; the limit is 253"),
            Self::EmptyLabel => f.write_str("host name has an empty label"),
            Self::LabelTooLong(l) => {
                write!(
                    f,
                    "host name label {l:?} is {} bytes long; the limit is 63",
                    l.len()
                )
            }
            Self::InvalidCharacter(c) => write!(f, "host name contains invalid character {c:?}"),
            Self::BadHyphen(l) => write!(f, "host name label {l:?} starts or ends with '-'"),
            Self::PortZero => f.write_str("port 0 cannot be connected to"),
            Self::BadPort(p) => write!(f, "port {p:?} is not a number in 1..=65535"),
            Self::MissingHost => f.write_str("URI has no host"),
            Self::UnsupportedScheme(s) => {
                write!(f, "scheme {s:?} is not supported (use http, https or tcp)")
            }
        }
    }
}

impl std::error::Error for AddressError {}

impl FromStr for Host {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        if s.is_empty() {
            return Err(AddressError::EmptyHost);
        }
        let unbracketed = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Self::Ip(normalize_ip(ip)));
        }
        let name = s.strip_suffix('.').unwrap_or(s);
        if name.is_empty() {
            return Err(AddressError::EmptyHost);
        }
        if name.len() > 253 {
            return Err(AddressError::NameTooLong(name.len()));
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(AddressError::EmptyLabel);
            }
            if label.len() > 63 {
                return Err(AddressError::LabelTooLong(label.to_owned()));
            }
            if let Some(c) = label
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            {
                return Err(AddressError::InvalidCharacter(c));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(AddressError::BadHyphen(label.to_owned()));
            }
        }
        Ok(Self::Name(name.to_ascii_lowercase()))
    }
}

/// Turns an IPv4-mapped IPv6 address into plain IPv4 (RFC 6724 §2.1 classifies it as IPv4).
pub(crate) fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The scheme of an [`Address`].
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Scheme {
    /// Plain TCP, no HTTP: no HTTPS record query (the standards' "plain mode").
    Tcp,
    /// `http://`: TCP, and the HTTPS record is queried (HEv3 §4.1).
    Http,
    /// `https://`: TCP then TLS, and the HTTPS record is queried.
    Https,
}

impl Scheme {
    /// The scheme's default port.
    pub fn default_port(self) -> Option<u16> {
        match self {
            Self::Tcp => None,
            Self::Http => Some(80),
            Self::Https => Some(443),
        }
    }
}

/// What kind of proxy.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum ProxyKind {
    /// An HTTP proxy: `CONNECT` tunnels for TLS origins.
    Http,
    /// A SOCKS5 proxy, which resolves the origin itself.
    Socks5,
}

/// A proxy to reach the origin through. The race resolves and races the proxy's addresses.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub struct Proxy {
    /// What kind.
    pub kind: ProxyKind,
    /// The proxy's host.
    pub host: Host,
    /// The proxy's port.
    pub port: u16,
}

/// The origin to connect to, validated: host, port, scheme, TLS and proxy settings.
///
/// ```
/// use fastfallback_route::{Address, Scheme};
///
/// let a = Address::parse("https://Example.COM").unwrap();
/// assert_eq!(a.port(), 443);
/// assert_eq!(a.scheme(), Scheme::Https);
/// assert_eq!(a.host().to_string(), "example.com");
/// assert!(Address::parse("ftp://example.com").is_err());
/// assert!(Address::parse("example.com:0").is_err());
/// ```
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub struct Address {
    host: Host,
    port: u16,
    scheme: Scheme,
    proxy: Option<Proxy>,
}

impl Address {
    /// An address from parts. Port 0 is rejected.
    pub fn new(host: Host, port: u16, scheme: Scheme) -> Result<Self, AddressError> {
        if port == 0 {
            return Err(AddressError::PortZero);
        }
        Ok(Self {
            host,
            port,
            scheme,
            proxy: None,
        })
    }

    /// Parses `scheme://host[:port][/path]` or `host:port` (plain TCP).
    pub fn parse(s: &str) -> Result<Self, AddressError> {
        let (scheme, rest) = match s.split_once("://") {
            Some(("http", r)) => (Scheme::Http, r),
            Some(("https", r)) => (Scheme::Https, r),
            Some(("tcp", r)) => (Scheme::Tcp, r),
            Some((other, _)) => return Err(AddressError::UnsupportedScheme(other.to_owned())),
            None => (Scheme::Tcp, s),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if authority.is_empty() {
            return Err(AddressError::MissingHost);
        }
        let (host, port) = split_host_port(authority)?;
        let port = match (port, scheme.default_port()) {
            (Some(p), _) => parse_port(p)?,
            (None, Some(d)) => d,
            (None, None) => return Err(AddressError::BadPort(String::new())),
        };
        Self::new(host.parse()?, port, scheme)
    }

    /// Routes this address through `proxy`.
    pub fn with_proxy(mut self, proxy: Proxy) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// The origin host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The origin port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Whether connections to this origin use TLS.
    pub fn is_tls(&self) -> bool {
        self.scheme == Scheme::Https
    }

    /// The proxy, if any.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// The host whose addresses are raced: the proxy's for HTTP proxies and SOCKS, else the
    /// origin's.
    pub fn connect_host(&self) -> (&Host, u16) {
        match &self.proxy {
            Some(p) => (&p.host, p.port),
            None => (&self.host, self.port),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Tcp => "tcp",
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), AddressError> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(AddressError::EmptyHost)?;
        let _ = inside;
        let host = &authority[..inside.len() + 2];
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(p))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(AddressError::BadPort(after.to_owned())),
        };
    }
    // A bare IPv6 literal has several colons and no port.
    if authority.matches(':').count() > 1 {
        return Ok((authority, None));
    }
    Ok(match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    })
}

fn parse_port(p: &str) -> Result<u16, AddressError> {
    match p.parse::<u16>() {
        Ok(0) => Err(AddressError::PortZero),
        Ok(n) => Ok(n),
        Err(_) => Err(AddressError::BadPort(p.to_owned())),
    }
}

/// One concrete way to reach an origin: an IP and port to open a socket to, and how.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub struct Route {
    /// Where the socket connects.
    pub target: SocketAddr,
    /// The address as DNS gave it, when it differs from `target`: the IPv4 address behind a
    /// NAT64-synthesized target (HEv3 §8.3).
    pub logical: IpAddr,
    /// The proxy this route goes through, if any.
    pub proxy: Option<Proxy>,
}

impl Route {
    /// A direct route to `target`.
    pub fn direct(target: SocketAddr) -> Self {
        Self {
            target,
            logical: target.ip(),
            proxy: None,
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.target)?;
        if self.logical != self.target.ip() {
            write!(f, " (NAT64 for {})", self.logical)?;
        }
        if let Some(p) = &self.proxy {
            write!(f, " via proxy {}:{}", p.host, p.port)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_trailing_dot_dropped() {
        assert_eq!(
            "Example.COM.".parse::<Host>(),
            Ok(Host::Name("example.com".into()))
        );
    }

    #[test]
    fn malformed_names_are_rejected_with_the_reason() {
        assert_eq!("".parse::<Host>(), Err(AddressError::EmptyHost));
        assert_eq!("a..b".parse::<Host>(), Err(AddressError::EmptyLabel));
        let long_label = "a".repeat(64);
        assert!(matches!(
            long_label.parse::<Host>(),
            Err(AddressError::LabelTooLong(_))
        ));
        let long_name = vec!["a".repeat(60); 5].join(".");
        assert!(matches!(
            long_name.parse::<Host>(),
            Err(AddressError::NameTooLong(304))
        ));
        assert_eq!(
            "a\0b".parse::<Host>(),
            Err(AddressError::InvalidCharacter('\0'))
        );
        assert_eq!(
            "a b".parse::<Host>(),
            Err(AddressError::InvalidCharacter(' '))
        );
        assert!(matches!(
            "-a.com".parse::<Host>(),
            Err(AddressError::BadHyphen(_))
        ));
    }

    #[test]
    fn ip_literals_parse_with_and_without_brackets() {
        let v6: IpAddr = "2001:db8::a".parse().unwrap();
        assert_eq!("2001:db8::a".parse::<Host>(), Ok(Host::Ip(v6)));
        assert_eq!("[2001:db8::a]".parse::<Host>(), Ok(Host::Ip(v6)));
        assert_eq!(
            "192.0.2.1".parse::<Host>(),
            Ok(Host::Ip("192.0.2.1".parse().unwrap()))
        );
    }

    #[test]
    fn ipv4_mapped_literal_is_treated_as_ipv4() {
        assert_eq!(
            "::ffff:192.0.2.1".parse::<Host>(),
            Ok(Host::Ip("192.0.2.1".parse().unwrap()))
        );
    }

    #[test]
    fn uris_parse_with_default_ports() {
        let a = Address::parse("http://example.com/path?q").unwrap();
        assert_eq!((a.port(), a.scheme()), (80, Scheme::Http));
        let a = Address::parse("https://[2001:db8::a]:8443/").unwrap();
        assert_eq!(a.port(), 8443);
        assert_eq!(a.host(), &Host::Ip("2001:db8::a".parse().unwrap()));
        let a = Address::parse("example.com:7000").unwrap();
        assert_eq!((a.port(), a.scheme()), (7000, Scheme::Tcp));
    }

    #[test]
    fn bad_uris_are_rejected_with_the_reason() {
        assert_eq!(Address::parse("https://"), Err(AddressError::MissingHost));
        assert_eq!(Address::parse("https://:443"), Err(AddressError::EmptyHost));
        assert_eq!(
            Address::parse("https://a.com:0"),
            Err(AddressError::PortZero)
        );
        assert!(matches!(
            Address::parse("https://a.com:99999"),
            Err(AddressError::BadPort(_))
        ));
        assert!(matches!(
            Address::parse("gopher://a.com"),
            Err(AddressError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            Address::parse("a.com"),
            Err(AddressError::BadPort(_))
        ));
    }

    #[test]
    fn route_display_names_nat64_and_proxy() {
        let mut r = Route::direct("[64:ff9b::c000:201]:443".parse().unwrap());
        r.logical = "192.0.2.1".parse().unwrap();
        assert_eq!(
            r.to_string(),
            "[64:ff9b::c000:201]:443 (NAT64 for 192.0.2.1)"
        );
    }
}
