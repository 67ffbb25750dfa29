//! NAT64: RFC 6052 address synthesis and de-synthesis (HEv3 §8).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fastfallback_proto::DnsAnswer;

/// A NAT64 prefix (PREF64), learned from a Router Advertisement (RFC 8781) or from the
/// `ipv4only.arpa` query (RFC 7050).
///
/// ```
/// use fastfallback_route::Nat64Prefix;
/// use std::net::{Ipv4Addr, Ipv6Addr};
///
/// let p = Nat64Prefix::WELL_KNOWN;
/// let v6 = p.synthesize(Ipv4Addr::new(192, 0, 2, 33));
/// assert_eq!(v6, "64:ff9b::c000:221".parse::<Ipv6Addr>().unwrap());
/// assert_eq!(p.extract(v6), Some(Ipv4Addr::new(192, 0, 2, 33)));
/// ```
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub struct Nat64Prefix {
    bytes: [u8; 16],
    len: u8,
}

/// Why a NAT64 prefix was rejected.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Nat64Error {
    /// RFC 6052 §2.2 allows only 32, 40, 48, 56, 64 and 96 bits.
    BadLength(u8),
}

impl fmt::Display for Nat64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength(l) => write!(
                f,
                "NAT64 prefix length /{l} is not one of 32, 40, 48, 56, 64 or 96 (RFC 6052 §2.2)"
            ),
        }
    }
}

impl std::error::Error for Nat64Error {}

impl Nat64Prefix {
    /// The well-known prefix `64:ff9b::/96` (RFC 6052 §2.1).
    pub const WELL_KNOWN: Self = Self {
        bytes: [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        len: 96,
    };

    /// A prefix of `len` bits. Bits past `len` are ignored.
    pub fn new(prefix: Ipv6Addr, len: u8) -> Result<Self, Nat64Error> {
        if ![32, 40, 48, 56, 64, 96].contains(&len) {
            return Err(Nat64Error::BadLength(len));
        }
        let mut bytes = prefix.octets();
        for b in bytes.iter_mut().skip(usize::from(len / 8)) {
            *b = 0;
        }
        Ok(Self { bytes, len })
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// The prefix as an address (host bits zero).
    pub fn prefix(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.bytes)
    }

    /// Byte positions the 4 IPv4 octets occupy for this prefix length (RFC 6052 §2.2, Figure 1).
    /// Byte 8 (the "u" octet) is always skipped.
    fn v4_positions(&self) -> [usize; 4] {
        match self.len {
            32 => [4, 5, 6, 7],
            40 => [5, 6, 7, 9],
            48 => [6, 7, 9, 10],
            56 => [7, 9, 10, 11],
            64 => [9, 10, 11, 12],
            _ => [12, 13, 14, 15],
        }
    }

    /// The IPv6 address that reaches `v4` through this NAT64 (RFC 6052 §2.3).
    pub fn synthesize(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let mut out = self.bytes;
        for (pos, octet) in self.v4_positions().into_iter().zip(v4.octets()) {
            out[pos] = octet;
        }
        Ipv6Addr::from(out)
    }

    /// The IPv4 address embedded in `v6`, if `v6` lies inside this prefix (RFC 6052 §2.3;
    /// HEv3 §8.2 requires checking every AAAA answer).
    pub fn extract(&self, v6: Ipv6Addr) -> Option<Ipv4Addr> {
        let o = v6.octets();
        let full = usize::from(self.len / 8);
        if o[..full] != self.bytes[..full] {
            return None;
        }
        if self.len < 96 && o[8] != 0 {
            return None;
        }
        let p = self.v4_positions();
        Some(Ipv4Addr::new(o[p[0]], o[p[1]], o[p[2]], o[p[3]]))
    }

    /// The prefix a DNS64 resolver used, found from its AAAA answer for `ipv4only.arpa` (RFC
    /// 7050 §3): the name has only the well-known IPv4 addresses 192.0.0.170 and 192.0.0.171,
    /// so the synthesized answer holds one of them at the place an RFC 6052 prefix length puts
    /// it. Each length is tried, longest first; the first address that fits gives the prefix.
    /// `None` for an empty answer (no DNS64: RFC 7050 §3 says there is no NAT64 then).
    ///
    /// ```
    /// use fastfallback_route::Nat64Prefix;
    ///
    /// let answer = ["64:ff9b::c000:aa".parse().unwrap(), "64:ff9b::c000:ab".parse().unwrap()];
    /// assert_eq!(Nat64Prefix::discover(&answer), Some(Nat64Prefix::WELL_KNOWN));
    /// assert_eq!(Nat64Prefix::discover(&[]), None);
    /// ```
    pub fn discover(answer: &[Ipv6Addr]) -> Option<Self> {
        answer.iter().find_map(|&v6| Self::synthesized_from(v6))
    }

    /// The name whose AAAA answer tells the prefix ([`Self::discover_from`]): `ipv4only.arpa`
    /// (RFC 7050 §2). The query goes to the network's own resolver, the one that would
    /// synthesize, and is never answered locally (RFC 7050 §3).
    pub const DISCOVERY_NAME: &'static str = "ipv4only.arpa";

    /// The prefix the AAAA `answer` for [`Self::DISCOVERY_NAME`] shows ([`Self::discover`] on
    /// its IPv6 addresses). An error, NODATA or an answer without a synthesized address
    /// means no NAT64 (RFC 7050 §3: the host then has none to use).
    ///
    /// ```
    /// use fastfallback_proto::{DnsAnswer, DnsError};
    /// use fastfallback_route::Nat64Prefix;
    ///
    /// let answer = DnsAnswer::Addresses(vec!["64:ff9b::c000:aa".parse().unwrap()]);
    /// assert_eq!(Nat64Prefix::discover_from(&answer), Some(Nat64Prefix::WELL_KNOWN));
    /// assert_eq!(Nat64Prefix::discover_from(&DnsAnswer::Error(DnsError::NxDomain)), None);
    /// ```
    pub fn discover_from(answer: &DnsAnswer) -> Option<Self> {
        match answer {
            DnsAnswer::Addresses(list) => list.iter().find_map(|ip| match ip {
                IpAddr::V6(v6) => Self::synthesized_from(*v6),
                IpAddr::V4(_) => None,
            }),
            DnsAnswer::Https(_) | DnsAnswer::Error(_) => None,
        }
    }

    /// The prefix that synthesized `v6` from one of `ipv4only.arpa`'s well-known addresses
    /// 192.0.0.170 and 192.0.0.171 (RFC 7050 §2), trying each RFC 6052 length, longest first.
    fn synthesized_from(v6: Ipv6Addr) -> Option<Self> {
        const WKA: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 0, 170), Ipv4Addr::new(192, 0, 0, 171)];
        [96u8, 64, 56, 48, 40, 32].into_iter().find_map(|len| {
            let mut bytes = v6.octets();
            bytes[usize::from(len / 8)..].fill(0);
            let prefix = Self::new(Ipv6Addr::from(bytes), len).ok()?;
            let embedded = prefix.extract(v6)?;
            (WKA.contains(&embedded) && prefix.synthesize(embedded) == v6).then_some(prefix)
        })
    }

    /// Whether HEv3 §8.3 exempts `v4` from synthesis: 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16 and
    /// 255.255.255.255/32 are neither needed nor possible through NAT64.
    pub fn is_exempt(v4: Ipv4Addr) -> bool {
        let o = v4.octets();
        o[0] == 0 || o[0] == 127 || (o[0] == 169 && o[1] == 254) || v4.is_broadcast()
    }
}

impl fmt::Display for Nat64Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.prefix(), self.len)
    }
}

#[cfg(test)]
mod discovery_tests {
    use super::*;

    #[test]
    fn rfc7050_discovery_finds_the_prefix_for_every_rfc6052_length() {
        // T29 (a): the well-known prefix.
        let wkp = [
            "64:ff9b::c000:aa".parse().unwrap(),
            "64:ff9b::c000:ab".parse().unwrap(),
        ];
        assert_eq!(Nat64Prefix::discover(&wkp), Some(Nat64Prefix::WELL_KNOWN));
        // A network-specific prefix of each length, synthesized the RFC 6052 way.
        for len in [32u8, 40, 48, 56, 64, 96] {
            let prefix = Nat64Prefix::new("2001:db8:122:344::".parse().unwrap(), len).unwrap();
            let answer = [prefix.synthesize(Ipv4Addr::new(192, 0, 0, 171))];
            let found = Nat64Prefix::discover(&answer).unwrap();
            assert_eq!(
                found.synthesize(Ipv4Addr::new(198, 51, 100, 1)),
                prefix.synthesize(Ipv4Addr::new(198, 51, 100, 1)),
                "/{len}"
            );
        }
    }

    #[test]
    fn the_prefix_is_read_from_the_ipv6_addresses_of_an_aaaa_answer_and_nothing_else() {
        use fastfallback_proto::DnsError;
        let prefix = Nat64Prefix::new("2001:db8:122:344::".parse().unwrap(), 64).unwrap();
        let synthesized = IpAddr::V6(prefix.synthesize(Ipv4Addr::new(192, 0, 0, 170)));
        // An IPv4 address in the list (a resolver's odd answer) is passed over.
        let answer = DnsAnswer::Addresses(vec!["192.0.0.170".parse().unwrap(), synthesized]);
        assert_eq!(Nat64Prefix::discover_from(&answer), Some(prefix));
        assert_eq!(
            Nat64Prefix::discover_from(&DnsAnswer::Addresses(Vec::new())),
            None
        );
        let failed = DnsAnswer::Error(DnsError::NxDomain);
        assert_eq!(Nat64Prefix::discover_from(&failed), None);
        assert_eq!(
            Nat64Prefix::discover_from(&DnsAnswer::Https(Vec::new())),
            None
        );
    }

    #[test]
    fn an_empty_or_unrelated_answer_is_no_nat64() {
        // T29 (b): NODATA.
        assert_eq!(Nat64Prefix::discover(&[]), None);
        // A real AAAA record for the name, not a synthesized one.
        assert_eq!(
            Nat64Prefix::discover(&["2001:db8::1".parse().unwrap()]),
            None
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    const EXAMPLE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 33);

    // RFC 6052 §2.4's examples for 192.0.2.33 (standards Appendix B).
    #[test]
    fn synthesis_matches_rfc6052_examples_for_every_length() {
        let cases = [
            ("2001:db8::", 32, "2001:db8:c000:221::"),
            ("2001:db8:100::", 40, "2001:db8:1c0:2:21::"),
            ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
            ("64:ff9b::", 96, "64:ff9b::c000:221"),
        ];
        for (base, len, expect) in cases {
            let p = Nat64Prefix::new(v6(base), len).unwrap();
            assert_eq!(p.synthesize(EXAMPLE), v6(expect), "/{len}");
            assert_eq!(p.extract(v6(expect)), Some(EXAMPLE), "/{len}");
        }
    }

    #[test]
    fn well_known_prefix_round_trips() {
        let p = Nat64Prefix::WELL_KNOWN;
        assert_eq!(
            p.synthesize(Ipv4Addr::new(192, 0, 2, 1)),
            v6("64:ff9b::c000:201")
        );
        assert_eq!(
            p.extract(v6("64:ff9b::c000:201")),
            Some(Ipv4Addr::new(192, 0, 2, 1))
        );
    }

    #[test]
    fn addresses_outside_the_prefix_are_not_extracted() {
        assert_eq!(Nat64Prefix::WELL_KNOWN.extract(v6("2001:db8::a")), None);
    }

    #[test]
    fn bad_prefix_lengths_are_rejected() {
        assert_eq!(
            Nat64Prefix::new(v6("64:ff9b::"), 80),
            Err(Nat64Error::BadLength(80))
        );
        assert!(Nat64Prefix::new(v6("64:ff9b::"), 0).is_err());
    }

    #[test]
    fn exempt_ranges_follow_hev3_section_8_3() {
        for a in ["0.1.2.3", "127.0.0.1", "169.254.1.1", "255.255.255.255"] {
            assert!(Nat64Prefix::is_exempt(a.parse().unwrap()), "{a}");
        }
        assert!(!Nat64Prefix::is_exempt(Ipv4Addr::new(192, 0, 2, 1)));
    }
}
