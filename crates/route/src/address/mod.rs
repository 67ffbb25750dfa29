//! What to connect to: [`Host`], [`Address`], [`Proxy`] and [`Route`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

mod proxy;
#[cfg(test)]
mod tests;

pub use proxy::{Credentials, Proxy, ProxyDns, ProxyKind};

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
    /// `host:port` was expected but no port was given (plain TCP has no default port).
    MissingPort,
    /// An IPv6 literal opened with `[` was never closed with `]`.
    UnclosedBracket,
    /// A zone (`%eth0`, `%2`) was given on something other than an IPv6 literal.
    ZoneWithoutIpv6,
    /// The zone is empty or holds characters no interface name has (RFC 6874 §2).
    BadZone(String),
    /// The zone names an interface this host does not have.
    UnknownInterface(String),
    /// A proxy URL's user or password is not valid percent-encoded UTF-8 (neither is shown).
    BadUserinfo,
    /// The host or port is malformed and an `@` follows it, in what reads as the path,
    /// query or fragment: it may be part of a user or password holding an unencoded `/`, `?`
    /// or `#`, which ends the authority early (RFC 3986 §3.2, §3.2.1). Its text is not shown.
    HidesUserinfo,
    /// A proxy URL's scheme is not `http`, `socks5` or `socks5h`.
    UnsupportedProxyScheme(String),
    /// The host ends in a number (`1.2.3`, `10.0.0.256`, `0x7f.1`), so it can only mean an
    /// IPv4 address, but it is not one in dotted-decimal form (WHATWG URL, "ends in a number
    /// checker"; a name's last label is never all digits, RFC 3696 §2). Browsers read such
    /// hosts as IPv4 shorthand (`1.2.3` as 1.2.0.3); this crate rejects them rather than
    /// send them to DNS or guess.
    NumericName(String),
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
            Self::MissingPort => f.write_str("port is missing (write host:port)"),
            Self::UnclosedBracket => f.write_str("IPv6 literal has an unclosed '['"),
            Self::ZoneWithoutIpv6 => f.write_str("a zone (%...) is only valid on an IPv6 literal"),
            Self::BadZone(z) => write!(f, "zone {z:?} is not an interface name or index"),
            Self::UnknownInterface(z) => write!(f, "zone {z:?}: this host has no such interface"),
            Self::BadUserinfo => {
                f.write_str("the proxy's user or password is not valid percent-encoded UTF-8")
            }
            Self::HidesUserinfo => f.write_str(
                "the host or port is malformed, and an '@' follows it: if the URI holds a user \
                 or password, percent-encode its '/', '?' and '#' (RFC 3986 §3.2.1); the text \
                 is not shown, as it may be a password",
            ),
            Self::NumericName(n) => write!(
                f,
                "host {n:?} ends in a number, so it can only be an IPv4 address, and it is not \
                 one in dotted-decimal form (a.b.c.d, each 0-255)"
            ),
            Self::UnsupportedProxyScheme(s) => {
                write!(
                    f,
                    "proxy scheme {s:?} is not supported (use http, socks5 or socks5h)"
                )
            }
        }
    }
}

impl AddressError {
    /// Whether the error shows some of the text it was given.
    fn quotes_input(&self) -> bool {
        matches!(
            self,
            Self::LabelTooLong(_)
                | Self::InvalidCharacter(_)
                | Self::BadHyphen(_)
                | Self::BadPort(_)
                | Self::BadZone(_)
                | Self::UnknownInterface(_)
                | Self::NumericName(_)
                | Self::UnsupportedScheme(_)
                | Self::UnsupportedProxyScheme(_)
        )
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
        let name = match s.strip_suffix('.') {
            // An IPv4 literal written with a root dot (`192.0.2.1.`) is that address: a
            // name's last label is never all digits (RFC 3696 §2), and a URL host reads it
            // the same way (WHATWG URL, IPv4 parser, which drops one trailing dot).
            Some(n) => match n.parse::<std::net::Ipv4Addr>() {
                Ok(v4) => return Ok(Self::Ip(IpAddr::V4(v4))),
                Err(_) => n,
            },
            None => s,
        };
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
        if ends_in_a_number(name) {
            return Err(AddressError::NumericName(name.to_owned()));
        }
        Ok(Self::Name(name.to_ascii_lowercase()))
    }
}

/// Whether a name's last label is a number, decimal or `0x` hex (WHATWG URL, "ends in a
/// number checker"): such a host is an IPv4 address or nothing.
fn ends_in_a_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()),
    }
}

impl Host {
    /// Whether this is `localhost` or a name under it, which always means the loopback
    /// addresses and is never sent to DNS (RFC 6761 §6.3).
    pub fn is_localhost(&self) -> bool {
        match self {
            Self::Name(n) => n == "localhost" || n.ends_with(".localhost"),
            Self::Ip(_) => false,
        }
    }
}

/// An IPv6 zone (RFC 4007 §11, RFC 6874): which interface a link-local literal is on.
///
/// ```
/// use fastfallback_route::{Address, Zone};
///
/// let a = Address::parse("http://[fe80::1%25eth0]:8080").unwrap();
/// assert_eq!(a.zone(), Some(&Zone::Name("eth0".into())));
/// let b = Address::parse("http://[fe80::1%2]:8080").unwrap();
/// assert_eq!(b.scope_id(), Some(2));
/// ```
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub enum Zone {
    /// A numeric interface index, used as the socket address's scope id.
    Index(u32),
    /// An interface name; the driver turns it into an index before connecting.
    Name(String),
}

impl Zone {
    /// Parses a zone as written after `%` (already percent-decoded).
    fn parse(z: &str) -> Result<Self, AddressError> {
        if let Ok(i) = z.parse::<u32>() {
            return Ok(Self::Index(i));
        }
        let ok = !z.is_empty()
            && !z.starts_with('.')
            && z.len() <= 15
            && z.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(Self::Name(z.to_owned()))
        } else {
            Err(AddressError::BadZone(z.to_owned()))
        }
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Name(n) => f.write_str(n),
        }
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
///
/// An address is cheap to clone: its parts are shared (one reference count), so a race, a
/// pool key or a report takes its own copy of the origin without copying a name.
#[derive(Clone, Eq, Hash, PartialEq)]
pub struct Address(Arc<Parts>);

/// What an [`Address`] holds, shared by its clones.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
struct Parts {
    host: Host,
    port: u16,
    scheme: Scheme,
    /// Shared, so every route of a race points at it without copying it.
    proxy: Option<Arc<Proxy>>,
    zone: Option<Zone>,
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Parts {
            host,
            port,
            scheme,
            proxy,
            zone,
        } = &*self.0;
        f.debug_struct("Address")
            .field("host", host)
            .field("port", port)
            .field("scheme", scheme)
            .field("proxy", proxy)
            .field("zone", zone)
            .finish()
    }
}

impl Address {
    /// An address from parts. Port 0 is rejected.
    pub fn new(host: Host, port: u16, scheme: Scheme) -> Result<Self, AddressError> {
        if port == 0 {
            return Err(AddressError::PortZero);
        }
        Ok(Self(Arc::new(Parts {
            host,
            port,
            scheme,
            proxy: None,
            zone: None,
        })))
    }

    /// Parses `scheme://host[:port][/path]` or `host:port` (plain TCP). An IPv6 literal may
    /// carry a zone, `[fe80::1%25eth0]` as RFC 6874 writes it in a URI, or `[fe80::1%eth0]`.
    /// Userinfo (`user:password@`) is accepted and dropped: it is never stored, so it can
    /// never appear in an error, a report or a log.
    pub fn parse(s: &str) -> Result<Self, AddressError> {
        let b = s.as_bytes();
        // RFC 3986 §3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then "://".
        // A scheme holds no ':', so it can only end at the first one.
        let scheme_len = b.iter().position(|&c| c == b':').unwrap_or(b.len());
        let has_scheme = scheme_len > 0
            && b[scheme_len..].starts_with(b"://")
            && b[..scheme_len]
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
        let (scheme, rest) = if has_scheme {
            let rest = &s[scheme_len + 3..];
            // Schemes are case-insensitive (RFC 3986 §3.1).
            let name = &s[..scheme_len];
            if name.eq_ignore_ascii_case("https") {
                (Scheme::Https, rest)
            } else if name.eq_ignore_ascii_case("http") {
                (Scheme::Http, rest)
            } else if name.eq_ignore_ascii_case("tcp") {
                (Scheme::Tcp, rest)
            } else {
                return Err(AddressError::UnsupportedScheme(name.to_owned()));
            }
        } else {
            (Scheme::Tcp, s)
        };
        // The authority ends at the path, query or fragment; userinfo ends at its last '@'.
        // The same pass counts the colons after it and finds the last (`split_host_port`).
        let mut end = rest.len();
        let mut start = 0;
        let mut colons = Colons::default();
        for (i, c) in rest.bytes().enumerate() {
            match c {
                b'/' | b'?' | b'#' => {
                    end = i;
                    break;
                }
                b'@' => {
                    start = i + 1;
                    colons = Colons::default();
                }
                b':' => {
                    colons.count += 1;
                    colons.last = i - start;
                }
                _ => {}
            }
        }
        let authority = &rest[start..end];
        if authority.is_empty() {
            return Err(AddressError::MissingHost);
        }
        Self::from_authority(scheme, authority, colons).map_err(|e| {
            // An '@' after the authority: the authority may be the start of a userinfo that
            // an unencoded '/', '?' or '#' cut short, so no text of it is shown. Only errors
            // pay for the look.
            if e.quotes_input() && rest.as_bytes()[end..].contains(&b'@') {
                AddressError::HidesUserinfo
            } else {
                e
            }
        })
    }

    /// The host, port and zone of `authority` (userinfo already split off).
    fn from_authority(
        scheme: Scheme,
        authority: &str,
        colons: Colons,
    ) -> Result<Self, AddressError> {
        let (host, port) = split_host_port(authority, colons)?;
        let port = match (port, scheme.default_port()) {
            (Some(""), _) => return Err(AddressError::MissingPort),
            (Some(p), _) => parse_port(p)?,
            (None, Some(d)) => d,
            (None, None) => return Err(AddressError::MissingPort),
        };
        let (host, zone) = split_zone(host)?;
        let host: Host = host.parse()?;
        if zone.is_some() && !matches!(host, Host::Ip(IpAddr::V6(_))) {
            return Err(AddressError::ZoneWithoutIpv6);
        }
        let mut address = Self::new(host, port, scheme)?;
        // Just built, so not shared: nothing is copied.
        Arc::make_mut(&mut address.0).zone = zone;
        Ok(address)
    }

    /// The IPv6 zone of a literal host, if one was given.
    pub fn zone(&self) -> Option<&Zone> {
        self.0.zone.as_ref()
    }

    /// The zone as a scope id, once it is numeric ([`Zone::Index`]).
    pub fn scope_id(&self) -> Option<u32> {
        match self.0.zone {
            Some(Zone::Index(i)) => Some(i),
            _ => None,
        }
    }

    /// Replaces the zone, for example with the index the driver found for an interface name.
    pub fn with_zone(mut self, zone: Zone) -> Self {
        Arc::make_mut(&mut self.0).zone = Some(zone);
        self
    }

    /// Routes this address through `proxy`.
    pub fn with_proxy(mut self, proxy: Proxy) -> Self {
        Arc::make_mut(&mut self.0).proxy = Some(Arc::new(proxy));
        self
    }

    /// The origin host.
    pub fn host(&self) -> &Host {
        &self.0.host
    }

    /// The origin port.
    pub fn port(&self) -> u16 {
        self.0.port
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.0.scheme
    }

    /// Whether connections to this origin use TLS.
    pub fn is_tls(&self) -> bool {
        self.0.scheme == Scheme::Https
    }

    /// The proxy, if any.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.0.proxy.as_deref()
    }

    /// The proxy, shared (for routes).
    pub fn proxy_shared(&self) -> Option<&Arc<Proxy>> {
        self.0.proxy.as_ref()
    }

    /// The host whose addresses are raced: the proxy's for HTTP proxies and SOCKS, else the
    /// origin's.
    pub fn connect_host(&self) -> (&Host, u16) {
        match self.0.proxy.as_deref() {
            Some(p) => (&p.host, p.port),
            None => (&self.0.host, self.0.port),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.0.scheme {
            Scheme::Tcp => "tcp",
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        match (&self.0.host, &self.0.zone) {
            (Host::Ip(IpAddr::V6(v6)), Some(z)) => {
                write!(f, "{scheme}://[{v6}%25{z}]:{}", self.0.port)
            }
            (host, _) => write!(f, "{scheme}://{host}:{}", self.0.port),
        }
    }
}

/// Splits `[addr%zone]` into `addr` and the zone. `%25` starts an RFC 6874 zone in a URI;
/// a bare `%` is accepted too.
fn split_zone(host: &str) -> Result<(&str, Option<Zone>), AddressError> {
    let Some(inside) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) else {
        return Ok((host, None));
    };
    let Some((ip, zone)) = inside.split_once('%') else {
        return Ok((host, None));
    };
    let zone = match zone.strip_prefix("25") {
        Some(rest) if !rest.is_empty() => rest,
        _ => zone,
    };
    Ok((ip, Some(Zone::parse(zone)?)))
}

/// The colons of an authority: how many, and where the last one is (from its start).
#[derive(Clone, Copy, Default)]
struct Colons {
    count: usize,
    last: usize,
}

fn split_host_port(authority: &str, colons: Colons) -> Result<(&str, Option<&str>), AddressError> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(AddressError::UnclosedBracket)?;
        let host = &authority[..inside.len() + 2];
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(p))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(AddressError::BadPort(after.to_owned())),
        };
    }
    // One colon separates the port; none means no port, and so do several (a bare IPv6
    // literal).
    Ok(if colons.count == 1 {
        let (host, port) = authority.split_at(colons.last);
        (host, Some(&port[1..]))
    } else {
        (authority, None)
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
    pub proxy: Option<Arc<Proxy>>,
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
            write!(f, " ({p})")?;
        }
        Ok(())
    }
}
