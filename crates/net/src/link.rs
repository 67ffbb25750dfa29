//! The seam a connection pool links races through.
//!
//! A plain [`Connector::connect`](crate::Connector::connect) races alone. A pool wants more of a
//! race: to start it waiting for another call's connect (single flight), to end it early on a
//! connection that is already open, to hear which addresses it resolved (so that it can offer a
//! connection it may coalesce onto, spec/okhttp-connection-layer.md §3.7), and to keep the
//! attempts that lost but may still connect. [`Connector::race_linked`](crate::Connector::race_linked)
//! runs such a race; this module holds what goes in ([`RaceLink`], [`Offer`]) and what comes
//! out ([`RaceEnd`], [`Raced`], [`Spare`]).
//!
//! The driver knows nothing of HTTP: an offered connection is a [`Lease`], a value the pool
//! made, which the race holds while it decides and hands back unchanged (the pool downcasts it,
//! as `fastfallback-http` does). Any other pool can link races the same way.
//!
//! ```
//! use fastfallback_net::link::{Lease, Offer, RaceLink};
//! use fastfallback_proto::PooledId;
//!
//! /// A pool's reservation on one of its connections.
//! struct Reserved(PooledId);
//!
//! impl Lease for Reserved {
//!     fn id(&self) -> PooledId {
//!         self.0
//!     }
//! }
//!
//! let (offers, receiver) = tokio::sync::mpsc::unbounded_channel();
//! let link = RaceLink::new(receiver);
//! // Later, while the race runs: a connection came free.
//! offers.send(Offer::Pooled(Box::new(Reserved(PooledId(7))))).unwrap();
//! # drop(link);
//! ```

use std::any::Any;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use fastfallback_proto::{Alpn, AttemptId, CancelReason, PooledId};
use fastfallback_route::Lesson;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::{ConnectError, Connection, Stream};

pub use crate::connector::now;
pub use crate::events::Listeners;
pub use crate::report::Story;

/// An already-open connection offered to a running race, with whatever the pool reserved on
/// it (an HTTP/2 stream, say). The race ends on it if it has not ended yet
/// ([`fastfallback_plan::FastFallbackExchangeFinder::handle_pooled`]) and returns it in
/// [`Raced::Pooled`]; otherwise the lease is dropped, which must give the reservation back.
pub trait Lease: Any + Send {
    /// The pool's id of the connection, which the race names as its winner.
    fn id(&self) -> PooledId;

    /// Whether the connection carries many exchanges at once (HTTP/2). When this lease wins a
    /// race, the attempt it overtook ([`CancelReason::Overtaken`]) is kept for the pool
    /// ([`Watch::adopt`]) only if it does not: a connection that carries one exchange at a
    /// time leaves the pool one short, a multiplexed one serves the next calls itself.
    /// Provided as `true`, which closes the overtaken attempt as any loser is closed.
    fn multiplexed(&self) -> bool {
        true
    }
}

/// What a linked race hears from its pool while it runs.
pub enum Offer {
    /// A pooled connection with a reservation for this race.
    Pooled(Box<dyn Lease>),
    /// The connect this (waiting) race followed ended without a connection to share; what it
    /// taught route memory ([`fastfallback_plan::FastFallbackExchangeFinder::handle_release`]).
    Release(Vec<Lesson>),
}

/// Where a linked race reports what it resolved, and hands over the attempts it kept: the one
/// a pooled connection overtook ([`CancelReason::Overtaken`]), and with
/// [`fastfallback_plan::SpareWinners::Pool`] every loser.
pub trait Watch: Send + Sync {
    /// The race now knows these addresses of its origin (A and AAAA answers for the origin's
    /// own name only: not HTTPS hints, not a service target's addresses).
    fn resolved(&self, addresses: &[IpAddr]);
    /// An attempt the race cancelled but kept ([`SpareEnd::reason`] says why): it finishes in
    /// the background and, if it connects, may be pooled. Dropping the future closes its
    /// socket.
    fn adopt(&self, spare: Spare);
}

/// A cancelled attempt kept to finish on its own, bounded by the policy's attempt timeout.
pub type Spare = Pin<Box<dyn Future<Output = SpareEnd> + Send>>;

/// How a kept attempt ended: its id and route, and its stream with what ALPN chose, or `None`
/// if it failed or ran past the attempt timeout.
pub struct SpareEnd {
    /// The attempt's id in the race that kept it.
    pub attempt: AttemptId,
    /// Where it connected (or tried to).
    pub route: SocketAddr,
    /// Why the race cancelled it: [`CancelReason::Overtaken`] (a pooled connection won while
    /// it connected: demand the pool could not meet) or [`CancelReason::LostRace`] (another
    /// attempt won; kept only with [`fastfallback_plan::SpareWinners::Pool`]).
    pub reason: CancelReason,
    /// Its stream and negotiated protocol, if it connected in time.
    pub connected: Option<(Stream, Option<Alpn>)>,
}

/// How a race is wired to its pool.
pub struct RaceLink {
    /// Start in [`fastfallback_plan::RacePhase::Waiting`]: another call's connect leads, and
    /// this race waits for its [`Offer`] (single flight).
    pub waiting: bool,
    /// Who hears the race's DNS queries and attempts.
    pub listeners: Listeners,
    /// The pool's offers, heard between the race's turns.
    pub offers: UnboundedReceiver<Offer>,
    /// Who hears what the race resolved and adopts its kept attempts.
    pub watch: Option<Arc<dyn Watch>>,
    /// Where QUIC attempts that can send 0-RTT data hand their connection as soon as they
    /// can ([`EarlyQuic`]); `None`: no attempt tries 0-RTT.
    pub early: Option<UnboundedSender<EarlyQuic>>,
}

/// A QUIC attempt that resumed a session whose ticket allows early data: its connection can
/// carry 0-RTT data now (RFC 9001 §4.6), before its handshake is done.
///
/// This is not a win. The attempt wins, as any QUIC attempt does, when its handshake
/// completes (HEv3 §6.1, R-32): a path that drops UDP never completes it, and then another
/// attempt wins while the early data goes nowhere. So what is sent early must be safe to
/// send again (idempotent, RFC 9110 §9.2.2): a server may also reject 0-RTT (the winner's
/// `QuicConnection::early_data` says whether it took it), or see it replayed (RFC 9001 §9.2). Match the winner to this connection by
/// [`EarlyQuic::stable_id`].
pub struct EarlyQuic {
    /// The attempt, in the race that sent it.
    pub attempt: AttemptId,
    /// The connection, in 0-RTT (needs the driver's `quic` feature).
    #[cfg(feature = "quic")]
    pub connection: quinn::Connection,
}

impl EarlyQuic {
    /// quinn's id of the connection, the same as the winner's when this attempt wins.
    #[cfg(feature = "quic")]
    pub fn stable_id(&self) -> usize {
        self.connection.stable_id()
    }
}

impl RaceLink {
    /// A link that hears `offers`, with no listeners, no watch, and not waiting.
    pub fn new(offers: UnboundedReceiver<Offer>) -> Self {
        Self {
            waiting: false,
            listeners: Listeners::default(),
            offers,
            watch: None,
            early: None,
        }
    }
}

/// How a linked race ended well.
pub enum Raced {
    /// It connected: a new connection.
    Connected(Connection),
    /// It ended on a connection its pool offered; the lease comes back as it was offered.
    Pooled {
        /// The offered lease (downcast it with `Box<dyn Any>`'s `downcast`).
        lease: Box<dyn Lease>,
        /// What the race recorded, for its report.
        story: Story,
    },
}

/// Everything a linked race hands back, whatever its outcome.
pub struct RaceEnd {
    /// A connection, a pooled connection, or why not.
    pub result: Result<Raced, ConnectError>,
    /// What the race taught route memory (for the calls that waited on it).
    pub lessons: Vec<Lesson>,
}
