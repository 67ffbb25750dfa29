//! # fastfallback-pool
//!
//! Bookkeeping for reusable connections, kept apart from any I/O.
//!
//! A [`ConnectionPool`] stores connection handles the caller gives it (any type `C`: a socket
//! wrapper, an index into the driver's own table, a test marker). It remembers, for each one,
//! which [`PoolKey`] (host, port, TLS) it serves, which [`Protocol`](fastfallback_proto::Protocol)
//! it speaks and how many exchanges it carries. From that it answers three questions:
//!
//! - **Which connection can this call use?** [`ConnectionPool::acquire`] prefers an HTTP/2
//!   connection with a free stream, else the HTTP/1 connection that went idle most recently.
//!   An HTTP/1 connection carries one exchange at a time; an HTTP/2 connection carries as many
//!   as the peer's `SETTINGS_MAX_CONCURRENT_STREAMS` allows.
//! - **Which connections must be closed?** [`ConnectionPool::cleanup`] applies OkHttp's
//!   `closeConnections(now)` rules: an idle connection is closed once it has been idle for the
//!   keep-alive duration, or when more connections are idle than [`PoolConfig::max_idle`]; one
//!   connection per call. Connections marked with [`ConnectionPool::mark_no_new_exchanges`] are
//!   closed as soon as their last exchange ends.
//! - **When should cleanup run next?** [`Cleanup::next_run`].
//!
//! Around the pool, two more pieces of bookkeeping serve the races that open connections:
//!
//! - [`Flights`]: one connect for concurrent calls to a new host (single flight), and
//!   [`ProtocolMemory`], which origins spoke HTTP/2 and with what stream limit.
//! - [`RaceBoard`]: the races watching the pool while they connect. It decides which race is
//!   offered which connection ([`OfferTo`]: the same key, or an HTTP/2 connection it may be
//!   coalesced onto, RFC 9113 §9.1.1), and which waiting races are released to connect
//!   ([`ReleaseTo`]) when their flight lands or the connection they waited on ends.
//!
//! The pool is sans-IO: it never reads a clock, sleeps or touches a socket. Every operation that
//! depends on time takes `now` as a [`fastfallback_proto::Instant`], and connections the pool
//! gives up are handed back to the caller, who closes them.
//!
//! ```text
//!   driver                                   ConnectionPool<C>
//!     insert(key, conn, protocol, ..) ─────▶  PooledId
//!     acquire(key, now)               ─────▶  Some(PooledId) | None
//!     release(id, now)                ─────▶  Release::{Ignored, Released, Close(conn)}
//!     cleanup(now)                    ─────▶  Cleanup { closed: [conn..], next_run }
//!
//!   driver                                   RaceBoard<T> (with &mut ConnectionPool<C>)
//!     watch(key, single_flight, payload) ─▶  Watching { race, join }
//!     offer_capacity(pool, id)           ─▶  [OfferTo { race, id, payload }..]
//!     resolved(pool, race, addresses)    ─▶  [Coalesce { race, id, host }..] → offer(..)
//!     land(pool, key, race, landing)     ─▶  [ReleaseTo { race, lead }..]
//! ```

#![forbid(unsafe_code)]

mod board;
mod flight;
mod pool;

pub use board::{Coalesce, Landing, OfferTo, RaceBoard, RaceId, ReleaseTo, Watching};
pub use flight::{Flights, Join, ProtocolMemory};
pub use pool::{
    Acquired, Cleanup, ConnectionPool, PROVISIONAL_MAX_STREAMS, PoolConfig, PoolKey, Release,
};
