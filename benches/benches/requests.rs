//! What one request costs the client on a warm pool, in one run, through our `Pool`,
//! hyper-util's legacy `Client` (hyper-rustls) and reqwest ([`fastfallback_benches::warm`]):
//! loopback TLS, HTTP/2 and HTTP/1.1 keep-alive.
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench requests
//! ```
//!
//! - **Allocations per request** (1, 64 and 256 in flight), counted by `allocation-counter`'s
//!   allocator, which counts per thread: the clients run on a current-thread runtime on the
//!   main thread, the server on a thread of its own (`ServerThread`), so the server's
//!   allocations are not counted. Each client first makes two rounds at the measured
//!   concurrency (its pool then holds the connections that concurrency needs); the figure is
//!   the median over three rounds of allocations divided by requests, realloc counted as an
//!   allocation.
//! - **Instructions per request** (1 and 64 in flight), counted by callgrind: the bench re-runs
//!   itself under `valgrind --tool=callgrind` with collection on only inside [`measured`],
//!   which runs on the client's thread (callgrind's collection state is per thread, so the
//!   server's threads are not counted), and takes the difference between two counts (200 and
//!   600 requests) so lazy set-up cancels out. Without valgrind this part says so and is left
//!   out.
//!
//! - **Client CPU time per request** (1, 64 and 256 in flight): the CPU time of the thread the
//!   clients run on (`CLOCK_THREAD_CPUTIME_ID`: the client's user and kernel time, not the
//!   server's) over a round, divided by its requests; rounds take turns between the
//!   contenders (Williams order), the figure is the median round. Unlike requests per second
//!   on two shared cores, it does not depend on what the server costs.
//!
//! Results go to stdout and, unless it is a smoke run (without `--bench`), to
//! `target/fastfallback-bench/requests.json`.

use std::process::Command;

use fastfallback_benches::warm::{Clients, ServerThread, Who};
use fastfallback_benches::{median, williams_row};
use fastfallback_testnet::TlsMaterial;

/// The protocols measured: the server's ALPN id, and the name in tables.
const PROTOCOLS: [(&[u8], &str); 2] = [(b"h2", "h2"), (b"http/1.1", "http/1.1")];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let who = Who::from_name(&args[i + 1]).expect("contender");
        let proto = PROTOCOLS
            .iter()
            .find(|(_, name)| *name == args[i + 2])
            .expect("protocol");
        let n: usize = args[i + 3].parse().expect("requests");
        let in_flight: usize = args[i + 4].parse().expect("requests in flight");
        child(who, proto.0, n, in_flight);
        return;
    }
    let smoke = !args.iter().any(|a| a == "--bench");
    let tls = tls();
    let mut rows = allocations(&tls, smoke);
    rows.extend(cpu_time(&tls, smoke));
    rows.extend(instructions(smoke));
    let mut md = String::from(
        "| protocol | in flight | contender | per request | unit | × hyper-util |\n|---|---:|---|---:|---|---:|\n",
    );
    for r in &rows {
        let hyper = rows
            .iter()
            .find(|h| {
                h.what == r.what
                    && h.proto == r.proto
                    && h.in_flight == r.in_flight
                    && h.contender == Who::Hyper.label()
            })
            .map_or(f64::NAN, |h| h.value);
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {:.2} |\n",
            r.proto,
            r.in_flight,
            r.contender,
            r.value,
            r.what,
            r.value / hyper
        ));
    }
    println!("{md}");
    if smoke {
        return;
    }
    let json: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "measure": r.what,
                "protocol": r.proto,
                "in_flight": r.in_flight,
                "contender": r.contender,
                "per_request": r.value,
                "bytes_per_request": r.bytes,
            })
        })
        .collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
    std::fs::write(
        dir.join("requests.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write");
}

/// One figure of one contender.
struct Row {
    /// `allocations` or `instructions`.
    what: &'static str,
    proto: &'static str,
    in_flight: usize,
    contender: &'static str,
    /// Per request.
    value: f64,
    /// Bytes allocated per request (allocations only).
    bytes: Option<f64>,
}

fn tls() -> TlsMaterial {
    TlsMaterial::new(&["a.test".to_owned()], &[[127, 0, 0, 1].into()]).expect("TLS material")
}

/// The clients' runtime, on this thread (the server runs on its own, [`ServerThread`]).
fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

/// A server for `alpn` on a thread of its own and the three clients for it, built on the
/// client runtime.
fn setup(
    client_rt: &tokio::runtime::Runtime,
    tls: &TlsMaterial,
    alpn: &[u8],
) -> (Clients, ServerThread) {
    let server = ServerThread::start(tls, alpn);
    let _in_client = client_rt.enter();
    (Clients::new(tls, server.port()), server)
}

fn allocations(tls: &TlsMaterial, smoke: bool) -> Vec<Row> {
    let client_rt = client_runtime();
    let mut rows = Vec::new();
    for (alpn, proto) in PROTOCOLS {
        let (clients, server) = setup(&client_rt, tls, alpn);
        let stats = server.stats();
        for in_flight in [1, 64, 256] {
            let n = if smoke {
                in_flight.max(8)
            } else {
                (in_flight * 4).max(400)
            };
            for who in Who::ALL {
                for _ in 0..2 {
                    client_rt.block_on(clients.round(who, in_flight, in_flight));
                }
                let (mut counts, mut bytes) = (Vec::new(), Vec::new());
                let before = stats.connections();
                for _ in 0..3 {
                    let info = allocation_counter::measure(|| {
                        client_rt.block_on(clients.round(who, n, in_flight));
                    });
                    counts.push(info.count_total as f64 / n as f64);
                    bytes.push(info.bytes_total as f64 / n as f64);
                }
                let (count, bytes) = (median(counts), median(bytes));
                let opened = stats.connections() - before;
                eprintln!(
                    "allocations {proto} ×{in_flight}: {:<42} {count:>7.1} per request ({bytes:.0} bytes), {opened} connections opened while counted",
                    who.label()
                );
                rows.push(Row {
                    what: "allocations",
                    proto,
                    in_flight,
                    contender: who.label(),
                    value: count,
                    bytes: Some(bytes),
                });
            }
        }
    }
    rows
}

/// The CPU time this thread has used, in seconds.
fn thread_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn cpu_time(tls: &TlsMaterial, smoke: bool) -> Vec<Row> {
    let client_rt = client_runtime();
    let rounds = if smoke { 1 } else { 9 };
    let mut rows = Vec::new();
    for (alpn, proto) in PROTOCOLS {
        let (clients, _server) = setup(&client_rt, tls, alpn);
        for in_flight in [1, 64, 256] {
            let n = if smoke {
                in_flight.max(8)
            } else {
                (in_flight * 8).max(800)
            };
            for who in Who::ALL {
                client_rt.block_on(clients.round(who, in_flight, in_flight));
            }
            let mut per_request = vec![Vec::new(); Who::ALL.len()];
            for k in 0..rounds {
                for i in williams_row(Who::ALL.len(), k) {
                    let before = thread_cpu();
                    client_rt.block_on(clients.round(Who::ALL[i], n, in_flight));
                    per_request[i].push((thread_cpu() - before) / n as f64 * 1e6);
                }
            }
            for (i, who) in Who::ALL.into_iter().enumerate() {
                let us = median(per_request[i].clone());
                eprintln!(
                    "client CPU {proto} ×{in_flight}: {:<42} {us:>7.2} µs per request",
                    who.label()
                );
                rows.push(Row {
                    what: "client CPU µs",
                    proto,
                    in_flight,
                    contender: who.label(),
                    value: us,
                    bytes: None,
                });
            }
        }
    }
    rows
}

fn instructions(smoke: bool) -> Vec<Row> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!(
            "instructions per request skipped: valgrind is not installed (apt-get install valgrind)"
        );
        return Vec::new();
    }
    let (low, high) = if smoke { (20, 60) } else { (200, 600) };
    let concurrencies: &[usize] = if smoke { &[1] } else { &[1, 64] };
    let exe = std::env::current_exe().expect("own path");
    let mut rows = Vec::new();
    for (_, proto) in PROTOCOLS {
        for &in_flight in concurrencies {
            for who in Who::ALL {
                let run = |n: usize| -> f64 {
                    let out_file = std::env::temp_dir().join(format!(
                        "ff-requests-{}-{}-{n}-{in_flight}-{}.out",
                        who.name(),
                        proto.replace('/', ""),
                        std::process::id()
                    ));
                    let output = Command::new("valgrind")
                        .arg("--tool=callgrind")
                        .arg("--toggle-collect=requests::measured")
                        .arg(format!("--callgrind-out-file={}", out_file.display()))
                        .arg(&exe)
                        .args(["--child", who.name(), proto])
                        .args([n.to_string(), in_flight.to_string()])
                        .output()
                        .expect("valgrind runs");
                    assert!(
                        output.status.success(),
                        "{}",
                        String::from_utf8_lossy(&output.stderr)
                    );
                    let text = std::fs::read_to_string(&out_file).expect("callgrind output");
                    let _ = std::fs::remove_file(&out_file);
                    fastfallback_benches::callgrind_total(&text, "Ir")
                };
                let per_request = (run(high) - run(low)) / (high - low) as f64;
                eprintln!(
                    "instructions {proto} ×{in_flight}: {:<42} {per_request:>9.0} per request",
                    who.label()
                );
                rows.push(Row {
                    what: "instructions",
                    proto,
                    in_flight,
                    contender: who.label(),
                    value: per_request,
                    bytes: None,
                });
            }
        }
    }
    rows
}

/// Runs under callgrind: warms `who`'s pool, then makes `n` requests in [`measured`].
fn child(who: Who, alpn: &[u8], n: usize, in_flight: usize) {
    let tls = tls();
    let client_rt = client_runtime();
    let (clients, _server) = setup(&client_rt, &tls, alpn);
    for _ in 0..2 {
        client_rt.block_on(clients.round(who, in_flight.max(20), in_flight));
    }
    measured(&client_rt, &clients, who, n, in_flight);
}

/// The requests callgrind counts (`--toggle-collect`): `n` of them, `in_flight` at a time,
/// on the client's runtime on this thread.
#[inline(never)]
fn measured(
    client_rt: &tokio::runtime::Runtime,
    clients: &Clients,
    who: Who,
    n: usize,
    in_flight: usize,
) {
    client_rt.block_on(clients.round(who, n, in_flight));
}
