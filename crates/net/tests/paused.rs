//! The driver loop on tokio's paused clock, with a scripted resolver and a scripted dialer (the
//! `Resolve` and `Dial` seams): exact timelines for the DNS tail, cancellation on drop,
//! per-attempt timeouts and the connect deadline, with no socket and no sleep in real time.
//!
//! Each test builds its own paused runtime while holding one lock: the driver's clock is one
//! process-wide epoch, and a paused clock never runs behind it that way.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use fastfallback_net::{
    Answer, ConnectError, Connector, Dial, Dialing, FallbackPolicy, Resolve, SocketOptions,
    Transport,
};
use fastfallback_proto::{AttemptErrorKind, DnsAnswer, QueryKind, RaceErrorKind};
use fastfallback_route::{Address, Connectivity, HostModel, NetworkId};
use fastfallback_testkit::resolver::FakeDns;
use tokio::time::Instant;

const V6A: &str = "2001:db8::a";
const V4A: &str = "192.0.2.1";
const PORT: u16 = 443;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `f` on a fresh current-thread runtime whose clock is paused, one test at a time.
fn paused<F: Future>(f: F) -> F::Output {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

/// When each scripted query was sent and when its future went away (answered or dropped).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, start: Instant, what: String) {
        let t = start.elapsed().as_millis();
        self.0.lock().unwrap().push(format!("{t} {what}"));
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Records `what` when dropped, unless it finished first.
struct OnDrop {
    log: Log,
    start: Instant,
    what: String,
    armed: bool,
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.log.push(self.start, format!("dropped {}", self.what));
        }
    }
}

/// DNS on a script: each record type answers after a delay, or never.
struct ScriptedDns {
    answers: HashMap<QueryKind, (u64, DnsAnswer)>,
    log: Log,
    start: Instant,
}

impl Resolve for ScriptedDns {
    fn query(&self, _name: &str, kind: QueryKind) -> Answer {
        let script = self.answers.get(&kind).cloned();
        let (log, start) = (self.log.clone(), self.start);
        log.push(start, format!("query {kind}"));
        Box::pin(async move {
            let mut guard = OnDrop {
                log: log.clone(),
                start,
                what: format!("query {kind}"),
                armed: true,
            };
            let Some((after, answer)) = script else {
                return std::future::pending().await;
            };
            tokio::time::sleep(ms(after)).await;
            guard.armed = false;
            log.push(start, format!("answer {kind}"));
            answer
        })
    }
}

/// What one address does when dialled.
#[derive(Clone, Copy)]
enum Script {
    ConnectAfter(u64),
    RefuseAfter(u64),
    Blackhole,
}

/// Sockets on a script: each address connects, refuses, or never answers.
struct ScriptedDialer {
    script: HashMap<IpAddr, Script>,
    log: Log,
    start: Instant,
}

impl Dial for ScriptedDialer {
    fn dial(&self, target: SocketAddr, _options: &SocketOptions) -> Dialing {
        let script = self
            .script
            .get(&target.ip())
            .copied()
            .unwrap_or(Script::Blackhole);
        let (log, start) = (self.log.clone(), self.start);
        log.push(start, format!("dial {}", target.ip()));
        Box::pin(async move {
            let mut guard = OnDrop {
                log: log.clone(),
                start,
                what: format!("dial {}", target.ip()),
                armed: true,
            };
            let result = match script {
                Script::ConnectAfter(t) => {
                    tokio::time::sleep(ms(t)).await;
                    let (ours, theirs) = tokio::io::duplex(64);
                    // The far end lives as long as the runtime: the stream stays open.
                    std::mem::forget(theirs);
                    Ok(Transport::other(ours))
                }
                Script::RefuseAfter(t) => {
                    tokio::time::sleep(ms(t)).await;
                    Err(io::Error::from(io::ErrorKind::ConnectionRefused))
                }
                Script::Blackhole => std::future::pending().await,
            };
            guard.armed = false;
            result
        })
    }
}

struct World {
    connector: Connector,
    log: Log,
}

fn addrs(list: &[&str]) -> DnsAnswer {
    DnsAnswer::Addresses(list.iter().map(|s| s.parse().unwrap()).collect())
}

fn world(
    policy: FallbackPolicy,
    dns: &[(QueryKind, u64, DnsAnswer)],
    script: &[(&str, Script)],
) -> World {
    let log = Log::default();
    let start = Instant::now();
    let resolver = ScriptedDns {
        answers: dns.iter().map(|(k, t, a)| (*k, (*t, a.clone()))).collect(),
        log: log.clone(),
        start,
    };
    let dialer = ScriptedDialer {
        script: script
            .iter()
            .map(|(ip, s)| (ip.parse().unwrap(), *s))
            .collect(),
        log: log.clone(),
        start,
    };
    let connector = Connector::builder()
        .policy(policy)
        .resolver(resolver)
        .dialer(dialer)
        .sources(HostModel::e0())
        .connectivity(Connectivity::DUAL_STACK)
        .rng_seed(0)
        .build()
        .unwrap();
    World { connector, log }
}

fn both_at_10() -> Vec<(QueryKind, u64, DnsAnswer)> {
    vec![
        (QueryKind::Aaaa, 10, addrs(&[V6A])),
        (QueryKind::A, 10, addrs(&[V4A])),
    ]
}

fn origin() -> String {
    format!("tcp://example.test:{PORT}")
}

/// `(start, end, outcome)` of every attempt in a report, times in whole ms.
fn attempts(report: &fastfallback_net::RaceReport) -> Vec<(u128, Option<u128>, String)> {
    report
        .attempts
        .iter()
        .map(|a| {
            let end = a.ended.map(|t| t.as_millis());
            (a.started.as_millis(), end, a.outcome.to_string())
        })
        .collect()
}

#[test]
fn blackholed_ipv6_starts_ipv4_after_the_attempt_delay_exactly() {
    paused(async {
        let w = world(
            FallbackPolicy::default(),
            &both_at_10(),
            &[(V6A, Script::Blackhole), (V4A, Script::ConnectAfter(20))],
        );
        let conn = w.connector.connect(&origin()).await.unwrap();
        let report = conn.report();
        assert_eq!(
            attempts(report),
            [
                (
                    10,
                    Some(280),
                    "cancelled: lost the race (in tcp)".to_owned()
                ),
                (260, Some(280), "won".to_owned()),
            ],
            "{report}"
        );
        assert_eq!(report.elapsed, Duration::from_millis(280));
        assert_eq!(
            conn.peer_addr(),
            SocketAddr::new(V4A.parse().unwrap(), PORT)
        );
        // The loser's dial future was dropped in the same turn the winner connected.
        assert!(w.log.lines().contains(&format!("280 dropped dial {V6A}")));
    });
}

#[test]
fn a_refusal_1ms_after_the_start_starts_the_next_attempt_in_the_same_instant() {
    // T55 through the real driver loop.
    paused(async {
        let w = world(
            FallbackPolicy::default(),
            &both_at_10(),
            &[
                (V6A, Script::RefuseAfter(1)),
                (V4A, Script::ConnectAfter(10)),
            ],
        );
        let report = w.connector.connect(&origin()).await.unwrap().into_parts().1;
        assert_eq!(report.attempts[0].ended, Some(Duration::from_millis(11)));
        assert_eq!(
            report.attempts[1].started,
            Duration::from_millis(11),
            "{report}"
        );
        assert_eq!(report.elapsed, Duration::from_millis(21));
    });
}

#[test]
fn pending_queries_live_until_the_end_of_the_dns_tail_then_go() {
    // HEv3 §6: after the win at 30, the unanswered A query is kept for 1 s, then dropped.
    paused(async {
        let dns = vec![(QueryKind::Aaaa, 10, addrs(&[V6A]))];
        let w = world(
            FallbackPolicy::default(),
            &dns,
            &[(V6A, Script::ConnectAfter(20))],
        );
        let report = w.connector.connect(&origin()).await.unwrap().into_parts().1;
        assert_eq!(report.elapsed, Duration::from_millis(30));
        tokio::time::sleep(ms(2000)).await;
        let lines = w.log.lines();
        assert!(
            lines.contains(&"1030 dropped query A".to_owned()),
            "{lines:?}"
        );
    });
}

#[test]
fn an_answer_inside_the_dns_tail_is_still_taken() {
    paused(async {
        let dns = vec![
            (QueryKind::Aaaa, 10, addrs(&[V6A])),
            (QueryKind::A, 500, addrs(&[V4A])),
        ];
        let w = world(
            FallbackPolicy::default(),
            &dns,
            &[(V6A, Script::ConnectAfter(20))],
        );
        let _conn = w.connector.connect(&origin()).await.unwrap();
        tokio::time::sleep(ms(2000)).await;
        let lines = w.log.lines();
        assert!(lines.contains(&"500 answer A".to_owned()), "{lines:?}");
        assert!(
            !lines.iter().any(|l| l.contains("dropped query A")),
            "{lines:?}"
        );
    });
}

#[test]
fn dropping_the_connect_future_drops_every_attempt_and_query_at_that_instant() {
    // T45 through the driver: the caller gives up at 100.
    paused(async {
        let dns = vec![
            (QueryKind::Aaaa, 10, addrs(&[V6A])),
            // A never answers.
        ];
        let w = world(FallbackPolicy::default(), &dns, &[(V6A, Script::Blackhole)]);
        let r = tokio::time::timeout(ms(100), w.connector.connect(&origin())).await;
        assert!(r.is_err(), "still racing at 100 ms");
        let lines = w.log.lines();
        assert!(
            lines.contains(&format!("100 dropped dial {V6A}")),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"100 dropped query A".to_owned()),
            "{lines:?}"
        );
        // What the abandoned race learned reached route memory: a lower bound of 90 ms.
        let db = w.connector.route_database().unwrap();
        let origin = Address::parse(&origin()).unwrap();
        let t = fastfallback_proto::Instant::from_elapsed(Duration::from_secs(24 * 3600));
        let view = db.view(NetworkId(0), &origin, t + Duration::from_secs(1));
        let v6 = SocketAddr::new(V6A.parse().unwrap(), PORT);
        assert!(
            view.srtt(v6, t + Duration::from_secs(1)) >= Some(ms(90)),
            "the cancelled attempt taught a lower bound on its RTT"
        );
    });
}

#[test]
fn an_attempt_past_its_own_timeout_is_cancelled_and_the_next_starts_at_once() {
    paused(async {
        let policy = FallbackPolicy::builder()
            .attempt_timeout(ms(100))
            .build()
            .unwrap();
        let w = world(
            policy,
            &both_at_10(),
            &[(V6A, Script::Blackhole), (V4A, Script::ConnectAfter(20))],
        );
        let report = w.connector.connect(&origin()).await.unwrap().into_parts().1;
        assert_eq!(
            attempts(&report),
            [
                (
                    10,
                    Some(110),
                    "cancelled: attempt timed out (in tcp)".to_owned()
                ),
                (110, Some(130), "won".to_owned()),
            ],
            "{report}"
        );
        assert!(w.log.lines().contains(&format!("110 dropped dial {V6A}")));
    });
}

#[test]
fn the_connect_deadline_ends_the_race_with_every_cause() {
    paused(async {
        let policy = FallbackPolicy::builder()
            .connect_timeout(ms(2000))
            .build()
            .unwrap();
        let w = world(
            policy,
            &both_at_10(),
            &[(V6A, Script::Blackhole), (V4A, Script::Blackhole)],
        );
        let err = w.connector.connect(&origin()).await.unwrap_err();
        let ConnectError::Race(failure) = err else {
            panic!("a race failure");
        };
        assert_eq!(failure.error.kind, RaceErrorKind::TimedOut);
        assert_eq!(failure.report.elapsed, Duration::from_millis(2000));
        let kinds: Vec<_> = failure
            .error
            .attempts
            .iter()
            .map(|a| a.error.kind)
            .collect();
        assert_eq!(
            kinds,
            [AttemptErrorKind::TimedOut, AttemptErrorKind::TimedOut]
        );
        let lines = w.log.lines();
        assert!(
            lines.contains(&format!("2000 dropped dial {V6A}")),
            "{lines:?}"
        );
        assert!(
            lines.contains(&format!("2000 dropped dial {V4A}")),
            "{lines:?}"
        );
    });
}

/// A connect to the literal `V4A` on `script`, given up at `give_up`, by a connector without
/// route memory (so that the race's only move is one attempt): its report (or its error's),
/// or `None` if it was given up, and the dialer's log.
fn literal_connect(
    mut policy: FallbackPolicy,
    script: Script,
    give_up: u64,
) -> (Option<String>, Vec<String>) {
    policy.route_memory.enabled = false;
    paused(async {
        let w = world(policy, &[], &[(V4A, script)]);
        let origin = format!("tcp://{V4A}:{PORT}");
        let report = match tokio::time::timeout(ms(give_up), w.connector.connect(&origin)).await {
            Ok(Ok(conn)) => Some(conn.report().to_string()),
            Ok(Err(e)) => Some(e.report().expect("a race's error has a report").to_string()),
            Err(_) => None,
        };
        (report, w.log.lines())
    })
}

#[test]
fn a_literal_that_connects_at_once_wins_in_that_instant() {
    let (report, log) = literal_connect(FallbackPolicy::default(), Script::ConnectAfter(0), 5_000);
    let report = report.unwrap();
    assert!(report.contains("tcp at 0.0 ms; won at 0.0 ms"), "{report}");
    assert_eq!(log, [format!("0 dial {V4A}")]);
}

#[test]
fn a_literal_past_its_attempt_timeout_fails_at_that_instant_and_closes_its_dial() {
    let policy = FallbackPolicy::builder()
        .attempt_timeout(ms(300))
        .build()
        .unwrap();
    let (report, log) = literal_connect(policy, Script::Blackhole, 5_000);
    let report = report.unwrap();
    assert!(report.contains("300.0 ms"), "{report}");
    assert_eq!(
        log,
        [format!("0 dial {V4A}"), format!("300 dropped dial {V4A}")]
    );
}

#[test]
fn a_literal_dropped_while_its_attempt_runs_closes_its_dial_at_that_instant() {
    paused(async {
        let mut policy = FallbackPolicy::default();
        policy.route_memory.enabled = false;
        let w = world(policy, &[], &[(V4A, Script::Blackhole)]);
        let origin = format!("tcp://{V4A}:{PORT}");
        {
            // One poll: the opening's attempt is dialled and the race waits, not built yet.
            let mut connect = std::pin::pin!(w.connector.connect(&origin));
            let first = std::future::poll_fn(|cx| Poll::Ready(connect.as_mut().poll(cx))).await;
            assert!(first.is_pending());
        }
        assert_eq!(
            w.log.lines(),
            [format!("0 dial {V4A}"), format!("0 dropped dial {V4A}")]
        );
    });
}

#[test]
fn a_refused_literal_fails_at_the_refusal() {
    let (report, log) = literal_connect(FallbackPolicy::default(), Script::RefuseAfter(5), 5_000);
    let report = report.unwrap();
    assert!(report.contains("refused"), "{report}");
    assert!(report.contains("5.0 ms"), "{report}");
    assert_eq!(log, [format!("0 dial {V4A}")]);
}

/// A connector on an IPv6-only host that knows no NAT64 prefix, with `ipv4only.arpa`
/// answering `wka` (RFC 7050) and `v4only.test` having only an A record (every other query
/// gets an empty answer, at once); and its resolver, which counts the queries.
fn ipv6_only_world(wka: &[&str]) -> (World, FakeDns) {
    let log = Log::default();
    let start = Instant::now();
    let dns = FakeDns::new()
        .answer("ipv4only.arpa", QueryKind::Aaaa, addrs(wka))
        .answer("v4only.test", QueryKind::A, addrs(&["192.0.2.1"]))
        .otherwise(DnsAnswer::Addresses(Vec::new()));
    let dialer = ScriptedDialer {
        script: [(
            "64:ff9b::c000:201".parse().unwrap(),
            Script::ConnectAfter(20),
        )]
        .into(),
        log: log.clone(),
        start,
    };
    let connector = Connector::builder()
        .resolver(dns.clone())
        .dialer(dialer)
        .sources(HostModel::v6_only())
        .connectivity(Connectivity {
            v6: true,
            v4: false,
            nat64: None,
        })
        .rng_seed(0)
        .build()
        .unwrap();
    (World { connector, log }, dns)
}

#[test]
fn an_ipv6_only_host_discovers_the_nat64_prefix_and_reaches_ipv4_only_names_and_literals() {
    // T29 (a), then T26 and T28 with the discovered prefix.
    paused(async {
        let (w, dns) = ipv6_only_world(&["64:ff9b::c000:aa", "64:ff9b::c000:ab"]);
        let conn = w.connector.connect("tcp://v4only.test:80").await.unwrap();
        assert_eq!(conn.peer_addr(), "[64:ff9b::c000:201]:80".parse().unwrap());
        let conn = w.connector.connect("tcp://192.0.2.1:80").await.unwrap();
        assert_eq!(conn.peer_addr(), "[64:ff9b::c000:201]:80".parse().unwrap());
        let discoveries = dns.asked_for("ipv4only.arpa", QueryKind::Aaaa);
        assert_eq!(discoveries, 1, "the prefix is kept: {:?}", w.log.lines());
    });
}

#[test]
fn without_dns64_an_ipv4_literal_on_an_ipv6_only_host_fails_at_once_as_network_unreachable() {
    // T29 (b): ipv4only.arpa has no AAAA, so there is no NAT64; nothing is dialled.
    paused(async {
        let (w, _) = ipv6_only_world(&[]);
        let err = w.connector.connect("tcp://192.0.2.1:80").await.unwrap_err();
        let ConnectError::Race(failure) = err else {
            panic!("a race failure");
        };
        assert_eq!(
            failure.error.kind,
            RaceErrorKind::NetworkUnreachable(fastfallback_proto::Family::V4)
        );
        assert!(
            w.log.lines().iter().all(|l| !l.contains("dial")),
            "{:?}",
            w.log.lines()
        );
    });
}
