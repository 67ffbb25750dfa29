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

use crate::Host;

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
