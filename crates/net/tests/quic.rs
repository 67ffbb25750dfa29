//! QUIC attempts on loopback (the `quic` feature): T44 (QUIC wins when UDP works, R-32) and
//! T43 (UDP silent: TCP one attempt delay after QUIC, R-18, R-24) with a real quinn server,
//! the winner's connection carrying a stream, and broken-QUIC memory on the next contact.
//! Run: `cargo test -p fastfallback-net --features quic --test quic`.
#![cfg(feature = "quic")]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fastfallback_net::link::{EarlyQuic, RaceLink, Raced};
use fastfallback_net::{ConnectError, Connection, Connector, FallbackPolicy};
use fastfallback_proto::{Alpn, DnsAnswer, HttpsRecord, QueryKind};
use fastfallback_route::Address;
use fastfallback_testkit::loopback::{LOCALHOST, https_server, roots, trusting_connector};
use fastfallback_testkit::resolver::FakeDns;
use fastfallback_testkit::tickets::Tickets;
use fastfallback_testkit::udp::SilentUdp;
use fastfallback_testnet::TlsMaterial;
use tokio::sync::mpsc;

const NAME: &str = "quic.test";

/// The name's answers: 127.0.0.1, no IPv6, and `1 . alpn=h3,h2` (a service reached over
/// QUIC and TCP, on the origin's port).
fn dns() -> FakeDns {
    let record = HttpsRecord {
        priority: 1,
        target: ".".into(),
        alpn: vec![Alpn::H3, Alpn::H2],
        ..Default::default()
    };
    FakeDns::new()
        .addresses(NAME, QueryKind::A, [LOCALHOST])
        .addresses(NAME, QueryKind::Aaaa, [])
        .answer(NAME, QueryKind::Https, DnsAnswer::Https(vec![record]))
}

fn connector(tls: &TlsMaterial) -> Connector {
    trusting_connector(tls, dns(), true)
}

/// [`connector`] whose TLS sessions go to a store that says when a ticket arrives.
fn ticketing_connector(tls: &TlsMaterial) -> (Connector, Arc<Tickets>) {
    let tickets = Tickets::new();
    let connector = Connector::builder()
        .tls_config(tickets.client_config(roots(tls)))
        .resolver(dns())
        .policy(FallbackPolicy::builder().quic(true).build().unwrap())
        .build()
        .expect("a QUIC connector");
    (connector, tickets)
}

/// A QUIC server for the name on 127.0.0.1:`port` (UDP), speaking `h3`, that accepts 0-RTT
/// and answers in 0.5-RTT: it echoes every bidirectional stream.
fn quic_server(tls: &TlsMaterial, port: u16) -> quinn::Endpoint {
    quic_server_with(tls.quic_server(&[b"h3".to_vec()], true).unwrap(), port)
}

/// [`quic_server`] whose tickets allow no early data, so it rejects 0-RTT.
fn quic_server_without_early_data(tls: &TlsMaterial, port: u16) -> quinn::Endpoint {
    quic_server_with(tls.quic_server(&[b"h3".to_vec()], false).unwrap(), port)
}

fn quic_server_with(config: quinn::ServerConfig, port: u16) -> quinn::Endpoint {
    let endpoint =
        quinn::Endpoint::server(config, SocketAddr::from((Ipv4Addr::LOCALHOST, port))).unwrap();
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(connecting) = incoming.accept() else {
                    return;
                };
                let conn = match connecting.into_0rtt() {
                    Ok((conn, _)) => conn,
                    Err(connecting) => match connecting.await {
                        Ok(conn) => conn,
                        Err(_) => return,
                    },
                };
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    tokio::spawn(async move {
                        let bytes = recv.read_to_end(4 << 20).await.unwrap_or_default();
                        let _ = send.write_all(&bytes).await;
                        let _ = send.finish();
                        // Until the client has read it all (a finished stream's data is
                        // still sent after its handle is dropped, but the connection must
                        // stay open for it).
                        let _ = send.stopped().await;
                    });
                }
            });
        }
    });
    endpoint
}

/// The origin: an HTTPS server (h2, http/1.1) on a TCP port, and its certificate.
async fn tcp_origin() -> (TlsMaterial, u16) {
    let tls = TlsMaterial::new(&[NAME.to_owned()], &[]).unwrap();
    let (port, _) = https_server(tls.with_alpn(&[b"h2".to_vec(), b"http/1.1".to_vec()])).await;
    (tls, port)
}

async fn connect(connector: &Connector, port: u16) -> Connection {
    tokio::time::timeout(
        Duration::from_secs(10),
        connector.connect(&format!("https://{NAME}:{port}")),
    )
    .await
    .expect("the race ends")
    .expect("a connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_handshake_wins_and_its_connection_carries_a_stream() {
    // T44 on loopback: QUIC starts first and its handshake completes long before the
    // attempt delay would start TCP.
    let (tls, port) = tcp_origin().await;
    let _server = quic_server(&tls, port);
    let conn = connect(&connector(&tls), port).await;
    assert_eq!(conn.alpn(), Some(&Alpn::H3), "{}", conn.report());
    let report = conn.report();
    assert_eq!(report.attempts.len(), 1, "{report}");
    assert!(report.attempts[0].plan.starts_with("quic "), "{report}");
    assert_eq!(
        report.attempts[0].tcp_connected, None,
        "QUIC has no TCP step"
    );
    let quic = conn.stream().quic().expect("a QUIC winner");
    assert!(conn.stream().tcp().is_none() && conn.stream().tls().is_none());

    // The connection is real: a stream there and back.
    let (mut send, mut recv) = quic.connection().open_bi().await.unwrap();
    send.write_all(b"over quic").await.unwrap();
    send.finish().unwrap();
    let echoed = recv.read_to_end(1024).await.unwrap();
    assert_eq!(echoed, b"over quic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_comes_back_whole_over_a_quic_winner() {
    // The attempt's socket has UDP GRO off and the endpoint reads one datagram per slot
    // (`an_attempt_socket_has_gro_off_after_quinn_turned_it_on` checks the option): a stream
    // of many datagrams each way must still arrive whole and in order.
    let (tls, port) = tcp_origin().await;
    let _server = quic_server(&tls, port);
    let conn = connect(&connector(&tls), port).await;
    let quic = conn.stream().quic().expect("a QUIC winner");
    let sent: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let (mut send, mut recv) = quic.connection().open_bi().await.unwrap();
    let writing = async {
        send.write_all(&sent).await.unwrap();
        send.finish().unwrap();
    };
    let (_, echoed) = tokio::join!(writing, recv.read_to_end(4 << 20));
    assert!(echoed.unwrap() == sent, "the echo differs");
    let datagrams = quic.connection().stats().udp_rx.datagrams;
    assert!(datagrams > 700, "{datagrams} datagrams for 1 MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_connection_read_as_one_byte_stream_says_why_it_cannot_be() {
    use tokio::io::AsyncReadExt;
    let (tls, port) = tcp_origin().await;
    let _server = quic_server(&tls, port);
    let mut conn = connect(&connector(&tls), port).await;
    let mut buf = [0u8; 8];
    let err = conn.read(&mut buf).await.expect_err("not a byte stream");
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    assert!(err.to_string().contains("QUIC"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_silent_starts_tcp_one_attempt_delay_after_quic_and_the_next_contact_leads_with_tcp() {
    // T43 on loopback: nothing listens on the UDP port, and QUIC's Initial gets no answer.
    let (tls, port) = tcp_origin().await;
    let connector = connector(&tls);
    let first = connect(&connector, port).await;
    let report = first.report();
    assert_eq!(first.alpn(), Some(&Alpn::H2), "{report}");
    assert!(first.stream().tls().is_some());
    assert_eq!(report.attempts.len(), 2, "{report}");
    let (quic, tcp) = (&report.attempts[0], &report.attempts[1]);
    assert!(
        quic.plan.starts_with("quic ") && tcp.plan.starts_with("tcp "),
        "{report}"
    );
    let delay = connector.policy().attempt_delay;
    assert!(
        tcp.started >= quic.started + delay,
        "TCP started {:?} after QUIC, before the attempt delay ({delay:?})\n{report}",
        tcp.started - quic.started
    );
    assert!(quic.outcome.to_string().contains("cancelled"), "{report}");

    // QUIC lost to TCP, so it is remembered broken: the next contact starts TCP first and
    // wins with it before QUIC's turn comes.
    let second = connect(&connector, port).await;
    let report = second.report();
    assert_eq!(second.alpn(), Some(&Alpn::H2), "{report}");
    assert!(report.attempts[0].plan.starts_with("tcp "), "{report}");
    assert_eq!(report.attempts.len(), 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alt_svc_alternative_from_a_response_makes_the_next_connect_race_quic() {
    // No HTTPS record: the origin's addresses are TCP only, until a response names an h3
    // alternative (RFC 7838).
    let (tls, port) = tcp_origin().await;
    let _server = quic_server(&tls, port);
    let dns = FakeDns::new()
        .addresses(NAME, QueryKind::A, [LOCALHOST])
        .addresses(NAME, QueryKind::Aaaa, [])
        .answer(NAME, QueryKind::Https, DnsAnswer::Addresses(Vec::new()));
    let connector = trusting_connector(&tls, dns, true);
    let first = connect(&connector, port).await;
    assert_eq!(first.alpn(), Some(&Alpn::H2), "{}", first.report());
    assert_eq!(first.report().attempts.len(), 1, "{}", first.report());

    let origin = Address::parse(&format!("https://{NAME}:{port}")).unwrap();
    assert!(connector.learn_alt_svc(&origin, &format!("h3=\":{port}\"; ma=60")));
    let second = connect(&connector, port).await;
    let report = second.report();
    assert_eq!(second.alpn(), Some(&Alpn::H3), "{report}");
    assert!(report.attempts[0].plan.starts_with("quic "), "{report}");
}

#[test]
fn a_tls_configuration_without_tls13_cannot_carry_quic_and_is_refused_at_build() {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls12 = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let err = Connector::builder()
        .resolver(dns())
        .tls_config(tls12)
        .policy(FallbackPolicy::builder().quic(true).build().unwrap())
        .build()
        .expect_err("QUIC needs TLS 1.3");
    assert!(err.to_string().contains("TLS 1.3"), "{err}");
}

/// Echoes `bytes` over a new stream of `connection`.
async fn echo(connection: &quinn::Connection, bytes: &[u8]) -> Vec<u8> {
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    send.finish().unwrap();
    recv.read_to_end(1024).await.unwrap()
}

/// A connector (from [`ticketing_connector`]) that has a ticket for the name: its first
/// connect, to a QUIC server on a port of its own that accepts 0-RTT, finished a full
/// handshake and a round trip, and the server's ticket has arrived. Returns the server, kept
/// running.
async fn ticketed(tls: &TlsMaterial, connector: &Connector, tickets: &Tickets) -> quinn::Endpoint {
    let (port, _) = https_server(tls.with_alpn(&[b"h2".to_vec()])).await;
    let server = quic_server(tls, port);
    let first = connect(connector, port).await;
    let quic = first.stream().quic().expect("a QUIC winner");
    assert_eq!(quic.early_data(), None, "no ticket on first contact");
    assert_eq!(echo(quic.connection(), b"hello").await, b"hello");
    tokio::time::timeout(Duration::from_secs(10), tickets.received(1))
        .await
        .expect("a ticket");
    server
}

/// What a race linked with an early sink did: how it ended, and the connection an attempt
/// handed over in 0-RTT (if one did) with the stream `early` was written on at once.
struct EarlyRace {
    end: Result<Connection, ConnectError>,
    early: Option<(EarlyQuic, quinn::RecvStream)>,
}

/// Races to the name on `port` with an early sink, writing `early` on a stream of the first
/// connection handed over in 0-RTT, the moment it comes (as a pool would send a request).
async fn race_writing_early(connector: &Connector, port: u16, early: &[u8]) -> EarlyRace {
    let (sink, mut heard) = mpsc::unbounded_channel();
    let (_offers, offered) = mpsc::unbounded_channel();
    let mut link = RaceLink::new(offered);
    link.early = Some(sink);
    let address = Address::parse(&format!("https://{NAME}:{port}")).unwrap();
    let racing = connector.clone();
    let mut race = tokio::spawn(async move { racing.race_linked(address, link).await });
    let mut written = None;
    let end = loop {
        tokio::select! {
            // The hand-over comes before the race can end (the attempt hands its connection
            // over, then waits for its handshake): heard first, so it is never missed when
            // both are ready.
            biased;
            Some(quic) = heard.recv(), if written.is_none() => {
                let (mut send, recv) = quic.connection.open_bi().await.unwrap();
                // Fails if the server rejected 0-RTT in the meantime (what was early is lost).
                if send.write_all(early).await.is_ok() {
                    let _ = send.finish();
                }
                written = Some((quic, recv));
            }
            end = &mut race => break end.unwrap(),
        }
    };
    let end = end.result.map(|raced| match raced {
        Raced::Connected(c) => c,
        Raced::Pooled { .. } => panic!("nothing was offered"),
    });
    EarlyRace {
        end,
        early: written,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_quic_attempt_hands_its_connection_over_in_0rtt_and_wins_on_its_handshake() {
    let (tls, port) = tcp_origin().await;
    let (connector, tickets) = ticketing_connector(&tls);
    let _first = ticketed(&tls, &connector, &tickets).await;
    let _server = quic_server(&tls, port);

    // The attempt's connection came before its handshake was done and carried a stream
    // (0-RTT data) at once.
    let race = race_writing_early(&connector, port, b"sent in 0-rtt").await;
    let (early, mut recv) = race.early.expect("a connection in 0-RTT");
    let conn = race.end.expect("a connection");
    let report = conn.report();
    assert_eq!(conn.alpn(), Some(&Alpn::H3), "{report}");
    assert_eq!(report.attempts.len(), 1, "{report}");
    assert_eq!(report.attempts[0].id, early.attempt.get(), "{report}");
    let quic = conn.stream().quic().expect("a QUIC winner");
    assert_eq!(quic.connection().stable_id(), early.stable_id());
    // The server took the early data, so the session was resumed.
    assert_eq!(quic.early_data(), Some(true));
    assert_eq!(recv.read_to_end(1024).await.unwrap(), b"sent in 0-rtt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0rtt_attempt_into_silent_udp_never_wins_and_tcp_does_after_the_attempt_delay() {
    // The connector holds a ticket for the name, and on this port UDP is silent: the QUIC
    // attempt sends its 0-RTT packets into nothing. 0-RTT proves nothing about the path, so
    // TCP starts one attempt delay later and wins.
    let (tls, port) = tcp_origin().await;
    let (connector, tickets) = ticketing_connector(&tls);
    let _first = ticketed(&tls, &connector, &tickets).await;
    let silent = SilentUdp::bind(port).await.unwrap();

    let race = race_writing_early(&connector, port, b"into the void").await;
    let conn = race.end.expect("TCP connects");
    let report = conn.report();
    assert_eq!(conn.alpn(), Some(&Alpn::H2), "{report}");
    let (early, _) = race.early.expect("the QUIC attempt could send 0-RTT");
    assert!(silent.zero_rtt_packets() > 0, "0-RTT packets went out");
    let (quic, tcp) = (&report.attempts[0], &report.attempts[1]);
    assert_eq!(quic.id, early.attempt.get(), "{report}");
    assert!(
        tcp.started >= quic.started + connector.policy().attempt_delay,
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_rejects_0rtt_still_completes_the_handshake_and_the_winner_says_so() {
    // A server that knows nothing of the ticket (another session cache) and allows no early
    // data: the attempt offers 0-RTT, the handshake completes in full, and the early data
    // is rejected.
    let (tls, port) = tcp_origin().await;
    let (connector, tickets) = ticketing_connector(&tls);
    let _first = ticketed(&tls, &connector, &tickets).await;
    let _server = quic_server_without_early_data(&tls, port);

    let race = race_writing_early(&connector, port, b"lost").await;
    let conn = race.end.expect("QUIC connects");
    assert_eq!(conn.alpn(), Some(&Alpn::H3), "{}", conn.report());
    assert!(race.early.is_some(), "0-RTT was offered");
    let quic = conn.stream().quic().unwrap();
    assert_eq!(quic.early_data(), Some(false));
    // The connection works once the handshake is done.
    assert_eq!(echo(quic.connection(), b"after").await, b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_without_an_early_sink_sends_no_0rtt_even_with_a_ticket() {
    let (tls, port) = tcp_origin().await;
    let (connector, tickets) = ticketing_connector(&tls);
    let _first = ticketed(&tls, &connector, &tickets).await;
    let silent = SilentUdp::bind(port).await.unwrap();
    let conn = connect(&connector, port).await;
    assert_eq!(conn.alpn(), Some(&Alpn::H2), "{}", conn.report());
    assert!(silent.datagrams() > 0, "the QUIC attempt went there");
    assert_eq!(silent.zero_rtt_packets(), 0);
}
