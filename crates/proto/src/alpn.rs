//! Application protocols and ALPN ids.

use std::fmt;

/// An ALPN protocol id (RFC 7301) that fastfallback knows how to speak, or another one.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub enum Alpn {
    /// `h2`: HTTP/2 over TLS.
    H2,
    /// `http/1.1`.
    Http11,
    /// `h3`: HTTP/3 over QUIC (RFC 9114). The only id a QUIC attempt offers; HTTPS records
    /// that list it give QUIC endpoints to a client that speaks QUIC
    /// ([`TransportKind::Quic`]), and are filtered out for one that does not (RFC 9460
    /// §7.1.2).
    H3,
    /// Any other id, as raw bytes.
    Other(Vec<u8>),
}

impl Alpn {
    /// Parses an id as it appears on the wire.
    pub fn from_bytes(id: &[u8]) -> Self {
        match id {
            b"h2" => Self::H2,
            b"http/1.1" => Self::Http11,
            b"h3" => Self::H3,
            other => Self::Other(other.to_vec()),
        }
    }

    /// The id as it appears on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::H2 => b"h2",
            Self::Http11 => b"http/1.1",
            Self::H3 => b"h3",
            Self::Other(b) => b,
        }
    }

    /// The protocol this id selects, if fastfallback speaks it over TCP.
    pub fn protocol(&self) -> Option<Protocol> {
        match self {
            Self::H2 => Some(Protocol::Http2),
            Self::Http11 => Some(Protocol::Http11),
            _ => None,
        }
    }
}

impl fmt::Display for Alpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The transport an attempt runs on: its handshake is what counts as a connection (HEv3
/// §6.1: the TCP handshake, then TLS over it; or the QUIC handshake, TLS included).
///
/// ```
/// use fastfallback_proto::{Alpn, TransportKind};
///
/// assert_eq!(TransportKind::default(), TransportKind::Tcp);
/// assert_eq!(TransportKind::QUIC_ALPN, [Alpn::H3]);
/// assert_eq!(TransportKind::Quic.to_string(), "quic");
/// ```
#[derive(Clone, Copy, Debug, Default, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub enum TransportKind {
    /// TCP, with TLS and ALPN over it for `https` origins.
    #[default]
    Tcp,
    /// QUIC (RFC 9000), whose handshake carries TLS 1.3 (RFC 9001) and ALPN `h3`.
    Quic,
}

impl TransportKind {
    /// The ALPN ids every QUIC attempt offers: HTTP/3 alone, the only protocol the engine
    /// speaks over QUIC (HEv3 §6.2: one ProtocolNameList per transport, holding every id the
    /// client speaks on it). TCP's list is the policy's [`AlpnOffer`], so it has no constant.
    pub const QUIC_ALPN: &'static [Alpn] = &[Alpn::H3];
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Quic => "quic",
        })
    }
}

/// Which application protocols the client offers in ALPN (RFC 7301), most preferred first:
/// what it will speak, so a server never picks one it won't.
///
/// ```
/// use fastfallback_proto::{Alpn, AlpnOffer};
///
/// assert_eq!(AlpnOffer::default().ids(), [Alpn::H2, Alpn::Http11]);
/// assert_eq!(AlpnOffer::from_ids(&[b"http/1.1".to_vec()]), Some(AlpnOffer::Http11Only));
/// assert!(!AlpnOffer::Http11Only.speaks(&Alpn::H2));
/// ```
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum AlpnOffer {
    /// `h2`, then `http/1.1`.
    #[default]
    Both,
    /// `h2` only.
    Http2Only,
    /// `http/1.1` only.
    Http11Only,
}

impl AlpnOffer {
    /// The ids offered, most preferred first.
    pub fn ids(self) -> &'static [Alpn] {
        const BOTH: &[Alpn] = &[Alpn::H2, Alpn::Http11];
        const H2: &[Alpn] = &[Alpn::H2];
        const H1: &[Alpn] = &[Alpn::Http11];
        match self {
            Self::Both => BOTH,
            Self::Http2Only => H2,
            Self::Http11Only => H1,
        }
    }

    /// Whether `alpn` is offered.
    pub fn speaks(self, alpn: &Alpn) -> bool {
        self.ids().contains(alpn)
    }

    /// The offer a list of wire ids makes (a TLS configuration's `alpn_protocols`), if it is
    /// one the engine speaks over TCP: `h2` and/or `http/1.1`, in either order (`http/1.1`
    /// first is read as both; the server chooses).
    pub fn from_ids(ids: &[Vec<u8>]) -> Option<Self> {
        let parsed: Vec<Alpn> = ids.iter().map(|id| Alpn::from_bytes(id)).collect();
        let h2 = parsed.contains(&Alpn::H2);
        let h1 = parsed.contains(&Alpn::Http11);
        if parsed.iter().any(|a| a.protocol().is_none()) {
            return None;
        }
        match (h2, h1) {
            (true, true) => Some(Self::Both),
            (true, false) => Some(Self::Http2Only),
            (false, true) => Some(Self::Http11Only),
            (false, false) => None,
        }
    }
}

/// The application protocol a finished connection speaks.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Protocol {
    /// HTTP/1.1: one exchange at a time.
    Http11,
    /// HTTP/2: multiplexed streams up to the peer's limit.
    Http2,
    /// HTTP/3 (RFC 9114): multiplexed QUIC streams up to the peer's limit.
    Http3,
}

impl Protocol {
    /// Whether connections of this protocol carry many exchanges at once.
    pub fn is_multiplexed(self) -> bool {
        matches!(self, Self::Http2 | Self::Http3)
    }
}
