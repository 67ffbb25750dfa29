//! Unit tests of the connector: building, errors, the network reading, and the layout of
//! what a connect moves.

use super::*;

/// What only the tests that build a connector (which needs a crypto backend) use.
#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
use {
    super::builder::WARMED,
    super::shared::NETWORK_TTL,
    fastfallback_route::{Connectivity, NetworkId},
    std::time::Duration,
};

/// A build error keeps what caused it as its `source()` (here the file system's error).
#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
#[test]
fn a_build_error_keeps_its_cause_as_its_source() {
    let err = Connector::builder()
        .memory_file("/nonexistent-directory-of-this-test/memory")
        .build()
        .expect_err("a missing directory is refused");
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.is::<io::Error>(), "{source:?}");
}

/// A policy that asks for QUIC attempts is refused at build, saying what is missing, rather
/// than failing each QUIC attempt of every race.
#[test]
#[cfg(not(feature = "quic"))]
fn a_policy_asking_for_quic_is_refused_by_a_driver_without_quic() {
    let policy = FallbackPolicy::builder()
        .quic(true)
        .build()
        .expect("a valid policy");
    let err = Connector::builder()
        .resolver(crate::StaticResolver::new())
        .policy(policy)
        .build()
        .expect_err("no QUIC step in this driver");
    assert!(matches!(err, BuildError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("FallbackPolicy::quic"), "{err}");
}

/// A broken invariant is its own kind, never "unsupported", and says it is a bug.
#[test]
fn an_internal_error_is_told_apart_from_an_unsupported_feature() {
    let e = ConnectError::Internal("a race that ended twice");
    assert!(e.to_string().contains("a bug"), "{e}");
    assert_eq!(io::Error::from(e).kind(), io::ErrorKind::Other);
    let unsupported: io::Error = ConnectError::Unsupported("QUIC").into();
    assert_eq!(unsupported.kind(), io::ErrorKind::Unsupported);
}

/// The provider's random generator is set up when the first connector is built, not
/// in the first handshake (whose report would count it as TLS).
#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
#[test]
fn building_a_connector_warms_the_random_generator_up() {
    let _ = Connector::builder().build().unwrap();
    assert!(WARMED.is_completed());
}

/// The kernel's tables are read again only once the last reading is `NETWORK_TTL` old.
#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
#[test]
fn the_network_reading_is_reused_until_its_ttl_and_read_again_after() {
    let connector = Connector::builder().build().unwrap();
    let inner = &connector.inner;
    let t0 = tokio::time::Instant::now();
    // A reading no kernel gives, so a fresh one is told apart.
    let marked = NetworkState {
        connectivity: Connectivity::DUAL_STACK,
        id: NetworkId(0x5eed),
    };
    *inner.detected.lock().unwrap() = Some((t0 + NETWORK_TTL, marked));
    let just_before = t0 + NETWORK_TTL - Duration::from_millis(1);
    assert_eq!(inner.network(just_before).id, marked.id);
    let fresh = inner.network(t0 + NETWORK_TTL);
    assert_ne!(
        fresh.id, marked.id,
        "read again once the reading is {NETWORK_TTL:?} old"
    );
    // The fresh reading holds for another `NETWORK_TTL` from when it was taken.
    let until = inner.detected.lock().unwrap().map(|(until, _)| until);
    assert_eq!(until, Some(t0 + NETWORK_TTL + NETWORK_TTL));
}

/// A thread keeps its own copy of the last reading, under the connector's id: two connectors
/// read on one thread never answer with each other's reading.
#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
#[test]
fn a_threads_copy_of_a_network_reading_belongs_to_one_connector() {
    let (a, b) = (
        Connector::builder().build().unwrap(),
        Connector::builder().build().unwrap(),
    );
    let t0 = tokio::time::Instant::now();
    let marked = |id| NetworkState {
        connectivity: Connectivity::DUAL_STACK,
        id: NetworkId(id),
    };
    *a.inner.detected.lock().unwrap() = Some((t0 + NETWORK_TTL, marked(0xa)));
    *b.inner.detected.lock().unwrap() = Some((t0 + NETWORK_TTL, marked(0xb)));
    for _ in 0..2 {
        assert_eq!(a.inner.network(t0).id, NetworkId(0xa));
        assert_eq!(b.inner.network(t0).id, NetworkId(0xb));
    }
    // The copy expires with the reading it copies.
    assert_ne!(a.inner.network(t0 + NETWORK_TTL).id, NetworkId(0xa));
}

/// Built with no crypto backend (`--no-default-features`; CI runs it so) and with no
/// process-wide provider, a connector cannot do TLS, and says how to fix it.
#[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
#[test]
fn without_a_crypto_backend_build_names_the_features_to_enable() {
    let err = Connector::builder()
        .resolver(crate::StaticResolver::default())
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`aws-lc-rs` or `ring` feature"), "{text}");
    assert!(text.contains("install_default"), "{text}");
}

#[cfg(any(feature = "aws-lc-rs", feature = "ring"))]
#[test]
fn with_a_crypto_backend_the_connector_builds_its_own_tls_configuration() {
    let connector = Connector::builder()
        .resolver(crate::StaticResolver::default())
        .build()
        .unwrap();
    assert!(connector.certificate_verifier().is_some());
    assert_eq!(
        connector.inner.tls.alpn_protocols,
        [b"h2".to_vec(), b"http/1.1".to_vec()]
    );
}

/// With the `platform-verifier` feature (CI builds it), the OS verifier is the one kept:
/// a certificate the system does not trust is refused.
#[cfg(all(
    feature = "platform-verifier",
    any(feature = "aws-lc-rs", feature = "ring")
))]
#[test]
fn the_platform_verifier_refuses_a_certificate_the_system_does_not_trust() {
    use rustls::pki_types::{ServerName, UnixTime};
    let connector = Connector::builder()
        .resolver(crate::StaticResolver::default())
        .platform_verifier()
        .build()
        .unwrap();
    let tls = fastfallback_testnet::TlsMaterial::new(&["localhost".to_owned()], &[]).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let verdict = connector
        .certificate_verifier()
        .unwrap()
        .verify_server_cert(&tls.ca_der(), &[], &name, &[], UnixTime::now());
    assert!(verdict.is_err(), "{verdict:?}");
}

/// A connection and the race's result are moved several times per connect. Moves of up to
/// 128 bytes are inlined; larger ones call `memcpy`, which cost ~29 instructions each when a
/// `Connection` was 224 bytes (docs/benchmarks.md), and each inlined move costs about one
/// instruction per 8 bytes. Our part of a connection is its story, one pointer to the race's
/// own allocation (which holds the winner, its ALPN, the end, the query log and the report
/// once formatted), besides tokio's `TcpStream` (32 bytes in a release build, more in some
/// test builds).
///
/// That allocation must stay within glibc's small chunks (1 000 bytes): a larger one takes
/// the large-bin path, which cost ~400 instructions per connect with 100 in flight
/// (crates/plan/tests/layout.rs).
#[cfg(target_pointer_width = "64")]
mod layout {
    use super::{ConnectError, Connection, Raced};
    use crate::Stream;
    use crate::report::RaceCell;

    #[test]
    fn a_connection_and_a_race_result_move_without_a_memcpy_call() {
        let ours = size_of::<Connection>() - size_of::<Stream>();
        assert!(
            ours <= 8,
            "Connection holds {ours} bytes besides its stream"
        );
        let raced = size_of::<Result<Raced, ConnectError>>();
        assert!(raced <= size_of::<Connection>(), "a race's result: {raced}");
    }

    #[test]
    fn the_race_and_the_drivers_notes_stay_inside_glibcs_small_chunk_range() {
        let size = size_of::<RaceCell>();
        assert!(size <= 1000, "a race's allocation is {size} bytes");
    }
}
