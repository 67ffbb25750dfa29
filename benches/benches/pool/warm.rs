//! The request path on a warm pool (issue 24's first rows): requests per second and per-request
//! latency (p50, p99) through our `Pool`, hyper-util's legacy `Client` and reqwest
//! ([`fastfallback_benches::warm`]) over loopback TLS, HTTP/2 and HTTP/1.1 keep-alive, with 1,
//! 64 and 256 requests in flight.
//!
//! Before measuring, each client makes one round of requests at the measured concurrency, so
//! its pool holds the connections that concurrency needs (one for HTTP/2, up to one per
//! request in flight for HTTP/1). Rounds take turns between the contenders; the figures are
//! medians over the rounds (rates) and over every request (latencies).
//!
//! The clients run on a current-thread runtime on the bench's thread and the server on a
//! thread of its own ([`ServerThread`]), so each side has one of the two cores and the
//! server is not the bottleneck of a client benchmark.

use fastfallback_benches::warm::{Clients, ServerThread, Who, percentile};
use fastfallback_benches::{median, williams_row};
use fastfallback_testnet::TlsMaterial;

use super::Row;

/// The warm rows: HTTP/2 and HTTP/1.1, each at 1, 64 and 256 requests in flight.
pub(super) fn rows(tls: &TlsMaterial, full: bool) -> Vec<Row> {
    let rounds = if full { 12 } else { 2 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let mut rows = Vec::new();
    for (alpn, proto) in [(&b"h2"[..], "h2"), (&b"http/1.1"[..], "http/1.1")] {
        let server = ServerThread::start(tls, alpn);
        let stats = server.stats();
        rt.block_on(async {
            let clients = Clients::new(tls, server.port());
            for in_flight in [1, 64, 256] {
                let n = if full { (in_flight * 8).max(400) } else { in_flight.max(8) };
                // Warm: every client's pool gets the connections this concurrency needs.
                for who in Who::ALL {
                    clients.round(who, in_flight, in_flight).await;
                }
                let mut rates = vec![Vec::new(); Who::ALL.len()];
                let mut latencies = vec![Vec::new(); Who::ALL.len()];
                // Connections each client opened while measured: a warm pool opens none.
                let mut opened = [0usize; Who::ALL.len()];
                for k in 0..rounds {
                    for i in williams_row(Who::ALL.len(), k) {
                        let before = stats.connections();
                        let (rate, l) = clients.round(Who::ALL[i], n, in_flight).await;
                        opened[i] += stats.connections() - before;
                        rates[i].push(rate);
                        latencies[i].extend(l);
                    }
                }
                let ours_rate = median(rates[0].clone());
                for (i, who) in Who::ALL.into_iter().enumerate() {
                    let rate = median(rates[i].clone());
                    let (p50, p99) = (
                        percentile(latencies[i].clone(), 0.5),
                        percentile(latencies[i].clone(), 0.99),
                    );
                    eprintln!(
                        "warm {proto} ×{in_flight}: {:<42} {rate:>9.0} req/s  p50 {p50:>7.0} µs  p99 {p99:>7.0} µs  opened {}  (ours ÷ it: {:.2})",
                        who.label(),
                        opened[i],
                        ours_rate / rate
                    );
                    rows.push(Row {
                        section: "warm",
                        contender: who.label(),
                        value: rate,
                        unit: "req/s",
                        connections: Some(opened[i] as f64),
                        rounds,
                        detail: Some(format!(
                            "{proto}, {in_flight} in flight, {n} requests a round; p50 {p50:.0} µs, p99 {p99:.0} µs; ours ÷ it {:.2}",
                            ours_rate / rate
                        )),
                    });
                }
            }
        });
    }
    rows
}
