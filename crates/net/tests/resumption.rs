//! TLS session resumption (RFC 8446 §2.2): every race of a connector shares rustls's session
//! cache, so a later connect to an origin resumes the session an earlier one was given (a
//! cheaper handshake, and the ticket 0-RTT would need). A connector with its own TLS
//! configuration shares that configuration's cache the same way; two connectors share none.

use std::time::Duration;

use fastfallback_net::{Connection, Connector, FallbackPolicy, StaticResolver};
use fastfallback_proto::AlpnOffer;
use fastfallback_testkit::loopback::{LOCALHOST, TlsOrigin};
use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn connector(origin: &TlsOrigin) -> Connector {
    let policy = FallbackPolicy::builder()
        .alpn(AlpnOffer::Http11Only)
        .build()
        .unwrap();
    Connector::builder()
        .root_certificates(origin.roots())
        .resolver(StaticResolver::new().with("origin.test", [LOCALHOST]))
        .policy(policy)
        .build()
        .unwrap()
}

/// Connects, then makes one HTTP/1.1 request and reads its answer: reading is when the
/// client takes in the tickets a TLS 1.3 server sends after the handshake.
async fn contact(connector: &Connector, origin: &TlsOrigin) -> Option<HandshakeKind> {
    let url = format!("https://origin.test:{}", origin.port);
    let mut conn: Connection =
        tokio::time::timeout(Duration::from_secs(10), connector.connect(&url))
            .await
            .expect("the race ends")
            .expect("a connection");
    let kind = conn.stream().tls().and_then(|t| t.handshake_kind());
    conn.write_all(b"GET / HTTP/1.1\r\nhost: origin.test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut answer)).await;
    assert!(read.is_ok_and(|r| r.is_ok()), "no answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connect_to_an_origin_resumes_the_tls_session_of_the_first() {
    let origin = TlsOrigin::start().await;
    let connector = connector(&origin);
    assert_eq!(
        contact(&connector, &origin).await,
        Some(HandshakeKind::Full)
    );
    assert_eq!(
        contact(&connector, &origin).await,
        Some(HandshakeKind::Resumed)
    );
    // A clone is the same connector, with the same cache.
    let clone = connector.clone();
    assert_eq!(contact(&clone, &origin).await, Some(HandshakeKind::Resumed));
    // Another connector starts with an empty one.
    assert_eq!(
        contact(&self::connector(&origin), &origin).await,
        Some(HandshakeKind::Full)
    );
}
