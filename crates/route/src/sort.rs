//! RFC 6724 §6 destination address selection, in userspace.
//!
//! hickory returns addresses in DNS order and getaddrinfo's sort never runs, so the engine sorts
//! for itself (HEv3 §5.3: "MUST"). Rules that need the source address take it as input: the
//! driver finds it with the UDP-connect trick; tests use a [`HostModel`].
//!
//! Rules implemented: 1 (unusable last), 2 (matching scope), 3 (avoid deprecated sources),
//! 5 (matching label), 6 (higher precedence), 8 (smaller scope), the HEv3 §5.3 RTT rule between
//! 8 and 9, and 9 (longest matching prefix, IPv6 only, as Go does: on IPv4 it undoes DNS
//! round-robin). Rule 4 (Mobile IPv6 home addresses) and Rule 7 (native transport) are skipped:
//! Rules 5 and 6 already demote 6to4 and Teredo. Rule 10 holds because the sort is stable.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// The source address the kernel would use to reach a destination.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub struct Source {
    /// The address.
    pub addr: IpAddr,
    /// Its prefix length; Rule 9 counts common bits only up to here.
    pub prefix_len: u8,
    /// Whether the address is deprecated (`IFA_F_DEPRECATED`, Rule 3).
    pub deprecated: bool,
}

impl Source {
    /// A preferred (not deprecated) source.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Self {
        Self {
            addr,
            prefix_len,
            deprecated: false,
        }
    }
}

/// One destination and the source address the host would use for it: what the driver hands
/// the race with each DNS answer, so the race can sort without asking anyone.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SourceOf {
    /// The destination (as the race will see it: IPv4-mapped and NAT64-synthesized addresses
    /// already turned into IPv4; see [`crate::Connectivity::destinations`]).
    pub dst: IpAddr,
    /// Its source, or `None` when the destination is unusable (RFC 6724 Rule 1).
    pub source: Option<Source>,
}

/// Finds the source address for a destination, or `None` when the destination is unusable
/// (RFC 6724 Rule 1: no route, or the kernel refuses it).
///
/// The driver implements this with a connected UDP socket (no packet is sent), outside the
/// race, and hands the results in as [`SourceOf`] data. Tests use a [`HostModel`].
pub trait SourceSelector {
    /// The source for `dst`, or `None` if `dst` is unusable.
    fn source_for(&self, dst: IpAddr) -> Option<Source>;

    /// The sources of every destination in `dsts`.
    fn sources_for(&self, dsts: impl IntoIterator<Item = IpAddr>) -> Vec<SourceOf>
    where
        Self: Sized,
    {
        dsts.into_iter()
            .map(|dst| SourceOf {
                dst,
                source: self.source_for(dst),
            })
            .collect()
    }
}

/// A host described as data: one source per family, plus destinations with no route. It stands
/// in for the kernel in tests, benchmarks and the demo.
///
/// [`HostModel::e0`] is the standards' default host "E0": 2001:db8:ffff::100/64 and
/// 203.0.113.100/24, each with a default route.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct HostModel {
    /// The IPv6 source, if the host has IPv6 connectivity.
    pub v6: Option<Source>,
    /// The IPv4 source, if the host has IPv4 connectivity.
    pub v4: Option<Source>,
    /// Destination prefixes with an `unreachable` route.
    pub unreachable: Vec<(IpAddr, u8)>,
}

impl HostModel {
    /// Host E0: dual-stack, 2001:db8:ffff::100/64 and 203.0.113.100/24.
    pub fn e0() -> Self {
        Self {
            v6: Some(Source::new(
                "2001:db8:ffff::100".parse().expect("literal"),
                64,
            )),
            v4: Some(Source::new("203.0.113.100".parse().expect("literal"), 24)),
            unreachable: Vec::new(),
        }
    }

    /// E0 without IPv6.
    pub fn v4_only() -> Self {
        Self {
            v6: None,
            ..Self::e0()
        }
    }

    /// E0 without IPv4.
    pub fn v6_only() -> Self {
        Self {
            v4: None,
            ..Self::e0()
        }
    }

    /// Adds an `unreachable` route for `prefix/len`.
    pub fn with_unreachable(mut self, prefix: IpAddr, len: u8) -> Self {
        self.unreachable.push((prefix, len));
        self
    }
}

impl SourceSelector for HostModel {
    fn source_for(&self, dst: IpAddr) -> Option<Source> {
        if self
            .unreachable
            .iter()
            .any(|&(p, len)| common_prefix_len(p, dst, 128) >= len)
        {
            return None;
        }
        if dst.is_loopback() {
            return Some(Source::new(dst, if dst.is_ipv4() { 8 } else { 128 }));
        }
        match dst {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        }
    }
}

/// One row of the RFC 6724 policy table.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
struct PolicyRow {
    prefix: Ipv6Addr,
    len: u8,
    precedence: u8,
    label: u8,
}

const fn row(prefix: [u16; 8], len: u8, precedence: u8, label: u8) -> PolicyRow {
    let p = prefix;
    PolicyRow {
        prefix: Ipv6Addr::new(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]),
        len,
        precedence,
        label,
    }
}

/// RFC 6724 §2.1's default policy table.
const DEFAULT_POLICY: [PolicyRow; 9] = [
    row([0, 0, 0, 0, 0, 0, 0, 1], 128, 50, 0),
    row([0; 8], 0, 40, 1),
    row([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, 35, 4),
    row([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, 30, 2),
    row([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, 5, 5),
    row([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, 3, 13),
    row([0; 8], 96, 1, 3),
    row([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, 1, 11),
    row([0x3ffe, 0, 0, 0, 0, 0, 0, 0], 16, 1, 12),
];

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn policy(ip: IpAddr) -> PolicyRow {
    let v6 = IpAddr::V6(as_v6(ip));
    let mut best = DEFAULT_POLICY[1];
    for r in DEFAULT_POLICY {
        if common_prefix_len(IpAddr::V6(r.prefix), v6, 128) >= r.len && r.len >= best.len {
            best = r;
        }
    }
    best
}

/// The RFC 6724 §3.1 scope of an address: 0x2 link-local, 0x5 site-local, 0xE global.
pub fn scope(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if o[0] == 127 || (o[0] == 169 && o[1] == 254) {
                0x2
            } else {
                0xE
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return scope(IpAddr::V4(v4));
            }
            let s = v6.segments();
            if v6.is_multicast() {
                (v6.octets()[1] & 0x0f).max(1)
            } else if v6.is_loopback() || (s[0] & 0xffc0) == 0xfe80 {
                0x2
            } else if (s[0] & 0xffc0) == 0xfec0 {
                0x5
            } else {
                0xE
            }
        }
    }
}

/// Leading bits `a` and `b` share, stopping at `max` (RFC 6724 §2.2). 0 across families.
pub fn common_prefix_len(a: IpAddr, b: IpAddr, max: u8) -> u8 {
    let (x, y, width) = match (a, b) {
        (IpAddr::V4(x), IpAddr::V4(y)) => (
            u128::from(u32::from(x)) << 96,
            u128::from(u32::from(y)) << 96,
            32,
        ),
        (IpAddr::V6(x), IpAddr::V6(y)) => (u128::from(x), u128::from(y), 128),
        _ => return 0,
    };
    let same = (x ^ y).leading_zeros().min(width) as u8;
    same.min(max)
}

/// What the sort needs to know about one destination.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SortInput {
    /// The destination (IPv4-mapped addresses should already be plain IPv4).
    pub dst: IpAddr,
    /// Its source, or `None` when unusable (Rule 1).
    pub source: Option<Source>,
    /// The route's smoothed RTT from history, for the HEv3 §5.3 RTT rule.
    pub srtt: Option<Duration>,
}

/// Rules 1–8 and the RTT rule, as a key: lower sorts first.
#[derive(Clone, Copy, Debug, Eq, Ord, PartialEq, PartialOrd)]
struct RuleKey {
    unusable: bool,
    scope_mismatch: bool,
    deprecated: bool,
    label_mismatch: bool,
    neg_precedence: i16,
    scope: u8,
    srtt: Duration,
}

fn rule_key(i: &SortInput) -> RuleKey {
    let Some(s) = i.source else {
        return RuleKey {
            unusable: true,
            scope_mismatch: true,
            deprecated: true,
            label_mismatch: true,
            neg_precedence: -i16::from(policy(i.dst).precedence),
            scope: scope(i.dst),
            srtt: i.srtt.unwrap_or(Duration::MAX),
        };
    };
    RuleKey {
        unusable: false,
        scope_mismatch: scope(i.dst) != scope(s.addr),
        deprecated: s.deprecated,
        label_mismatch: policy(i.dst).label != policy(s.addr).label,
        neg_precedence: -i16::from(policy(i.dst).precedence),
        scope: scope(i.dst),
        // Unknown RTT sorts after known RTT; equal or both unknown tie (Rule 10 keeps order).
        srtt: i.srtt.unwrap_or(Duration::MAX),
    }
}

/// Sorts `items` by RFC 6724 §6 (see the module doc for the rules used), stably.
///
/// Returns the permutation applied, as indices into the input. Rule 9 is applied inside each run
/// of entries that tie on every earlier rule: the IPv6 entries of the run are ordered by common
/// prefix length with their source, and IPv4 entries keep their places. This keeps the order
/// total, so the sort is well defined even though Rule 9 compares only IPv6 pairs.
///
/// ```
/// use fastfallback_route::sort::{sort_destinations, SortInput};
/// use fastfallback_route::{HostModel, SourceSelector};
///
/// let host = HostModel::e0();
/// let dsts = ["fd00::1", "192.0.2.1", "2001:db8::1"].map(|s| s.parse().unwrap());
/// let inputs: Vec<_> = dsts.iter()
///     .map(|&dst| SortInput { dst, source: host.source_for(dst), srtt: None })
///     .collect();
/// let order = sort_destinations(&inputs);
/// // 2001:db8::1 (Rule 6: 40 > 35), 192.0.2.1, then the ULA (Rule 5: label mismatch).
/// assert_eq!(order, [2, 1, 0]);
/// ```
pub fn sort_destinations(items: &[SortInput]) -> Vec<usize> {
    let keys: Vec<RuleKey> = items.iter().map(rule_key).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && keys[order[end]] == keys[order[start]] {
            end += 1;
        }
        if end - start > 1 {
            rule9_within_run(items, &mut order[start..end]);
        }
        start = end;
    }
    order
}

fn rule9_within_run(items: &[SortInput], run: &mut [usize]) {
    let cpl = |i: usize| -> u8 {
        let it = &items[i];
        match it.source {
            Some(s) => common_prefix_len(s.addr, it.dst, s.prefix_len),
            None => 0,
        }
    };
    let slots: Vec<usize> = (0..run.len())
        .filter(|&k| items[run[k]].dst.is_ipv6())
        .collect();
    if slots.len() < 2 {
        return;
    }
    let mut v6: Vec<usize> = slots.iter().map(|&k| run[k]).collect();
    v6.sort_by_key(|&i| std::cmp::Reverse(cpl(i)));
    for (k, i) in slots.into_iter().zip(v6) {
        run[k] = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn sorted(host: &HostModel, dsts: &[&str]) -> Vec<IpAddr> {
        let inputs: Vec<SortInput> = dsts
            .iter()
            .map(|d| SortInput {
                dst: ip(d),
                source: host.source_for(ip(d)),
                srtt: None,
            })
            .collect();
        sort_destinations(&inputs)
            .into_iter()
            .map(|i| inputs[i].dst)
            .collect()
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| ip(s)).collect()
    }

    // Worked examples from the standards' §2.5 on host E0.
    #[test]
    fn ula_sorts_after_ipv4_and_global_ipv6_first() {
        let out = sorted(&HostModel::e0(), &["fd00::1", "192.0.2.1", "2001:db8::1"]);
        assert_eq!(out, ips(&["2001:db8::1", "192.0.2.1", "fd00::1"]));
    }

    #[test]
    fn teredo_destination_sorts_after_ipv4() {
        let out = sorted(&HostModel::e0(), &["2001:0:4136:e378::1", "192.0.2.1"]);
        assert_eq!(out, ips(&["192.0.2.1", "2001:0:4136:e378::1"]));
    }

    #[test]
    fn six_to_four_destination_sorts_after_ipv4() {
        let out = sorted(&HostModel::e0(), &["2002:c000:201::1", "192.0.2.1"]);
        assert_eq!(out, ips(&["192.0.2.1", "2002:c000:201::1"]));
    }

    #[test]
    fn longest_matching_prefix_orders_ipv6() {
        let out = sorted(
            &HostModel::e0(),
            &[
                "2001:db8::1",
                "2001:db8::2",
                "2001:db8:ffff::5",
                "2001:db8:fff0::7",
            ],
        );
        assert_eq!(
            out,
            ips(&[
                "2001:db8:ffff::5",
                "2001:db8:fff0::7",
                "2001:db8::1",
                "2001:db8::2"
            ])
        );
    }

    #[test]
    fn unusable_ipv6_sorts_after_ipv4() {
        let out = sorted(
            &HostModel::v4_only(),
            &["2001:db8::1", "2001:db8::2", "192.0.2.1"],
        );
        assert_eq!(out, ips(&["192.0.2.1", "2001:db8::1", "2001:db8::2"]));
    }

    #[test]
    fn unreachable_route_sorts_destination_last() {
        let host = HostModel::e0().with_unreachable(ip("2001:db8:dead::"), 48);
        let out = sorted(&host, &["2001:db8:dead::1", "192.0.2.1"]);
        assert_eq!(out, ips(&["192.0.2.1", "2001:db8:dead::1"]));
    }

    #[test]
    fn rule9_is_not_applied_to_ipv4_so_dns_order_survives() {
        let out = sorted(&HostModel::e0(), &["198.51.100.1", "203.0.113.7"]);
        assert_eq!(out, ips(&["198.51.100.1", "203.0.113.7"]));
    }

    #[test]
    fn lower_rtt_wins_between_rules_8_and_9() {
        let host = HostModel::e0();
        let mk = |d: &str, ms: Option<u64>| SortInput {
            dst: ip(d),
            source: host.source_for(ip(d)),
            srtt: ms.map(Duration::from_millis),
        };
        let inputs = [mk("2001:db8::a", Some(200)), mk("2001:db8::b", Some(20))];
        assert_eq!(sort_destinations(&inputs), [1, 0]);
    }

    #[test]
    fn scopes_follow_rfc6724_section_3() {
        assert_eq!(scope(ip("fe80::1")), 0x2);
        assert_eq!(scope(ip("::1")), 0x2);
        assert_eq!(scope(ip("fec0::1")), 0x5);
        assert_eq!(scope(ip("fd00::1")), 0xE);
        assert_eq!(scope(ip("10.0.0.1")), 0xE);
        assert_eq!(scope(ip("169.254.0.1")), 0x2);
        assert_eq!(scope(ip("ff02::1")), 0x2);
    }

    #[test]
    fn common_prefix_len_stops_at_source_prefix() {
        assert_eq!(common_prefix_len(ip("fe80::1"), ip("fe80::2"), 64), 64);
        assert_eq!(
            common_prefix_len(ip("192.0.2.1"), ip("2001:db8::1"), 128),
            0
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn dst() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
            (0u16..4, 0u16..16).prop_map(|(a, b)| IpAddr::from([0x2001, 0xdb8, a, 0, 0, 0, 0, b])),
        ]
    }

    proptest! {
        #[test]
        fn sorting_is_a_stable_permutation(
            dsts in prop::collection::vec(dst(), 0..64),
            rtts in prop::collection::vec(prop::option::of(0u64..500), 64),
        ) {
            let host = HostModel::e0();
            let inputs: Vec<SortInput> = dsts
                .iter()
                .zip(&rtts)
                .map(|(d, r)| SortInput {
                    dst: *d,
                    source: host.source_for(*d),
                    srtt: r.map(Duration::from_millis),
                })
                .collect();
            let order = sort_destinations(&inputs);
            let mut seen = order.clone();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..inputs.len()).collect::<Vec<_>>());
            // Sorting the sorted list again changes nothing (the order is total).
            let again: Vec<SortInput> = order.iter().map(|&i| inputs[i]).collect();
            prop_assert_eq!(sort_destinations(&again), (0..again.len()).collect::<Vec<_>>());
        }
    }
}
