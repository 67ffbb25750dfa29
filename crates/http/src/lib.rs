//! # fastfallback-http
//!
//! HTTP on the fastfallback driver ([`fastfallback_net`]):
//!
//! - [`Pool`]: connection reuse over HTTP/1.1 and HTTP/2, wired into the race. Concurrent
//!   calls to a new origin share one connect (single flight); a race ends early on a
//!   connection that enters the pool while it runs; HTTP/2 connections are coalesced across
//!   origins that share an address and a certificate (RFC 9113 §9.1.1). An [`Exchange`] is
//!   one request and response on a pooled connection, and reports where its connection came
//!   from.
//! - [`HyperConnector`]: the race as a connector for hyper-util's legacy `Client`.
//! - The tower `Service` implementations of [`Pool`] and [`HyperConnector`].
//!
//! The pool links its races through the driver's public seam, [`fastfallback_net::link`]: the
//! driver knows nothing of HTTP, and the pool's bookkeeping (keys, leases, single flight, the
//! races watching for connections) is the sans-IO [`fastfallback_pool`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fastfallback_http::Pool;
//! use fastfallback_net::Connector;
//!
//! let pool = Pool::new(Connector::builder().build()?);
//! let origin = pool.origin("https://example.com")?;
//! let response = pool
//!     .exchange(&origin)
//!     .await?
//!     .send(http::Request::get("/").body(bytes::Bytes::new())?)
//!     .await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```

mod hyper_connector;
mod pool;

pub use hyper_connector::{ConnectInfo, HyperConnecting, HyperConnector, HyperIo};
pub use pool::{
    Body, Call, Exchange, ExchangeError, ExchangeFuture, Origin, Pool, PoolOptions, PoolStats,
    RequestBody, SentEarly,
};
