//! Instructions per loopback connect, counted by callgrind, in one run:
//! - `fastfallback-bare`: tokio's socket options (none) and a parsed origin (`connect_to`), like
//!   for like with tokio (a `SocketAddr`) and hyper-util (a parsed `Uri`);
//! - `fastfallback`: its defaults (nodelay, keepalive) and an origin string (`connect`);
//! - `fastfallback-name`: tokio's socket options and a parsed origin whose host is a name,
//!   answered at once by a `StaticResolver` (A and AAAA queries, ordering, route memory): the
//!   path of most real connects, without a real resolver's cost;
//! - hyper-util's `HttpConnector` and a raw tokio connect.
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench instructions
//! ```
//!
//! The bench re-runs itself under `valgrind --tool=callgrind` once per contender and count,
//! and takes the difference between two counts (1000 and 3000 connects by default), so
//! start-up and the runtime's lazy set-up cancel out. Instruction counts do not depend on what
//! else the machine is doing. Without valgrind it says so and exits 0. Results go to
//! `target/fastfallback-bench/instructions.json` and stdout.
//!
//! Each run also simulates a first-level instruction cache of 32 KiB (8 ways, 64-byte lines:
//! this machine's, and most x86 cores') and counts its misses per connect. A connect runs
//! mostly straight-line code, so the code it touches is about as large as its instruction
//! count suggests, and once that exceeds the cache every connect fetches much of it again.
//! The column shows what instruction counts alone do not: a connect whose code fits stays
//! cached from one connect to the next. (The simulation sees user space only; the kernel's
//! own code evicts some more on real hardware, for every contender.)

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use fastfallback_net::{Connector, SocketOptions, StaticResolver};
use hyper_util::client::legacy::connect::HttpConnector;

const CONTENDERS: [&str; 5] = [
    "fastfallback-bare",
    "fastfallback",
    "fastfallback-name",
    "hyper-util",
    "tokio",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let who = args[i + 1].clone();
        let n: usize = args[i + 2].parse().expect("count");
        child(&who, n);
        return;
    }
    let smoke = !args.iter().any(|a| a == "--bench");
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipped: valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let (low, high) = if smoke { (20, 60) } else { (1000, 3000) };
    let exe = std::env::current_exe().expect("own path");
    let mut rows = Vec::new();
    for who in CONTENDERS {
        let run = |n: usize| -> Profile {
            let out_file = std::env::temp_dir()
                .join(format!("ff-callgrind-{who}-{n}-{}.out", std::process::id()));
            let status = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg("--cache-sim=yes")
                .arg("--I1=32768,8,64")
                // Per-instruction counts, uncompressed, for the code span (`Profile::parse`).
                .args(["--dump-instr=yes", "--dump-line=no"])
                .args(["--compress-strings=no", "--compress-pos=no"])
                .arg(format!("--callgrind-out-file={}", out_file.display()))
                .arg(&exe)
                .args(["--child", who, &n.to_string()])
                .output()
                .expect("valgrind runs");
            assert!(
                status.status.success(),
                "{}",
                String::from_utf8_lossy(&status.stderr)
            );
            let text = std::fs::read_to_string(&out_file).expect("callgrind output");
            let _ = std::fs::remove_file(&out_file);
            Profile::parse(&text)
        };
        let (a, b) = (run(low), run(high));
        let extra = (high - low) as f64;
        let per_connect = (b.instructions - a.instructions) / extra;
        let misses = (b.misses - a.misses) / extra;
        // A cache line of code every extra connect ran at least once.
        let lines: std::collections::HashSet<u64> = b
            .executed
            .iter()
            .filter(|(addr, n)| {
                let before = a.executed.get(addr).copied().unwrap_or(0);
                n.saturating_sub(before) as f64 >= extra
            })
            .map(|(addr, _)| addr >> 6)
            .collect();
        let span = lines.len();
        eprintln!(
            "{who:<20} {per_connect:>10.0} instructions per connect, {misses:>6.0} L1i misses, code on {span} lines"
        );
        rows.push((who, per_connect, misses, span));
    }
    let tokio = rows
        .iter()
        .find(|r| r.0 == "tokio")
        .map_or(f64::NAN, |r| r.1);
    let mut md = String::from(
        "| contender | instructions per connect | × tokio | code run per connect (64-byte lines) | L1i misses per connect (32 KiB, simulated) |\n|---|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for (who, n, misses, span) in &rows {
        md.push_str(&format!(
            "| {who} | {n:.0} | {:.2} | {span} ({} KiB) | {misses:.0} |\n",
            n / tokio,
            span * 64 / 1024
        ));
        json.push(serde_json::json!({
            "contender": who,
            "instructions_per_connect": n,
            "vs_tokio": n / tokio,
            "code_lines_per_connect": span,
            "l1i_misses_per_connect": misses,
        }));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
    std::fs::write(
        dir.join("instructions.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write");
    println!("{md}");
}

/// What one callgrind run counted.
struct Profile {
    instructions: f64,
    /// First-level instruction cache misses.
    misses: f64,
    /// How often each instruction address ran.
    executed: std::collections::HashMap<u64, u64>,
}

impl Profile {
    /// Reads callgrind's output (uncompressed, one cost line per instruction address).
    fn parse(text: &str) -> Self {
        let line = |prefix: &str| text.lines().find_map(|l| l.strip_prefix(prefix));
        let events: Vec<&str> = line("events: ")
            .expect("callgrind names its events")
            .split_whitespace()
            .collect();
        let totals: Vec<f64> = line("summary: ")
            .or_else(|| line("totals: "))
            .expect("a total")
            .split_whitespace()
            .map(|v| v.parse().expect("a count"))
            .collect();
        let event = |name: &str| totals[events.iter().position(|e| *e == name).expect(name)];
        let mut executed = std::collections::HashMap::new();
        // The cost line after `calls=` is the callee's inclusive cost at the call site, not
        // an execution of the call instruction's own address.
        let mut after_call = false;
        for l in text.lines() {
            if l.starts_with("calls=") {
                after_call = true;
                continue;
            }
            let Some(hex) = l.strip_prefix("0x") else {
                continue;
            };
            if std::mem::take(&mut after_call) {
                continue;
            }
            let mut fields = hex.split_whitespace();
            let addr = fields.next().and_then(|a| u64::from_str_radix(a, 16).ok());
            let ir = fields.next().and_then(|n| n.parse::<u64>().ok());
            if let (Some(addr), Some(ir)) = (addr, ir) {
                *executed.entry(addr).or_insert(0) += ir;
            }
        }
        Self {
            instructions: event("Ir"),
            misses: event("I1mr"),
            executed,
        }
    }
}

/// Runs `n` loopback connects as `who` and exits.
fn child(who: &str, n: usize) {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    // Accept and close on a thread of its own, so the client side measures only connecting.
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let origin = addr.to_string();
    rt.block_on(async {
        match who {
            "tokio" => {
                for _ in 0..n {
                    let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                    drop(s);
                }
            }
            "hyper-util" => {
                let connector = HttpConnector::new();
                let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
                for _ in 0..n {
                    let mut c = connector.clone();
                    let s = tower_service::Service::call(&mut c, uri.clone())
                        .await
                        .expect("connect");
                    drop(s);
                }
            }
            _ => {
                let options = if who != "fastfallback" {
                    SocketOptions::default().nodelay(false).keepalive(None)
                } else {
                    SocketOptions::default()
                };
                let c = Connector::builder()
                    .resolver(StaticResolver::new().with("origin.test", [addr.ip()]))
                    .socket_options(options)
                    .build()
                    .expect("connector");
                if who == "fastfallback-bare" {
                    // Like-for-like with tokio (a SocketAddr) and hyper-util (a parsed Uri).
                    let address = fastfallback_route::Address::parse(&origin).expect("address");
                    for _ in 0..n {
                        let conn = c.connect_to(address.clone()).await.expect("connect");
                        drop(conn);
                    }
                } else if who == "fastfallback-name" {
                    let name = format!("origin.test:{}", addr.port());
                    let address = fastfallback_route::Address::parse(&name).expect("address");
                    for _ in 0..n {
                        let conn = c.connect_to(address.clone()).await.expect("connect");
                        drop(conn);
                    }
                } else {
                    for _ in 0..n {
                        let conn = c.connect(&origin).await.expect("connect");
                        drop(conn);
                    }
                }
            }
        }
    });
}
