//! Listener events: what one call went through ([`EventListener`]) and what happened to the
//! pool's connections ([`ConnectionListener`]), in the order OkHttp documents for its own
//! `EventListener` and `ConnectionListener`.
//!
//! Listeners are called outside every lock of the engine, on the task that made the event
//! happen; they should return quickly. The events are plain data, so a listener can record
//! them.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use fastfallback_proto::{DnsAnswer, Query};

/// How this exchange got its connection.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum Source {
    /// A connection already in the pool, found when the call started (no race ran).
    Pool,
    /// A connection that entered the pool while this call's race ran (or waited); the race
    /// ended on it.
    PooledMidRace,
    /// A connection made for another host and shared with this one (HTTP/2 coalescing).
    Coalesced,
    /// A new connection: this call's race won it.
    New,
}

/// One step of one call (an exchange asked of `fastfallback_http::Pool`).
///
/// The order of a call that connects: `CallStart`, then `DnsStart`/`DnsEnd` per record type,
/// then per attempt `ConnectStart`, `SecureConnectStart`, `SecureConnectEnd`, `ConnectEnd`
/// (or `ConnectFailed`, a cancelled loser included), then `ConnectionAcquired`, and when the
/// response body ends (or the exchange is dropped) `ConnectionReleased` and `CallEnd`. A call
/// served from the pool sees `CallStart`, `ConnectionAcquired`, `ConnectionReleased`,
/// `CallEnd`. A call that fails sees `CallFailed` last.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CallEvent {
    /// The call began.
    CallStart {
        /// The origin, normalised.
        origin: String,
    },
    /// A DNS query was sent.
    DnsStart {
        /// Its record type and the name it asks about (the origin's, or a name the HTTPS
        /// records led to).
        query: Query,
    },
    /// A DNS query was answered.
    DnsEnd {
        /// The query.
        query: Query,
        /// The answer.
        answer: DnsAnswer,
    },
    /// An attempt started its TCP connect.
    ConnectStart {
        /// The attempt's id within its race.
        attempt: u32,
        /// Where it connects.
        route: SocketAddr,
    },
    /// An attempt's TCP connected and its TLS handshake started.
    SecureConnectStart {
        /// The attempt.
        attempt: u32,
    },
    /// An attempt's TLS handshake finished.
    SecureConnectEnd {
        /// The attempt.
        attempt: u32,
        /// The protocol ALPN chose.
        alpn: Option<String>,
    },
    /// An attempt connected (TCP, and TLS if any).
    ConnectEnd {
        /// The attempt.
        attempt: u32,
        /// Where it connected.
        route: SocketAddr,
    },
    /// An attempt failed or was cancelled.
    ConnectFailed {
        /// The attempt.
        attempt: u32,
        /// Where it was connecting.
        route: SocketAddr,
        /// Why.
        error: String,
    },
    /// The call got its connection.
    ConnectionAcquired {
        /// The pooled connection's id (`None` for an exclusive connection).
        connection: Option<u64>,
        /// How it got it.
        source: Source,
    },
    /// The call gave its connection back.
    ConnectionReleased {
        /// The pooled connection's id (`None` for an exclusive connection).
        connection: Option<u64>,
    },
    /// The call ended: its response body was read to the end or dropped.
    CallEnd,
    /// The call failed.
    CallFailed {
        /// Why.
        error: String,
    },
}

/// Receives the events of the calls it is given to (`fastfallback_http::Pool::exchange_with`).
pub trait EventListener: Send + Sync + 'static {
    /// One event, in order.
    fn event(&self, event: &CallEvent);
}

/// What happened to a connection of the pool.
///
/// Sequences (OkHttp's ConnectionListenerTest): a new connection sees `ConnectStart`,
/// `ConnectEnd`, `Acquired`, `Released`; a reused one `Acquired`, `Released`; one that broke
/// `NoNewExchanges` before its `Released`, then `Closed`. Attempts that lose a race see
/// `ConnectStart` and `ConnectFailed`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConnectionEvent {
    /// An attempt started connecting.
    ConnectStart {
        /// The attempt's id within its race.
        attempt: u32,
        /// Where it connects.
        route: SocketAddr,
    },
    /// An attempt connected (TCP, and TLS if any).
    ConnectEnd {
        /// The attempt.
        attempt: u32,
        /// Where it connected.
        route: SocketAddr,
    },
    /// An attempt failed or was cancelled.
    ConnectFailed {
        /// The attempt.
        attempt: u32,
        /// Where it was connecting.
        route: SocketAddr,
        /// Why.
        error: String,
    },
    /// A call took an exchange on pooled connection `connection`.
    Acquired {
        /// The connection's id.
        connection: u64,
    },
    /// A call gave an exchange on `connection` back.
    Released {
        /// The connection's id.
        connection: u64,
    },
    /// The connection takes no new exchanges (an error, GOAWAY, a closed peer, a failed
    /// health check). Sent once per connection.
    NoNewExchanges {
        /// The connection's id.
        connection: u64,
    },
    /// The connection left the pool and was closed.
    Closed {
        /// The connection's id.
        connection: u64,
    },
}

/// Receives the events of every connection of one pool (`fastfallback_http::Pool::with_listener`).
pub trait ConnectionListener: Send + Sync + 'static {
    /// One event, in order per connection.
    fn event(&self, event: &ConnectionEvent);
}

/// The listeners one race reports to (a linked race's, [`crate::link::RaceLink`]).
#[derive(Clone, Default)]
pub struct Listeners {
    /// Hears the call's events.
    pub call: Option<Arc<dyn EventListener>>,
    /// Hears the connection's events.
    pub connection: Option<Arc<dyn ConnectionListener>>,
}

impl fmt::Debug for Listeners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listeners")
            .field("call", &self.call.is_some())
            .field("connection", &self.connection.is_some())
            .finish()
    }
}

impl Listeners {
    /// Whether nobody listens.
    pub fn is_empty(&self) -> bool {
        self.call.is_none() && self.connection.is_none()
    }

    /// A call event (built only if someone listens).
    pub fn call(&self, event: impl FnOnce() -> CallEvent) {
        if let Some(l) = &self.call {
            l.event(&event());
        }
    }

    /// A connection event (built only if someone listens).
    pub fn connection(&self, event: impl FnOnce() -> ConnectionEvent) {
        if let Some(l) = &self.connection {
            l.event(&event());
        }
    }
}
