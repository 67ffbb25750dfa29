//! The state diagrams in docs/how-the-race-works.md are the race's own: every state is a
//! variant of `RacePhase` or `AttemptState` (the matches below are exhaustive, so a new variant
//! breaks this test until the diagram has it), and every transition the diagrams draw is one
//! the race makes, and the other way round, over scenarios that reach each of them.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use fastfallback_plan::{AttemptState, RacePhase, WinAt};
use fastfallback_proto::{Alpn, AttemptErrorKind, DnsError, HttpsRecord, QueryKind};
use fastfallback_sim::{Behaviour, Player, Scenario};

fn phase_name(p: RacePhase) -> &'static str {
    match p {
        RacePhase::Waiting => "Waiting",
        RacePhase::Resolving => "Resolving",
        RacePhase::Racing => "Racing",
        RacePhase::TlsOwner(_) => "TlsOwner",
        RacePhase::Won { .. } => "Won",
        RacePhase::Failed => "Failed",
        RacePhase::Abandoned => "Abandoned",
    }
}

fn attempt_name(s: &AttemptState) -> &'static str {
    match s {
        AttemptState::Connecting => "Connecting",
        AttemptState::Tunneling => "Tunneling",
        AttemptState::Securing => "Securing",
        AttemptState::Held => "Held",
        AttemptState::Won => "Won",
        AttemptState::Failed(_) => "Failed",
        AttemptState::FollowedUp => "FollowedUp",
        AttemptState::Cancelled { .. } => "Cancelled",
    }
}

const START: &str = "[*]";

/// A ServiceMode record with `ech`, for `target`.
fn ech_record(target: &str) -> HttpsRecord {
    HttpsRecord {
        priority: 1,
        target: target.into(),
        alpn: vec![Alpn::H2],
        ech: Some(std::sync::Arc::from(&b"an ECHConfigList"[..])),
        ..Default::default()
    }
}

/// Scenarios that between them take every transition.
fn scenarios() -> Vec<Scenario> {
    let v6 = "2001:db8::a";
    let v4 = "192.0.2.1";
    let follow: SocketAddr = "192.0.2.9:443".parse().unwrap();
    let both = |s: Scenario| s.aaaa(10, &[v6]).a(10, &[v4]);
    vec![
        // Resolving → Racing → Won; attempts Connecting → Won, Connecting → Cancelled.
        both(Scenario::plain()).drop(v6).ok(v4, 20),
        // An IP literal needs no DNS.
        Scenario::for_address("tcp://192.0.2.1:80").ok(v4, 20),
        // Resolving → Failed (NXDOMAIN on both).
        Scenario::plain()
            .dns_error(10, QueryKind::Aaaa, DnsError::NxDomain)
            .dns_error(10, QueryKind::A, DnsError::NxDomain),
        // Racing → Failed; Connecting → Failed.
        both(Scenario::plain()).refuse(v6, 5).refuse(v4, 5),
        // Resolving → Failed at the deadline (no answer ever).
        Scenario::plain().connect_timeout(300),
        // Waiting → Won (a pooled connection), Waiting → Resolving (released).
        both(Scenario::plain()).waiting().pooled_at(30),
        both(Scenario::plain())
            .waiting()
            .released_at(30, Vec::new())
            .ok(v6, 20),
        // Waiting → Failed at the deadline; Waiting → Abandoned.
        both(Scenario::plain()).waiting().connect_timeout(300),
        both(Scenario::plain()).waiting().abandon_at(30),
        // Resolving → Won and Racing → Won on a pooled connection.
        Scenario::plain().pooled_at(5).aaaa(10, &[v6]),
        both(Scenario::plain()).drop(v6).pooled_at(100),
        // Resolving → Abandoned, Racing → Abandoned.
        Scenario::plain().abandon_at(5).aaaa(10, &[v6]),
        both(Scenario::plain()).drop(v6).abandon_at(100),
        // TLS: Connecting → Securing → Won; Securing → Cancelled.
        both(Scenario::https())
            .ok_tls(v6, 20, 30)
            .ok_tls(v4, 300, 500),
        // Securing → Failed; Securing → FollowedUp; Connecting → FollowedUp.
        both(Scenario::https())
            .behave(
                v6,
                Behaviour::TlsFail {
                    tcp: 20,
                    tls: 30,
                    follow_up: None,
                },
            )
            .ok_tls(v4, 20, 30),
        both(Scenario::https())
            .behave(
                v6,
                Behaviour::TlsFail {
                    tcp: 20,
                    tls: 30,
                    follow_up: Some(follow),
                },
            )
            .ok_tls("192.0.2.9", 20, 30)
            .ok_tls(v4, 900, 30),
        both(Scenario::plain())
            .behave(
                v6,
                Behaviour::FollowUp {
                    after: 5,
                    to: follow,
                },
            )
            .ok("192.0.2.9", 20)
            .drop(v4),
        // WinAt::Tcp: Racing → TlsOwner → Won; TlsOwner → Racing when its TLS fails.
        both(Scenario::https())
            .tune(|p| p.win_at = WinAt::Tcp)
            .ok_tls(v6, 20, 30),
        both(Scenario::https())
            .tune(|p| p.win_at = WinAt::Tcp)
            .behave(
                v6,
                Behaviour::TlsFail {
                    tcp: 20,
                    tls: 30,
                    follow_up: None,
                },
            )
            .ok_tls(v4, 20, 30),
        // TlsOwner → Failed (nothing left), TlsOwner → Abandoned.
        Scenario::https()
            .aaaa(10, &[v6])
            .a(10, &[])
            .tune(|p| p.win_at = WinAt::Tcp)
            .behave(
                v6,
                Behaviour::TlsFail {
                    tcp: 20,
                    tls: 30,
                    follow_up: None,
                },
            ),
        both(Scenario::https())
            .tune(|p| p.win_at = WinAt::Tcp)
            .behave(v6, Behaviour::Ok { tcp: 20, tls: 500 })
            .abandon_at(300),
        // Connecting → Held → Securing → Won: TLS waits for an HTTPS answer with ECH (T41).
        both(Scenario::https())
            .https_rr(150, vec![ech_record(".")])
            .behave(v6, Behaviour::Ok { tcp: 20, tls: 30 }),
        // Held → Cancelled: the HTTPS answer makes the race SVCB-reliant on another name, so
        // the held origin address is withdrawn.
        both(Scenario::https())
            .https_rr(150, vec![ech_record("svc.example")])
            .behave(v6, Behaviour::Ok { tcp: 20, tls: 30 }),
        // TlsOwner → Failed: the deadline passes during the owner's TLS handshake.
        both(Scenario::https())
            .tune(|p| p.win_at = WinAt::Tcp)
            .behave(v6, Behaviour::Ok { tcp: 20, tls: 900 })
            .connect_timeout(300),
        // Connecting → Cancelled by the attempt timeout.
        both(Scenario::plain())
            .tune(|p| p.attempt_timeout = std::time::Duration::from_millis(100))
            .drop(v6)
            .behave(
                v4,
                Behaviour::Fail {
                    after: 400,
                    kind: AttemptErrorKind::Unreachable,
                },
            ),
    ]
}

/// Transitions as (from, to) state names.
type Edges = BTreeSet<(String, String)>;

/// Every transition the scenarios make: (race transitions, attempt transitions).
fn observed() -> (Edges, Edges) {
    let (mut race, mut attempts) = (BTreeSet::new(), BTreeSet::new());
    for scenario in scenarios() {
        let mut player = Player::new(&scenario);
        let mut phase = phase_name(player.phase());
        race.insert((START.to_owned(), phase.to_owned()));
        let mut states: Vec<&'static str> = Vec::new();
        loop {
            let records = player.attempts();
            for (i, r) in records.iter().enumerate() {
                let now = attempt_name(&r.state);
                match states.get(i) {
                    None => {
                        attempts.insert((START.to_owned(), now.to_owned()));
                        states.push(now);
                    }
                    Some(&before) if before != now => {
                        attempts.insert((before.to_owned(), now.to_owned()));
                        states[i] = now;
                    }
                    Some(_) => {}
                }
            }
            if !player.step() {
                break;
            }
            let now = phase_name(player.phase());
            if now != phase {
                race.insert((phase.to_owned(), now.to_owned()));
                phase = now;
            }
        }
    }
    (race, attempts)
}

/// The `A --> B` edges of the mermaid block whose first line is `%% title`, but the arrows to
/// the end state.
fn drawn(title: &str) -> Edges {
    let doc = include_str!("../../../docs/how-the-race-works.md");
    let block = doc
        .split("```mermaid")
        .skip(1)
        .find(|b| {
            b.trim_start()
                .lines()
                .next()
                .is_some_and(|l| l.trim() == format!("%% {title}"))
        })
        .unwrap_or_else(|| panic!("no mermaid block titled {title}"));
    let block = block.split("```").next().unwrap();
    block
        .lines()
        .filter_map(|l| {
            let (from, rest) = l.split_once("-->")?;
            let to = rest.split(':').next()?;
            Some((from.trim().to_owned(), to.trim().to_owned()))
        })
        // The ends: every final state leads to [*] in the drawing; the race has no such step.
        .filter(|(_, to)| to != START)
        .collect()
}

#[test]
fn the_race_state_diagram_draws_exactly_the_transitions_the_race_makes() {
    let (race, _) = observed();
    assert_eq!(
        drawn("RacePhase"),
        race,
        "docs/how-the-race-works.md vs the race"
    );
}

#[test]
fn the_attempt_state_diagram_draws_exactly_the_transitions_attempts_make() {
    let (_, attempts) = observed();
    assert_eq!(
        drawn("AttemptState"),
        attempts,
        "docs/how-the-race-works.md vs the attempts"
    );
}
