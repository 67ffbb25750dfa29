//! Memory per race in flight, sockets excluded: heap bytes held by one connect future while
//! its first attempt is pending, counted by dhat's allocator (live bytes).
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench memory
//! ```
//!
//! A scripted dialer whose attempts never complete stands in for the network, so no socket or
//! kernel buffer is involved and every byte counted is the engine's. 1000 races are started
//! (each polled until its attempt is in flight), the live heap is read, then every race is
//! dropped and the heap must return to where it was. Results go to
//! `target/fastfallback-bench/memory.json` and stdout.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use fastfallback_net::{Connector, Dial, Dialing, SocketOptions, StaticResolver};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Attempts that never finish: no socket is ever opened.
struct Pending;

impl Dial for Pending {
    fn dial(&self, _target: SocketAddr, _options: &SocketOptions) -> Dialing {
        Box::pin(std::future::pending())
    }
}

fn live() -> isize {
    dhat::HeapStats::get().curr_bytes as isize
}

fn main() {
    let races = if std::env::args().any(|a| a == "--bench") {
        1000
    } else {
        50
    };
    // Heap accounting only (no profile file is written).
    let _profiler = if std::env::var_os("FF_MEMORY_PROFILE").is_some() {
        dhat::Profiler::builder()
            .file_name("/tmp/dhat-heap.json")
            .build()
    } else {
        dhat::Profiler::builder().testing().build()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for (label, origin) in [
        ("IP literal, one attempt in flight", "tcp://192.0.2.1:443"),
        (
            "name with AAAA and A answered, one attempt in flight",
            "tcp://origin.test:443",
        ),
    ] {
        let (per_race, leaked) = rt.block_on(async {
            let connector = Connector::builder()
                .resolver(StaticResolver::new().with(
                    "origin.test",
                    ["2001:db8::a".parse().unwrap(), "192.0.2.1".parse().unwrap()],
                ))
                .dialer(Pending)
                .connectivity(fastfallback_net::Connectivity::DUAL_STACK)
                .build()
                .expect("connector");
            // Warm up lazy state (the runtime's timer wheel, the network reading).
            run_races(&connector, origin, 10);
            let before = live();
            let held = run_races(&connector, origin, races);
            let during = live();
            drop(held);
            let after = live();
            ((during - before) as f64 / races as f64, after - before)
        });
        eprintln!(
            "{label:<55} {per_race:>8.0} bytes per race in flight; {leaked} bytes left after"
        );
        rows.push(serde_json::json!({
            "scenario": label,
            "bytes_per_race_in_flight": per_race,
            "bytes_left_after_dropping_all": leaked,
            "target_bytes": 4096,
        }));
    }
    let conns = if races > 100 { 200 } else { 20 };
    let (raw, pooled) = rt.block_on(pooled_connection_bytes(conns));
    let per_conn = pooled - raw;
    eprintln!(
        "{:<55} {per_conn:>8.0} bytes per pooled connection ({pooled:.0} pooled − {raw:.0} bare)",
        "pool bookkeeping, HTTP/1 idle, sockets and buffers excluded"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
    std::fs::write(
        dir.join("memory-pool.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "connections": conns,
            "bytes_per_bare_connection": raw,
            "bytes_per_pooled_connection": pooled,
            "pool_bytes_per_connection": per_conn,
            "target_bytes": 1024,
        }))
        .expect("json"),
    )
    .expect("write");
    std::fs::write(
        dir.join("memory.json"),
        serde_json::to_string_pretty(&rows).expect("json"),
    )
    .expect("write");
    println!("| scenario | bytes per race in flight | bytes left after dropping all | target |");
    println!("|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {} | ≤ 4096 |",
            r["scenario"].as_str().unwrap_or(""),
            r["bytes_per_race_in_flight"].as_f64().unwrap_or(f64::NAN),
            r["bytes_left_after_dropping_all"]
        );
    }
}

type Race<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Starts `n` races and polls each until it waits on its attempt. The boxed futures are
/// returned still running (their frames are on the heap, so they are counted).
fn run_races<'a>(connector: &'a Connector, origin: &'a str, n: usize) -> Vec<Race<'a>> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut held: Vec<Race<'a>> = Vec::with_capacity(n);
    for _ in 0..n {
        let mut race: Race<'a> = Box::pin(async move {
            let _ = connector.connect(origin).await;
        });
        // The first polls send the answers in and start the attempt.
        for _ in 0..4 {
            if let Poll::Ready(()) = race.as_mut().poll(&mut cx) {
                break;
            }
        }
        held.push(race);
    }
    held
}

/// Heap bytes per idle HTTP/1 connection, measured two ways over the same loopback server:
/// connections the pool holds idle after one exchange each, and the same connections made
/// by hand (a race, hyper's HTTP/1 handshake, one exchange) and held in a `Vec`. The
/// difference is what pooling costs per connection; sockets, kernel buffers and hyper's own
/// buffers are in both and cancel out.
async fn pooled_connection_bytes(n: usize) -> (f64, f64) {
    use bytes::Bytes;
    use fastfallback_http::Pool;
    use fastfallback_testnet::http::{HttpOptions, serve};
    use http_body_util::{BodyExt, Full};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let _stats = serve(listener, HttpOptions::default());
    let url = format!("http://127.0.0.1:{port}");
    let policy = fastfallback_net::FallbackPolicy::builder()
        .pool(fastfallback_plan::PoolPolicy {
            max_idle: n + 10,
            ..fastfallback_plan::PoolPolicy::default()
        })
        .build()
        .expect("policy");
    let connector = Connector::builder()
        .resolver(StaticResolver::new())
        .connectivity(fastfallback_net::Connectivity::DUAL_STACK)
        .policy(policy)
        .build()
        .expect("connector");

    // By hand: race, handshake, one exchange, then hold the sender and the task.
    let bare = async |count: usize| {
        let mut held = Vec::with_capacity(count);
        for _ in 0..count {
            let conn = connector.connect(&url).await.expect("connect");
            let io = hyper_util::rt::TokioIo::new(conn.into_stream());
            // The pool's request body type, so hyper's own state is the same size in both.
            let (mut send, task) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(io)
                .await
                .expect("handshake");
            let task = tokio::spawn(task);
            let request = http::Request::get("/")
                .header("host", "127.0.0.1")
                .body(Full::new(Bytes::new()));
            let response = send
                .send_request(request.expect("request"))
                .await
                .expect("send");
            response.into_body().collect().await.expect("body");
            held.push((send, task));
        }
        held
    };
    // Warm-up: lazy statics, the runtime's first tasks.
    drop(bare(2).await);
    tokio::task::yield_now().await;
    let before = live();
    let held = bare(n).await;
    let raw = (live() - before) as f64 / n as f64;
    for (_, task) in &held {
        task.abort();
    }
    drop(held);

    let pool = Pool::new(connector.clone());
    let origin = pool.origin(&url).expect("origin");
    let fill = async |count: usize| {
        let mut exchanges = Vec::with_capacity(count);
        for _ in 0..count {
            exchanges.push(pool.exchange(&origin).await.expect("exchange"));
        }
        for exchange in exchanges {
            let request = http::Request::get("/").body(Bytes::new()).expect("request");
            let body = exchange.send(request).await.expect("send").into_body();
            body.bytes().await.expect("body");
        }
    };
    fill(2).await;
    pool.evict_all();
    tokio::task::yield_now().await;
    let before = live();
    fill(n).await;
    // Let each connection's task take its sender back (hyper signals readiness).
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let pooled = (live() - before) as f64 / n as f64;
    assert_eq!(pool.stats().idle, n, "every connection is pooled idle");
    if std::env::var_os("FF_MEMORY_DEBUG").is_some() {
        pool.evict_all();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        eprintln!(
            "after evict_all: {} bytes per connection left",
            (live() - before) as f64 / n as f64
        );
    }
    (raw, pooled)
}
