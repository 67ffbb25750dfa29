//! [`Connector`]: runs the sans-IO race on tokio.
//!
//! The driver loop does three things, over and over:
//!
//! 1. drain [`FastFallbackExchangeFinder::poll_output`] and act on it: send a query, start an
//!    attempt, drop a cancelled attempt (closing its socket in the same turn), or return;
//! 2. wait for the first of: a DNS answer, an attempt's progress, or the race's next deadline
//!    ([`FastFallbackExchangeFinder::poll_timeout`]);
//! 3. hand that event to the race with the current time.
//!
//! Every query and attempt is a future owned by the connect future itself; nothing is spawned
//! while the race runs. Dropping the connect future therefore drops every attempt and closes
//! every socket it opened, at once. Only after a win are the still-pending DNS queries handed
//! to a task for the DNS tail (HEv3 §6), bounded by [`FallbackPolicy::dns_tail`].

use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use fastfallback_plan::{
    ConnectPlan, FallbackPolicy, FastFallbackExchangeFinder, PolicyError, RaceEnv,
};
use fastfallback_proto::{
    Alpn, AttemptError, AttemptEvent, AttemptId, DnsAnswer, Instant, Output, QueryKind, RaceError,
    Winner,
};
use fastfallback_route::{Address, AddressError, Connectivity, Host, RouteDatabase};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::attempt::{connect_tcp, handshake};
use crate::report::{QueryLog, Story};
use crate::{
    Answer, HickoryResolver, KernelSources, RaceReport, Resolve, ResolverError, SocketOptions,
    Stream, detect_connectivity,
};

/// The clock every race of the process shares, so route memory written by one connector's
/// race can be read by another's.
fn epoch() -> tokio::time::Instant {
    static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(tokio::time::Instant::now)
}

fn now() -> Instant {
    Instant::from_elapsed(tokio::time::Instant::now().saturating_duration_since(epoch()))
}

/// Opens the fastest working connection to an origin: Happy Eyeballs with route memory.
///
/// Cheap to clone; clones share the resolver, TLS configuration and route memory.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use fastfallback_net::Connector;
/// use tokio::io::AsyncWriteExt;
///
/// let connector = Connector::builder().build()?;
/// let mut conn = connector.connect("https://example.com").await?;
/// println!("{}", conn.report());
/// conn.write_all(b"GET / HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
}

struct Inner {
    policy: FallbackPolicy,
    resolver: Arc<dyn Resolve>,
    tls: Arc<ClientConfig>,
    socket: SocketOptions,
    /// Set by the user, or `None` to read it from the kernel (cached briefly).
    connectivity: Option<Connectivity>,
    detected: std::sync::Mutex<Option<(tokio::time::Instant, Connectivity)>>,
    db: Option<Arc<RouteDatabase>>,
}

/// How long a connectivity reading is reused: long enough that a burst of connects reads the
/// kernel's tables once, short enough to notice a network change within seconds.
const CONNECTIVITY_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl Inner {
    fn connectivity(&self) -> Connectivity {
        if let Some(c) = self.connectivity {
            return c;
        }
        let now = tokio::time::Instant::now();
        let mut cached = self.detected.lock().unwrap_or_else(|p| p.into_inner());
        match *cached {
            Some((at, c)) if now.saturating_duration_since(at) < CONNECTIVITY_TTL => c,
            _ => {
                let c = detect_connectivity();
                *cached = Some((now, c));
                c
            }
        }
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("policy", &self.inner.policy)
            .field("socket", &self.inner.socket)
            .field("connectivity", &self.inner.connectivity)
            .field("route_memory", &self.inner.db.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Connector`]. Every setting has a default: the system's DNS configuration,
/// the webpki root certificates, [`FallbackPolicy::default`] and [`SocketOptions::default`].
#[derive(Default)]
#[must_use]
pub struct ConnectorBuilder {
    policy: FallbackPolicy,
    resolver: Option<Arc<dyn Resolve>>,
    roots: Option<RootCertStore>,
    tls: Option<ClientConfig>,
    socket: SocketOptions,
    connectivity: Option<Connectivity>,
    db: Option<Arc<RouteDatabase>>,
}

impl ConnectorBuilder {
    /// The race policy. It is validated by [`Self::build`].
    pub fn policy(mut self, policy: FallbackPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The DNS resolver (default: [`HickoryResolver::from_system_conf`]).
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.resolver = Some(Arc::new(resolver));
        self
    }

    /// Trust these roots instead of the webpki set (for private CAs and tests).
    pub fn root_certificates(mut self, roots: RootCertStore) -> Self {
        self.roots = Some(roots);
        self
    }

    /// A complete rustls configuration, replacing roots and defaults. Its ALPN list is
    /// replaced per attempt by the plan's (h2, http/1.1).
    pub fn tls_config(mut self, config: ClientConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Options set on every socket before it connects.
    pub fn socket_options(mut self, options: SocketOptions) -> Self {
        self.socket = options;
        self
    }

    /// Which families the host can use and its NAT64 prefix (default: read from the kernel
    /// with [`crate::detect_connectivity`] and re-read every few seconds, HEv3 §4.1).
    pub fn connectivity(mut self, connectivity: Connectivity) -> Self {
        self.connectivity = Some(connectivity);
        self
    }

    /// Share route memory with other connectors (default: a new one per connector, sized by
    /// the policy's [`fastfallback_route::RouteMemory`]; none if the policy turns it off).
    pub fn route_database(mut self, db: Arc<RouteDatabase>) -> Self {
        self.db = Some(db);
        self
    }

    /// Checks the settings and builds the connector.
    pub fn build(self) -> Result<Connector, BuildError> {
        self.policy.validate().map_err(BuildError::Policy)?;
        let resolver = match self.resolver {
            Some(r) => r,
            None => Arc::new(HickoryResolver::from_system_conf().map_err(BuildError::Resolver)?),
        };
        let mut tls = match self.tls {
            Some(c) => c,
            None => {
                let roots = self
                    .roots
                    .unwrap_or_else(|| webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect());
                ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::aws_lc_rs::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(BuildError::Tls)?
                .with_root_certificates(roots)
                .with_no_client_auth()
            }
        };
        tls.alpn_protocols = vec![
            Alpn::H2.as_bytes().to_vec(),
            Alpn::Http11.as_bytes().to_vec(),
        ];
        let db = match self.db {
            Some(db) => Some(db),
            None if self.policy.route_memory.enabled => {
                Some(Arc::new(RouteDatabase::new(self.policy.route_memory)))
            }
            None => None,
        };
        Ok(Connector {
            inner: Arc::new(Inner {
                policy: self.policy,
                resolver,
                tls: Arc::new(tls),
                socket: self.socket,
                connectivity: self.connectivity,
                detected: std::sync::Mutex::new(None),
                db,
            }),
        })
    }
}

/// Why a [`Connector`] could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The policy is invalid.
    Policy(PolicyError),
    /// The system DNS configuration could not be read.
    Resolver(ResolverError),
    /// The TLS configuration was rejected.
    Tls(rustls::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Policy(e) => write!(f, "invalid policy: {e}"),
            Self::Resolver(e) => write!(f, "{e}"),
            Self::Tls(e) => write!(f, "invalid TLS configuration: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a connect failed. Race failures carry the full report.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The origin is not a valid address (bad name, port 0, unsupported scheme…).
    InvalidAddress(AddressError),
    /// The race ran and lost: every cause is inside, in start order.
    Race(Box<RaceFailure>),
    /// The origin needs something this driver does not do yet (a proxy).
    Unsupported(&'static str),
}

/// A lost race: why, and everything that happened.
#[derive(Clone, Debug)]
pub struct RaceFailure {
    /// Why the race failed, with every attempt's cause.
    pub error: RaceError,
    /// The race's report.
    pub report: RaceReport,
}

impl ConnectError {
    /// The race's report, if a race ran.
    pub fn report(&self) -> Option<&RaceReport> {
        match self {
            Self::Race(r) => Some(&r.report),
            _ => None,
        }
    }

    /// The race error, if a race ran.
    pub fn race_error(&self) -> Option<&RaceError> {
        match self {
            Self::Race(r) => Some(&r.error),
            _ => None,
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidAddress(e) => write!(f, "invalid origin: {e}"),
            Self::Race(r) => write!(f, "cannot connect to {}: {}", r.report.origin, r.error),
            Self::Unsupported(what) => write!(f, "not supported by this driver yet: {what}"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidAddress(e) => Some(e),
            Self::Race(r) => Some(&r.error),
            Self::Unsupported(_) => None,
        }
    }
}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> Self {
        match e {
            ConnectError::Race(r) => Self::from(r.error),
            ConnectError::InvalidAddress(a) => Self::new(io::ErrorKind::InvalidInput, a),
            ConnectError::Unsupported(_) => Self::new(io::ErrorKind::Unsupported, e),
        }
    }
}

/// The winner of a race: a connected stream, and the story of how it was found.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    peer: SocketAddr,
    alpn: Option<Alpn>,
    story: Story,
    report: OnceLock<RaceReport>,
}

impl Connection {
    /// The race's report, formatted on first use (a connect that nobody asks about never pays
    /// for formatting it).
    pub fn report(&self) -> &RaceReport {
        self.report.get_or_init(|| self.story.report())
    }

    /// The address the winner connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The protocol ALPN chose, if TLS negotiated one.
    pub fn alpn(&self) -> Option<&Alpn> {
        self.alpn.as_ref()
    }

    /// The stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Takes the stream and the report apart.
    pub fn into_parts(self) -> (Stream, RaceReport) {
        let report = match self.report.into_inner() {
            Some(r) => r,
            None => self.story.report(),
        };
        (self.stream, report)
    }

    /// Takes the stream, dropping the report.
    pub fn into_stream(self) -> Stream {
        self.stream
    }
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

type StepFuture<T> = Pin<Box<dyn Future<Output = Result<T, AttemptError>> + Send>>;

/// The step an attempt is in: each is one future, dropped to cancel.
enum Step {
    Tcp(StepFuture<TcpStream>),
    Tls(StepFuture<(Stream, Option<Alpn>)>),
}

struct Running {
    id: AttemptId,
    plan: ConnectPlan,
    step: Step,
}

enum Wake {
    Dns(QueryKind, DnsAnswer),
    Tcp(usize, Result<TcpStream, AttemptError>),
    Tls(usize, Result<(Stream, Option<Alpn>), AttemptError>),
    Timer,
}

impl Connector {
    /// A builder with every default.
    pub fn builder() -> ConnectorBuilder {
        ConnectorBuilder::default()
    }

    /// The policy races run with.
    pub fn policy(&self) -> &FallbackPolicy {
        &self.inner.policy
    }

    /// The route memory shared by this connector's races, if it has one.
    pub fn route_database(&self) -> Option<&Arc<RouteDatabase>> {
        self.inner.db.as_ref()
    }

    /// Races to `origin`: `https://host[:port]`, `http://host[:port]`, `tcp://host:port` or
    /// `host:port` (plain TCP). Must run inside a tokio runtime.
    pub async fn connect(&self, origin: &str) -> Result<Connection, ConnectError> {
        let address = Address::parse(origin).map_err(ConnectError::InvalidAddress)?;
        self.connect_to(address, origin).await
    }

    /// Races to an already parsed address; `label` names it in the report.
    pub async fn connect_to(
        &self,
        address: Address,
        label: &str,
    ) -> Result<Connection, ConnectError> {
        if address.proxy().is_some() {
            return Err(ConnectError::Unsupported("connecting through a proxy"));
        }
        Race::new(Arc::clone(&self.inner), address, label)
            .run()
            .await
    }
}

/// One race in progress: the state machine, and the futures it asked for.
struct Race {
    inner: Arc<Inner>,
    /// Boxed: the state machine is large, and the race future is moved around by value.
    finder: Box<FastFallbackExchangeFinder>,
    name: String,
    origin: String,
    t0: Instant,
    log: Vec<QueryLog>,
    queries: Vec<(QueryKind, Answer)>,
    running: Vec<Running>,
    /// Finished attempts waiting for the race to declare them the winner.
    finished: Vec<(AttemptId, Stream, Option<Alpn>)>,
}

/// How the race ended, as far as the driver loop is concerned.
enum Ending {
    Won(AttemptId),
    Failed(RaceError),
    Unsupported(&'static str),
}

impl Race {
    fn new(inner: Arc<Inner>, address: Address, label: &str) -> Self {
        let env = RaceEnv {
            sources: Arc::new(KernelSources::new(&inner.socket)),
            db: inner.db.clone(),
            connectivity: inner.connectivity(),
        };
        let name = match address.connect_host().0 {
            Host::Name(n) => n.clone(),
            Host::Ip(_) => String::new(),
        };
        let t0 = now();
        let finder = Box::new(FastFallbackExchangeFinder::new(
            address,
            inner.policy.clone(),
            env,
            t0,
        ));
        Self {
            inner,
            finder,
            name,
            origin: label.to_owned(),
            t0,
            log: Vec::new(),
            queries: Vec::new(),
            running: Vec::new(),
            finished: Vec::new(),
        }
    }

    async fn run(mut self) -> Result<Connection, ConnectError> {
        let mut sleep: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep_until(epoch()));
        loop {
            let t = now();
            while let Some(out) = self.finder.poll_output(t) {
                if let Some(ending) = self.act(out, t) {
                    return self.end(ending, t);
                }
            }
            let armed = match self.finder.poll_timeout() {
                Some(at) => {
                    sleep.as_mut().reset(epoch() + at.elapsed());
                    true
                }
                None => false,
            };
            let wake = poll_fn(|cx| self.poll_wake(cx, sleep.as_mut(), armed)).await;
            self.handle(wake, now());
        }
    }

    /// Acts on one output of the race. Returns how the race ended, once it has.
    fn act(&mut self, out: Output<ConnectPlan>, t: Instant) -> Option<Ending> {
        match out {
            Output::StartQuery(kind) => {
                tracing::debug!(name = %self.name, %kind, "query");
                self.queries
                    .push((kind, self.inner.resolver.query(&self.name, kind)));
                self.log.push(QueryLog {
                    kind,
                    sent: t,
                    answered: None,
                });
            }
            Output::CancelQuery(kind) => self.queries.retain(|(k, _)| *k != kind),
            Output::StartAttempt { id, plan } => {
                tracing::debug!(%id, %plan, "attempt starts");
                let inner = Arc::clone(&self.inner);
                let target = plan.route.target;
                self.running.push(Running {
                    id,
                    plan,
                    step: Step::Tcp(Box::pin(
                        async move { connect_tcp(target, &inner.socket).await },
                    )),
                });
            }
            Output::CancelAttempt { id, reason } => {
                tracing::debug!(%id, %reason, "attempt cancelled");
                // Dropping the future closes the socket now, in this turn.
                self.running.retain(|r| r.id != id);
                self.finished.retain(|(f, ..)| *f != id);
            }
            Output::Done(Winner::Attempt(id)) => return Some(Ending::Won(id)),
            // This driver never offers pooled connections, so the race cannot pick one.
            Output::Done(Winner::Pooled(_)) => {
                return Some(Ending::Unsupported("pooled connections"));
            }
            Output::Failed(error) => return Some(Ending::Failed(error)),
        }
        None
    }

    /// Closes whatever is left and turns the race into its result.
    fn end(mut self, ending: Ending, t: Instant) -> Result<Connection, ConnectError> {
        self.running.clear();
        let winner = match &ending {
            Ending::Won(id) => {
                let i = self.finished.iter().position(|(f, ..)| f == id);
                i.map(|i| self.finished.swap_remove(i))
            }
            _ => None,
        };
        self.finished.clear();
        if winner.is_some() {
            self.start_dns_tail();
        }
        let mut story = Story {
            origin: self.origin,
            t0: self.t0,
            end: t,
            queries: self.log,
            attempts: self.finder.into_attempts(),
            winner: None,
            alpn: None,
            error: None,
        };
        match (ending, winner) {
            (Ending::Won(id), Some((_, stream, alpn))) => {
                tracing::debug!(%id, "race won");
                story.winner = Some(id);
                story.alpn.clone_from(&alpn);
                let peer = story
                    .attempts
                    .get(id.0 as usize)
                    .map(|a| a.plan.route.target)
                    .or_else(|| stream.tcp().peer_addr().ok())
                    .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
                Ok(Connection {
                    stream,
                    peer,
                    alpn,
                    story,
                    report: OnceLock::new(),
                })
            }
            (Ending::Failed(error), _) => {
                story.error = Some(error.to_string());
                Err(ConnectError::Race(Box::new(RaceFailure {
                    error,
                    report: story.report(),
                })))
            }
            (Ending::Unsupported(what), _) => Err(ConnectError::Unsupported(what)),
            (Ending::Won(_), None) => Err(ConnectError::Unsupported("a winner without a stream")),
        }
    }

    /// Keeps the queries still in flight for the DNS tail (HEv3 §6), so their answers reach the
    /// resolver's cache for the next race. Bounded by the policy's `dns_tail`.
    fn start_dns_tail(&mut self) {
        if self.queries.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let tail = self.inner.policy.dns_tail;
        for (_, answer) in self.queries.drain(..) {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(tail, answer).await;
            });
        }
    }

    fn poll_wake(
        &mut self,
        cx: &mut Context<'_>,
        sleep: Pin<&mut Sleep>,
        armed: bool,
    ) -> Poll<Wake> {
        for i in 0..self.queries.len() {
            if let Poll::Ready(answer) = self.queries[i].1.as_mut().poll(cx) {
                let (kind, _) = self.queries.remove(i);
                return Poll::Ready(Wake::Dns(kind, answer));
            }
        }
        for (i, r) in self.running.iter_mut().enumerate() {
            match &mut r.step {
                Step::Tcp(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        return Poll::Ready(Wake::Tcp(i, res));
                    }
                }
                Step::Tls(f) => {
                    if let Poll::Ready(res) = f.as_mut().poll(cx) {
                        return Poll::Ready(Wake::Tls(i, res));
                    }
                }
            }
        }
        if armed && sleep.poll(cx).is_ready() {
            return Poll::Ready(Wake::Timer);
        }
        Poll::Pending
    }

    /// Hands one event to the race.
    fn handle(&mut self, wake: Wake, t: Instant) {
        match wake {
            Wake::Timer => {}
            Wake::Dns(kind, answer) => {
                if let Some(q) = self
                    .log
                    .iter_mut()
                    .find(|q| q.kind == kind && q.answered.is_none())
                {
                    q.answered = Some((t, answer.clone()));
                }
                self.finder.handle_dns(kind, answer, t);
            }
            Wake::Tcp(i, Ok(tcp)) => {
                let id = self.running[i].id;
                match self.running[i].plan.tls.clone() {
                    Some(step) => {
                        let config = Arc::clone(&self.inner.tls);
                        self.running[i].step =
                            Step::Tls(Box::pin(
                                async move { handshake(tcp, &step, &config).await },
                            ));
                        self.finder
                            .handle_attempt(id, AttemptEvent::TcpConnected, t);
                    }
                    None => {
                        self.running.remove(i);
                        self.finished.push((id, Stream::Tcp(tcp), None));
                        self.finder
                            .handle_attempt(id, AttemptEvent::Connected(None), t);
                    }
                }
            }
            Wake::Tls(i, Ok((stream, alpn))) => {
                let id = self.running.remove(i).id;
                self.finished.push((id, stream, alpn.clone()));
                self.finder
                    .handle_attempt(id, AttemptEvent::Connected(alpn), t);
            }
            Wake::Tcp(i, Err(error)) | Wake::Tls(i, Err(error)) => {
                let id = self.running.remove(i).id;
                tracing::debug!(%id, %error, "attempt failed");
                self.finder.handle_attempt(
                    id,
                    AttemptEvent::Failed {
                        error,
                        follow_up: None,
                    },
                    t,
                );
            }
        }
    }
}
