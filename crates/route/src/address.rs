//! What to connect to: [`Host`], [`Address`], [`Proxy`] and [`Route`].

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

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
            host: address.host.clone(),
            port: address.port,
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
    /// Shared, so every route of a race points at it without copying it.
    proxy: Option<Arc<Proxy>>,
    zone: Option<Zone>,
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
            zone: None,
        })
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
        address.zone = zone;
        Ok(address)
    }

    /// The IPv6 zone of a literal host, if one was given.
    pub fn zone(&self) -> Option<&Zone> {
        self.zone.as_ref()
    }

    /// The zone as a scope id, once it is numeric ([`Zone::Index`]).
    pub fn scope_id(&self) -> Option<u32> {
        match self.zone {
            Some(Zone::Index(i)) => Some(i),
            _ => None,
        }
    }

    /// Replaces the zone, for example with the index the driver found for an interface name.
    pub fn with_zone(mut self, zone: Zone) -> Self {
        self.zone = Some(zone);
        self
    }

    /// Routes this address through `proxy`.
    pub fn with_proxy(mut self, proxy: Proxy) -> Self {
        self.proxy = Some(Arc::new(proxy));
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
        self.proxy.as_deref()
    }

    /// The proxy, shared (for routes).
    pub fn proxy_shared(&self) -> Option<&Arc<Proxy>> {
        self.proxy.as_ref()
    }

    /// The host whose addresses are raced: the proxy's for HTTP proxies and SOCKS, else the
    /// origin's.
    pub fn connect_host(&self) -> (&Host, u16) {
        match self.proxy.as_deref() {
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
        match (&self.host, &self.zone) {
            (Host::Ip(IpAddr::V6(v6)), Some(z)) => {
                write!(f, "{scheme}://[{v6}%25{z}]:{}", self.port)
            }
            (host, _) => write!(f, "{scheme}://{host}:{}", self.port),
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
    fn an_ipv4_literal_with_a_root_dot_is_that_address_not_a_name() {
        let ip: IpAddr = "0.0.0.0".parse().unwrap();
        assert_eq!("0.0.0.0.".parse::<Host>(), Ok(Host::Ip(ip)));
        let a = Address::parse("http://192.0.2.1.:8080").unwrap();
        assert_eq!(a.host(), &Host::Ip("192.0.2.1".parse().unwrap()));
        assert_eq!(a.to_string(), "http://192.0.2.1:8080");
        // Only one root dot, as for a name.
        assert_eq!("1.2.3.4..".parse::<Host>(), Err(AddressError::EmptyLabel));
    }

    #[test]
    fn a_host_ending_in_a_number_that_is_no_dotted_quad_is_rejected_not_resolved() {
        for host in [
            "1.2.3",
            "1.2.3.",
            "10.0.0.256",
            "2130706433",
            "0x7f.1",
            "a.0X",
            "x.010",
        ] {
            let e = host.parse::<Host>().unwrap_err();
            assert!(matches!(e, AddressError::NumericName(_)), "{host}: {e:?}");
            assert!(e.to_string().contains("ends in a number"), "{e}");
        }
        let e = Address::parse("http://1.2.3:8080").unwrap_err();
        assert_eq!(e, AddressError::NumericName("1.2.3".into()));
        // A label that only starts with digits, or a hex-looking one without `0x`, is a name.
        for host in [
            "1.2.3a",
            "example.com1",
            "a.0xg",
            "cafe.beef",
            "123.example",
        ] {
            assert!(matches!(host.parse::<Host>(), Ok(Host::Name(_))), "{host}");
        }
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
        assert_eq!(Address::parse("a.com"), Err(AddressError::MissingPort));
        assert_eq!(Address::parse("a.com:"), Err(AddressError::MissingPort));
    }

    #[test]
    fn schemes_are_case_insensitive() {
        assert_eq!(
            Address::parse("HTTPS://Example.com").unwrap().scheme(),
            Scheme::Https
        );
    }

    #[test]
    fn an_unclosed_bracket_is_named() {
        let e = Address::parse("http://[::1").unwrap_err();
        assert_eq!(e, AddressError::UnclosedBracket);
        assert_eq!(e.to_string(), "IPv6 literal has an unclosed '['");
        assert_eq!(
            Address::parse("tcp://[2001:db8::1:80").unwrap_err(),
            AddressError::UnclosedBracket
        );
    }

    #[test]
    fn a_missing_port_is_named() {
        let e = Address::parse("example.com").unwrap_err();
        assert_eq!(e.to_string(), "port is missing (write host:port)");
    }

    #[test]
    fn link_local_literals_keep_their_zone() {
        let a = Address::parse("http://[fe80::1%2]:80").unwrap();
        assert_eq!(a.host(), &Host::Ip("fe80::1".parse().unwrap()));
        assert_eq!(a.scope_id(), Some(2));
        let b = Address::parse("https://[fe80::1%25eth0]/x").unwrap();
        assert_eq!(b.zone(), Some(&Zone::Name("eth0".into())));
        assert_eq!(b.port(), 443);
        assert_eq!(b.to_string(), "https://[fe80::1%25eth0]:443");
        let c = Address::parse("[fe80::1%eth0]:7").unwrap();
        assert_eq!(c.zone(), Some(&Zone::Name("eth0".into())));
        // `%25` alone is the zone index 25, not an empty encoded zone.
        assert_eq!(
            Address::parse("[fe80::1%25]:7").unwrap().scope_id(),
            Some(25)
        );
    }

    #[test]
    fn bad_zones_are_rejected() {
        assert_eq!(
            Address::parse("[fe80::1%]:7"),
            Err(AddressError::BadZone(String::new()))
        );
        assert!(matches!(
            Address::parse("[fe80::1%e/th]:7"),
            Err(AddressError::BadPort(_)
                | AddressError::BadZone(_)
                | AddressError::UnclosedBracket)
        ));
        assert_eq!(
            Address::parse("[fe80::1%eth 0]:7"),
            Err(AddressError::BadZone("eth 0".into()))
        );
    }

    #[test]
    fn localhost_names_are_recognised() {
        assert!("localhost".parse::<Host>().unwrap().is_localhost());
        assert!("app.localhost".parse::<Host>().unwrap().is_localhost());
        assert!(!"localhost.example".parse::<Host>().unwrap().is_localhost());
        assert!(!"notlocalhost".parse::<Host>().unwrap().is_localhost());
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
