//! Arbitrary networks and DNS timings drive the race; the invariants of the property tests must
//! hold and nothing may panic. Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run plan_events`.
#![no_main]

use std::time::Duration;

use fastfallback_proto::{Alpn, AttemptErrorKind, HttpsRecord};
use fastfallback_sim::{Behaviour, Scenario};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (head, rest) = data.split_at(4);
    let mut s = if head[0] & 1 == 1 { Scenario::https() } else { Scenario::plain() };
    let cap = usize::from(head[1] % 6) + 1;
    s = s.tune(|p| {
        p.max_concurrent_attempts = std::num::NonZeroUsize::new(cap).unwrap();
        p.connect_timeout = Duration::from_millis(5000);
    });
    let mut v6 = Vec::new();
    let mut v4 = Vec::new();
    for (i, chunk) in rest.chunks(3).take(16).enumerate() {
        let addr = if chunk[0] & 1 == 0 {
            let a = format!("2001:db8::{:x}", i + 1);
            v6.push(a.clone());
            a
        } else {
            let a = format!("192.0.2.{}", i + 1);
            v4.push(a.clone());
            a
        };
        let t = u64::from(*chunk.get(1).unwrap_or(&0)) * 4;
        let b = match chunk.get(2).copied().unwrap_or(0) % 4 {
            0 => Behaviour::Ok { tcp: t, tls: t / 2 },
            1 => Behaviour::Fail { after: t, kind: AttemptErrorKind::Refused },
            2 => Behaviour::TlsFail { tcp: t, tls: 5, follow_up: None },
            _ => Behaviour::Drop,
        };
        s = s.behave(&addr, b);
    }
    let v6r: Vec<&str> = v6.iter().map(String::as_str).collect();
    let v4r: Vec<&str> = v4.iter().map(String::as_str).collect();
    s = s.aaaa(u64::from(head[2]) * 3, &v6r).a(u64::from(head[3]) * 3, &v4r);
    if head[0] & 2 == 2 {
        // An HTTPS answer, maybe with ECH (so TLS may be held), maybe for another name (so
        // held attempts to the origin may be withdrawn).
        let record = HttpsRecord {
            priority: 1,
            target: if head[0] & 4 == 4 { "svc.example".into() } else { ".".into() },
            alpn: vec![Alpn::H2],
            ipv6hint: v6r.first().map(|a| a.parse().unwrap()).into_iter().collect(),
            ech: (head[0] & 8 == 8).then(|| std::sync::Arc::from(&b"ech"[..])),
            ..Default::default()
        };
        s = s.https_rr(u64::from(head[0] >> 4) * 20, vec![record]);
    }
    let run = s.run();
    assert!(run.finished);
    assert!(run.peak_in_flight <= cap);
    assert_eq!(run.past_deadlines, 0);
    assert!(run.attempts.iter().all(|a| !a.in_flight()));
    // A held attempt wins only after it was resumed, which clears the hold in its record.
    assert!(
        run.attempts
            .iter()
            .filter(|a| a.state == fastfallback_plan::AttemptState::Won)
            .all(|a| !a.plan.hold_tls)
    );
});
