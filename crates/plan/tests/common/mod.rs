//! Names shared by the conformance tests: the standards' addresses (§0 legend).
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

/// Address `v6a` of the standards' legend.
pub const V6A: &str = "2001:db8::a";
/// Address `v6b` of the standards' legend.
pub const V6B: &str = "2001:db8::b";
/// Address `v6c` of the standards' legend.
pub const V6C: &str = "2001:db8::c";
/// Address `v6d` of the standards' legend.
pub const V6D: &str = "2001:db8::d";
/// Address `v4a` of the standards' legend.
pub const V4A: &str = "192.0.2.1";
/// Address `v4b` of the standards' legend.
pub const V4B: &str = "192.0.2.2";
/// Address `v4c` of the standards' legend.
pub const V4C: &str = "192.0.2.3";

/// `(address, ms)` pairs, as the sim reports them.
pub fn at(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(a, t)| ((*a).to_owned(), *t)).collect()
}

/// `Some((a, t))`, as `Run::won` reports a win.
pub fn one(a: &str, t: u64) -> Option<(String, u64)> {
    Some((a.to_owned(), t))
}

/// Teaches `db` that a TCP handshake from `origin` to `target` (`[ip]:port` or `ip:port`) took
/// `rtt_ms`, at time 0, on the sim's default network.
pub fn remember_rtt(
    db: &fastfallback_route::RouteDatabase,
    origin: &str,
    target: &str,
    rtt_ms: u64,
) {
    use fastfallback_route::{Address, Lesson, LessonKind, NetworkId};
    let lesson = Lesson {
        target: target.parse().expect("target socket address"),
        at: fastfallback_proto::Instant::ZERO,
        kind: LessonKind::Connected {
            rtt: std::time::Duration::from_millis(rtt_ms),
        },
    };
    db.learn(
        NetworkId(0),
        &Address::parse(origin).expect("origin"),
        [lesson],
    );
}
