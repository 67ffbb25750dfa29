//! Scenario benchmarks on the dual-stack test network: fastfallback against hyper-util's
//! `HttpConnector` (default settings) and tokio's sequential `TcpStream::connect`, in the same
//! run, on the same network, through the same DNS server.
//!
//! ```text
//! cargo bench -p fastfallback-benches --bench scenarios              # everything
//! cargo bench -p fastfallback-benches --bench scenarios -- loopback  # one section
//! cargo bench -p fastfallback-benches --bench scenarios -- network "second contact"  # matching rows
//! ```
//!
//! Each scenario of design.md's performance table gets a fresh network. Every contender runs
//! it several times; each run is a fresh runtime, resolver and connector (a "fresh process"),
//! with any warm-up contacts the scenario asks for made first by the same connector. For the
//! measured contact we record the time to a connected socket, and the attempts the wire saw
//! (client SYN flows: one per socket that reached the network). Results go to
//! `target/fastfallback-bench/scenarios.{json,md}` (not from a smoke run, `cargo test --benches`)
//! and to stdout.
//!
//! Needs root (network namespaces). Without it the bench says so and exits 0.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fastfallback_benches::{LookupIp, hickory, median};
use fastfallback_net::{Connector, FallbackPolicy, HickoryResolver};
use fastfallback_testnet::{DnsZone, Match, Rule, ServerKind, TestNet, server_v4, server_v6};
use hickory_resolver::TokioResolver;
use hyper_util::client::legacy::connect::HttpConnector;
use serde::Serialize;

#[path = "scenarios/loopback.rs"]
mod loopback;
#[path = "scenarios/names.rs"]
mod names;

const PORT: u16 = 80;
const ORIGIN: &str = "origin.test";
/// A second host, for the warm-process scenarios.
const OTHER: &str = "other.test";
const ONE_WAY: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug, Eq, PartialEq, Serialize)]
enum Contender {
    #[serde(rename = "fastfallback")]
    Fastfallback,
    #[serde(rename = "hyper-util HttpConnector")]
    HyperUtil,
    #[serde(rename = "tokio sequential connect")]
    TokioSequential,
}

impl Contender {
    const ALL: [Self; 3] = [Self::Fastfallback, Self::HyperUtil, Self::TokioSequential];

    fn label(self) -> &'static str {
        match self {
            Self::Fastfallback => "fastfallback",
            Self::HyperUtil => "hyper-util HttpConnector",
            Self::TokioSequential => "tokio sequential connect",
        }
    }
}

/// One row of design.md's performance table.
struct Scenario {
    name: &'static str,
    /// The physical limit: the best path's RTT.
    limit_ms: f64,
    /// Our target from design.md (and the issue's acceptance bound).
    target_ms: f64,
    /// IPv6 addresses of the origin (server indexes); IPv4 is always server 0.
    origin_v6: &'static [u8],
    setup: fn(&TestNet),
    /// A contact made first, by the same connector, and not measured.
    warm_up: Option<&'static str>,
    policy: fn() -> FallbackPolicy,
    /// Blackholes make sequential connect wait for the kernel (3 s each with syn_retries=1):
    /// fewer runs for it.
    slow_for_sequential: bool,
    /// fastfallback's measured contact is made by a fresh process that loads the route-memory
    /// file an earlier process wrote (both are this bench binary, re-run in the client
    /// namespace). The peers have no such file: each run is their own fresh process.
    fresh_process_memory: bool,
}

fn delay(ip: IpAddr, one_way: Duration) -> Rule {
    Rule::delay(Match::Addr(ip), one_way)
}

fn v6(i: u8) -> IpAddr {
    IpAddr::V6(server_v6(i))
}

fn v4(i: u8) -> IpAddr {
    IpAddr::V4(server_v4(i))
}

/// The origin's IPv6 is a black hole; its IPv4 has RTT 20 ms.
fn v6_blackholed(net: &TestNet) {
    net.set_rules(vec![
        Rule::blackhole(Match::Addr(v6(0))),
        delay(v4(0), ONE_WAY),
    ]);
}

fn default_policy() -> FallbackPolicy {
    FallbackPolicy::default()
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "both families healthy, RTT 20 ms",
            limit_ms: 20.0,
            target_ms: 21.0,
            origin_v6: &[0],
            setup: |net| net.set_rules(vec![delay(v6(0), ONE_WAY), delay(v4(0), ONE_WAY)]),
            warm_up: None,
            policy: default_policy,
            slow_for_sequential: false,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 blackholed, IPv4 RTT 20 ms, first contact",
            limit_ms: 20.0,
            target_ms: 275.0,
            origin_v6: &[0],
            setup: v6_blackholed,
            warm_up: None,
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "same, attempt delay set to 200 ms",
            limit_ms: 20.0,
            target_ms: 225.0,
            origin_v6: &[0],
            setup: v6_blackholed,
            warm_up: None,
            policy: || {
                FallbackPolicy::builder()
                    .attempt_delay(Duration::from_millis(200))
                    .build()
                    .unwrap()
            },
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 blackholed, second contact",
            limit_ms: 20.0,
            target_ms: 25.0,
            origin_v6: &[0],
            setup: v6_blackholed,
            warm_up: Some(ORIGIN),
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 blackholed for a new host only, warm process (RTT known)",
            limit_ms: 20.0,
            target_ms: 125.0,
            origin_v6: &[0],
            setup: |net| {
                net.set_rules(vec![
                    Rule::blackhole(Match::Addr(v6(0))),
                    delay(v4(0), ONE_WAY),
                    delay(v6(1), ONE_WAY),
                    delay(v4(1), ONE_WAY),
                ])
            },
            warm_up: Some(OTHER),
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 blackholed network-wide, new host after another host's IPv6 failed",
            limit_ms: 20.0,
            target_ms: 25.0,
            origin_v6: &[0],
            setup: |net| {
                net.set_rules(vec![
                    Rule::blackhole(Match::V6).port(PORT),
                    delay(v4(0), ONE_WAY),
                    delay(v4(1), ONE_WAY),
                ])
            },
            warm_up: Some(OTHER),
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 RTT 400 ms, IPv4 RTT 20 ms, second contact",
            limit_ms: 20.0,
            target_ms: 25.0,
            origin_v6: &[0],
            setup: |net| {
                net.set_rules(vec![
                    delay(v6(0), Duration::from_millis(200)),
                    delay(v4(0), ONE_WAY),
                ])
            },
            warm_up: Some(ORIGIN),
            policy: default_policy,
            slow_for_sequential: false,
            fresh_process_memory: false,
        },
        Scenario {
            name: "AAAA answer 300 ms late, A at once, IPv4 RTT 20 ms",
            limit_ms: 20.0,
            target_ms: 75.0,
            origin_v6: &[0],
            setup: |net| {
                net.set_dns(
                    ORIGIN,
                    DnsZone {
                        aaaa: vec![server_v6(0)],
                        a: vec![server_v4(0)],
                        aaaa_delay: Duration::from_millis(300),
                        ..DnsZone::default()
                    },
                );
                net.set_rules(vec![delay(v6(0), ONE_WAY), delay(v4(0), ONE_WAY)]);
            },
            warm_up: None,
            policy: default_policy,
            slow_for_sequential: false,
            fresh_process_memory: false,
        },
        Scenario {
            name: "8 IPv6 blackholed, 1 IPv4 (RTT 20 ms)",
            limit_ms: 20.0,
            target_ms: 275.0,
            origin_v6: &[0, 1, 2, 3, 4, 5, 6, 7],
            setup: |net| {
                net.set_rules(vec![
                    Rule::blackhole(Match::V6).port(PORT),
                    delay(v4(0), ONE_WAY),
                ])
            },
            warm_up: None,
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: false,
        },
        Scenario {
            name: "IPv6 blackholed, fresh process loading the route-memory file of an earlier one",
            limit_ms: 20.0,
            target_ms: 25.0,
            origin_v6: &[0],
            setup: v6_blackholed,
            warm_up: None,
            policy: default_policy,
            slow_for_sequential: true,
            fresh_process_memory: true,
        },
    ]
}

#[derive(Clone, Debug, Serialize)]
struct Sample {
    ms: f64,
    connected: bool,
    /// Client SYN flows on the wire during the measured contact.
    attempts_on_wire: usize,
    /// Attempts (= sockets) the contender reports itself, where it can (fastfallback only).
    attempts_reported: Option<usize>,
}

#[derive(Debug, Serialize)]
struct Row {
    scenario: &'static str,
    contender: Contender,
    limit_ms: f64,
    target_ms: f64,
    runs: usize,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    attempts_median: usize,
    sockets_opened_median: usize,
    failures: usize,
    /// This contender's median divided by fastfallback's (how many times slower).
    ratio_vs_fastfallback: f64,
    meets_target: Option<bool>,
    samples: Vec<Sample>,
}

/// The median (the mean of the middle two for an even count); NaN when empty.
/// One contender's client state for one run: made fresh per run, reused for the warm-up.
enum Client {
    Ours(Connector),
    Hyper(HttpConnector<LookupIp>),
    Sequential(TokioResolver),
}

impl Client {
    fn new(contender: Contender, policy: FallbackPolicy) -> Self {
        match contender {
            Contender::Fastfallback => Self::Ours(
                Connector::builder()
                    .policy(policy)
                    .resolver(HickoryResolver::from_resolver(hickory()))
                    .build()
                    .expect("connector"),
            ),
            Contender::HyperUtil => {
                Self::Hyper(HttpConnector::new_with_resolver(LookupIp(hickory())))
            }
            Contender::TokioSequential => Self::Sequential(hickory()),
        }
    }

    /// Connects to `host`; returns whether it connected and the attempts it reports.
    async fn contact(&mut self, host: &str) -> (bool, Option<usize>) {
        match self {
            Self::Ours(c) => match c.connect(&format!("tcp://{host}:{PORT}")).await {
                Ok(conn) => {
                    if std::env::var_os("FF_BENCH_REPORTS").is_some() {
                        eprintln!("{}", conn.report());
                    }
                    (true, Some(conn.report().attempts_started()))
                }
                Err(e) => (false, e.report().map(|r| r.attempts_started())),
            },
            Self::Hyper(h) => {
                let uri: http::Uri = format!("http://{host}:{PORT}/").parse().unwrap();
                let r = tower_service::Service::call(h, uri).await;
                (r.is_ok(), None)
            }
            Self::Sequential(r) => {
                let Ok(ips) = r.lookup_ip(host).await else {
                    return (false, None);
                };
                let addrs: Vec<SocketAddr> =
                    ips.iter().map(|ip| SocketAddr::new(ip, PORT)).collect();
                (
                    tokio::net::TcpStream::connect(&addrs[..]).await.is_ok(),
                    None,
                )
            }
        }
    }
}

fn prepare(net: &TestNet, s: &Scenario) {
    net.set_dns(
        ORIGIN,
        DnsZone {
            aaaa: s.origin_v6.iter().map(|&i| server_v6(i)).collect(),
            a: vec![server_v4(0)],
            ..DnsZone::default()
        },
    );
    net.set_dns(
        OTHER,
        DnsZone {
            aaaa: vec![server_v6(1)],
            a: vec![server_v4(1)],
            ..DnsZone::default()
        },
    );
    for i in 0..9 {
        for ip in [v6(i), v4(i)] {
            net.serve(SocketAddr::new(ip, PORT), ServerKind::Accept)
                .expect("server");
        }
    }
    (s.setup)(net);
}

/// One contact by a fresh process (this binary, re-run in the client namespace) whose
/// connector keeps route memory in `file`. Returns what the child measured.
fn contact_in_a_fresh_process(net: &TestNet, file: &std::path::Path) -> Sample {
    let exe = std::env::current_exe().expect("own path");
    let out = net.client(|| {
        std::process::Command::new(&exe)
            .args(["--fresh-process-contact", ORIGIN])
            .arg(file)
            .output()
            .expect("the child runs")
    });
    let text = String::from_utf8_lossy(&out.stdout);
    let mut f = text.split_whitespace();
    let connected = f.next() == Some("ok");
    let attempts: Option<usize> = f.next().and_then(|v| v.parse().ok());
    let ms: f64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    Sample {
        ms,
        connected,
        attempts_on_wire: net.client_connections(),
        attempts_reported: attempts,
    }
}

/// The child side of [`contact_in_a_fresh_process`]: one contact, then exit (which saves the
/// memory file).
fn fresh_process_contact(origin: &str, file: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let connector = Connector::builder()
            .resolver(HickoryResolver::from_resolver(hickory()))
            .memory_file(file)
            .build()
            .expect("connector");
        let t = Instant::now();
        let r = connector.connect(&format!("tcp://{origin}:{PORT}")).await;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (ok, attempts) = match &r {
            Ok(c) => ("ok", c.report().attempts_started()),
            Err(e) => ("failed", e.report().map_or(0, |r| r.attempts_started())),
        };
        println!("{ok} {attempts} {ms}");
    });
}

fn run_once(net: &TestNet, s: &Scenario, contender: Contender) -> Sample {
    if s.fresh_process_memory && contender == Contender::Fastfallback {
        let file = std::env::temp_dir().join(format!("ff-bench-memory-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        // The earlier process: a first contact, which learns that IPv6 is dead.
        let _ = contact_in_a_fresh_process(net, &file);
        net.clear_log();
        let sample = contact_in_a_fresh_process(net, &file);
        let _ = std::fs::remove_file(&file);
        return sample;
    }
    net.block_on_client(async {
        let mut client = Client::new(contender, (s.policy)());
        if let Some(host) = s.warm_up {
            let _ = client.contact(host).await;
        }
        net.clear_log();
        let t = Instant::now();
        let (connected, attempts_reported) = client.contact(ORIGIN).await;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        Sample {
            ms,
            connected,
            attempts_on_wire: net.client_connections(),
            attempts_reported,
        }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--fresh-process-contact") {
        fresh_process_contact(&args[i + 1], &args[i + 2]);
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` runs us with no args: do a small
    // version of everything then, as a smoke test.
    let smoke = !std::env::args().any(|a| a == "--bench");
    // `-- loopback` or `-- network` runs one section only.
    let only = std::env::args().find(|a| a == "loopback" || a == "network");
    let loopback = if only.as_deref() == Some("network") {
        Vec::new()
    } else {
        loopback::run(smoke)
    };
    for r in &loopback {
        eprintln!(
            "{:<60} {:<26} {:>10.1} {}",
            r.scenario, r.contender, r.value, r.metric
        );
    }
    let network = match TestNet::builder().servers(9).build() {
        Ok(_) if only.as_deref() == Some("loopback") => Vec::new(),
        Ok(net) => {
            drop(net);
            network_rows(smoke)
        }
        Err(e) => {
            eprintln!("skipped: needs CAP_NET_ADMIN (network scenario benchmarks): {e}");
            Vec::new()
        }
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fastfallback-bench");
    std::fs::create_dir_all(&dir).expect("target dir");
    let instructions = std::fs::read_to_string(dir.join("instructions.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.as_array()?
                .iter()
                .find(|r| r["contender"] == "fastfallback-bare")?["vs_tokio"]
                .as_f64()
        });
    let targets = if loopback.is_empty() {
        Vec::new()
    } else {
        loopback::targets(&loopback, instructions)
    };
    let json = serde_json::json!({ "network": network, "loopback": loopback, "loopback_targets": targets });
    let json = serde_json::to_string_pretty(&json).expect("json");
    let md = format!(
        "{}\n{}\n{}",
        markdown(&network),
        loopback_markdown(&loopback),
        targets_markdown(&targets)
    );
    println!("{md}");
    // A smoke run (`cargo test --benches`) keeps the last real result, which the chart's
    // `redraw_chart` example reads.
    if smoke {
        return;
    }
    std::fs::write(dir.join("scenarios.json"), json).expect("write json");
    std::fs::write(dir.join("scenarios.md"), &md).expect("write md");
    println!("written: {}", dir.join("scenarios.{json,md}").display());
    // The chart in docs/benchmarks.md is this run's, redrawn from the JSON rows.
    if !network.is_empty() {
        let rows = serde_json::to_value(&network).expect("rows");
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/img/scenarios.svg");
        match fastfallback_benches::chart::write_scenarios_chart(
            &rows,
            &[dir.join("scenarios.svg"), docs.clone()],
        ) {
            Ok(()) => println!("written: {}", docs.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
    }
}

fn network_rows(smoke: bool) -> Vec<Row> {
    let runs = |contender: Contender, s: &Scenario| match (smoke, contender, s.slow_for_sequential)
    {
        (true, ..) => 1,
        (false, Contender::TokioSequential, true) => 2,
        _ => 7,
    };
    let mut all = Vec::new();
    // Any other argument picks the scenarios whose name contains it.
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--") && a != "loopback" && a != "network");
    let mut list = scenarios();
    if let Some(f) = &filter {
        list.retain(|s| s.name.contains(f.as_str()));
    }
    let list = if smoke {
        &list[..list.len().min(1)]
    } else {
        &list[..]
    };
    for s in list {
        let net = TestNet::builder().servers(9).build().expect("test network");
        prepare(&net, s);
        let mut rows: Vec<Row> = Vec::new();
        for contender in Contender::ALL {
            let n = runs(contender, s);
            let samples: Vec<Sample> = (0..n).map(|_| run_once(&net, s, contender)).collect();
            let failures = samples.iter().filter(|x| !x.connected).count();
            let times: Vec<f64> = samples.iter().map(|x| x.ms).collect();
            let attempts = median(samples.iter().map(|x| x.attempts_on_wire as f64).collect());
            let sockets = median(
                samples
                    .iter()
                    .map(|x| x.attempts_reported.unwrap_or(x.attempts_on_wire) as f64)
                    .collect(),
            );
            let med = median(times.clone());
            rows.push(Row {
                scenario: s.name,
                contender,
                limit_ms: s.limit_ms,
                target_ms: s.target_ms,
                runs: n,
                median_ms: med,
                min_ms: times.iter().copied().fold(f64::INFINITY, f64::min),
                max_ms: times.iter().copied().fold(0.0, f64::max),
                attempts_median: attempts.round() as usize,
                sockets_opened_median: sockets.round() as usize,
                failures,
                ratio_vs_fastfallback: f64::NAN,
                meets_target: (contender == Contender::Fastfallback)
                    .then_some(med <= s.target_ms && failures == 0),
                samples,
            });
            eprintln!(
                "{:<75} {:<26} median {:>8.1} ms",
                s.name,
                contender.label(),
                med
            );
        }
        let ours = rows[0].median_ms;
        for r in &mut rows {
            r.ratio_vs_fastfallback = r.median_ms / ours;
        }
        all.extend(rows);
    }
    all
}

fn loopback_markdown(rows: &[loopback::LoopbackRow]) -> String {
    let mut out = String::new();
    out.push_str(
        "| loopback scenario | contender | value | metric | fastfallback ÷ contender | note |\n",
    );
    out.push_str("|---|---|---:|---|---:|---|\n");
    for r in rows {
        let ratio = if r.vs_fastfallback.is_nan() {
            String::new()
        } else {
            format!("{:.2}", r.vs_fastfallback)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} |",
            r.scenario, r.contender, r.value, r.metric, ratio, r.note
        );
    }
    out
}

fn targets_markdown(targets: &[loopback::Target]) -> String {
    let mut out =
        String::from("| loopback target | measured | target | met |\n|---|---:|---:|:---:|\n");
    for t in targets {
        let met = if t.met { "yes" } else { "**no**" };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} | {met} |",
            t.what, t.measured, t.target
        );
    }
    out
}

fn markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| scenario | contender | median ms | min–max ms | attempts on the wire | sockets opened | failed runs | × fastfallback | target | met |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1}–{:.1} | {} | {} | {}/{} | {:.2} | {} | {} |",
            r.scenario,
            r.contender.label(),
            r.median_ms,
            r.min_ms,
            r.max_ms,
            r.attempts_median,
            r.sockets_opened_median,
            r.failures,
            r.runs,
            r.ratio_vs_fastfallback,
            if r.contender == Contender::Fastfallback {
                format!("≤ {:.0}", r.target_ms)
            } else {
                String::new()
            },
            match r.meets_target {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            }
        );
    }
    out
}
