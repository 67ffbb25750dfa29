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
    let _profiler = dhat::Profiler::builder().testing().build();
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
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
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
