//! Dual-stack test networks for fastfallback: real kernel TCP/IP between two anonymous
//! network namespaces, joined by a userspace "wire" that can delay, jitter, lose, blackhole,
//! reset, ICMP-reject or stall traffic per address, family or port; plus an in-network DNS
//! server with per-type answer delays and TLS servers with a CA made at run time.
//!
//! Linux only, and it needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN for `unshare`, `setns` and
//! TUN devices), `/dev/net/tun` and `ip` from iproute2. No netem, nft or iptables: see the
//! [`wire`] module for how it works.
//!
//! # Address plan
//!
//! Every [`TestNet`] has the same addresses (its namespaces are private, so parallel test
//! networks do not see each other). IPv6 uses the documentation prefix 2001:db8::/32, which
//! is global scope: RFC 6724 prefers it over IPv4 as on the Internet (a ULA such as fd00::
//! would be sorted *after* IPv4).
//!
//! | who | IPv4 | IPv6 |
//! |---|---|---|
//! | the client (namespace "client", device `tnc0`) | [`CLIENT_V4`] 10.200.0.1 | [`CLIENT_V6`] 2001:db8:200::1 |
//! | server address `i` (namespace "server", device `tns0`) | [`server_v4`]`(i)` = 10.201.0.(10+i) | [`server_v6`]`(i)` = 2001:db8:201::(0xa+i) |
//! | the DNS server (server namespace, port 53 UDP+TCP) | [`DNS_V4`] 10.201.0.53 | [`DNS_V6`] 2001:db8:201::53 |
//! | NAT64 relays ([`TestNet::nat64`]) and DNS64 answers ([`TestNet::set_dns64`]) | – | [`NAT64_PREFIX`] 2001:db8:64::/96 + the IPv4 address |
//!
//! All server addresses live in one server namespace; the client reaches them through the
//! wire. A port with no server on it refuses (the kernel answers RST).
//!
//! # Skipping without privileges
//!
//! [`TestNetBuilder::build`] returns [`Unavailable`] when the machine cannot make test
//! networks (no root, no `/dev/net/tun`, no `ip`). Tests pass that through [`or_skip`], which
//! prints `skipped: needs CAP_NET_ADMIN (<test>): <reason>` and lets the test return early.
//! With `CI=true` or `FASTFALLBACK_REQUIRE_TESTNET=1` in the environment it panics instead,
//! so CI can never go green by skipping.
//!
//! # Example
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use fastfallback_testnet::{or_skip, server_v4, server_v6, Match, Rule, ServerKind, TestNet};
//!
//! let Some(net) = or_skip("my_test", TestNet::builder().build()) else { return };
//! let v4 = std::net::SocketAddr::from((server_v4(0), 443));
//! let v6 = std::net::SocketAddr::from((server_v6(0), 443));
//! net.serve(v4, ServerKind::Tls { alpn: vec![b"h2".to_vec()] }).unwrap();
//! // IPv6 is a black hole, IPv4 has a 2 x 20 ms round trip.
//! net.set_rules(vec![
//!     Rule::blackhole(Match::V6),
//!     Rule::delay(Match::V4, Duration::from_millis(20)),
//! ]);
//! let v4_connect = net.block_on_client(async move {
//!     let limit = Duration::from_millis(300);
//!     let v6_attempt = tokio::time::timeout(limit, tokio::net::TcpStream::connect(v6)).await;
//!     assert!(v6_attempt.is_err(), "the black hole never answers");
//!     let start = Instant::now();
//!     tokio::net::TcpStream::connect(v4).await.unwrap();
//!     start.elapsed()
//! });
//! assert!(v4_connect >= Duration::from_millis(40));
//! // The wire saw both attempts, in order.
//! let syns = net.syns();
//! assert_eq!(syns[0].1, v6);
//! assert_eq!(syns[1].1, v4);
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

mod dns;
pub mod http;
pub mod http3;
mod loopback_dns;
mod netns;
mod packet;
pub mod proxy;
mod rng;
mod servers;
mod sockets;
#[allow(unsafe_code)]
mod sys;
mod tls;
mod tun;
pub mod wire;

pub use dns::{DnsCounts, DnsZone, HttpsSpec, Rcode, synthesize};
pub use loopback_dns::LoopbackDns;
pub use servers::ServerKind;
pub use sockets::{SocketEntry, SocketProto};
pub use tls::{TlsMaterial, ech_config_list};
pub use wire::{Action, Dir, Match, Protocol, Rule, Verdict, WireEvent};

use netns::Netns;
use wire::lock;

/// The TCP flag bits of [`WireEvent::flags`].
pub mod flags {
    pub use crate::packet::{ACK, FIN, PSH, RST, SYN};
}

/// The client's IPv4 address.
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// The client's IPv6 address.
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 1);
/// The DNS server's address (port 53, UDP and TCP), in the server namespace.
pub const DNS_V4: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 53);
/// The DNS server's IPv6 address (the one an [IPv6-only](TestNetBuilder::ipv6_only) client
/// uses).
pub const DNS_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x201, 0, 0, 0, 0, 0x53);
/// The network's NAT64 prefix (a /96, network-specific as RFC 6052 §2.2 allows, so that it
/// may carry the private IPv4 server addresses): what [`TestNet::set_dns64`] synthesizes
/// into and [`TestNet::nat64`] translates from.
pub const NAT64_PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0);
/// The most server addresses per family a [`TestNet`] can have (so that they stay below
/// [`DNS_V4`]).
pub const MAX_SERVERS: u8 = 40;

/// Server IPv4 address number `i`: 10.201.0.(10+i).
pub const fn server_v4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 201, 0, 10u8.wrapping_add(i))
}

/// Server IPv6 address number `i`: 2001:db8:201::(0xa+i) (2001:db8:201::a for i = 0).
pub const fn server_v6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x201, 0, 0, 0, 0, 10 + i as u16)
}

/// The seed of the wire's PRNG unless [`TestNetBuilder::seed`] sets another.
const DEFAULT_SEED: u64 = 0x7e57_0fa1_1bac_0001;

/// Why a test network cannot be made on this machine (no privileges, no TUN, no `ip`).
///
/// Displays as `needs CAP_NET_ADMIN: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    reason: String,
}

impl Unavailable {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// What failed, e.g. `unshare(CLONE_NEWNET): Operation not permitted (os error 1)`.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "needs CAP_NET_ADMIN: {}", self.reason)
    }
}

impl std::error::Error for Unavailable {}

/// Whether the environment forbids skipping: `CI=true` or `FASTFALLBACK_REQUIRE_TESTNET=1`.
fn skipping_forbidden(ci: Option<&str>, require: Option<&str>) -> bool {
    ci.is_some_and(|v| v.eq_ignore_ascii_case("true")) || require == Some("1")
}

/// The skip policy every test uses: `Some(net)` on success; otherwise prints
/// `skipped: needs CAP_NET_ADMIN (<test>): <reason>` to stderr and returns `None`, unless
/// `CI=true` or `FASTFALLBACK_REQUIRE_TESTNET=1` is set, in which case it panics with that
/// message so that CI can never pass by skipping.
///
/// ```no_run
/// # use fastfallback_testnet::{or_skip, TestNet};
/// let Some(net) = or_skip("blackhole_makes_connect_hang", TestNet::builder().build()) else {
///     return;
/// };
/// # drop(net);
/// ```
pub fn or_skip(test: &str, r: Result<TestNet, Unavailable>) -> Option<TestNet> {
    match r {
        Ok(net) => Some(net),
        Err(e) => {
            let message = format!("skipped: needs CAP_NET_ADMIN ({test}): {}", e.reason);
            let ci = std::env::var("CI").ok();
            let require = std::env::var("FASTFALLBACK_REQUIRE_TESTNET").ok();
            if skipping_forbidden(ci.as_deref(), require.as_deref()) {
                panic!(
                    "{message} [skipping is forbidden: CI=true or FASTFALLBACK_REQUIRE_TESTNET=1]"
                );
            }
            eprintln!("{message}");
            None
        }
    }
}

/// Options of a [`TestNet`]; made by [`TestNet::builder`].
#[derive(Debug, Clone)]
pub struct TestNetBuilder {
    servers: u8,
    syn_retries: u8,
    tls_names: Vec<String>,
    seed: u64,
    ipv6_only: bool,
}

impl Default for TestNetBuilder {
    fn default() -> Self {
        Self {
            servers: 4,
            syn_retries: 1,
            tls_names: vec!["origin.test".to_owned()],
            seed: DEFAULT_SEED,
            ipv6_only: false,
        }
    }
}

impl TestNetBuilder {
    /// How many server addresses of each family (default 4, at most [`MAX_SERVERS`]):
    /// [`server_v4`]`(0..n)` and [`server_v6`]`(0..n)`, all in the one server namespace.
    ///
    /// # Panics
    /// If `n` is more than [`MAX_SERVERS`].
    #[must_use]
    pub fn servers(mut self, n: u8) -> Self {
        assert!(
            n <= MAX_SERVERS,
            "a TestNet has at most {MAX_SERVERS} servers"
        );
        self.servers = n;
        self
    }

    /// `net.ipv4.tcp_syn_retries` in the client namespace (default 1: the kernel gives up
    /// on an unanswered connect after about 3 s; it applies to IPv6 too).
    #[must_use]
    pub fn syn_retries(mut self, n: u8) -> Self {
        self.syn_retries = n;
        self
    }

    /// The DNS names of the TLS leaf certificate (default `["origin.test"]`). The leaf
    /// also carries every server address as an IP SAN.
    #[must_use]
    pub fn tls_names(mut self, names: &[&str]) -> Self {
        self.tls_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Makes the client IPv6-only: no IPv4 address and no IPv4 route, so the kernel (and the
    /// engine's connectivity detection) sees no IPv4 at all. IPv4 servers are then reachable
    /// only through [`TestNet::nat64`]; the DNS server is at [`DNS_V6`].
    #[must_use]
    pub fn ipv6_only(mut self) -> Self {
        self.ipv6_only = true;
        self
    }

    /// The seed of the wire's PRNG (jitter and loss), for reproducible runs.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The server addresses of this network, IPv4 then IPv6.
    fn server_ips(&self) -> Vec<IpAddr> {
        let v4 = (0..self.servers).map(|i| IpAddr::V4(server_v4(i)));
        let v6 = (0..self.servers).map(|i| IpAddr::V6(server_v6(i)));
        v4.chain(v6).collect()
    }

    /// The `ip -batch` script of the client namespace.
    fn client_batch(ipv6_only: bool) -> String {
        let mut batch = format!(
            "link set lo up\n\
             link set tnc0 mtu 1500 up\n\
             addr add {CLIENT_V6}/128 dev tnc0 nodad\n\
             route add 2001:db8:201::/48 dev tnc0 src {CLIENT_V6}\n\
             route add {NAT64_PREFIX}/96 dev tnc0 src {CLIENT_V6}\n"
        );
        if !ipv6_only {
            batch.push_str(&format!(
                "addr add {CLIENT_V4}/32 dev tnc0\n\
                 route add 10.201.0.0/16 dev tnc0 src {CLIENT_V4}\n"
            ));
        }
        batch
    }

    /// The `ip -batch` script of the server namespace.
    fn server_batch(&self) -> String {
        let mut batch = String::from("link set lo up\nlink set tns0 mtu 1500 up\n");
        for ip in self.server_ips() {
            match ip {
                IpAddr::V4(a) => batch.push_str(&format!("addr add {a}/32 dev tns0\n")),
                IpAddr::V6(a) => batch.push_str(&format!("addr add {a}/128 dev tns0 nodad\n")),
            }
        }
        // The NAT64 prefix is local to the server namespace, so relays can listen on any
        // address in it (with ip_nonlocal_bind).
        batch.push_str(&format!(
            "addr add {DNS_V4}/32 dev tns0\n\
             addr add {DNS_V6}/128 dev tns0 nodad\n\
             route add 10.200.0.0/16 dev tns0\n\
             route add 2001:db8:200::/48 dev tns0\n\
             route add local {NAT64_PREFIX}/96 dev lo\n"
        ));
        batch
    }

    /// Makes the network: two namespaces, their TUN devices and addresses, the wire thread,
    /// the server thread with its DNS server, and the TLS material. Takes about 5 ms (the
    /// first one in a process about 40 ms).
    ///
    /// Returns [`Unavailable`] if this machine cannot do it (no privileges, no
    /// `/dev/net/tun`, no `ip`, or the set-up failed for another reason, given in the
    /// reason).
    ///
    /// # Panics
    /// If the TLS material cannot be made (a bug, not a property of the machine).
    pub fn build(self) -> Result<TestNet, Unavailable> {
        if !tun::available() {
            return Err(Unavailable::new(format!(
                "{} does not exist",
                tun::TUN_DEVICE
            )));
        }
        let server_ips = self.server_ips();
        let tls = TlsMaterial::new(&self.tls_names, &server_ips)
            .unwrap_or_else(|e| panic!("testnet: making the TLS material failed: {e}"));
        let tls = Arc::new(tls);
        let dns = Arc::new(dns::DnsState::default());
        let accepted = Arc::new(servers::Accepted::default());
        let icmp_sysctls = [
            ("net/ipv4/icmp_ratelimit".to_owned(), "0".to_owned()),
            ("net/ipv6/icmp/ratelimit".to_owned(), "0".to_owned()),
        ];

        // The client namespace is set up on a helper thread while the server thread sets
        // up its own.
        let syn_retries = self.syn_retries.to_string();
        let ipv6_only = self.ipv6_only;
        let client = std::thread::Builder::new()
            .name("testnet-setup".to_owned())
            .spawn({
                let sysctls = icmp_sysctls.clone();
                move || -> Result<(Netns, std::fs::File), String> {
                    let ns = Netns::unshare_this_thread()
                        .map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
                    let tun =
                        tun::open("tnc0").map_err(|e| format!("creating TUN device tnc0: {e}"))?;
                    netns::ip_batch(&Self::client_batch(ipv6_only))?;
                    netns::write_sysctl("net/ipv4/tcp_syn_retries", &syn_retries)?;
                    for (key, value) in &sysctls {
                        netns::write_sysctl(key, value)?;
                    }
                    Ok((ns, tun))
                }
            })
            .map_err(|e| Unavailable::new(format!("cannot spawn a thread: {e}")))?;
        let mut server_sysctls = icmp_sysctls.to_vec();
        server_sysctls.push(("net/ipv6/ip_nonlocal_bind".to_owned(), "1".to_owned()));
        let server = servers::spawn(servers::ServerConfig {
            ip_batch: self.server_batch(),
            sysctls: server_sysctls,
            dns: Arc::clone(&dns),
            tls: Arc::clone(&tls),
            accepted: Arc::clone(&accepted),
        });
        let client = client
            .join()
            .unwrap_or_else(|_| Err("the set-up thread panicked".to_owned()));
        // On any error, what was made so far is dropped here: the server thread stops and
        // the namespaces go away with their descriptors.
        let (server_thread, server_ns, server_tun) = server.map_err(Unavailable::new)?;
        let (client_ns, client_tun) = client.map_err(Unavailable::new)?;

        let shared = Arc::new(wire::Shared::default());
        let wire = wire::spawn(client_tun, server_tun, Arc::clone(&shared), self.seed)
            .map_err(|e| Unavailable::new(format!("cannot start the wire thread: {e}")))?;
        Ok(TestNet {
            wire: Some(wire),
            server: Some(server_thread),
            shared,
            dns,
            accepted,
            tls,
            server_ips,
            ipv6_only,
            client_ns,
            server_ns,
        })
    }
}

/// One test network: a client namespace and a server namespace joined by the wire, a DNS
/// server and any servers started with [`TestNet::serve`].
///
/// Dropping it (also while unwinding from a panic) stops and joins the wire thread and the
/// server thread, closes the TUN devices and every server socket, and releases both
/// namespaces. That takes 40–100 ms, nearly all of it the kernel unregistering the two TUN
/// devices. See the [crate docs](crate) for the address plan.
///
/// `TestNet` is `Send + Sync`: several threads may use one network at once.
#[derive(Debug)]
pub struct TestNet {
    wire: Option<wire::WireThread>,
    server: Option<servers::ServerThread>,
    shared: Arc<wire::Shared>,
    dns: Arc<dns::DnsState>,
    accepted: Arc<servers::Accepted>,
    tls: Arc<TlsMaterial>,
    server_ips: Vec<IpAddr>,
    ipv6_only: bool,
    client_ns: Netns,
    server_ns: Netns,
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // The wire first, so that nothing moves between the namespaces while the servers
        // close; then the server thread. The namespace descriptors go last (field drops).
        drop(self.wire.take());
        drop(self.server.take());
    }
}

impl TestNet {
    /// A builder with the defaults: 4 servers, `tcp_syn_retries` 1, TLS name
    /// `origin.test`, a fixed seed.
    pub fn builder() -> TestNetBuilder {
        TestNetBuilder::default()
    }

    /// Runs `f` on a fresh OS thread that has joined the client namespace, and returns its
    /// result (a panic in `f` is passed on). Sockets belong to the namespace of the thread
    /// that creates them, so everything `f` creates is the client's.
    pub fn client<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.client_ns.run("testnet-client", f)
    }

    /// Runs `f` on a fresh OS thread that has joined the server namespace (for servers of
    /// your own beside [`TestNet::serve`]; anything `f` leaves running must end by itself).
    pub fn server<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.server_ns.run("testnet-server-fn", f)
    }

    /// [`TestNet::client`] with a tokio current-thread runtime (all drivers enabled) that
    /// runs `fut` to completion. The runtime, and so every socket and task it still holds,
    /// is dropped before this returns.
    ///
    /// # Panics
    /// If the runtime cannot be built, or `fut` panics.
    pub fn block_on_client<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.client(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("testnet: tokio runtime: {e}"));
            let out = rt.block_on(fut);
            drop(rt);
            out
        })
    }

    /// Replaces the wire's rule table (first match wins; no match = pass at once). Takes
    /// effect from the next packet on.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        *lock(&self.shared.rules) = rules;
    }

    /// The wire's log so far: TCP SYN/RST/FIN segments, the first data segment of each flow
    /// and direction, and packets the wire made.
    pub fn log(&self) -> Vec<WireEvent> {
        lock(&self.shared.log).clone()
    }

    /// Empties the wire's log.
    pub fn clear_log(&self) {
        lock(&self.shared.log).clear();
    }

    /// The client's connection attempts from the log (SYN without ACK, client to server),
    /// whatever the wire did with them: (time read, destination), in order.
    pub fn syns(&self) -> Vec<(Instant, SocketAddr)> {
        lock(&self.shared.log)
            .iter()
            .filter(|e| e.is_client_syn())
            .map(|e| (e.at, e.dst))
            .collect()
    }

    /// How many client connections tried to open: distinct client source addresses among the
    /// client SYNs in the log (a retransmitted SYN is the same connection).
    pub fn client_connections(&self) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|e| e.is_client_syn())
            .map(|e| e.src)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// Sets the DNS records of `name` (with or without the trailing dot; case does not
    /// matter), replacing earlier ones.
    pub fn set_dns(&self, name: &str, zone: DnsZone) {
        lock(&self.dns.zones).insert(dns::normalise(name), zone);
    }

    /// Makes the DNS server answer like DNS64 (RFC 6147) with [`NAT64_PREFIX`], or stop:
    /// an AAAA query for a name that has A records but no AAAA record gets them synthesized,
    /// and `ipv4only.arpa` answers as RFC 7050 §2.2 says, so clients can find the prefix.
    pub fn set_dns64(&self, on: bool) {
        *lock(&self.dns.dns64) = on.then_some(NAT64_PREFIX);
    }

    /// Whether the client is IPv6-only ([`TestNetBuilder::ipv6_only`]).
    pub fn is_ipv6_only(&self) -> bool {
        self.ipv6_only
    }

    /// The DNS server the client should use: [`DNS_V6`] on an IPv6-only network, else
    /// [`DNS_V4`].
    pub fn dns_server(&self) -> SocketAddr {
        if self.ipv6_only {
            SocketAddr::from((DNS_V6, 53))
        } else {
            SocketAddr::from((DNS_V4, 53))
        }
    }

    /// A NAT64 translator for one IPv4 server (RFC 6146, as a userspace relay): TCP
    /// connections to the synthesized address `[NAT64_PREFIX + v4]:port` are relayed to
    /// `v4:port`, in the server namespace. Returns the synthesized address. The wire sees the
    /// client's traffic to the IPv6 address, so rules can match it.
    ///
    /// # Errors
    /// The bind error, or `InvalidInput` for an address that is not a server's.
    pub fn nat64(&self, v4: SocketAddr) -> io::Result<SocketAddr> {
        let IpAddr::V4(ip) = v4.ip() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("testnet: NAT64 translates to IPv4, not {v4}"),
            ));
        };
        if !self.server_ips.contains(&v4.ip()) || v4.port() == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("testnet: {v4} is not a server address with a port"),
            ));
        }
        let from = SocketAddr::new(IpAddr::V6(synthesize(NAT64_PREFIX, ip)), v4.port());
        self.server
            .as_ref()
            .ok_or_else(|| io::Error::other("testnet: no server thread"))?
            .relay(from, v4)?;
        Ok(from)
    }

    /// How many A, AAAA and HTTPS queries the DNS server has received for `name`.
    pub fn dns_queries(&self, name: &str) -> DnsCounts {
        lock(&self.dns.counts)
            .get(&dns::normalise(name))
            .copied()
            .unwrap_or_default()
    }

    /// Starts a server of `kind` on `addr` in the server namespace and waits until it
    /// listens. `addr` must be one of the server addresses, with a port other than 0.
    ///
    /// # Errors
    /// `InvalidInput` for another address or port 0; the bind error (e.g. `AddrInUse`) if
    /// the address is taken.
    pub fn serve(&self, addr: SocketAddr, kind: ServerKind) -> io::Result<()> {
        if !self.server_ips.contains(&addr.ip()) || addr.port() == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("testnet: {addr} is not a server address with a port"),
            ));
        }
        self.server
            .as_ref()
            .ok_or_else(|| io::Error::other("testnet: no server thread"))?
            .serve(addr, kind)
    }

    /// How many TCP connections the server on `addr` has accepted so far (0 if there is
    /// none).
    pub fn accepted(&self, addr: SocketAddr) -> usize {
        lock(&self.accepted).get(&addr).copied().unwrap_or(0)
    }

    /// The test CA's certificate, to put in the client's root store.
    pub fn ca_der(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.tls.ca_der.clone()
    }

    /// The sockets that exist in the client namespace and are still owned by a process:
    /// `/proc/thread-self/net/{tcp,tcp6,udp,udp6}` read from a thread inside the client
    /// namespace, without the entries of inode 0 (TIME_WAIT and orphaned sockets, which no
    /// one holds any more). An empty list proves that nothing the client opened is held.
    pub fn client_sockets(&self) -> io::Result<Vec<SocketEntry>> {
        self.client(sockets::owned_sockets_of_this_thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_plan() {
        assert_eq!(server_v4(0), Ipv4Addr::new(10, 201, 0, 10));
        assert_eq!(server_v4(3), Ipv4Addr::new(10, 201, 0, 13));
        assert_eq!(
            server_v6(0),
            "2001:db8:201::a".parse::<Ipv6Addr>().expect("ip")
        );
        assert_eq!(
            server_v6(6),
            "2001:db8:201::10".parse::<Ipv6Addr>().expect("ip")
        );
        assert!(server_v4(MAX_SERVERS - 1) < DNS_V4);
        assert_eq!(CLIENT_V6.to_string(), "2001:db8:200::1");
    }

    #[test]
    fn skip_policy_reads_ci_and_the_require_switch() {
        assert!(!skipping_forbidden(None, None));
        assert!(!skipping_forbidden(Some("false"), Some("0")));
        assert!(skipping_forbidden(Some("true"), None));
        assert!(skipping_forbidden(Some("TRUE"), None));
        assert!(skipping_forbidden(None, Some("1")));
    }

    #[test]
    fn unavailable_displays_its_reason() {
        let u = Unavailable::new("unshare(CLONE_NEWNET): Operation not permitted");
        assert_eq!(
            u.to_string(),
            "needs CAP_NET_ADMIN: unshare(CLONE_NEWNET): Operation not permitted"
        );
    }

    #[test]
    fn server_batch_lists_every_address() {
        let b = TestNet::builder().servers(2);
        let batch = b.server_batch();
        for needle in [
            "addr add 10.201.0.10/32 dev tns0",
            "addr add 10.201.0.11/32 dev tns0",
            "addr add 2001:db8:201::a/128 dev tns0 nodad",
            "addr add 2001:db8:201::b/128 dev tns0 nodad",
            "addr add 10.201.0.53/32 dev tns0",
        ] {
            assert!(batch.contains(needle), "{needle} missing from\n{batch}");
        }
        assert!(!batch.contains("10.201.0.12/"));
    }
}
