//! Application protocols and ALPN ids.

use std::fmt;

/// An ALPN protocol id (RFC 7301) that fastfallback knows how to speak, or another one.
#[derive(Clone, Debug, Eq, Hash, PartialEq)]
pub enum Alpn {
    /// `h2`: HTTP/2 over TLS.
    H2,
    /// `http/1.1`.
    Http11,
    /// `h3`: HTTP/3 over QUIC. fastfallback does not speak QUIC yet; this id exists so HTTPS
    /// records that advertise it can be read and filtered (RFC 9460 §7.1.2).
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

/// The application protocol a finished connection speaks.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum Protocol {
    /// HTTP/1.1: one exchange at a time.
    Http11,
    /// HTTP/2: multiplexed streams up to the peer's limit.
    Http2,
}

impl Protocol {
    /// Whether connections of this protocol carry many exchanges at once.
    pub fn is_multiplexed(self) -> bool {
        self == Self::Http2
    }
}
