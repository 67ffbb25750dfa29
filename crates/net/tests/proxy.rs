//! Connecting through real proxies on loopback (crates/testnet's HTTP CONNECT and SOCKS5
//! servers): tunnels carrying TLS with ALPN, credentials (sent, checked, never shown),
//! who resolves the origin's name, failover across a proxy list, and pooled connections
//! through a proxy.

use std::sync::{Arc, Mutex};

use fastfallback_net::{ConnectError, Connector, StaticResolver};
use fastfallback_proto::{Alpn, AttemptErrorKind, Phase};
use fastfallback_route::{Credentials, Host, Proxy};
use fastfallback_testkit::loopback::{
    LOCALHOST, TlsOrigin, accept_and_hold, bind, closed_port, http_proxy, serve_each,
};

use fastfallback_testnet::proxy::{ProxyOptions, ProxyStats, serve_socks5};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "s3cret-Pa55";

async fn socks_proxy(options: ProxyOptions) -> (Proxy, Arc<ProxyStats>) {
    let (listener, port) = bind().await;
    (
        Proxy::socks5(Host::Ip(LOCALHOST), port),
        serve_socks5(listener, options),
    )
}

fn requiring_credentials() -> ProxyOptions {
    ProxyOptions {
        credentials: Some(("alice".to_owned(), SECRET.to_owned())),
    }
}

/// A proxy address where nothing listens.
fn dead_proxy() -> Proxy {
    Proxy::http(Host::Ip(LOCALHOST), closed_port())
}

#[tokio::test]
async fn an_http_connect_tunnel_carries_tls_to_the_origin_with_alpn() {
    let origin = TlsOrigin::start().await;
    let (proxy, stats) = http_proxy(ProxyOptions::default()).await;
    let conn = origin
        .connector(std::slice::from_ref(&proxy))
        .connect(&format!("https://localhost:{}", origin.port))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.alpn(), Some(&Alpn::H2));
    // Happy Eyeballs raced the proxy's addresses; the tunnel named the origin.
    assert_eq!(conn.peer_addr().port(), proxy.port);
    assert_eq!(stats.targets(), [format!("localhost:{}", origin.port)]);
    let plan = &conn.report().attempts[0].plan;
    assert!(
        plan.contains(&format!(
            "(http proxy 127.0.0.1:{}) → tunnel → tls localhost",
            proxy.port
        )),
        "{plan}"
    );
}

#[tokio::test]
async fn a_socks5_proxy_resolves_the_name_itself_unless_told_otherwise() {
    let origin = TlsOrigin::start().await;
    let (proxy, stats) = socks_proxy(ProxyOptions::default()).await;
    let conn = origin
        .connector(std::slice::from_ref(&proxy))
        .connect(&format!("https://localhost:{}", origin.port))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.alpn(), Some(&Alpn::H2));
    assert_eq!(stats.targets(), [format!("localhost:{}", origin.port)]);

    // socks5:// (not socks5h://): we resolve origin.test and send the address.
    let (proxy, stats) = socks_proxy(requiring_credentials()).await;
    let url = format!("socks5://alice:{SECRET}@127.0.0.1:{}", proxy.port);
    let local = Proxy::parse(&url).unwrap();
    let conn = origin
        .connector(&[local])
        .connect(&format!("https://origin.test:{}", origin.port))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.alpn(), Some(&Alpn::H2));
    assert_eq!(stats.targets(), [format!("127.0.0.1:{}", origin.port)]);
}

/// Every log line written while `f` runs, at every level.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buffer.0.lock().unwrap()).into_owned();
    (out, text)
}

#[test]
fn proxy_credentials_are_sent_checked_and_never_shown() {
    let ((ok, err, connector_debug), logs) = logged(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let origin = TlsOrigin::start().await;
            let url = format!("https://localhost:{}", origin.port);
            let (http, _) = http_proxy(requiring_credentials()).await;
            let good = http
                .clone()
                .with_credentials(Credentials::new("alice", SECRET));
            let ok = origin
                .connector(&[good])
                .connect(&url)
                .await
                .map(|c| c.into_parts().1);
            let bad = http.with_credentials(Credentials::new("alice", format!("{SECRET}-wrong")));
            let connector = origin.connector(&[bad]);
            let err = connector.connect(&url).await.err();
            (ok, err, format!("{connector:?}"))
        })
    });
    let report = ok.unwrap_or_else(|e| panic!("{e}"));
    let Some(ConnectError::Race(failure)) = err else {
        panic!("wrong credentials must fail the race");
    };
    let attempt = &failure.error.attempts[0].error;
    assert_eq!(
        (attempt.kind, attempt.phase),
        (AttemptErrorKind::Refused, Phase::Tunnel)
    );
    assert!(
        attempt.detail.contains("rejected the credentials"),
        "{}",
        attempt.detail
    );
    assert!(attempt.detail.contains("407"), "{}", attempt.detail);
    let shown = [
        failure.error.to_string(),
        format!("{failure:?}"),
        failure.report.to_string(),
        failure.report.to_json(),
        report.to_json(),
        connector_debug,
        logs.clone(),
    ];
    for text in shown {
        assert!(!text.contains(SECRET), "the password leaked: {text}");
    }
    assert!(
        !logs.is_empty(),
        "the races logged something, so the check above means something"
    );
}

#[tokio::test]
async fn socks5_credentials_are_checked() {
    let origin = TlsOrigin::start().await;
    let (socks, stats) = socks_proxy(requiring_credentials()).await;
    let url = format!("https://localhost:{}", origin.port);
    let none = origin
        .connector(std::slice::from_ref(&socks))
        .connect(&url)
        .await;
    let Err(err) = none else {
        panic!("no credentials, no tunnel");
    };
    assert!(err.to_string().contains("requires credentials"), "{err}");
    let wrong = socks
        .clone()
        .with_credentials(Credentials::new("alice", "nope"));
    let err = origin
        .connector(&[wrong])
        .connect(&url)
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("rejected the credentials"),
        "{err}"
    );
    let right = socks.with_credentials(Credentials::new("alice", SECRET));
    origin
        .connector(&[right])
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.tunnels(), 1);
}

#[tokio::test]
async fn a_dead_proxy_fails_over_to_the_next_one() {
    let origin = TlsOrigin::start().await;
    let (live, stats) = http_proxy(ProxyOptions::default()).await;
    let connector = origin.connector(&[dead_proxy(), live.clone()]);
    let conn = connector
        .connect(&format!("https://localhost:{}", origin.port))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(conn.peer_addr().port(), live.port);
    assert_eq!(stats.tunnels(), 1);

    // Both dead: one error, with the first proxy's race kept as `earlier`.
    let err = origin
        .connector(&[dead_proxy(), dead_proxy()])
        .connect(&format!("https://localhost:{}", origin.port))
        .await
        .err()
        .unwrap();
    let ConnectError::Race(failure) = err else {
        panic!("a race failure");
    };
    assert_eq!(failure.earlier.len(), 1);
    assert_eq!(
        failure.error.attempts[0].error.kind,
        AttemptErrorKind::Refused
    );
}

#[tokio::test]
async fn a_certificate_failure_through_a_proxy_does_not_fail_over() {
    let origin = TlsOrigin::start().await;
    let (first, first_stats) = http_proxy(ProxyOptions::default()).await;
    let (second, second_stats) = http_proxy(ProxyOptions::default()).await;
    // Webpki roots: the test CA is not trusted.
    let connector = Connector::builder()
        .proxy(first)
        .proxy(second)
        .build()
        .unwrap();
    let err = connector
        .connect(&format!("https://localhost:{}", origin.port))
        .await
        .err()
        .unwrap();
    let ConnectError::Race(failure) = err else {
        panic!("a race failure");
    };
    assert_eq!(failure.error.attempts[0].error.kind, AttemptErrorKind::Tls);
    assert!(failure.earlier.is_empty());
    assert_eq!(first_stats.tunnels(), 1);
    assert_eq!(
        second_stats.connections(),
        0,
        "the origin's certificate is no proxy's fault"
    );
}

#[tokio::test]
async fn a_server_that_speaks_first_is_heard_through_the_tunnel() {
    let (listener, port) = bind().await;
    serve_each(listener, |mut s| async move {
        let _ = s.write_all(b"SSH-2.0-test banner\r\n").await;
        let mut sink = [0u8; 64];
        let _ = s.read(&mut sink).await;
    });
    let (proxy, _) = http_proxy(ProxyOptions::default()).await;
    let conn = Connector::builder()
        .proxy(proxy)
        .build()
        .unwrap()
        .connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut stream, _) = conn.into_parts();
    let mut banner = vec![0u8; 21];
    stream.read_exact(&mut banner).await.unwrap();
    assert_eq!(banner, b"SSH-2.0-test banner\r\n");
}

/// A proxy that accepts TCP and never answers the tunnel request: the attempt times out in
/// the tunnel step, and says so (it used to read "during tls", TCP being done).
#[tokio::test]
async fn a_proxy_that_accepts_and_never_answers_times_out_in_the_tunnel() {
    let origin = TlsOrigin::start().await;
    let (listener, port) = bind().await;
    accept_and_hold(listener);
    let policy = fastfallback_net::FallbackPolicy::builder()
        .attempt_timeout(std::time::Duration::from_millis(200))
        .connect_timeout(std::time::Duration::from_millis(300))
        .build()
        .unwrap();
    let connector = Connector::builder()
        .root_certificates(origin.roots())
        .resolver(StaticResolver::new().with("origin.test", [LOCALHOST]))
        .proxy(Proxy::http(Host::Ip(LOCALHOST), port))
        .policy(policy)
        .build()
        .unwrap();

    let err = connector
        .connect(&format!("https://origin.test:{}", origin.port))
        .await
        .err()
        .unwrap();

    let ConnectError::Race(failure) = &err else {
        panic!("a race failure: {err}");
    };
    let attempt = &failure.error.attempts[0].error;
    assert_eq!(
        (attempt.kind, attempt.phase),
        (AttemptErrorKind::TimedOut, Phase::Tunnel)
    );
    assert!(err.to_string().contains("tunnel"), "{err}");
    assert!(!err.to_string().contains("during tls"), "{err}");
}

/// The tunnel is a step of its own for a plan without TLS too (`tcp://` through a proxy).
#[tokio::test]
async fn a_plain_tcp_connect_through_a_proxy_opens_its_tunnel_then_connects() {
    let origin = TlsOrigin::start().await;
    let (proxy, stats) = http_proxy(ProxyOptions::default()).await;
    let conn = origin
        .connector(&[proxy])
        .connect(&format!("tcp://localhost:{}", origin.port))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.tunnels(), 1);
    let won = conn.report().winning_attempt().unwrap();
    assert_eq!((won.tls, won.proxy.is_some()), (false, true));
}

/// A hand-written CONNECT proxy on loopback that answers each request with `interim` (1xx
/// heads), then `200`, then `greeting` as the tunnel's first bytes.
async fn proxy_answering(interim: &'static [u8], greeting: &'static [u8]) -> Proxy {
    let (listener, port) = bind().await;
    serve_each(listener, move |mut s| async move {
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") && s.read(&mut byte).await.unwrap_or(0) == 1 {
            request.push(byte[0]);
        }
        // Interim heads and the final one in separate writes, as a proxy relaying them would
        // send them.
        let _ = s.write_all(interim).await;
        let _ = s.flush().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await;
        let _ = s.write_all(greeting).await;
        let mut sink = [0u8; 64];
        let _ = s.read(&mut sink).await;
    });
    Proxy::http(Host::Ip(LOCALHOST), port)
}

#[tokio::test]
async fn interim_1xx_responses_to_connect_are_skipped_before_the_final_200() {
    let proxy = proxy_answering(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-A: b\r\n\r\n",
        b"hello",
    )
    .await;
    let conn = Connector::builder()
        .proxy(proxy)
        .build()
        .unwrap()
        .connect("tcp://127.0.0.1:9")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut stream, _) = conn.into_parts();
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(
        &greeting, b"hello",
        "the bytes after the final head are the tunnel's"
    );
}

#[tokio::test]
async fn endless_interim_responses_to_connect_fail_the_tunnel_on_the_head_bound() {
    // Many small 1xx heads add up past the 8 KiB bound.
    let heads: &'static [u8] = Box::leak(
        b"HTTP/1.1 100 Continue\r\n\r\n"
            .repeat(1000)
            .into_boxed_slice(),
    );
    let proxy = proxy_answering(heads, b"").await;
    let err = Connector::builder()
        .proxy(proxy)
        .build()
        .unwrap()
        .connect("tcp://127.0.0.1:9")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("response head over"), "{err}");
}
