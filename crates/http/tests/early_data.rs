//! 0-RTT through the pool (the `http3` feature, `PoolOptions::early_data`): an idempotent
//! request of `Pool::send` rides a resuming QUIC attempt's first flight (RFC 9001 §4.6), and
//! is sent again over the winner when the early data went nowhere: UDP silent (TCP wins), or
//! the server rejected it. All on loopback, against quinn + h3 servers.
#![cfg(feature = "http3")]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fastfallback_http::{Pool, PoolOptions, SentEarly};
use fastfallback_net::{Connector, FallbackPolicy};
use fastfallback_proto::{Alpn, DnsAnswer, HttpsRecord, QueryKind};
use fastfallback_testkit::loopback::{LOCALHOST, https_server, roots};
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testkit::tickets::Tickets;
use fastfallback_testkit::udp::{SilentUdp, UdpRelay};
use fastfallback_testnet::TlsMaterial;
use fastfallback_testnet::http::HttpStats;
use fastfallback_testnet::http3::Http3Stats;

const NAME: &str = "early.test";

/// What answers UDP on an origin's port.
enum Udp {
    /// An HTTP/3 server whose tickets allow early data.
    Early,
    /// An HTTP/3 server that allows no early data (and knows no other server's tickets).
    NoEarly,
    /// Nothing: datagrams are read and never answered.
    Silent,
}

/// How long the relay in front of an HTTP/3 server holds each of the server's datagrams: a
/// round trip for early data to ride in. On bare loopback a handshake can end before the
/// pool has written its request, which then goes in 1-RTT. Well under the 100 ms floor of
/// the attempt delay, so QUIC still wins the race.
const SERVER_DELAY: Duration = Duration::from_millis(20);

/// An origin on 127.0.0.1: an HTTPS server (h2) on a TCP port, and on the same UDP port
/// what `udp` says. An HTTP/3 server sits on a port of its own behind a relay on the
/// origin's, which counts the 0-RTT packets clients send and delays the server's answers
/// ([`SERVER_DELAY`]).
struct Origin {
    url: String,
    tcp: Arc<HttpStats>,
    h3: Option<Arc<Http3Stats>>,
    silent: Option<SilentUdp>,
    relay: Option<UdpRelay>,
    _quic: Option<quinn::Endpoint>,
}

async fn origin(tls: &TlsMaterial, udp: Udp) -> Origin {
    let (port, tcp) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    let url = format!("https://{NAME}:{port}/");
    let early = match udp {
        Udp::Early => true,
        Udp::NoEarly => false,
        Udp::Silent => {
            let silent = Some(SilentUdp::bind(port).await.unwrap());
            return Origin {
                url,
                tcp,
                h3: None,
                silent,
                relay: None,
                _quic: None,
            };
        }
    };
    let config = tls.quic_server(&[b"h3".to_vec()], early).unwrap();
    let quic = quinn::Endpoint::server(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
    let h3 = Some(fastfallback_testnet::http3::serve(quic.clone()));
    let server = quic.local_addr().unwrap();
    let relay = Some(UdpRelay::bind(port, server, SERVER_DELAY).await.unwrap());
    Origin {
        url,
        tcp,
        h3,
        silent: None,
        relay,
        _quic: Some(quic),
    }
}

/// A connector racing QUIC: `early.test` is 127.0.0.1 with `1 . alpn=h3,h2`. Its TLS
/// sessions go to a store that says when a ticket arrives.
fn connector(tls: &TlsMaterial) -> (Connector, Arc<Tickets>) {
    let record = HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H3, Alpn::H2],
        ..Default::default()
    };
    let dns = FakeDns::new()
        .addresses(NAME, QueryKind::A, [LOCALHOST])
        .addresses(NAME, QueryKind::Aaaa, [])
        .answer(NAME, QueryKind::Https, DnsAnswer::Https(vec![record]));
    let tickets = Tickets::new();
    let connector = Connector::builder()
        .tls_config(tickets.client_config(roots(tls)))
        .resolver(dns)
        .policy(FallbackPolicy::builder().quic(true).build().unwrap())
        .build()
        .unwrap();
    (connector, tickets)
}

/// A new pool on `connector` (whose clones share its TLS session cache), with 0-RTT on.
fn early_pool(connector: &Connector) -> Pool {
    let options = PoolOptions {
        early_data: true,
        ..PoolOptions::default()
    };
    Pool::with_options(connector.clone(), options)
}

/// A response, its body read.
struct Answer {
    status: http::StatusCode,
    version: http::Version,
    early: bool,
    conn: Option<String>,
    body: Bytes,
}

async fn send(pool: &Pool, request: http::Request<Bytes>) -> Answer {
    let answer = send_any(pool, request).await;
    assert_eq!(answer.status, 200);
    answer
}

async fn send_any(pool: &Pool, request: http::Request<Bytes>) -> Answer {
    let response = pool.send(request).await.expect("a response");
    let status = response.status();
    let early = response.extensions().get::<SentEarly>().is_some();
    let version = response.version();
    let conn = response
        .headers()
        .get("x-conn")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("the body")
        .to_bytes();
    Answer {
        status,
        version,
        early,
        conn,
        body,
    }
}

fn get(url: &str) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

/// Gives `connector` a ticket for the name that allows early data: two GETs over HTTP/3 to
/// a server that accepts 0-RTT, and the wait for its ticket. Returns that origin.
async fn ticketed(tls: &TlsMaterial, connector: &Connector, tickets: &Tickets) -> Origin {
    let first = origin(tls, Udp::Early).await;
    let pool = early_pool(connector);
    for _ in 0..2 {
        let answer = send(&pool, get(&first.url)).await;
        assert_eq!(answer.version, http::Version::HTTP_3);
        assert!(!answer.early, "no ticket yet, then a pooled connection");
    }
    tokio::time::timeout(Duration::from_secs(10), tickets.received(1))
        .await
        .expect("a ticket");
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_rides_0rtt_on_a_resumed_quic_connection_which_then_serves_the_next_calls() {
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (connector, tickets) = connector(&tls);
    let origin = ticketed(&tls, &connector, &tickets).await;

    // A new pool: a new connection, which resumes the session and sends the GET early.
    let pool = early_pool(&connector);
    let answer = send(&pool, get(&origin.url)).await;
    assert!(answer.early, "the GET went out in 0-RTT");
    assert_eq!(answer.version, http::Version::HTTP_3);
    assert_eq!(answer.body.as_ref(), b"ok");
    assert_eq!(answer.conn.as_deref(), Some("2"));
    // The HTTP/3 client made in 0-RTT is the pooled connection's: the next call reuses it.
    let again = send(&pool, get(&origin.url)).await;
    assert!(!again.early);
    assert_eq!(again.conn.as_deref(), Some("2"));
    let stats = origin.h3.as_ref().unwrap();
    assert_eq!(stats.requests(), 4);
    assert_eq!(origin.tcp.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_goes_early_without_the_option_nor_for_a_request_that_is_not_idempotent() {
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (connector, tickets) = connector(&tls);
    let origin = ticketed(&tls, &connector, &tickets).await;

    let plain = Pool::new(connector.clone());
    let answer = send(&plain, get(&origin.url)).await;
    assert!(!answer.early, "0-RTT is off by default");
    assert_eq!(answer.version, http::Version::HTTP_3);

    let post = http::Request::post(&origin.url)
        .body(Bytes::from_static(b"once"))
        .unwrap();
    let answer = send(&early_pool(&connector), post).await;
    assert!(
        !answer.early,
        "a POST may not be replayed (RFC 9110 §9.2.2)"
    );
    assert_eq!(answer.version, http::Version::HTTP_3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_sent_early_into_silent_udp_is_sent_again_over_tcp_which_wins() {
    // 0-RTT proves nothing about the path: the QUIC attempt sends the GET into UDP that
    // never answers, TCP starts one attempt delay later and wins, and the GET goes there.
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (connector, tickets) = connector(&tls);
    let _ticket = ticketed(&tls, &connector, &tickets).await;
    let silent = origin(&tls, Udp::Silent).await;

    let answer = send(&early_pool(&connector), get(&silent.url)).await;
    assert_eq!(answer.version, http::Version::HTTP_2);
    assert!(!answer.early);
    assert_eq!(answer.body.as_ref(), b"ok");
    let udp = silent.silent.as_ref().unwrap();
    assert!(
        udp.zero_rtt_packets() > 0,
        "the GET went out in 0-RTT first"
    );
    assert_eq!(silent.tcp.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_rejects_0rtt_gets_the_get_once_after_the_handshake() {
    // Another server, with another session cache and no early data: the attempt offers
    // 0-RTT with the GET (the relay in front of the server sees 0-RTT packets), the server
    // rejects it and completes a full handshake, and the GET goes again on the new connection
    // (the server sees it once).
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (connector, tickets) = connector(&tls);
    let _ticket = ticketed(&tls, &connector, &tickets).await;
    let rejecting = origin(&tls, Udp::NoEarly).await;

    let pool = early_pool(&connector);
    let answer = send(&pool, get(&rejecting.url)).await;
    assert_eq!(answer.version, http::Version::HTTP_3);
    assert!(!answer.early, "the early GET was rejected");
    assert_eq!(answer.body.as_ref(), b"ok");
    let relay = rejecting.relay.as_ref().unwrap();
    assert!(
        relay.zero_rtt_packets() > 0,
        "the GET went out in 0-RTT first"
    );
    let stats = rejecting.h3.as_ref().unwrap();
    assert_eq!(stats.requests(), 1);
    // The connection is pooled and works.
    let again = send(&pool, get(&rejecting.url)).await;
    assert_eq!(again.conn, answer.conn);
    assert_eq!(stats.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_425_to_a_get_sent_early_sends_it_again_once_the_handshake_is_done() {
    // RFC 8470 §5.2: `/too-early` answers 425 to the first request that comes in 0-RTT on
    // each connection, here the GET that rode 0-RTT. The pool sends it again, on the same (now pooled) connection.
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (connector, tickets) = connector(&tls);
    let origin = ticketed(&tls, &connector, &tickets).await;
    let url = format!("{}too-early", origin.url);

    let answer = send(&early_pool(&connector), get(&url)).await;
    assert!(!answer.early, "the answer is the second sending's");
    assert_eq!(answer.conn.as_deref(), Some("2"), "on the 0-RTT connection");
    assert_eq!(origin.h3.as_ref().unwrap().requests(), 4);

    // A 425 to a request that did not go early is the caller's to read: sent once.
    let plain = Pool::new(connector.clone());
    let answer = send_any(&plain, get(&format!("{}425", origin.url))).await;
    assert_eq!(answer.status, http::StatusCode::TOO_EARLY);
    assert_eq!(origin.h3.as_ref().unwrap().requests(), 5);
}
