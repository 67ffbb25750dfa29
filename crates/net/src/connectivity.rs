//! Which address families this host can use (HEv3 §4.1), and which network it is on, read
//! from the kernel.
//!
//! HEv3 §4.1: a client queries AAAA only if it has IPv6 connectivity, meaning an IPv6 address
//! that is not link-local and a route that is not link-local; likewise A for IPv4. On Linux the
//! kernel's tables are read from `/proc/thread-self/net` (the calling thread's network
//! namespace). Elsewhere, or if the tables cannot be read, both families are assumed to work,
//! which costs at worst one query and one fast-failing attempt.

use std::hash::{Hash, Hasher};
use std::net::Ipv6Addr;

use fastfallback_route::{Connectivity, NetworkId};

/// What the driver knows about the network the calling thread is on.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct NetworkState {
    /// Which families work (HEv3 §4.1).
    pub connectivity: Connectivity,
    /// A digest of the source prefixes and default routes: route memory is kept per network
    /// (HEv3 §5.3, R-21).
    pub id: NetworkId,
}

/// Reads the host's IPv6 and IPv4 connectivity from the kernel (see the module docs).
///
/// ```
/// let c = fastfallback_net::detect_connectivity();
/// // A machine running the doc test can reach something.
/// assert!(c.v4 || c.v6);
/// ```
pub fn detect_connectivity() -> Connectivity {
    detect_network().connectivity
}

/// Reads the host's connectivity and network identity from the kernel. The identity changes
/// when the IPv6 prefixes, the IPv4 routes or the default routes change: a new network, so
/// route memory from the old one is set aside.
///
/// ```
/// let a = fastfallback_net::detect_network();
/// let b = fastfallback_net::detect_network();
/// assert_eq!(a.id, b.id, "the same network, read twice");
/// ```
pub fn detect_network() -> NetworkState {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/thread-self/net/{f}"));
    let (if_inet6, ipv6_route, route) = (read("if_inet6"), read("ipv6_route"), read("route"));
    let v6 = match (&if_inet6, &ipv6_route) {
        (Ok(addrs), Ok(routes)) => ipv6_usable(addrs, routes),
        // No IPv6 in this kernel at all.
        (Err(_), Err(_)) if route.is_ok() => false,
        _ => true,
    };
    let v4 = route.as_ref().map_or(true, |routes| ipv4_usable(routes));
    let connectivity = if !v4 && !v6 {
        // Nothing routable: let the attempts say why, rather than failing with no queries.
        Connectivity::DUAL_STACK
    } else {
        Connectivity {
            v6,
            v4,
            nat64: None,
        }
    };
    let id = network_id(
        if_inet6.as_deref().unwrap_or(""),
        ipv6_route.as_deref().unwrap_or(""),
        route.as_deref().unwrap_or(""),
    );
    NetworkState { connectivity, id }
}

/// FNV-1a, so the identity is the same in every process and on every run.
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The network's identity: the /64 prefixes of global IPv6 addresses, the IPv6 routes with a
/// gateway, and the IPv4 routes (subnets and gateways), each off `lo`, sorted and hashed.
/// Interface identifiers (privacy addresses rotate them) and counters do not count.
fn network_id(if_inet6: &str, ipv6_route: &str, route: &str) -> NetworkId {
    let mut facts: Vec<String> = Vec::new();
    for line in if_inet6.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(addr), Some(dev)) = (f.first(), f.get(5))
            && *dev != "lo"
            && let Some(ip) = hex_v6(addr)
            && !local_only(ip)
        {
            let prefix = u128::from(ip) >> 64;
            facts.push(format!("a6 {prefix:x} {dev}"));
        }
    }
    for line in ipv6_route.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(dst), Some(len), Some(gw), Some(dev)) =
            (f.first(), f.get(1), f.get(4), f.get(9))
            && *dev != "lo"
            && hex_v6(gw).is_some_and(|g| !g.is_unspecified())
        {
            facts.push(format!("r6 {dst}/{len} via {gw} {dev}"));
        }
    }
    for line in route.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(dev), Some(dst), Some(gw), Some(mask)) =
            (f.first(), f.get(1), f.get(2), f.get(7))
            && *dev != "lo"
        {
            facts.push(format!("r4 {dst}/{mask} via {gw} {dev}"));
        }
    }
    facts.sort_unstable();
    facts.dedup();
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    facts.hash(&mut h);
    NetworkId(h.finish())
}

/// `IFA_F_TENTATIVE` and `IFA_F_DADFAILED`: an address that cannot be used as a source yet.
const UNUSABLE_ADDRESS: u32 = 0x40 | 0x08;
/// `RTF_REJECT` (an unreachable route) and `RTF_LOCAL` (the host's own addresses).
const NOT_A_PATH: u32 = 0x0200 | 0x8000_0000;

fn hex_v6(s: &str) -> Option<Ipv6Addr> {
    u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from)
}

/// Whether an IPv6 address is link-local, loopback, multicast or unspecified.
fn local_only(ip: Ipv6Addr) -> bool {
    ip.is_loopback()
        || ip.is_multicast()
        || ip.is_unspecified()
        || (ip.segments()[0] & 0xffc0) == 0xfe80
}

/// `/proc/net/if_inet6` has an address beyond link-local, and `/proc/net/ipv6_route` a route
/// beyond link-local, multicast and the host itself, on an interface other than `lo`.
fn ipv6_usable(if_inet6: &str, ipv6_route: &str) -> bool {
    let address = if_inet6.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags), Some(dev)) = (f.first(), f.get(4), f.get(5)) else {
            return false;
        };
        let flags = u32::from_str_radix(flags, 16).unwrap_or(UNUSABLE_ADDRESS);
        *dev != "lo"
            && flags & UNUSABLE_ADDRESS == 0
            && hex_v6(addr).is_some_and(|ip| !local_only(ip))
    });
    let route = ipv6_route.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dst), Some(flags), Some(dev)) = (f.first(), f.get(8), f.get(9)) else {
            return false;
        };
        let flags = u32::from_str_radix(flags, 16).unwrap_or(NOT_A_PATH);
        let Some(dst) = hex_v6(dst) else {
            return false;
        };
        // The default route (::/0) has an unspecified destination and counts.
        let link_only = !dst.is_unspecified() && local_only(dst);
        *dev != "lo" && flags & NOT_A_PATH == 0 && !link_only
    });
    address && route
}

/// `/proc/net/route` (the main table) has a usable route on an interface other than `lo`.
fn ipv4_usable(route: &str) -> bool {
    route.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dev), Some(flags)) = (f.first(), f.get(3)) else {
            return false;
        };
        let flags = u32::from_str_radix(flags, 16).unwrap_or(0);
        // RTF_UP, and not RTF_REJECT.
        *dev != "lo" && flags & 0x1 != 0 && flags & 0x0200 == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUAL_IF6: &str = "\
fd000000000000000000000000000002 04 40 00 82     eth0
00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
";
    const DUAL_RT6: &str = "\
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000004 00000000 80200001       lo
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
";
    const RT4: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
";

    #[test]
    fn a_global_address_with_a_default_route_is_ipv6_connectivity() {
        assert!(ipv6_usable(DUAL_IF6, DUAL_RT6));
        assert!(ipv4_usable(RT4));
    }

    #[test]
    fn link_local_only_ipv6_is_not_connectivity() {
        // HEv3 §4.1: only link-local addresses and routes do not count.
        let addrs = "\
00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
";
        let routes = "\
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000003 00000000 00000001     eth0
";
        assert!(!ipv6_usable(addrs, routes));
        // A global address without any route beyond the link is not enough either.
        assert!(!ipv6_usable(DUAL_IF6, routes));
    }

    #[test]
    fn a_tentative_address_does_not_count() {
        let addrs = "20010db8000000000000000000000001 04 40 00 c0     eth0\n";
        assert!(!ipv6_usable(addrs, DUAL_RT6));
    }

    #[test]
    fn no_ipv4_route_is_no_ipv4_connectivity() {
        let header_only = RT4.lines().next().unwrap();
        assert!(!ipv4_usable(header_only));
    }

    #[test]
    fn the_network_id_follows_prefixes_and_routes_but_not_interface_ids() {
        let base = network_id(DUAL_IF6, DUAL_RT6, RT4);
        assert_eq!(base, network_id(DUAL_IF6, DUAL_RT6, RT4));
        // A privacy address in the same /64: the same network.
        let rotated = DUAL_IF6.replace(
            "fd000000000000000000000000000002",
            "fd0000000000000012345678abcdef01",
        );
        assert_eq!(base, network_id(&rotated, DUAL_RT6, RT4));
        // Another /64: another network.
        let moved = DUAL_IF6.replace(
            "fd000000000000000000000000000002",
            "fd000000000000010000000000000002",
        );
        assert_ne!(base, network_id(&moved, DUAL_RT6, RT4));
        // Another IPv4 default gateway: another network.
        let other_gw = RT4.replace("010200C0", "020200C0");
        assert_ne!(base, network_id(DUAL_IF6, DUAL_RT6, &other_gw));
    }

    #[test]
    fn garbage_never_panics() {
        for junk in ["", "x", "zz zz zz zz zz zz zz zz zz zz", "\n\n\t"] {
            assert!(!ipv6_usable(junk, junk));
            assert!(!ipv4_usable(junk));
            let _ = network_id(junk, junk, junk);
        }
    }
}
