//! The loopback row users hit most: a connect to a *name*, resolved through a real DNS server
//! on loopback ([`fastfallback_testnet::LoopbackDns`], hickory-server answering A with
//! `127.0.0.1` and AAAA with `::1`), 100 connects in flight.
//!
//! Both contenders use hickory-resolver set up the same way: one name server (UDP, TCP
//! fallback), hickory's default options (its cache included, so after the warm-up both read
//! their answers from hickory's cache, as a client does for a name it keeps using). We ask
//! for AAAA and A separately (HEv3 §4.1); hyper-util's `HttpConnector` gets hickory's
//! `lookup_ip` as its resolver service, which asks for both and returns them together (how
//! reqwest wires hickory in). Both connect to `[::1]` first: RFC 6724 ranks IPv6 loopback
//! first, and hickory's default `Ipv6AndIpv4` strategy lists it first for hyper-util.
//! No root needed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use fastfallback_benches::{LookupIp, hickory_at, median, williams_row};
use fastfallback_net::{Connector, HickoryResolver, SocketOptions};
use fastfallback_testnet::{DnsZone, LoopbackDns};
use futures::StreamExt;
use hyper_util::client::legacy::connect::HttpConnector;

use super::loopback::{LoopbackRow, Server, scenario_rows_of};

/// The name the DNS server answers.
const NAME: &str = "origin.test";

pub(crate) const NAME_IN_FLIGHT: &str =
    "name connects per second on loopback through a local DNS server, 100 at a time";

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Ours,
    Hyper,
    /// hyper-util a second time, on a resolver of its own: the run's noise floor.
    HyperControl,
}

impl Who {
    const ALL: [Self; 3] = [Self::Ours, Self::Hyper, Self::HyperControl];

    fn label(self) -> &'static str {
        match self {
            Self::Ours => "fastfallback, hickory (AAAA and A), tokio's socket options",
            Self::Hyper => "hyper-util HttpConnector, hickory lookup_ip",
            Self::HyperControl => {
                "hyper-util HttpConnector, hickory lookup_ip, a second time (control)"
            }
        }
    }
}

struct Clients {
    ours: Connector,
    hyper: HttpConnector<LookupIp>,
    control: HttpConnector<LookupIp>,
    address: fastfallback_route::Address,
    uri: http::Uri,
}

impl Clients {
    fn new(dns: SocketAddr, port: u16) -> Self {
        let hyper = || HttpConnector::new_with_resolver(LookupIp(hickory_at(dns)));
        Self {
            ours: Connector::builder()
                .resolver(HickoryResolver::with_name_server(dns).expect("resolver"))
                .socket_options(SocketOptions::default().nodelay(false).keepalive(None))
                .build()
                .expect("connector"),
            hyper: hyper(),
            control: hyper(),
            address: fastfallback_route::Address::parse(&format!("{NAME}:{port}"))
                .expect("address"),
            uri: format!("http://{NAME}:{port}/").parse().expect("uri"),
        }
    }

    /// One connect; the address it reached, if it connected.
    async fn connect(&self, who: Who) -> Option<IpAddr> {
        match who {
            Who::Ours => {
                let c = self.ours.connect_to(self.address.clone()).await.ok()?;
                Some(c.peer_addr().ip())
            }
            Who::Hyper | Who::HyperControl => {
                let mut h = if who == Who::Hyper {
                    self.hyper.clone()
                } else {
                    self.control.clone()
                };
                let s = tower_service::Service::call(&mut h, self.uri.clone())
                    .await
                    .ok()?;
                s.inner().peer_addr().ok().map(|a| a.ip())
            }
        }
    }
}

/// The name rows, on `server` (the loopback rows' server).
pub(crate) fn run(server: &Server, smoke: bool) -> Vec<LoopbackRow> {
    let rounds = if smoke { 6 } else { 96 };
    let round = if smoke { 25 } else { 250 };
    let dns = LoopbackDns::start().expect("loopback DNS server");
    dns.set_dns(
        NAME,
        DnsZone {
            a: vec![Ipv4Addr::LOCALHOST],
            // Without IPv6 loopback, AAAA answers NODATA and both connect over IPv4.
            aaaa: if server.v6 {
                vec![Ipv6Addr::LOCALHOST]
            } else {
                Vec::new()
            },
            ..DnsZone::default()
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let clients = Clients::new(dns.addr(), server.addr.port());
    let expected = if server.v6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    rt.block_on(async {
        // Warm up: the first lookups reach the server and fill each resolver's cache.
        for who in Who::ALL {
            for _ in 0..20 {
                let reached = clients.connect(who).await;
                assert_eq!(
                    reached,
                    Some(expected),
                    "{}: a name connect failed",
                    who.label()
                );
            }
        }
    });
    let queries = dns.dns_queries(NAME);
    let mut connected = vec![0usize; Who::ALL.len()];
    let mut round_rates: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); Who::ALL.len()];
    for k in 0..rounds {
        for i in williams_row(Who::ALL.len(), k) {
            let who = Who::ALL[i];
            let (ok, secs) = rt.block_on(async {
                let t = Instant::now();
                let ok = futures::stream::iter(0..round)
                    .map(|_| clients.connect(who))
                    .buffer_unordered(100)
                    .filter(|reached| std::future::ready(*reached == Some(expected)))
                    .count()
                    .await;
                (ok, t.elapsed().as_secs_f64())
            });
            connected[i] += ok;
            round_rates[i].push(ok as f64 / secs);
        }
    }
    let after = dns.dns_queries(NAME);
    let rates: Vec<f64> = round_rates.iter().cloned().map(median).collect();
    let total = rounds * round;
    let labels: Vec<&'static str> = Who::ALL.iter().map(|w| w.label()).collect();
    let mut rows = scenario_rows_of(
        NAME_IN_FLIGHT,
        "connects per second (median of the rounds)",
        &labels,
        &rates,
        round_rates,
        &format!(
            "{rounds} rounds of {round} taking turns in a balanced order, paired by turn; current-thread runtime; \
             the server saw {} A and {} AAAA queries in the warm-up and {} A and {} AAAA while measuring",
            queries.a,
            queries.aaaa,
            after.a - queries.a,
            after.aaaa - queries.aaaa
        ),
    );
    for (row, ok) in rows.iter_mut().zip(connected) {
        row.note = format!("{ok}/{total} connected to {expected}, {}", row.note);
    }
    rows
}

/// The name row's ratio for the targets: our rate ÷ hyper-util's, and the control's.
pub(crate) fn ratios(rows: &[LoopbackRow]) -> Option<(f64, f64)> {
    let series = |who: Who| {
        rows.iter()
            .find(|r| r.scenario == NAME_IN_FLIGHT && r.contender == who.label())
            .map(|r| &r.series[..])
    };
    let (ours, hyper, control) = (
        series(Who::Ours)?,
        series(Who::Hyper)?,
        series(Who::HyperControl)?,
    );
    Some((
        fastfallback_benches::paired_ratio(ours, hyper),
        fastfallback_benches::paired_ratio(control, hyper),
    ))
}
