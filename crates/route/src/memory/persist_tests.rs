//! The memory file's tests: round trips, versions, bounds, and every kind of bad file.
use super::super::{Lesson, LessonKind, RouteDatabase};
use super::*;
use crate::Address;
use fastfallback_proto::{AttemptErrorKind, Phase};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn filled() -> (RouteDatabase, Address) {
    let db = RouteDatabase::new(RouteMemory::default());
    let origin = Address::parse("https://example.com").unwrap();
    let t = Instant::from_millis(100_000);
    db.learn(
        NetworkId(7),
        &origin,
        [
            Lesson {
                target: "[2001:db8::a]:443".parse().unwrap(),
                at: t,
                kind: LessonKind::Unfinished { elapsed: ms(250) },
            },
            Lesson {
                target: "[2001:db8::a]:443".parse().unwrap(),
                at: t,
                kind: LessonKind::Failed {
                    kind: AttemptErrorKind::TimedOut,
                    phase: Phase::Tcp,
                },
            },
            Lesson {
                target: "192.0.2.1:443".parse().unwrap(),
                at: t,
                kind: LessonKind::Connected { rtt: ms(20) },
            },
        ],
    );
    (db, origin)
}

#[test]
fn a_file_read_back_in_another_process_keeps_what_was_learned() {
    let (db, origin) = filled();
    let bytes = db.encode(Instant::from_millis(101_000), 1_000_000);
    // A new process: its clock started recently, and 5 s of wall time went by.
    let fresh = RouteDatabase::new(RouteMemory::default());
    let now = Instant::from_millis(90_000_000);
    fresh.decode_into(&bytes, now, 1_000_005).unwrap();
    let view = fresh.view(NetworkId(7), &origin, now);
    let v6 = "[2001:db8::a]:443".parse().unwrap();
    assert!(view.is_postponed(v6, now));
    assert_eq!(view.srtt(v6, now), Some(ms(250)));
    assert_eq!(
        view.srtt("192.0.2.1:443".parse().unwrap(), now),
        Some(ms(20))
    );
    assert!(view.family_is_worse(fastfallback_proto::Family::V6, ms(100), now));
    assert!(fresh.view(NetworkId(8), &origin, now).is_empty());
}

#[test]
fn a_file_naming_an_origin_twice_counts_its_routes_once() {
    let (db, origin) = filled();
    let now = Instant::from_millis(101_000);
    let bytes = db.encode(now, 1_000_000);
    // One network, one origin: the origin count sits after the header (14 bytes), the
    // network id (8), the two family records (24) and the QUIC record (9); the origin
    // runs to the checksum.
    assert_eq!(&bytes[55..57], &1u16.to_le_bytes());
    let record = &bytes[57..bytes.len() - 4];
    let mut twice = bytes[..55].to_vec();
    twice.extend_from_slice(&2u16.to_le_bytes());
    twice.extend_from_slice(record);
    twice.extend_from_slice(record);
    let sum = fnv1a(&twice);
    twice.extend_from_slice(&sum.to_le_bytes());
    let read = RouteDatabase::new(RouteMemory::default());
    read.decode_into(&twice, now, 1_000_000).unwrap();
    assert_eq!(read.len(NetworkId(7)), 2, "two routes, not four");
    let v4 = "192.0.2.1:443".parse().unwrap();
    assert_eq!(
        read.view(NetworkId(7), &origin, now).srtt(v4, now),
        Some(ms(20))
    );
}

fn quic_lesson(kind: LessonKind, at: Instant) -> Lesson {
    Lesson {
        target: "[2001:db8::a]:443".parse().unwrap(),
        at,
        kind,
    }
}

#[test]
fn a_broken_quic_outlives_the_ttl_in_the_file_until_its_period_ends() {
    let db = RouteDatabase::new(RouteMemory::default());
    let origin = Address::parse("https://example.com").unwrap();
    let t = Instant::from_millis(100_000);
    // Broken twice in a row: QUIC follows TCP for 10 minutes from t.
    let broken = [
        quic_lesson(LessonKind::QuicBroken, t),
        quic_lesson(LessonKind::QuicBroken, t),
    ];
    db.learn(NetworkId(7), &origin, broken);
    let bytes = db.encode(t, 1_000_000);
    let now = Instant::from_millis(5_000_000);
    let read = |wall| {
        let fresh = RouteDatabase::new(RouteMemory::default());
        fresh.decode_into(&bytes, now, wall).unwrap();
        fresh.view(NetworkId(7), &origin, now)
    };
    // Read 9 minutes later: one minute of the period is left.
    let view = read(1_000_540);
    assert_eq!(
        view.quic_broken_until(now),
        Some(now + Duration::from_secs(60))
    );
    // Read 11 minutes later: the period has ended (but the record is kept: a third
    // failure would keep QUIC back for 20 minutes).
    let later = RouteDatabase::new(RouteMemory::default());
    later.decode_into(&bytes, now, 1_000_660).unwrap();
    assert!(!later.view(NetworkId(7), &origin, now).is_quic_broken(now));
    later.learn(
        NetworkId(7),
        &origin,
        [quic_lesson(LessonKind::QuicBroken, now)],
    );
    let view = later.view(NetworkId(7), &origin, now);
    assert_eq!(
        view.quic_broken_until(now),
        Some(now + Duration::from_secs(1200))
    );
    // Read one TTL after the period ended: forgotten.
    assert!(read(1_001_201).is_empty());
}

#[test]
fn alt_svc_alternatives_are_read_back_with_what_is_left_of_their_max_age() {
    let db = RouteDatabase::new(RouteMemory::default());
    let origin = Address::parse("https://example.com").unwrap();
    let t = Instant::from_millis(100_000);
    let value = fastfallback_proto::parse_alt_svc(r#"h3=":443"; ma=600, h3=":8443"; ma=60"#);
    db.learn_alt_svc(NetworkId(7), &origin, &value, t);
    let bytes = db.encode(t, 1_000_000);
    let now = Instant::from_millis(5_000_000);
    // Read 30 s later: both fresh; 2 minutes later: the 60 s one is gone; 11 minutes
    // later (past the TTL too): none.
    for (wall, want) in [
        (1_000_030, &[443, 8443][..]),
        (1_000_120, &[443]),
        (1_000_660, &[]),
    ] {
        let read = RouteDatabase::new(RouteMemory::default());
        read.decode_into(&bytes, now, wall).unwrap();
        assert_eq!(
            read.alternatives(NetworkId(7), &origin, now),
            want,
            "at {wall}"
        );
    }
    let read = RouteDatabase::new(RouteMemory::default());
    read.decode_into(&bytes, now, 1_000_120).unwrap();
    let left = Duration::from_secs(480);
    assert_eq!(
        read.alternatives(
            NetworkId(7),
            &origin,
            now + (left - Duration::from_millis(1))
        ),
        [443]
    );
    assert!(
        read.alternatives(NetworkId(7), &origin, now + left)
            .is_empty()
    );
}

#[test]
fn a_version_1_file_is_still_read() {
    // What this crate wrote before QUIC records: one network, one origin, one route.
    let mut v1 = Vec::new();
    v1.extend_from_slice(MAGIC);
    v1.push(1);
    v1.extend_from_slice(&1_000_000u64.to_le_bytes());
    v1.push(1);
    v1.extend_from_slice(&7u64.to_le_bytes());
    for _ in 0..2 {
        for field in [NONE, NONE, NONE] {
            v1.extend_from_slice(&field.to_le_bytes());
        }
    }
    v1.extend_from_slice(&1u16.to_le_bytes());
    put_host(&mut v1, &Host::Name("example.com".into()));
    v1.extend_from_slice(&443u16.to_le_bytes());
    v1.extend_from_slice(&1_000u32.to_le_bytes());
    v1.push(1);
    put_target(&mut v1, "192.0.2.1:443".parse().unwrap());
    for field in [20_000u32, 1_000, NONE] {
        v1.extend_from_slice(&field.to_le_bytes());
    }
    v1.extend_from_slice(&0u16.to_le_bytes());
    v1.extend_from_slice(&1_000u32.to_le_bytes());
    let sum = fnv1a(&v1);
    v1.extend_from_slice(&sum.to_le_bytes());
    let db = RouteDatabase::new(RouteMemory::default());
    let now = Instant::from_millis(50_000);
    db.decode_into(&v1, now, 1_000_000).unwrap();
    let origin = Address::parse("https://example.com").unwrap();
    let view = db.view(NetworkId(7), &origin, now);
    let v4 = "192.0.2.1:443".parse().unwrap();
    assert_eq!(view.srtt(v4, now), Some(ms(20)));
    assert!(!view.is_quic_broken(now));
}

#[test]
fn entries_older_than_the_ttl_are_dropped_on_reading() {
    let (db, origin) = filled();
    let bytes = db.encode(Instant::from_millis(101_000), 1_000_000);
    let fresh = RouteDatabase::new(RouteMemory::default());
    let now = Instant::from_millis(90_000_000);
    // 11 minutes later: past the 10-minute TTL.
    fresh.decode_into(&bytes, now, 1_000_660).unwrap();
    assert!(fresh.view(NetworkId(7), &origin, now).is_empty());
}

#[test]
fn damaged_truncated_foreign_and_oversized_files_are_refused() {
    let (db, _) = filled();
    let bytes = db.encode(Instant::from_millis(101_000), 1_000_000);
    let fresh = RouteDatabase::new(RouteMemory::default());
    let now = Instant::from_millis(1_000);
    let mut flipped = bytes.clone();
    flipped[20] ^= 0x40;
    assert_eq!(
        fresh.decode_into(&flipped, now, 0),
        Err(PersistError::Corrupt)
    );
    assert_eq!(
        fresh.decode_into(&bytes[..3], now, 0),
        Err(PersistError::NotAMemoryFile)
    );
    assert_eq!(
        fresh.decode_into(&bytes[..10], now, 0),
        Err(PersistError::Truncated)
    );
    let mut other = bytes;
    other[4] = 9;
    assert_eq!(
        fresh.decode_into(&other, now, 0),
        Err(PersistError::UnsupportedVersion(9))
    );
    assert_eq!(
        fresh.decode_into(b"{\"json\": true}", now, 0),
        Err(PersistError::NotAMemoryFile)
    );
    let huge = vec![0u8; MAX_FILE_BYTES + 1];
    assert_eq!(
        fresh.decode_into(&huge, now, 0),
        Err(PersistError::TooLarge(MAX_FILE_BYTES + 1))
    );
    assert!(fresh.is_empty(), "a refused file changes nothing");
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error_not_a_panic() {
    let (db, _) = filled();
    let bytes = db.encode(Instant::from_millis(101_000), 1_000_000);
    let fresh = RouteDatabase::new(RouteMemory::default());
    for n in 0..bytes.len() {
        assert!(fresh.decode_into(&bytes[..n], Instant::ZERO, 0).is_err());
    }
}

#[test]
fn the_encoding_stays_under_the_size_limit() {
    let db = RouteDatabase::new(RouteMemory {
        max_routes: 1_000_000,
        ..RouteMemory::default()
    });
    let t = Instant::from_millis(1);
    for i in 0..40_000u32 {
        let origin = Address::parse(&format!("tcp://host{i}.example:443")).unwrap();
        let target = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(i)), 443);
        db.learn(
            NetworkId(1),
            &origin,
            [Lesson {
                target,
                at: t,
                kind: LessonKind::Connected { rtt: ms(5) },
            }],
        );
    }
    let bytes = db.encode(t, 0);
    assert!(bytes.len() <= MAX_FILE_BYTES, "{} bytes", bytes.len());
    let fresh = RouteDatabase::new(RouteMemory {
        max_routes: 1_000_000,
        ..RouteMemory::default()
    });
    fresh.decode_into(&bytes, t, 0).unwrap();
    assert!(fresh.len(NetworkId(1)) > 10_000);
}
