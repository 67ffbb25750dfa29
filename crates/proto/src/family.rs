//! Address families.

use std::fmt;
use std::net::IpAddr;

/// An IP address family.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub enum Family {
    /// IPv6 (AAAA records).
    V6,
    /// IPv4 (A records).
    V4,
}

impl Family {
    /// The family of `ip`. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) counts as IPv4
    /// (RFC 6724 §2.1 classifies it by its IPv4 part).
    #[inline]
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// The other family.
    #[inline]
    pub fn other(self) -> Self {
        match self {
            Self::V6 => Self::V4,
            Self::V4 => Self::V6,
        }
    }

    /// Both families, IPv6 first.
    pub const ALL: [Self; 2] = [Self::V6, Self::V4];
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V6 => "IPv6",
            Self::V4 => "IPv4",
        })
    }
}
