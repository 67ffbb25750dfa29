//! Instructions per loopback connect, counted by callgrind, in one run:
//! - `fastfallback-bare`: tokio's socket options (none) and a parsed origin (`connect_to`), like
//!   for like with tokio (a `SocketAddr`) and hyper-util (a parsed `Uri`);
//! - `fastfallback`: its defaults (nodelay, keepalive) and an origin string (`connect`);
//! - `fastfallback-name`: tokio's socket options and a parsed origin whose host is a name,
//!   answered at once by a `StaticResolver` (A and AAAA queries, ordering, route memory): the
//!   path of most real connects, without a real resolver's cost;
//! - `fastfallback-hickory` and `hyper-util-hickory`: the same name resolved through a real
//!   DNS server on loopback (`LoopbackDns`) by hickory set up the same way on both sides (its
//!   cache on: after the first connects both read their answers from it). We ask AAAA and A
//!   apart; hyper-util gets hickory's `lookup_ip`. The scenarios bench's name row, counted;
//! - hyper-util's `HttpConnector` and a raw tokio connect;
//! - `race-only`: the sans-IO race of a `fastfallback-bare` connect alone, on virtual time,
//!   with no socket and no runtime (built, its attempt started and reported connected, the
//!   win polled, dropped). Its count carries none of the allocator-layout noise that the
//!   socket's allocation brings to the connect rows (docs/benchmarks.md), so it shows a
//!   change to the race itself to the instruction;
//! - `minimal-driver`: the same race driven on tokio by the least a driver can do: the race
//!   built, its one attempt's socket opened, registered with tokio and awaited writable, the
//!   connect reported, the win polled. No timer, network reading, route memory, report, listener or error mapping. Not
//!   a connector anyone should use: the floor the driver's row can approach, so that the
//!   driver's own cost (the bare row minus this one) is measured, not guessed.
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench instructions
//! ```
//!
//! The bench re-runs itself under `valgrind --tool=callgrind` once per contender and count,
//! and takes the difference between two counts (1000 and 3000 connects by default), so
//! start-up and the runtime's lazy set-up cancel out. Counting starts where the connects do
//! (`--zero-before`), so a set-up cost that differs between runs (aws-lc seeding its random
//! generator) cannot leak into the difference. Instruction counts do not depend on what else
//! the machine is doing. Without valgrind it says so and exits 0. Results go to stdout
//! and, unless it is a smoke run (without `--bench`), to
//! `target/fastfallback-bench/instructions.json`.
//!
//! Each contender is counted twice: one connect at a time, and 100 in flight (as in the
//! scenarios bench's throughput rows). With 100 in flight every race's allocations outlive
//! the next race's start, so glibc's per-size caches run dry and allocations take its slower
//! paths, which a sequential count never shows.
//!
//! The sequential runs also simulate a first-level instruction cache of 32 KiB (8 ways, 64-byte lines:
//! this machine's, and most x86 cores') and counts its misses per connect. A connect runs
//! mostly straight-line code, so the code it touches is about as large as its instruction
//! count suggests, and once that exceeds the cache every connect fetches much of it again.
//! The column shows what instruction counts alone do not: a connect whose code fits stays
//! cached from one connect to the next. (The simulation sees user space only; the kernel's
//! own code evicts some more on real hardware, for every contender.)

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use fastfallback_net::{Connector, SocketOptions, StaticResolver};
use futures::StreamExt;
use hyper_util::client::legacy::connect::HttpConnector;

const CONTENDERS: [&str; 9] = [
    "fastfallback-bare",
    "fastfallback",
    "fastfallback-name",
    "fastfallback-hickory",
    "hyper-util",
    "hyper-util-hickory",
    "tokio",
    "race-only",
    "minimal-driver",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let who = args[i + 1].clone();
        let n: usize = args[i + 2].parse().expect("count");
        let in_flight: usize = args[i + 3].parse().expect("connects in flight");
        child(&who, n, in_flight);
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
        let run = |n: usize, in_flight: usize| -> Profile {
            let out_file = std::env::temp_dir().join(format!(
                "ff-callgrind-{who}-{n}-{in_flight}-{}.out",
                std::process::id()
            ));
            let status = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg("--cache-sim=yes")
                .arg("--I1=32768,8,64")
                .arg("--zero-before=instructions::counting_starts_here")
                // Per-instruction counts, uncompressed, for the code span (`Profile::parse`).
                .args(["--dump-instr=yes", "--dump-line=no"])
                .args(["--compress-strings=no", "--compress-pos=no"])
                .arg(format!("--callgrind-out-file={}", out_file.display()))
                .arg(&exe)
                .args(["--child", who, &n.to_string(), &in_flight.to_string()])
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
        let extra = (high - low) as f64;
        let (a, b) = (run(low, 1), run(high, 1));
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
        // The same connects 100 at a time: a race's allocations then outlive the next
        // race's, so glibc's per-size caches (7 chunks each) run dry and most allocations
        // take its slower paths, which one connect at a time never does.
        let (a, b) = (run(low, IN_FLIGHT), run(high, IN_FLIGHT));
        let in_flight = (b.instructions - a.instructions) / extra;
        eprintln!(
            "{who:<20} {per_connect:>10.0} instructions per connect ({in_flight:.0} with {IN_FLIGHT} in flight), {misses:>6.0} L1i misses, code on {span} lines"
        );
        rows.push(Row {
            who,
            per_connect,
            in_flight,
            misses,
            span,
        });
    }
    let tokio = rows.iter().find(|r| r.who == "tokio");
    let (tokio, tokio_in_flight) =
        tokio.map_or((f64::NAN, f64::NAN), |r| (r.per_connect, r.in_flight));
    let mut md = String::from(
        "| contender | instructions per connect | × tokio | 100 in flight: instructions per connect | × tokio | code run per connect (64-byte lines) | L1i misses per connect (32 KiB, simulated) |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for r in &rows {
        md.push_str(&format!(
            "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {} ({} KiB) | {:.0} |\n",
            r.who,
            r.per_connect,
            r.per_connect / tokio,
            r.in_flight,
            r.in_flight / tokio_in_flight,
            r.span,
            r.span * 64 / 1024,
            r.misses,
        ));
        json.push(serde_json::json!({
            "contender": r.who,
            "instructions_per_connect": r.per_connect,
            "vs_tokio": r.per_connect / tokio,
            "instructions_per_connect_100_in_flight": r.in_flight,
            "vs_tokio_100_in_flight": r.in_flight / tokio_in_flight,
            "code_lines_per_connect": r.span,
            "l1i_misses_per_connect": r.misses,
        }));
    }
    println!("{md}");
    // A smoke run (`cargo test --benches`, 20 and 60 connects) keeps the last real result,
    // which the scenarios bench reads for its instructions target.
    if smoke {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
    std::fs::write(
        dir.join("instructions.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("write");
}

/// Connects in flight in the second measurement of each contender.
const IN_FLIGHT: usize = 100;

/// One contender's counts, per connect.
struct Row {
    who: &'static str,
    /// Instructions, one connect at a time.
    per_connect: f64,
    /// Instructions, [`IN_FLIGHT`] connects at a time.
    in_flight: f64,
    /// Simulated first-level instruction cache misses, one connect at a time.
    misses: f64,
    /// Cache lines of code every connect ran, one connect at a time.
    span: usize,
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
            instructions: fastfallback_benches::callgrind_total(text, "Ir"),
            misses: fastfallback_benches::callgrind_total(text, "I1mr"),
            executed,
        }
    }
}

/// Runs `n` loopback connects as `who`, `in_flight` at a time, and exits.
fn child(who: &str, n: usize, in_flight: usize) {
    // A backlog of 4096 (std's is 128): connects the client closed still wait in the accept
    // queue until the server thread, which valgrind runs in turns with the client, takes
    // them; a full queue would drop SYNs and stall the run for a second each.
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .expect("bind");
    socket.listen(4096).expect("listen");
    let listener = std::net::TcpListener::from(socket);
    let addr: SocketAddr = listener.local_addr().expect("addr");
    // Accept and close on a thread of its own, so the client side measures only connecting.
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    if who == "race-only" {
        race_only(addr, n, in_flight);
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let origin = addr.to_string();
    // The DNS server for the hickory contenders: A is the listener, AAAA has no records
    // (NODATA, which hickory caches too).
    let dns = who.ends_with("-hickory").then(|| {
        let dns = fastfallback_testnet::LoopbackDns::start().expect("loopback DNS");
        dns.set_dns(
            "origin.test",
            fastfallback_testnet::DnsZone {
                a: vec![Ipv4Addr::LOCALHOST],
                ..fastfallback_testnet::DnsZone::default()
            },
        );
        dns
    });
    let dns_addr = dns.as_ref().map(fastfallback_testnet::LoopbackDns::addr);
    rt.block_on(async {
        match who {
            "hyper-util-hickory" => {
                let resolver = fastfallback_benches::hickory_at(dns_addr.expect("dns"));
                let connector =
                    &HttpConnector::new_with_resolver(fastfallback_benches::LookupIp(resolver));
                let uri: &http::Uri = &format!("http://origin.test:{}/", addr.port())
                    .parse()
                    .expect("uri");
                drive(n, in_flight, || async move {
                    let mut c = connector.clone();
                    let s = tower_service::Service::call(&mut c, uri.clone()).await;
                    drop(s.expect("connect"));
                })
                .await;
            }
            "fastfallback-hickory" => {
                let c = &Connector::builder()
                    .resolver(
                        fastfallback_net::HickoryResolver::with_name_server(dns_addr.expect("dns"))
                            .expect("resolver"),
                    )
                    .socket_options(SocketOptions::default().nodelay(false).keepalive(None))
                    .build()
                    .expect("connector");
                let address =
                    &fastfallback_route::Address::parse(&format!("origin.test:{}", addr.port()))
                        .expect("address");
                drive(n, in_flight, || async move {
                    drop(c.connect_to(address.clone()).await.expect("connect"));
                })
                .await;
            }
            "minimal-driver" => minimal_driver(addr, n, in_flight).await,
            "tokio" => {
                drive(n, in_flight, || async move {
                    drop(tokio::net::TcpStream::connect(addr).await.expect("connect"));
                })
                .await;
            }
            "hyper-util" => {
                let connector = &HttpConnector::new();
                let uri: &http::Uri = &format!("http://{addr}/").parse().expect("uri");
                drive(n, in_flight, || async move {
                    let mut c = connector.clone();
                    let s = tower_service::Service::call(&mut c, uri.clone()).await;
                    drop(s.expect("connect"));
                })
                .await;
            }
            _ => {
                let options = if who != "fastfallback" {
                    SocketOptions::default().nodelay(false).keepalive(None)
                } else {
                    SocketOptions::default()
                };
                let c = &Connector::builder()
                    .resolver(StaticResolver::new().with("origin.test", [addr.ip()]))
                    .socket_options(options)
                    .build()
                    .expect("connector");
                let origin = &origin;
                // `fastfallback-bare` is like for like with tokio (a `SocketAddr`) and
                // hyper-util (a parsed `Uri`).
                let parsed = match who {
                    "fastfallback-bare" => Some(origin.clone()),
                    "fastfallback-name" => Some(format!("origin.test:{}", addr.port())),
                    _ => None,
                };
                if let Some(parsed) = parsed {
                    let address = &fastfallback_route::Address::parse(&parsed).expect("address");
                    drive(n, in_flight, || async move {
                        drop(c.connect_to(address.clone()).await.expect("connect"));
                    })
                    .await;
                } else {
                    drive(n, in_flight, || async move {
                        drop(c.connect(origin).await.expect("connect"));
                    })
                    .await;
                }
            }
        }
    });
}

/// The race of a `fastfallback-bare` connect to `address` at `now`, built as the driver builds
/// it for a loopback literal (its network dual-stack, route memory off), with its one attempt
/// started (the outputs drained, the timer read, as the driver does). Inlined, as the code
/// it stands for was written out in each contender when their counts were reported.
#[inline(always)]
fn started_race(
    address: &fastfallback_route::Address,
    policy: &std::sync::Arc<fastfallback_plan::FallbackPolicy>,
    seed: u64,
    now: fastfallback_proto::Instant,
) -> (
    Box<fastfallback_plan::WithDriver<()>>,
    fastfallback_proto::AttemptId,
) {
    use fastfallback_plan::{FastFallbackExchangeFinder, RaceInput};
    use fastfallback_proto::Output;
    use fastfallback_route::{Connectivity, MemoryView};

    let input = RaceInput {
        connectivity: Connectivity::DUAL_STACK,
        memory: MemoryView::disabled(),
        seed,
        waiting: false,
        alternatives: Vec::new(),
    };
    let policy = std::sync::Arc::clone(policy);
    let mut cell = FastFallbackExchangeFinder::boxed_with(address.clone(), policy, input, now, ());
    let race = &mut cell.race;
    let Some(Output::StartAttempt { id }) = race.poll_output(now) else {
        panic!("a literal's race starts its attempt at once");
    };
    assert_eq!(race.poll_output(now), None);
    std::hint::black_box(race.poll_timeout());
    (cell, id)
}

/// Hands `race` the connect of its attempt `id` at `now` and polls its win.
#[inline(always)]
fn won(
    race: &mut fastfallback_plan::FastFallbackExchangeFinder,
    id: fastfallback_proto::AttemptId,
    now: fastfallback_proto::Instant,
) {
    use fastfallback_proto::{AttemptEvent, Output};

    race.handle_attempt(id, AttemptEvent::Connected(None), now);
    let won = race.poll_output(now);
    assert!(matches!(won, Some(Output::Done(_))), "{won:?}");
}

/// `n` connects to `addr`, `in_flight` at a time, each a race driven by the least a driver can
/// do (see the module docs): the race is built as [`started_race`] builds it, and its clock is
/// tokio's, turned into the race's as the driver turns it (from the same base).
async fn minimal_driver(addr: SocketAddr, n: usize, in_flight: usize) {
    use fastfallback_plan::{FallbackPolicy, MAX_MEMORY_TTL};
    use fastfallback_proto::Instant;
    use fastfallback_route::Address;

    let policy = &std::sync::Arc::new(FallbackPolicy::default());
    let address = &Address::parse(&addr.to_string()).expect("address");
    let epoch = tokio::time::Instant::now();
    let clock = move || {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(epoch);
        Instant::from_elapsed(MAX_MEMORY_TTL + elapsed)
    };
    let seed = &std::cell::Cell::new(0u64);
    drive(n, in_flight, || async move {
        seed.set(seed.get() + 1);
        let (mut race, id) = started_race(address, policy, seed.get(), clock());
        let target = race.race.attempt(id).expect("its record").plan.route.target;
        // The socket as the driver opens it, registered with tokio and awaited writable.
        // tokio's connect functions are left to the tokio row alone: a second caller here
        // would change how the compiler builds them there.
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(target),
            socket2::Type::STREAM.nonblocking(),
            Some(socket2::Protocol::TCP),
        )
        .expect("socket");
        match socket.connect(&target.into()) {
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            other => other.expect("connect under way"),
        }
        let stream = tokio::net::TcpStream::from_std(socket.into()).expect("registered");
        std::future::poll_fn(|cx| stream.poll_write_ready(cx))
            .await
            .expect("connected");
        won(&mut race.race, id, clock());
        drop(stream);
    })
    .await;
}

/// `n` races of a `fastfallback-bare` connect to `addr` through the sans-IO race alone, on
/// virtual time, `in_flight` alive at a time: each is built and started ([`started_race`]),
/// and once `in_flight` newer ones have started, hears that the attempt connected, yields its
/// win and is dropped.
fn race_only(addr: SocketAddr, n: usize, in_flight: usize) {
    use fastfallback_plan::FallbackPolicy;
    use fastfallback_proto::Instant;
    use fastfallback_route::Address;

    let policy = std::sync::Arc::new(FallbackPolicy::default());
    let address = Address::parse(&addr.to_string()).expect("address");
    let mut live = std::collections::VecDeque::with_capacity(in_flight);
    counting_starts_here();
    for k in 1..=n as u64 {
        let now = Instant::from_millis(k);
        live.push_back(started_race(&address, &policy, k, now));
        if live.len() >= in_flight
            && let Some((mut race, id)) = live.pop_front()
        {
            won(&mut race.race, id, now);
        }
    }
    let end = Instant::from_millis(n as u64 + 1);
    for (mut race, id) in live {
        won(&mut race.race, id, end);
    }
}

/// Where callgrind's counts start (`--zero-before`): everything before, the contender's set-up
/// included, is left out. Set-up costs the same for 1 000 and 3 000 connects, so it cancels
/// out of the difference, except where it varies from run to run: building a connector seeds
/// aws-lc's random generator from jitter entropy, whose loop runs a different number of
/// times each run (±100 instructions per connect in the difference, seen in a profile).
#[inline(never)]
fn counting_starts_here() {
    std::hint::black_box(());
}

/// Runs `n` connects made by `connect`: one after another when `in_flight` is 1 (no stream
/// machinery around them), else `in_flight` at a time, as the throughput rows of the
/// scenarios bench do.
async fn drive<F: Future<Output = ()>>(n: usize, in_flight: usize, connect: impl Fn() -> F) {
    counting_starts_here();
    if in_flight == 1 {
        for _ in 0..n {
            connect().await;
        }
    } else {
        futures::stream::iter(0..n)
            .map(|_| connect())
            .buffer_unordered(in_flight)
            .for_each(|()| std::future::ready(()))
            .await;
    }
}
