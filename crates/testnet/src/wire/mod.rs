//! The wire: a userspace "cable" between the client's and the server's TUN device.
//!
//! ```text
//!  client netns                         wire thread                          server netns
//!  10.200.0.1, 2001:db8:200::1   read -> classify -> heap(due) -> write    10.201.0.10.., DNS 10.201.0.53
//!  tnc0 (TUN) <──────────────────────────────────────────────────────────> tns0 (TUN)   2001:db8:201::a..
//! ```
//!
//! One OS thread per [`TestNet`](crate::TestNet) (not a tokio task: tokio's timers have 1 ms
//! granularity) waits in `ppoll` (nanosecond timeout, 1 ns timer slack) on both TUN
//! descriptors and a stop pipe. Every packet read from one side is classified and put in a
//! timer heap; when it is due, it is written into the other side's TUN device, which injects
//! it straight into that namespace's stack. Nothing is routed or forwarded, no sysctl is
//! needed for it, and IPv4 and IPv6 are handled alike. The measured overhead is a few
//! hundred microseconds per hop (the VM's timer wake-up latency).
//!
//! # Rules
//!
//! The rule table ([`TestNet::set_rules`](crate::TestNet::set_rules)) is read for every
//! packet; the **first** rule whose [`Match`] (and port and protocol, if set) fits the packet's
//! **server-side** address (the destination of a client→server packet, the source of a
//! server→client packet) decides; no match means "pass at once". Rules see all traffic,
//! including DNS to [`DNS_V4`](crate::DNS_V4): match a single address or set a port to keep
//! DNS out of a rule.
//!
//! Each packet gets its direction's one-way delay (`c2s` or `s2c`) ± a uniform `jitter`,
//! but never overtakes an earlier packet of the same flow (5-tuple and direction), so jitter
//! does not reorder a TCP stream. `loss` drops each packet, in either direction, with that
//! probability, from a seeded PRNG ([`TestNetBuilder::seed`](crate::TestNetBuilder::seed)).
//! The [`Action`] then decides what happens to a packet that was not lost:
//!
//! | action | client → server | server → client |
//! |---|---|---|
//! | [`Pass`](Action::Pass) | delivered after `c2s` | delivered after `s2c` |
//! | [`Blackhole`](Action::Blackhole) | dropped | delivered |
//! | [`Rst`](Action::Rst) | a TCP segment is answered with RST\|ACK after `c2s + s2c`; anything else is dropped | delivered |
//! | [`IcmpPort`](Action::IcmpPort), [`IcmpHost`](Action::IcmpHost), [`IcmpAdmin`](Action::IcmpAdmin) | answered with ICMP/ICMPv6 destination unreachable after `c2s + s2c` | delivered |
//! | [`DropData`](Action::DropData) | TCP segments with payload dropped, the rest delivered | same |
//!
//! The wire makes its RST and ICMP packets with correct checksums, so the client kernel
//! takes them as it would take a real router's or server's: connect() fails with
//! ECONNREFUSED (RST, port unreachable), EHOSTUNREACH (host unreachable, and IPv4
//! admin-prohibited) or EACCES (IPv6 admin-prohibited). They are not rate-limited.
//!
//! # Log
//!
//! Every TCP segment with SYN, RST or FIN set is logged as a [`WireEvent`] (time read,
//! direction, addresses, flags, verdict, rule), and so is every packet the wire makes. Data
//! segments and pure ACKs are not logged. [`TestNet::syns`](crate::TestNet::syns) picks the
//! client's connection attempts out of it.
//!
//! Malformed packets never make the wire panic: what cannot be parsed is passed on at once.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{self, PipeWriter, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::packet::{self, Packet, Unreachable};
use crate::rng::SplitMix64;
use crate::sys;

/// Which packets a [`Rule`] applies to, by the packet's **server-side** address (the
/// destination of a client→server packet, the source of a server→client packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Every packet.
    Any,
    /// Every IPv4 packet.
    V4,
    /// Every IPv6 packet.
    V6,
    /// Packets whose server-side address is exactly this one.
    Addr(IpAddr),
    /// Packets whose server-side address is in this prefix (address, prefix length). A
    /// prefix of the other family never matches; a length past the family's width counts as
    /// a full-length prefix.
    Prefix(IpAddr, u8),
}

impl Match {
    /// Whether `ip` (a server-side address) is matched.
    pub fn matches(&self, ip: IpAddr) -> bool {
        match (*self, ip) {
            (Self::Any, _) => true,
            (Self::V4, ip) => ip.is_ipv4(),
            (Self::V6, ip) => ip.is_ipv6(),
            (Self::Addr(a), ip) => a == ip,
            (Self::Prefix(IpAddr::V4(net), len), IpAddr::V4(ip)) => {
                let bits = u32::from(len.min(32));
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (Self::Prefix(IpAddr::V6(net), len), IpAddr::V6(ip)) => {
                let bits = u32::from(len.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            (Self::Prefix(..), _) => false,
        }
    }
}

/// What the wire does with a packet that a [`Rule`] matched. See the [module
/// docs](crate::wire) for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Deliver after the rule's delay.
    Pass,
    /// Drop every client→server packet: connect() hangs (until its timeout, or
    /// `tcp_syn_retries` runs out).
    Blackhole,
    /// Answer each client TCP segment with RST|ACK from the server address, after
    /// `c2s + s2c`: connect() fails with ECONNREFUSED after one round trip.
    Rst,
    /// Answer each client packet with ICMP port unreachable (ICMPv6 code 4): ECONNREFUSED.
    IcmpPort,
    /// Answer each client packet with ICMP host unreachable (ICMPv6 address unreachable,
    /// code 3): EHOSTUNREACH.
    IcmpHost,
    /// Answer each client packet with ICMP administratively prohibited (code 13; ICMPv6
    /// code 1): EHOSTUNREACH on IPv4, EACCES on IPv6.
    IcmpAdmin,
    /// Let the TCP handshake (and FIN/RST/ACK) through but drop every TCP segment that
    /// carries payload, both ways: "accepts, then stalls".
    DropData,
}

/// One entry of the wire's rule table: which packets, and what happens to them.
///
/// Build one with a constructor ([`Rule::delay`], [`Rule::blackhole`], ...) and refine it
/// with the setters:
///
/// ```
/// use std::time::Duration;
/// use fastfallback_testnet::{Match, Rule, server_v6};
/// let ms = Duration::from_millis;
/// let rule = Rule::delay(Match::Addr(server_v6(0).into()), ms(100)).port(443).jitter(ms(5)).loss(0.1);
/// assert_eq!((rule.c2s, rule.s2c), (ms(100), ms(100)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Which server-side addresses the rule applies to.
    pub matches: Match,
    /// The server-side TCP/UDP port the rule applies to; `None` = any port (and packets
    /// without ports, such as ICMP).
    pub port: Option<u16>,
    /// The transport protocol the rule applies to; `None` = every packet.
    pub protocol: Option<Protocol>,
    /// One-way delay of client→server packets.
    pub c2s: Duration,
    /// One-way delay of server→client packets.
    pub s2c: Duration,
    /// Each packet's delay is moved by a uniform random amount in `[-jitter, +jitter]`
    /// (never below zero); packets of one flow still arrive in order.
    pub jitter: Duration,
    /// Probability (0..=1) that a packet, in either direction, is lost.
    pub loss: f64,
    /// What happens to the matched packets.
    pub action: Action,
}

impl Rule {
    /// A rule with `action`, no delay, no jitter and no loss.
    pub fn new(matches: Match, action: Action) -> Self {
        Self {
            matches,
            port: None,
            protocol: None,
            c2s: Duration::ZERO,
            s2c: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            action,
        }
    }

    /// Pass, with `one_way` delay in each direction (a round trip of twice that).
    pub fn delay(matches: Match, one_way: Duration) -> Self {
        Self::new(matches, Action::Pass).one_way(one_way)
    }

    /// Drop every client→server packet ([`Action::Blackhole`]).
    pub fn blackhole(matches: Match) -> Self {
        Self::new(matches, Action::Blackhole)
    }

    /// Refuse TCP with a RST ([`Action::Rst`]); add a delay to make it cost a round trip.
    pub fn rst(matches: Match) -> Self {
        Self::new(matches, Action::Rst)
    }

    /// Answer with ICMP port unreachable ([`Action::IcmpPort`]).
    pub fn icmp_port(matches: Match) -> Self {
        Self::new(matches, Action::IcmpPort)
    }

    /// Answer with ICMP host unreachable ([`Action::IcmpHost`]).
    pub fn icmp_host(matches: Match) -> Self {
        Self::new(matches, Action::IcmpHost)
    }

    /// Answer with ICMP administratively prohibited ([`Action::IcmpAdmin`]).
    pub fn icmp_admin(matches: Match) -> Self {
        Self::new(matches, Action::IcmpAdmin)
    }

    /// Let handshakes through (after `one_way` each way) and drop all TCP payload
    /// ([`Action::DropData`]).
    pub fn stall(matches: Match, one_way: Duration) -> Self {
        Self::new(matches, Action::DropData).one_way(one_way)
    }

    /// Only packets to/from this server-side port.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Only UDP packets (QUIC, and DNS over UDP unless the rule's match or port keeps it
    /// out): "UDP blocked" is `Rule::blackhole(Match::Any).port(443).udp()`.
    #[must_use]
    pub fn udp(mut self) -> Self {
        self.protocol = Some(Protocol::Udp);
        self
    }

    /// Only TCP segments.
    #[must_use]
    pub fn tcp(mut self) -> Self {
        self.protocol = Some(Protocol::Tcp);
        self
    }

    /// Sets both one-way delays.
    #[must_use]
    pub fn one_way(mut self, delay: Duration) -> Self {
        self.c2s = delay;
        self.s2c = delay;
        self
    }

    /// Sets the client→server delay.
    #[must_use]
    pub fn c2s(mut self, delay: Duration) -> Self {
        self.c2s = delay;
        self
    }

    /// Sets the server→client delay.
    #[must_use]
    pub fn s2c(mut self, delay: Duration) -> Self {
        self.s2c = delay;
        self
    }

    /// Sets the per-packet jitter (± uniform).
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets the loss probability (clamped to 0..=1).
    #[must_use]
    pub fn loss(mut self, probability: f64) -> Self {
        self.loss = if probability.is_nan() {
            0.0
        } else {
            probability.clamp(0.0, 1.0)
        };
        self
    }

    /// Whether this rule applies to a packet with this server-side address and port, of
    /// IP protocol number `proto`.
    fn applies(&self, server_ip: IpAddr, server_port: Option<u16>, proto: u8) -> bool {
        self.matches.matches(server_ip)
            && self.port.is_none_or(|p| server_port == Some(p))
            && self.protocol.is_none_or(|p| p.number() == proto)
    }
}

/// A transport protocol a [`Rule`] can be limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP (QUIC runs over it).
    Udp,
}

impl Protocol {
    /// Its IP protocol number.
    fn number(self) -> u8 {
        match self {
            Self::Tcp => packet::PROTO_TCP,
            Self::Udp => packet::PROTO_UDP,
        }
    }
}

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From the client namespace to the server namespace.
    ClientToServer,
    /// From the server namespace (or the wire, for packets it makes) to the client.
    ServerToClient,
}

/// What the wire did with a logged packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Passed on, after its delay.
    Delivered,
    /// Dropped by the rule's action ([`Action::Blackhole`], [`Action::DropData`], or a
    /// packet [`Action::Rst`]/ICMP does not answer, such as a RST).
    Dropped,
    /// Dropped by the rule's random loss.
    Lost,
    /// Dropped and answered by the wire (the answer is logged as its own
    /// [`Verdict::Synthesized`] event).
    Answered(Action),
    /// A packet the wire made ([`Action::Rst`] or one of the ICMP actions), sent to the
    /// client after `c2s + s2c`.
    Synthesized(Action),
}

/// One entry of the wire's log.
#[derive(Debug, Clone, PartialEq)]
pub struct WireEvent {
    /// When the wire read the packet (for a packet the wire made: when it made it, which is
    /// when the packet it answers was read).
    pub at: Instant,
    /// Which way it travels.
    pub dir: Dir,
    /// Source address and port (port 0 if none).
    pub src: SocketAddr,
    /// Destination address and port (port 0 if none).
    pub dst: SocketAddr,
    /// The TCP flags byte (see [`flags`](crate::flags)); 0 for a synthesized ICMP packet.
    pub flags: u8,
    /// What happened to it.
    pub verdict: Verdict,
    /// Index of the rule that decided, `None` if no rule matched.
    pub rule: Option<usize>,
}

impl WireEvent {
    /// Whether this is a client's connection attempt: a client→server SYN without ACK.
    pub fn is_client_syn(&self) -> bool {
        self.dir == Dir::ClientToServer
            && self.flags & packet::SYN != 0
            && self.flags & packet::ACK == 0
    }
}

/// State shared between the wire thread and the [`TestNet`](crate::TestNet) handle.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) rules: Mutex<Vec<Rule>>,
    pub(crate) log: Mutex<Vec<WireEvent>>,
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not wedge the wire).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which TUN device a packet is written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// A packet waiting in the heap. Ordered by (due, seq) so that the heap pops the earliest
/// first and equal times keep their arrival order.
#[derive(Debug)]
struct Pending {
    due: Instant,
    seq: u64,
    to: Side,
    pkt: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest packet.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// A flow for the FIFO guarantee: direction and 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    dir: Dir,
    src: SocketAddr,
    dst: SocketAddr,
    proto: u8,
}

/// Flows whose last packet is already due are forgotten once there are this many.
const FLOW_TABLE_PRUNE_AT: usize = 4096;

/// The wire's logic, without I/O: packets in (with the time they were read), packets out
/// (when due). The thread in [`spawn`] drives it; tests drive it with made-up times.
#[derive(Debug)]
pub(crate) struct Engine {
    shared: Arc<Shared>,
    rng: SplitMix64,
    heap: BinaryHeap<Pending>,
    /// Due time of the last packet scheduled per flow.
    flows: HashMap<FlowKey, Instant>,
    /// Flows whose first data segment is logged already.
    data_logged: std::collections::HashSet<FlowKey>,
    seq: u64,
}

impl Engine {
    pub(crate) fn new(shared: Arc<Shared>, seed: u64) -> Self {
        Self {
            shared,
            rng: SplitMix64::new(seed),
            heap: BinaryHeap::new(),
            flows: HashMap::new(),
            data_logged: std::collections::HashSet::new(),
            seq: 0,
        }
    }

    /// The earliest due time of a waiting packet.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|p| p.due)
    }

    /// The next packet due at or before `now`, and where it goes.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Side, Vec<u8>)> {
        if self.heap.peek()?.due > now {
            return None;
        }
        self.heap.pop().map(|p| (p.to, p.pkt))
    }

    /// `base` moved by the rule's jitter.
    fn jittered(&mut self, base: Duration, jitter: Duration) -> Duration {
        if jitter.is_zero() {
            return base;
        }
        let offset = (self.rng.unit() * 2.0 - 1.0) * jitter.as_secs_f64();
        Duration::try_from_secs_f64((base.as_secs_f64() + offset).max(0.0)).unwrap_or(base)
    }

    /// `now + delay`, or a year from now if that is not representable.
    fn after(now: Instant, delay: Duration) -> Instant {
        now.checked_add(delay)
            .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
            .unwrap_or(now)
    }

    /// Puts `pkt` in the heap for `due`, but not before the flow's previous packet.
    fn schedule(&mut self, due: Instant, flow: FlowKey, to: Side, pkt: Vec<u8>) {
        let due = self.flows.get(&flow).map_or(due, |&last| due.max(last));
        self.flows.insert(flow, due);
        if self.flows.len() > FLOW_TABLE_PRUNE_AT {
            let now = Instant::now();
            self.flows.retain(|_, last| *last > now);
        }
        self.seq += 1;
        self.heap.push(Pending {
            due,
            seq: self.seq,
            to,
            pkt,
        });
    }

    /// Takes one packet read at `now` from the `dir` side's TUN device.
    pub(crate) fn handle(&mut self, now: Instant, dir: Dir, pkt: &[u8]) {
        let out = match dir {
            Dir::ClientToServer => Side::Server,
            Dir::ServerToClient => Side::Client,
        };
        let Some(p) = packet::parse(pkt) else {
            // Not IP as we know it: pass it on at once, in order with other such packets.
            let any: SocketAddr = (std::net::Ipv4Addr::UNSPECIFIED, 0).into();
            let flow = FlowKey {
                dir,
                src: any,
                dst: any,
                proto: 0,
            };
            self.schedule(now, flow, out, pkt.to_vec());
            return;
        };
        let (server_ip, server_port) = match dir {
            Dir::ClientToServer => (p.dst, p.ports.map(|(_, d)| d)),
            Dir::ServerToClient => (p.src, p.ports.map(|(s, _)| s)),
        };
        let found = lock(&self.shared.rules)
            .iter()
            .enumerate()
            .find(|(_, r)| r.applies(server_ip, server_port, p.proto))
            .map(|(i, r)| (i, r.clone()));
        let (index, rule) = match found {
            Some((i, r)) => (Some(i), r),
            None => (None, Rule::new(Match::Any, Action::Pass)),
        };
        let (verdict, answer) = self.decide(dir, pkt, &p, &rule);
        let flow = FlowKey {
            dir,
            src: p.src_sock(),
            dst: p.dst_sock(),
            proto: p.proto,
        };
        let control = p.tcp_flags() & (packet::SYN | packet::RST | packet::FIN) != 0;
        // The first data segment of each flow and direction is logged too: when a client's
        // first bytes (a ClientHello, a request) went out.
        let first_data = !control && p.carries_tcp_data() && self.data_logged.insert(flow);
        if control || first_data {
            self.log(WireEvent {
                at: now,
                dir,
                src: p.src_sock(),
                dst: p.dst_sock(),
                flags: p.tcp_flags(),
                verdict,
                rule: index,
            });
        }
        match verdict {
            Verdict::Delivered => {
                let base = match dir {
                    Dir::ClientToServer => rule.c2s,
                    Dir::ServerToClient => rule.s2c,
                };
                let delay = self.jittered(base, rule.jitter);
                self.schedule(Self::after(now, delay), flow, out, pkt.to_vec());
            }
            Verdict::Answered(action) => {
                if let Some(answer) = answer {
                    let delay = self
                        .jittered(rule.c2s, rule.jitter)
                        .saturating_add(self.jittered(rule.s2c, rule.jitter));
                    let back = FlowKey {
                        dir: Dir::ServerToClient,
                        src: p.dst_sock(),
                        dst: p.src_sock(),
                        proto: p.proto,
                    };
                    self.log(WireEvent {
                        at: now,
                        dir: Dir::ServerToClient,
                        src: p.dst_sock(),
                        dst: p.src_sock(),
                        flags: if action == Action::Rst {
                            packet::RST | packet::ACK
                        } else {
                            0
                        },
                        verdict: Verdict::Synthesized(action),
                        rule: index,
                    });
                    self.schedule(Self::after(now, delay), back, Side::Client, answer);
                }
            }
            Verdict::Dropped | Verdict::Lost | Verdict::Synthesized(_) => {}
        }
    }

    /// The verdict for a packet that `rule` matched, and the answer to send for
    /// [`Verdict::Answered`].
    fn decide(
        &mut self,
        dir: Dir,
        pkt: &[u8],
        p: &Packet,
        rule: &Rule,
    ) -> (Verdict, Option<Vec<u8>>) {
        if rule.loss > 0.0 && self.rng.unit() < rule.loss {
            return (Verdict::Lost, None);
        }
        let answered = |answer: Option<Vec<u8>>, action| match answer {
            Some(a) => (Verdict::Answered(action), Some(a)),
            None => (Verdict::Dropped, None),
        };
        match (rule.action, dir) {
            (Action::Pass, _) => (Verdict::Delivered, None),
            (Action::DropData, _) if p.carries_tcp_data() => (Verdict::Dropped, None),
            (Action::DropData, _) => (Verdict::Delivered, None),
            (_, Dir::ServerToClient) => (Verdict::Delivered, None),
            (Action::Blackhole, Dir::ClientToServer) => (Verdict::Dropped, None),
            (Action::Rst, Dir::ClientToServer) => answered(packet::tcp_reset_for(p), Action::Rst),
            (action @ Action::IcmpPort, Dir::ClientToServer) => answered(
                packet::icmp_unreachable_for(pkt, p, Unreachable::Port),
                action,
            ),
            (action @ Action::IcmpHost, Dir::ClientToServer) => answered(
                packet::icmp_unreachable_for(pkt, p, Unreachable::Host),
                action,
            ),
            (action @ Action::IcmpAdmin, Dir::ClientToServer) => answered(
                packet::icmp_unreachable_for(pkt, p, Unreachable::Admin),
                action,
            ),
        }
    }

    fn log(&self, event: WireEvent) {
        lock(&self.shared.log).push(event);
    }
}

/// The running wire thread. Dropping it stops the thread (closing the stop pipe wakes it),
/// joins it, and so closes both TUN descriptors, which removes the devices.
#[derive(Debug)]
pub(crate) struct WireThread {
    stop: Option<PipeWriter>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for WireThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // The wire never panics on packets; if it died anyway, there is nothing to add
            // while dropping (possibly during another panic).
            let _ = t.join();
        }
    }
}

/// Packets read from one TUN device in a row before the other side gets its turn.
const READ_BURST: usize = 64;

/// Starts the wire thread between the `client` and `server` TUN descriptors.
pub(crate) fn spawn(
    client: File,
    server: File,
    shared: Arc<Shared>,
    seed: u64,
) -> io::Result<WireThread> {
    let (stop_rx, stop_tx) = io::pipe()?;
    let engine = Engine::new(shared, seed);
    let thread = std::thread::Builder::new()
        .name("testnet-wire".to_owned())
        .spawn(move || run(&client, &server, &stop_rx, engine))?;
    Ok(WireThread {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// The wire thread's loop; returns when the stop pipe is closed (or polling fails).
fn run(client: &File, server: &File, stop: &io::PipeReader, mut engine: Engine) {
    // Best effort: without it, wake-ups are up to 50 µs later.
    let _ = sys::set_timer_slack(1);
    let mut buf = vec![0u8; 65536];
    loop {
        let timeout = engine
            .next_due()
            .map(|due| due.saturating_duration_since(Instant::now()));
        let revents =
            match sys::poll_readable([client.as_fd(), server.as_fd(), stop.as_fd()], timeout) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
        if revents[2] != 0 || (revents[0] | revents[1]) & libc::POLLNVAL != 0 {
            return;
        }
        for (i, (mut tun, dir)) in [(client, Dir::ClientToServer), (server, Dir::ServerToClient)]
            .into_iter()
            .enumerate()
        {
            if revents[i] == 0 {
                continue;
            }
            for _ in 0..READ_BURST {
                match tun.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => engine.handle(Instant::now(), dir, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // The device is gone (EBADFD with POLLERR): polling again would spin.
                    Err(_) if revents[i] & (libc::POLLERR | libc::POLLHUP) != 0 => return,
                    Err(_) => break,
                }
            }
        }
        let now = Instant::now();
        while let Some((side, pkt)) = engine.pop_due(now) {
            let mut tun = match side {
                Side::Client => client,
                Side::Server => server,
            };
            // EIO (device down during set-up) and the like: the packet is lost, as on a
            // real link.
            let _ = tun.write(&pkt);
        }
    }
}

#[cfg(test)]
mod tests;
