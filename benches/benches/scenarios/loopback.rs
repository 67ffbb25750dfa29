//! The loopback rows of design.md's performance table: engine overhead against a raw tokio
//! connect, connects per second with 100 in flight, and 10 000 concurrent races. No root needed.
//!
//! The server accepts on its own OS thread and closes each connection at once, so the client
//! side measures only connecting. Every contender connects to the same IP literal (no DNS).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use fastfallback_net::Connector;
use futures::StreamExt;
use hyper_util::client::legacy::connect::HttpConnector;
use serde::Serialize;

use fastfallback_benches::{block_medians, median, paired_ratio, williams_row};

/// One measured loopback row.
#[derive(Debug, Serialize)]
pub(crate) struct LoopbackRow {
    pub(crate) scenario: &'static str,
    pub(crate) contender: &'static str,
    pub(crate) metric: &'static str,
    pub(crate) value: f64,
    /// fastfallback's value divided by this contender's (for times: < 1 means we are faster;
    /// for rates: > 1 means we are faster), paired by turn (see `paired_ratio`). `NaN` on
    /// fastfallback's own row.
    pub(crate) vs_fastfallback: f64,
    pub(crate) note: String,
    /// One value per stretch of turns, in the order they ran, aligned across the contenders of
    /// a scenario: what `paired_ratio` compares.
    pub(crate) series: Vec<f64>,
}

/// The loopback server: accepts on `127.0.0.1` (and on `[::1]`, on the same port, where the
/// host has IPv6 loopback) and closes each connection at once.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// Whether it also listens on `[::1]` at `addr`'s port.
    pub(crate) v6: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start() -> Self {
        let (tx_addr, rx_addr) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                socket.set_reuseaddr(true).expect("reuseaddr");
                socket
                    .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                    .expect("bind");
                let listener = socket.listen(4096).expect("listen");
                let addr = listener.local_addr().expect("addr");
                // The same port on IPv6 loopback, for the name rows' AAAA answer.
                let v6 = tokio::net::TcpSocket::new_v6().ok().and_then(|s| {
                    s.bind(SocketAddr::from((Ipv6Addr::LOCALHOST, addr.port())))
                        .ok()?;
                    s.listen(4096).ok()
                });
                tx_addr.send((addr, v6.is_some())).expect("send");
                let accept = async {
                    loop {
                        // Close at once: the server side should cost the client nothing.
                        let accepted = match &v6 {
                            Some(v6) => tokio::select! {
                                a = listener.accept() => a,
                                a = v6.accept() => a,
                            },
                            None => listener.accept().await,
                        };
                        if let Ok((s, _)) = accepted {
                            drop(s);
                        }
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let (addr, v6) = rx_addr.recv().expect("server address");
        Self {
            addr,
            v6,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Ours,
    OursBare,
    Hyper,
    HyperLikeOurs,
    Tokio,
    /// The same raw tokio connect a second time. Its ratio to [`Who::Tokio`] is this run's
    /// noise floor: two copies of one code path should read 1.00.
    TokioControl,
}

impl Who {
    const ALL: [Self; 6] = [
        Self::Ours,
        Self::OursBare,
        Self::Hyper,
        Self::HyperLikeOurs,
        Self::Tokio,
        Self::TokioControl,
    ];

    /// The contenders' order in turn `k`, with each one's index in [`Self::ALL`]: row `k` of
    /// a Williams square ([`williams_row`]). A rotation kept every contender's neighbours, and
    /// a random shuffle left a 3–4% bias between the two copies of tokio's connect.
    fn turn(k: usize) -> impl Iterator<Item = (usize, Self)> {
        williams_row(Self::ALL.len(), k).map(|i| (i, Self::ALL[i]))
    }

    fn label(self) -> &'static str {
        match self {
            Self::Ours => "fastfallback",
            Self::OursBare => "fastfallback, tokio's socket options (none), parsed origin",
            Self::Hyper => "hyper-util HttpConnector",
            Self::HyperLikeOurs => {
                "hyper-util HttpConnector, our default options (nodelay, 60 s keepalive)"
            }
            Self::Tokio => "tokio TcpStream::connect",
            Self::TokioControl => "tokio TcpStream::connect, a second time (control)",
        }
    }
}

struct Clients {
    ours: Connector,
    bare: Connector,
    hyper: HttpConnector,
    hyper_like_ours: HttpConnector,
    addr: SocketAddr,
    origin: String,
    address: fastfallback_route::Address,
    uri: http::Uri,
}

impl Clients {
    fn new(addr: SocketAddr) -> Self {
        Self {
            ours: Connector::builder()
                .resolver(fastfallback_net::StaticResolver::new())
                .build()
                .expect("connector"),
            bare: Connector::builder()
                .resolver(fastfallback_net::StaticResolver::new())
                .socket_options(
                    fastfallback_net::SocketOptions::default()
                        .nodelay(false)
                        .keepalive(None),
                )
                .build()
                .expect("connector"),
            hyper: HttpConnector::new(),
            hyper_like_ours: {
                let mut h = HttpConnector::new();
                h.set_nodelay(true);
                h.set_keepalive(Some(Duration::from_secs(60)));
                h
            },
            addr,
            origin: format!("{addr}"),
            address: fastfallback_route::Address::parse(&format!("{addr}")).expect("address"),
            uri: format!("http://{addr}/").parse().expect("uri"),
        }
    }

    async fn connect(&self, who: Who) -> bool {
        match who {
            Who::Ours => self.ours.connect(&self.origin).await.is_ok(),
            // Like-for-like with tokio (a parsed SocketAddr) and hyper-util (a parsed Uri).
            Who::OursBare => self.bare.connect_to(self.address.clone()).await.is_ok(),
            Who::Hyper | Who::HyperLikeOurs => {
                let mut h = if who == Who::Hyper {
                    self.hyper.clone()
                } else {
                    self.hyper_like_ours.clone()
                };
                tower_service::Service::call(&mut h, self.uri.clone())
                    .await
                    .is_ok()
            }
            Who::Tokio | Who::TokioControl => {
                tokio::net::TcpStream::connect(self.addr).await.is_ok()
            }
        }
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// TCP sockets in TIME_WAIT in this network namespace (`/proc/net/sockstat`): each loopback
/// connect leaves one for a minute, and tens of thousands of them (an earlier bench's) slow
/// every connect and widen the spread, so the rows say how many there were.
fn time_wait() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let tcp = stat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = tcp.split_whitespace();
    words.find(|w| *w == "tw")?;
    words.next()?.parse().ok()
}

fn time_wait_note() -> String {
    time_wait().map_or_else(String::new, |n| {
        format!("; {n} TIME_WAIT sockets at the start")
    })
}

const ONE_AT_A_TIME: &str = "engine overhead, healthy loopback (one connect at a time)";
const IN_FLIGHT: &str = "connects per second on loopback, 100 at a time";

/// How far a control ratio may stray from 1 for the run's other verdicts to count: a run
/// whose two copies of one connect differ by more was too noisy to tell 10%.
const CONTROL_TOLERANCE: f64 = 0.03;
const CONTROL: &str = "1.00 ± 0.03";

/// One of the loopback targets (design.md's performance table, as issue 22 set them), checked
/// on this run's rows.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub(crate) what: &'static str,
    pub(crate) measured: f64,
    pub(crate) target: &'static str,
    pub(crate) met: bool,
}

/// The loopback targets, computed from `rows` (and from the instructions bench's last
/// result, when `instructions` holds it): fastfallback with tokio's socket options against
/// a raw tokio connect and against hyper-util.
pub(crate) fn targets(rows: &[LoopbackRow], instructions: Option<f64>) -> Vec<Target> {
    let ratio = |scenario: &str, a: Who, b: Who| {
        let series = |who: Who| {
            rows.iter()
                .find(|r| r.scenario == scenario && r.contender == who.label())
                .map_or(&[][..], |r| &r.series[..])
        };
        paired_ratio(series(a), series(b))
    };
    let one = ratio(ONE_AT_A_TIME, Who::OursBare, Who::Tokio);
    let bare = ratio(IN_FLIGHT, Who::OursBare, Who::Hyper);
    // Our defaults set `TCP_NODELAY` and keepalive, three more system calls than hyper-util's
    // defaults, so they are compared with a hyper-util connector set up the same way.
    let ours = ratio(IN_FLIGHT, Who::Ours, Who::HyperLikeOurs);
    // Two copies of the same code: how far this run's estimate strays from the truth.
    let control_one = ratio(ONE_AT_A_TIME, Who::TokioControl, Who::Tokio);
    let control_rate = ratio(IN_FLIGHT, Who::TokioControl, Who::Tokio);
    let mut out = vec![
        Target {
            what: "control, one at a time: tokio's time ÷ the same tokio connect's",
            measured: control_one,
            target: CONTROL,
            met: (control_one - 1.0).abs() <= CONTROL_TOLERANCE,
        },
        Target {
            what: "control, 100 in flight: tokio's rate ÷ the same tokio connect's",
            measured: control_rate,
            target: CONTROL,
            met: (control_rate - 1.0).abs() <= CONTROL_TOLERANCE,
        },
        Target {
            what: "one connect at a time, tokio's socket options: time ÷ tokio's",
            measured: one,
            target: "≤ 1.15",
            met: one <= 1.15,
        },
        Target {
            what: "100 in flight, tokio's socket options: connects per second ÷ hyper-util's",
            measured: bare,
            target: "≥ 1.00",
            met: bare >= 1.0,
        },
        Target {
            what: "100 in flight, defaults: connects per second ÷ hyper-util's with the same options",
            measured: ours,
            target: "≥ 1.00",
            met: ours >= 1.0,
        },
    ];
    if let Some((names, control)) = crate::names::ratios(rows) {
        out.push(Target {
            what: "control, names: hyper-util's rate ÷ the same hyper-util connector's",
            measured: control,
            target: CONTROL,
            met: (control - 1.0).abs() <= CONTROL_TOLERANCE,
        });
        out.push(Target {
            what: "100 in flight to a name via a local DNS server: connects per second ÷ hyper-util's with hickory",
            measured: names,
            target: "≥ 1.10",
            met: names >= 1.10,
        });
    }
    if let Some(ratio) = instructions {
        out.push(Target {
            what: "instructions per connect ÷ tokio's (the last `--bench instructions` run)",
            measured: ratio,
            target: "≤ 1.80",
            met: ratio <= 1.8,
        });
    }
    out
}

/// One row per contender of `scenario`: `values[i]` and `series[i]` are [`Who::ALL`]`[i]`'s.
fn scenario_rows(
    scenario: &'static str,
    metric: &'static str,
    values: &[f64],
    series: Vec<Vec<f64>>,
    note: &str,
) -> Vec<LoopbackRow> {
    let labels: Vec<&'static str> = Who::ALL.iter().map(|w| w.label()).collect();
    scenario_rows_of(scenario, metric, &labels, values, series, note)
}

/// One row per contender of `scenario`: `labels[i]`, `values[i]` and `series[i]` are the
/// `i`-th contender's, and the first contender is fastfallback (the others' rows carry the
/// ratio to it).
pub(crate) fn scenario_rows_of(
    scenario: &'static str,
    metric: &'static str,
    labels: &[&'static str],
    values: &[f64],
    series: Vec<Vec<f64>>,
    note: &str,
) -> Vec<LoopbackRow> {
    let ours = series[0].clone();
    labels
        .iter()
        .zip(values)
        .zip(series)
        .enumerate()
        .map(|(i, ((&contender, &value), series))| LoopbackRow {
            scenario,
            contender,
            metric,
            value,
            vs_fastfallback: if i == 0 {
                f64::NAN
            } else {
                paired_ratio(&ours, &series)
            },
            note: note.to_owned(),
            series,
        })
        .collect()
}

/// Runs the loopback rows. `smoke` shrinks every count for `cargo test --benches`.
pub(crate) fn run(smoke: bool) -> Vec<LoopbackRow> {
    let server = Server::start();
    let mut rows = Vec::new();
    let sequential = if smoke { 24 } else { 9_600 };
    // One value of the paired ratio per this many turns of one connect each.
    let block = if smoke { 12 } else { 96 };
    let rounds = if smoke { 6 } else { 96 };
    let round = if smoke { 25 } else { 250 };
    let concurrent = if smoke { 200 } else { 10_000 };
    let at_start = time_wait_note();

    // Engine overhead: one connect at a time, median per connect. The contenders take turns
    // connect by connect, so the kernel's state (TIME_WAIT buckets, caches) weighs on all alike.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let clients = Clients::new(server.addr);
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(sequential); Who::ALL.len()];
    rt.block_on(async {
        // Warm up: first connects pay for lazy set-up (allocations, the runtime's slabs).
        for who in Who::ALL {
            for _ in 0..20 {
                clients.connect(who).await;
            }
        }
        for k in 0..sequential {
            for (i, who) in Who::turn(k) {
                let t = Instant::now();
                assert!(clients.connect(who).await, "loopback connect failed");
                times[i].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    });
    // A single connect's time is too noisy to pair on its own: each stretch of `block` turns
    // gives one median per contender, and those are paired.
    let series: Vec<Vec<f64>> = times.iter().map(|t| block_medians(t, block)).collect();
    let per_connect: Vec<f64> = times.into_iter().map(median).collect();
    rows.extend(scenario_rows(
        ONE_AT_A_TIME,
        "median µs per connect",
        &per_connect,
        series,
        &format!(
            "{sequential} connects each, taking turns in a balanced order, paired by {block} turns; current-thread runtime{at_start}"
        ),
    ));

    // Throughput: `round` connects with 100 in flight, one round per contender per turn. A
    // round lasts some 8 ms; each contender's rate is the median of its rounds' rates.
    //
    // The rounds run on the current-thread runtime, which polls its own sockets. A future
    // blocked on from outside a multi-thread runtime is woken from the worker thread that
    // polls them, and that hop between threads, the same for every contender, took a third
    // of each connect's time here (docs/benchmarks.md).
    let in_flight_start = time_wait_note();
    let mut connected = vec![0usize; Who::ALL.len()];
    let mut round_rates: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); Who::ALL.len()];
    for k in 0..rounds {
        for (i, who) in Who::turn(k) {
            let (ok, secs) = rt.block_on(async {
                let t = Instant::now();
                let ok = futures::stream::iter(0..round)
                    .map(|_| clients.connect(who))
                    .buffer_unordered(100)
                    .filter(|ok| std::future::ready(*ok))
                    .count()
                    .await;
                (ok, t.elapsed().as_secs_f64())
            });
            connected[i] += ok;
            round_rates[i].push(ok as f64 / secs);
        }
    }
    let rates: Vec<f64> = round_rates.iter().cloned().map(median).collect();
    let total = rounds * round;
    let mut in_flight = scenario_rows(
        IN_FLIGHT,
        "connects per second (median of the rounds)",
        &rates,
        round_rates,
        &format!(
            "{rounds} rounds of {round} taking turns in a balanced order, paired by turn; current-thread runtime{in_flight_start}"
        ),
    );
    for (row, ok) in in_flight.iter_mut().zip(connected) {
        row.note = format!("{ok}/{total} connected, {}", row.note);
    }
    rows.extend(in_flight);

    // The same, to a name through a local DNS server.
    rows.extend(crate::names::run(&server, smoke));

    // Many races at once: all complete, and the process holds no more descriptors afterwards.
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let before = open_fds();
    let (ok, secs) = mt.block_on(async {
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..concurrent {
            let c = clients.ours.clone();
            let origin = clients.origin.clone();
            set.spawn(async move { c.connect(&origin).await.is_ok() });
        }
        let mut ok = 0;
        while let Some(r) = set.join_next().await {
            ok += usize::from(matches!(r, Ok(true)));
        }
        (ok, t.elapsed().as_secs_f64())
    });
    // Closed sockets leave the descriptor table at once; give the runtime a moment to drop
    // the last tasks.
    std::thread::sleep(Duration::from_millis(50));
    let after = open_fds();
    rows.push(LoopbackRow {
        scenario: "10 000 concurrent races on loopback",
        contender: "fastfallback",
        metric: "races completed",
        value: ok as f64,
        vs_fastfallback: f64::NAN,
        note: format!(
            "{ok}/{concurrent} in {secs:.2} s; open descriptors {before} before, {after} after"
        ),
        series: Vec::new(),
    });
    drop(mt);
    drop(rt);
    rows
}
