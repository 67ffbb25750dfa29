//! Scenarios: scripted DNS answers and per-address behaviour.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fastfallback_plan::FallbackPolicy;
use fastfallback_proto::{AttemptErrorKind, DnsAnswer, DnsError, HttpsRecord, Query, QueryKind};
use fastfallback_route::{Address, Connectivity, HostModel, NetworkId, RouteDatabase};

/// How one address behaves for one attempt. Times are from the attempt's start.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Behaviour {
    /// TCP connects after `tcp` ms; a TLS plan then finishes after `tls` more ms.
    Ok {
        /// TCP handshake time.
        tcp: u64,
        /// TLS handshake time (ignored for plans without TLS).
        tls: u64,
    },
    /// Fails with `kind` after `after` ms, in TCP.
    Fail {
        /// When.
        after: u64,
        /// How.
        kind: AttemptErrorKind,
    },
    /// TCP connects after `tcp` ms, then TLS fails after `tls` more ms; optionally the failure
    /// carries a follow-up plan to `follow_up`.
    TlsFail {
        /// TCP handshake time.
        tcp: u64,
        /// Time until the TLS failure.
        tls: u64,
        /// Where the follow-up plan connects, if any.
        follow_up: Option<SocketAddr>,
    },
    /// After `after` ms, asks for a follow-up plan to `to` (no error).
    FollowUp {
        /// When.
        after: u64,
        /// Where the follow-up plan connects.
        to: SocketAddr,
    },
    /// No reply, ever (a blackhole).
    Drop,
}

/// A scripted race: the origin, the policy, the host, DNS answers with arrival times, and how
/// every address behaves.
#[derive(Clone)]
pub struct Scenario {
    pub(crate) name: String,
    pub(crate) address: Address,
    pub(crate) policy: FallbackPolicy,
    pub(crate) host: HostModel,
    pub(crate) connectivity: Connectivity,
    pub(crate) answers: Vec<(u64, Query, DnsAnswer)>,
    pub(crate) behaviours: HashMap<IpAddr, Vec<Behaviour>>,
    /// How each address answers QUIC: by default not at all (UDP blocked).
    pub(crate) quic_behaviours: HashMap<IpAddr, Vec<Behaviour>>,
    pub(crate) db: Option<Arc<RouteDatabase>>,
    pub(crate) network: NetworkId,
    pub(crate) seed: u64,
    pub(crate) pooled_at: Option<u64>,
    pub(crate) abandon_at: Option<u64>,
    pub(crate) waiting: bool,
    pub(crate) release_at: Option<(u64, Vec<fastfallback_route::Lesson>)>,
    pub(crate) exchanges: usize,
    pub(crate) start_at: u64,
}

fn ip(s: &str) -> IpAddr {
    let s = s.trim_start_matches('[').trim_end_matches(']');
    s.parse()
        .unwrap_or_else(|_| panic!("scenario address {s:?} is not an IP address"))
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

impl Scenario {
    /// Plain mode (standards §3): `tcp://example.com:443`, no HTTPS query, host E0, the default
    /// policy, no route memory.
    pub fn plain() -> Self {
        Self::for_address("tcp://example.com:443")
    }

    /// HTTP mode: `https://example.com`, HTTPS + AAAA + A queries, TLS plans.
    pub fn https() -> Self {
        Self::for_address("https://example.com")
    }

    /// A scenario for any address (`scheme://host:port` or `host:port`).
    ///
    /// # Panics
    ///
    /// If `addr` does not parse: scenarios are written by hand in tests.
    pub fn for_address(addr: &str) -> Self {
        Self {
            name: addr.to_owned(),
            address: Address::parse(addr).expect("scenario address must parse"),
            policy: FallbackPolicy::default(),
            host: HostModel::e0(),
            connectivity: Connectivity::DUAL_STACK,
            answers: Vec::new(),
            behaviours: HashMap::new(),
            quic_behaviours: HashMap::new(),
            db: None,
            network: NetworkId(0),
            seed: 0,
            pooled_at: None,
            abandon_at: None,
            waiting: false,
            release_at: None,
            exchanges: 1,
            start_at: 0,
        }
    }

    /// Names the scenario (shown by the demo).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Uses `policy`.
    pub fn policy(mut self, policy: FallbackPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Uses `host` for source addresses and its connectivity (no NAT64).
    pub fn host(mut self, host: HostModel) -> Self {
        self.connectivity = Connectivity {
            v6: host.v6.is_some(),
            v4: host.v4.is_some(),
            nat64: None,
        };
        self.host = host;
        self
    }

    /// Sets the connectivity explicitly (for NAT64).
    pub fn connectivity(mut self, c: Connectivity) -> Self {
        self.connectivity = c;
        self
    }

    /// Shares route memory with other runs: the race takes a view of `db` when it starts, and
    /// its lessons are applied to `db` as it learns them.
    pub fn memory(mut self, db: Arc<RouteDatabase>) -> Self {
        self.db = Some(db);
        self
    }

    /// Runs on `network` (route memory is kept per network; default `NetworkId(0)`).
    pub fn network(mut self, network: NetworkId) -> Self {
        self.network = network;
        self
    }

    /// Seeds the race's random choices (default 0, which never ignores history with the
    /// default `explore_one_in`).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Starts the race at `t` ms instead of 0 (for runs sharing route memory).
    pub fn starting_at(mut self, t: u64) -> Self {
        self.start_at = t;
        self
    }

    /// An AAAA answer at `t` ms (empty list: NODATA).
    pub fn aaaa(self, t: u64, addrs: &[&str]) -> Self {
        self.answer(t, QueryKind::Aaaa, DnsAnswer::Addresses(ips(addrs)))
    }

    /// An A answer at `t` ms (empty list: NODATA).
    pub fn a(self, t: u64, addrs: &[&str]) -> Self {
        self.answer(t, QueryKind::A, DnsAnswer::Addresses(ips(addrs)))
    }

    /// An HTTPS answer at `t` ms.
    pub fn https_rr(self, t: u64, records: Vec<HttpsRecord>) -> Self {
        self.answer(t, QueryKind::Https, DnsAnswer::Https(records))
    }

    /// A DNS error for `kind` at `t` ms.
    pub fn dns_error(self, t: u64, kind: QueryKind, e: DnsError) -> Self {
        self.answer(t, kind, DnsAnswer::Error(e))
    }

    /// Any answer at `t` ms, to a query for the origin's name (a [`QueryKind`]) or for another
    /// name (a [`Query`]). It is delivered at `t`, or when the query goes out if that is later.
    pub fn answer(mut self, t: u64, query: impl Into<Query>, answer: DnsAnswer) -> Self {
        self.answers.push((t, query.into(), answer));
        self
    }

    /// The AAAA answer for `name` (an alias or service target) at `t` ms.
    pub fn aaaa_for(self, name: &str, t: u64, addrs: &[&str]) -> Self {
        let q = Query::target(QueryKind::Aaaa, name);
        self.answer(t, q, DnsAnswer::Addresses(ips(addrs)))
    }

    /// The A answer for `name` at `t` ms.
    pub fn a_for(self, name: &str, t: u64, addrs: &[&str]) -> Self {
        let q = Query::target(QueryKind::A, name);
        self.answer(t, q, DnsAnswer::Addresses(ips(addrs)))
    }

    /// The HTTPS records of `name` (an alias target) at `t` ms.
    pub fn https_rr_for(self, name: &str, t: u64, records: Vec<HttpsRecord>) -> Self {
        let q = Query::target(QueryKind::Https, name);
        self.answer(t, q, DnsAnswer::Https(records))
    }

    /// How `addr` behaves; each call adds the behaviour for the next attempt to it (the last
    /// one repeats).
    pub fn behave(mut self, addr: &str, b: Behaviour) -> Self {
        self.behaviours.entry(ip(addr)).or_default().push(b);
        self
    }

    /// How `addr` answers QUIC, as [`Self::behave`] does for TCP. Without one, QUIC to an
    /// address gets no reply (UDP blocked). For QUIC, [`Behaviour::Ok`] is one handshake of
    /// `tcp + tls` ms that ends connected with ALPN `h3`.
    pub fn behave_quic(mut self, addr: &str, b: Behaviour) -> Self {
        self.quic_behaviours.entry(ip(addr)).or_default().push(b);
        self
    }

    /// `addr`'s QUIC handshake (TLS included) completes after `r` ms.
    pub fn quic_ok(self, addr: &str, r: u64) -> Self {
        self.behave_quic(addr, Behaviour::Ok { tcp: r, tls: 0 })
    }

    /// `addr` connects (TCP, and TLS if any) after `r` ms.
    pub fn ok(self, addr: &str, r: u64) -> Self {
        self.behave(addr, Behaviour::Ok { tcp: r, tls: 0 })
    }

    /// `addr` connects TCP after `tcp` ms and TLS after `tls` more.
    pub fn ok_tls(self, addr: &str, tcp: u64, tls: u64) -> Self {
        self.behave(addr, Behaviour::Ok { tcp, tls })
    }

    /// `addr` refuses (RST) after `r` ms.
    pub fn refuse(self, addr: &str, r: u64) -> Self {
        self.behave(
            addr,
            Behaviour::Fail {
                after: r,
                kind: AttemptErrorKind::Refused,
            },
        )
    }

    /// `addr` is unreachable after `r` ms.
    pub fn unreachable(self, addr: &str, r: u64) -> Self {
        self.behave(
            addr,
            Behaviour::Fail {
                after: r,
                kind: AttemptErrorKind::Unreachable,
            },
        )
    }

    /// `addr` never answers.
    pub fn drop(self, addr: &str) -> Self {
        self.behave(addr, Behaviour::Drop)
    }

    /// Offers a pooled connection to the race at `t` ms.
    pub fn pooled_at(mut self, t: u64) -> Self {
        self.pooled_at = Some(t);
        self
    }

    /// The race starts waiting for another call's connect (single flight).
    pub fn waiting(mut self) -> Self {
        self.waiting = true;
        self
    }

    /// The connect the race waits for ends at `t` ms without a connection to share: the race
    /// goes on, having heard `news`.
    pub fn released_at(mut self, t: u64, news: Vec<fastfallback_route::Lesson>) -> Self {
        self.release_at = Some((t, news));
        self
    }

    /// The caller abandons the race at `t` ms.
    pub fn abandon_at(mut self, t: u64) -> Self {
        self.abandon_at = Some(t);
        self
    }

    /// Runs `n` exchanges on the same finder, the next starting right after each win.
    pub fn exchanges(mut self, n: usize) -> Self {
        self.exchanges = n.max(1);
        self
    }

    /// Sets the overall connect deadline.
    ///
    /// # Panics
    ///
    /// If the policy becomes invalid.
    pub fn connect_timeout(mut self, ms: u64) -> Self {
        let mut p = self.policy.clone();
        p.connect_timeout = Duration::from_millis(ms);
        self.policy = rebuild(p);
        self
    }

    /// Edits the policy in place, re-validating it.
    ///
    /// # Panics
    ///
    /// If the edited policy is invalid: scenarios are written by hand in tests.
    pub fn tune(mut self, f: impl FnOnce(&mut FallbackPolicy)) -> Self {
        let mut p = self.policy.clone();
        f(&mut p);
        self.policy = rebuild(p);
        self
    }
}

fn rebuild(p: FallbackPolicy) -> FallbackPolicy {
    if let Err(e) = p.validate() {
        panic!("scenario policy is invalid: {e}");
    }
    p
}
