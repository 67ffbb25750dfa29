//! What the host can reach ([`Connectivity`]): which queries to send, which addresses can be
//! connected to, and how NAT64 maps them.

use std::net::IpAddr;

use fastfallback_proto::{DnsAnswer, Family, QueryKind};
use smallvec::SmallVec;

use crate::Nat64Prefix;
use crate::address::normalize_ip;

/// What the host can reach, as far as choosing queries and synthesizing addresses goes.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Connectivity {
    /// IPv6 connectivity: a non-link-local address and a non-link-local route (HEv3 §4.1).
    pub v6: bool,
    /// IPv4 connectivity.
    pub v4: bool,
    /// The NAT64 prefix, if one is known (HEv3 §8.1).
    pub nat64: Option<Nat64Prefix>,
}

impl Connectivity {
    /// A dual-stack host without NAT64.
    pub const DUAL_STACK: Self = Self {
        v6: true,
        v4: true,
        nat64: None,
    };

    /// Whether the host should look for a NAT64 prefix before a race
    /// ([`Nat64Prefix::DISCOVERY_NAME`], RFC 7050 §3): it has IPv6 only and knows no prefix,
    /// so without one it could reach no IPv4-only name or literal (HEv3 §8.1).
    ///
    /// ```
    /// use fastfallback_route::{Connectivity, Nat64Prefix};
    /// let v6_only = Connectivity { v6: true, v4: false, nat64: None };
    /// assert!(v6_only.needs_nat64_discovery());
    /// let known = Connectivity { nat64: Some(Nat64Prefix::WELL_KNOWN), ..v6_only };
    /// assert!(!known.needs_nat64_discovery());
    /// assert!(!Connectivity::DUAL_STACK.needs_nat64_discovery());
    /// ```
    pub fn needs_nat64_discovery(&self) -> bool {
        self.v6 && !self.v4 && self.nat64.is_none()
    }

    /// The family HEv3 §4.2 prefers: IPv6 when it has connectivity, else IPv4.
    pub fn preferred_family(&self) -> Family {
        if self.v6 { Family::V6 } else { Family::V4 }
    }

    /// The queries to send, in HEv3 §4.1 order: HTTPS (if `https`), AAAA when IPv6 works, A when
    /// IPv4 works or a NAT64 prefix is known (HEv3 §8.1: "MUST").
    pub fn queries(&self, https: bool) -> SmallVec<[QueryKind; 3]> {
        let mut q = SmallVec::new();
        if https {
            q.push(QueryKind::Https);
        }
        if self.v6 {
            q.push(QueryKind::Aaaa);
        }
        if self.v4 || self.nat64.is_some() {
            q.push(QueryKind::A);
        }
        q
    }

    /// Whether `ip` can be connected to: it is a loopback address (the host itself, whatever
    /// its global connectivity), its family works, or it is IPv4 and a NAT64 prefix can carry
    /// it (HEv3 §8.3).
    pub fn can_reach(&self, ip: IpAddr) -> bool {
        if ip.is_loopback() {
            return true;
        }
        match ip {
            IpAddr::V6(_) => self.v6,
            IpAddr::V4(v4) => {
                self.v4 || (self.v6 && self.nat64.is_some() && !Nat64Prefix::is_exempt(v4))
            }
        }
    }

    /// The destinations of `answer` as the race will see them: IPv4-mapped addresses as IPv4,
    /// DNS64-synthesized ones de-synthesized (HEv3 §8.2), HTTPS hints included. The driver
    /// finds a source for each ([`crate::SourceOf`]) and hands them in with the answer.
    pub fn destinations(&self, answer: &DnsAnswer) -> Vec<IpAddr> {
        let mut out = Vec::new();
        self.for_each_destination(answer, |ip| out.push(ip));
        out
    }

    /// [`Self::destinations`], one at a time, without building a list.
    pub fn for_each_destination(&self, answer: &DnsAnswer, mut f: impl FnMut(IpAddr)) {
        let logical = |ip: IpAddr| match (normalize_ip(ip), self.nat64) {
            (IpAddr::V6(v6), Some(p)) => p.extract(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
            (ip, _) => ip,
        };
        match answer {
            DnsAnswer::Addresses(list) => list.iter().for_each(|ip| f(logical(*ip))),
            DnsAnswer::Https(records) => {
                for r in records {
                    let v6 = r.ipv6hint.iter().map(|v| IpAddr::V6(*v));
                    v6.chain(r.ipv4hint.iter().map(|v| IpAddr::V4(*v)))
                        .for_each(|ip| f(logical(ip)));
                }
            }
            DnsAnswer::Error(_) => {}
        }
    }

    /// The address a socket connects to for `logical`: the NAT64-synthesized one when IPv4 has
    /// no route and a prefix is known (HEv3 §8.3), else `logical` itself.
    pub fn connect_ip(&self, logical: IpAddr) -> IpAddr {
        match (logical, self.nat64) {
            (IpAddr::V4(v4), Some(p)) if !self.v4 && !Nat64Prefix::is_exempt(v4) => {
                IpAddr::V6(p.synthesize(v4))
            }
            _ => logical,
        }
    }
}
