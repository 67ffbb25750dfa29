//! Alt-Svc memory (RFC 7838): the HTTP/3 alternatives an origin's responses named, kept per
//! network and origin until their `ma` runs out.
//!
//! Only what the race can use is kept: `h3` alternatives on the origin's own host (an
//! alt-authority with no host, or the origin's name), by port, at most
//! [`MAX_KEPT`] of them in the server's order. An alternative on another host would need a
//! resolution of its own and a certificate for the origin's name on another name; it is not
//! kept. RFC 7838 §3: a field value replaces every alternative kept for its origin, and
//! `clear` forgets them; a value none of whose alternatives parsed says nothing and changes
//! nothing.
//!
//! Network changes (RFC 7838 §3.1): the store keeps memory per network, so alternatives
//! learned on another network are set aside, except those marked `persist=1`, which a race
//! on any network still sees while they are fresh.

use fastfallback_proto::{Alpn, AltSvc, Instant};

use super::key::{OriginKey, OriginRef};
use super::{NetworkId, NetworkMemory, OriginMemory, RouteDatabase, RouteMemory};
use crate::{Address, Host};

/// The most alternatives kept per origin.
pub const MAX_KEPT: usize = 4;

/// One kept alternative: HTTP/3 on the origin's host at `port`.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) struct AltRecord {
    pub(super) port: u16,
    /// When its `ma` runs out.
    pub(super) expires: Instant,
    /// `persist=1`: not set aside on another network.
    pub(super) persist: bool,
}

impl AltRecord {
    pub(super) fn fresh(&self, now: Instant) -> bool {
        now < self.expires
    }
}

/// What a field value `value` received at `now` from an origin on `host` leaves kept:
/// `None` when it says nothing (no alternative parsed), else the new list (empty for
/// `clear`, or for alternatives this engine cannot use).
pub(super) fn kept(host: &Host, value: &AltSvc, now: Instant) -> Option<Vec<AltRecord>> {
    let list = match value {
        AltSvc::Clear => return Some(Vec::new()),
        AltSvc::Services(list) if list.is_empty() => return None,
        AltSvc::Services(list) => list,
    };
    let same_host = |h: &Option<String>| match (h, host) {
        (None, _) => true,
        (Some(h), Host::Name(n)) => h.trim_end_matches('.').eq_ignore_ascii_case(n),
        (Some(h), Host::Ip(ip)) => h.parse().ok() == Some(*ip),
    };
    let mut kept: Vec<AltRecord> = Vec::new();
    for alt in list {
        if alt.protocol != Alpn::H3 || !same_host(&alt.host) {
            continue;
        }
        if kept.iter().any(|k| k.port == alt.port) || kept.len() == MAX_KEPT {
            continue;
        }
        kept.push(AltRecord {
            port: alt.port,
            expires: now + alt.max_age,
            persist: alt.persist,
        });
    }
    Some(kept)
}

impl RouteDatabase {
    /// Takes what an `Alt-Svc` field value from a response of `origin`, received at `now` on
    /// `network`, says (RFC 7838 §3): its HTTP/3 alternatives on the origin's own host
    /// replace those kept, `clear` forgets them, and a value that parsed to nothing changes
    /// nothing. Only for `https` origins reached without a proxy: the alternatives would be
    /// raced over QUIC, which neither `http` origins nor proxies carry. Returns whether
    /// anything was kept or forgotten.
    ///
    /// ```
    /// use fastfallback_route::{Address, NetworkId, RouteDatabase, RouteMemory};
    /// use fastfallback_proto::{Instant, parse_alt_svc};
    ///
    /// let db = RouteDatabase::new(RouteMemory::default());
    /// let origin = Address::parse("https://example.com").unwrap();
    /// let t0 = Instant::from_millis(0);
    /// let value = parse_alt_svc(r#"h3=":443"; ma=60, h3="other.example:443", h2=":8443""#);
    /// assert!(db.learn_alt_svc(NetworkId(1), &origin, &value, t0));
    /// // Only HTTP/3 on the origin's own host is kept, while its `ma` runs.
    /// assert_eq!(db.alternatives(NetworkId(1), &origin, t0), [443]);
    /// assert!(db.alternatives(NetworkId(1), &origin, Instant::from_millis(60_000)).is_empty());
    /// ```
    pub fn learn_alt_svc(
        &self,
        network: NetworkId,
        origin: &Address,
        value: &AltSvc,
        now: Instant,
    ) -> bool {
        if !self.config.enabled || !origin.is_tls() || origin.proxy().is_some() {
            return false;
        }
        let Some(kept) = kept(origin.host(), value, now) else {
            return false;
        };
        let (host, port) = origin.connect_host();
        let config = self.config;
        self.with(|inner| {
            let net = inner.network_mut(network);
            if kept.is_empty() && !net.origins.contains_key(&(host, port) as &dyn OriginRef) {
                return false;
            }
            let o = net.origin_mut(host, port, now, config);
            let before = o.slots();
            o.alt_svc = kept;
            o.touched = o.touched.max(now);
            let after = o.slots();
            net.routes = (net.routes + after).saturating_sub(before);
            true
        })
    }

    /// The ports of `origin`'s fresh HTTP/3 alternatives on its own host, in the server's
    /// order ([`Self::learn_alt_svc`]): those learned on `network`, or, when this network
    /// knows nothing of the origin, those another network kept with `persist=1` (RFC 7838
    /// §3.1). The race's input ([`crate::Resolution::with_alternatives`]).
    pub fn alternatives(&self, network: NetworkId, origin: &Address, now: Instant) -> Vec<u16> {
        if !self.config.enabled || !origin.is_tls() || origin.proxy().is_some() {
            return Vec::new();
        }
        let (host, port) = origin.connect_host();
        self.with(|inner| {
            let ports = |net: &NetworkMemory, persisted: bool| {
                net.origins
                    .get(&(host, port) as &dyn OriginRef)
                    .map(|o| -> Vec<u16> {
                        o.alt_svc
                            .iter()
                            .filter(|a| a.fresh(now) && (a.persist || !persisted))
                            .map(|a| a.port)
                            .collect()
                    })
            };
            match inner.network(network).and_then(|n| ports(n, false)) {
                Some(here) => here,
                None => inner
                    .networks
                    .iter()
                    .filter(|n| n.id != network)
                    .find_map(|n| ports(n, true).filter(|p| !p.is_empty()))
                    .unwrap_or_default(),
            }
        })
    }
}

impl NetworkMemory {
    /// The origin `host`:`port`, made if it is new (after eviction if the network is full).
    /// It copies the host for the key: for the rare updates (Alt-Svc), not for lessons.
    fn origin_mut(
        &mut self,
        host: &Host,
        port: u16,
        now: Instant,
        config: RouteMemory,
    ) -> &mut OriginMemory {
        if self.routes >= config.max_routes
            && !self.origins.contains_key(&(host, port) as &dyn OriginRef)
        {
            self.evict(now, config);
        }
        self.origins
            .entry(OriginKey::new(host, port))
            .or_insert_with(|| OriginMemory::new(now))
    }
}
