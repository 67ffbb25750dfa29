//! The ordering pipeline the race runs whenever its endpoint list changes:
//!
//! 1. RFC 6724 §6 destination sorting, with the HEv3 §5.3 RTT rule from route memory
//!    ([`crate::sort`]);
//! 2. routes that failed recently move to the end, in order (OkHttp's postponement, with expiry);
//! 3. the leading family is chosen by [`FamilyPreference`] (in `Auto`, the first sorted family
//!    unless family history says it is worse right now);
//! 4. the families are interleaved with the Preferred Address Family Count
//!    ([`crate::interleave()`]).
//!
//! The whole list is ordered each time, attempted endpoints included, so interleaving stays
//! right as answers arrive (HEv3 §5, §7; R-17 and R-44).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fastfallback_proto::{Family, Instant};

use crate::sort::{SortInput, sort_destinations};
use crate::{MemoryView, Source, interleave};

/// Which address family goes first, or only.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum FamilyPreference {
    /// RFC 6724 decides, corrected by history: a family that recently failed on this network,
    /// or is much slower than the other, yields the lead.
    #[default]
    Auto,
    /// IPv6 leads when it has addresses.
    V6First,
    /// IPv4 leads when it has addresses.
    V4First,
    /// IPv6 only: no A query, IPv4 addresses are skipped.
    V6Only,
    /// IPv4 only: no AAAA query, IPv6 addresses are skipped.
    V4Only,
}

impl FamilyPreference {
    /// Whether addresses of `family` may be used at all.
    pub fn allows(self, family: Family) -> bool {
        !matches!(
            (self, family),
            (Self::V6Only, Family::V4) | (Self::V4Only, Family::V6)
        )
    }
}

/// Everything the ordering needs besides the endpoints. Plain data: no callbacks, no locks.
#[derive(Clone, Copy, Debug)]
pub struct OrderContext<'a> {
    /// Route memory for this origin, if it is used.
    pub memory: Option<&'a MemoryView>,
    /// Which family leads.
    pub preference: FamilyPreference,
    /// The Preferred Address Family Count (HEv3 §5.3; reference profile P3).
    pub preferred_family_count: usize,
    /// How much slower (by RTT history) the leading family must be before it yields the lead.
    pub slower_margin: Duration,
    /// Now, for expiring history.
    pub now: Instant,
}

/// The identity of an endpoint for ordering: the address DNS gave (`logical`, IPv4 for NAT64
/// routes, HEv3 §8.2), the socket address the attempt connects to (`target`, the key of route
/// memory), and the source address the host would use for it (RFC 6724 rules 1, 2, 3, 5 and
/// 9), which the driver found and handed in with the answer.
pub trait Orderable {
    /// The address as DNS gave it.
    fn logical(&self) -> IpAddr;
    /// The socket address connected to.
    fn target(&self) -> SocketAddr;
    /// The source address for `logical`, or `None` when the destination is unusable.
    fn source(&self) -> Option<Source>;
}

/// Orders `items` (see the module doc). The result is a permutation of the input.
///
/// ```
/// use fastfallback_route::order::{order, FamilyPreference, OrderContext, Orderable};
/// use fastfallback_route::{HostModel, Source, SourceSelector};
/// use fastfallback_proto::Instant;
/// use std::net::{IpAddr, SocketAddr};
/// use std::time::Duration;
///
/// struct E(SocketAddr, Option<Source>);
/// impl Orderable for E {
///     fn logical(&self) -> IpAddr { self.0.ip() }
///     fn target(&self) -> SocketAddr { self.0 }
///     fn source(&self) -> Option<Source> { self.1 }
/// }
/// let host = HostModel::e0();
/// let ctx = OrderContext {
///     memory: None, preference: FamilyPreference::Auto,
///     preferred_family_count: 1, slower_margin: Duration::from_millis(100),
///     now: Instant::ZERO,
/// };
/// let items = ["[2001:db8::a]:443", "[2001:db8::b]:443", "192.0.2.1:443"]
///     .map(|s| s.parse::<SocketAddr>().unwrap())
///     .map(|a| E(a, host.source_for(a.ip()))).into_iter().collect::<Vec<_>>();
/// let out: Vec<String> = order(items, &ctx).iter().map(|e| e.0.to_string()).collect();
/// assert_eq!(out, ["[2001:db8::a]:443", "192.0.2.1:443", "[2001:db8::b]:443"]);
/// ```
pub fn order<T: Orderable>(items: Vec<T>, ctx: &OrderContext<'_>) -> Vec<T> {
    if items.len() < 2 {
        return items;
    }
    let inputs: Vec<SortInput> = items
        .iter()
        .map(|it| SortInput {
            dst: it.logical(),
            source: it.source(),
            srtt: ctx.memory.and_then(|m| m.srtt(it.target(), ctx.now)),
        })
        .collect();
    let perm = sort_destinations(&inputs);
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let mut sorted: Vec<T> = perm.into_iter().filter_map(|i| slots[i].take()).collect();

    if let Some(memory) = ctx.memory {
        let (fresh, postponed): (Vec<T>, Vec<T>) = sorted
            .into_iter()
            .partition(|it| !memory.is_postponed(it.target(), ctx.now));
        sorted = fresh;
        sorted.extend(postponed);
    }

    let family = |it: &T| Family::of(it.logical());
    let has = |f: Family| sorted.iter().any(|it| family(it) == f);
    let first = sorted.first().map_or(Family::V6, family);
    let lead = match ctx.preference {
        FamilyPreference::V6First | FamilyPreference::V6Only if has(Family::V6) => Family::V6,
        FamilyPreference::V4First | FamilyPreference::V4Only if has(Family::V4) => Family::V4,
        FamilyPreference::Auto => match ctx.memory {
            Some(memory)
                if has(first.other())
                    && memory.family_is_worse(first, ctx.slower_margin, ctx.now) =>
            {
                first.other()
            }
            _ => first,
        },
        _ => first,
    };
    interleave(sorted, family, lead, ctx.preferred_family_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostModel, Lesson, LessonKind, RouteMemory, SourceSelector};
    use fastfallback_proto::{AttemptErrorKind, Phase};

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct E(SocketAddr, Option<Source>);

    impl Orderable for E {
        fn logical(&self) -> IpAddr {
            self.0.ip()
        }
        fn target(&self) -> SocketAddr {
            self.0
        }
        fn source(&self) -> Option<Source> {
            self.1
        }
    }

    fn e(s: &str) -> E {
        let ip: IpAddr = s.parse().unwrap();
        E(SocketAddr::new(ip, 443), HostModel::e0().source_for(ip))
    }

    fn run(items: &[&str], memory: Option<&MemoryView>, pref: FamilyPreference) -> Vec<String> {
        let ctx = OrderContext {
            memory,
            preference: pref,
            preferred_family_count: 1,
            slower_margin: Duration::from_millis(100),
            now: Instant::from_millis(1000),
        };
        let v: Vec<E> = items.iter().map(|s| e(s)).collect();
        order(v, &ctx)
            .into_iter()
            .map(|x| x.0.ip().to_string())
            .collect()
    }

    fn failed(addr: &str, kind: AttemptErrorKind) -> MemoryView {
        let mut m = MemoryView::empty(RouteMemory::default());
        m.learn(&Lesson {
            target: e(addr).0,
            at: Instant::from_millis(0),
            kind: LessonKind::Failed {
                kind,
                phase: Phase::Tcp,
            },
        });
        m
    }

    #[test]
    fn failed_route_is_postponed_behind_its_family() {
        let m = failed("2001:db8::a", AttemptErrorKind::Refused);
        let out = run(
            &["2001:db8::a", "2001:db8::b", "192.0.2.1"],
            Some(&m),
            FamilyPreference::Auto,
        );
        assert_eq!(out, ["2001:db8::b", "192.0.2.1", "2001:db8::a"]);
    }

    #[test]
    fn family_with_recent_path_failure_yields_the_lead() {
        let m = failed("2001:db8::99", AttemptErrorKind::Unreachable);
        let out = run(
            &["2001:db8::a", "192.0.2.1"],
            Some(&m),
            FamilyPreference::Auto,
        );
        assert_eq!(out, ["192.0.2.1", "2001:db8::a"]);
    }

    #[test]
    fn explicit_v4_first_overrides_rfc6724() {
        let out = run(
            &["2001:db8::a", "192.0.2.1", "192.0.2.2"],
            None,
            FamilyPreference::V4First,
        );
        assert_eq!(out, ["192.0.2.1", "2001:db8::a", "192.0.2.2"]);
    }

    #[test]
    fn without_history_rfc6724_and_interleaving_decide() {
        let out = run(
            &["192.0.2.1", "2001:db8::a", "2001:db8::b"],
            None,
            FamilyPreference::Auto,
        );
        assert_eq!(out, ["2001:db8::a", "192.0.2.1", "2001:db8::b"]);
    }
}
