#![doc = include_str!("../../../README.md")]
//!
//! # This crate
//!
#![cfg_attr(
    feature = "http",
    doc = "The paved path: the driver's types at the top ([`Connector`], [`Pool`], \
           [`HyperConnector`], [`RaceReport`] …), with [`Address`] and [`Proxy`], and each \
           layer under its own name:"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "The paved path: the driver's types at the top (with the `http` feature), \
           [`Address`] and [`Proxy`], and each layer under its own name:"
)]
//! [`plan`] (the sans-IO race and its policy), [`route`] (addresses, DNS aggregation,
//! ordering, route memory), [`pool`] (pool bookkeeping) and [`proto`] (the shared
//! vocabulary).
//!
//! The crates whose types the driver's API names are re-exported at the versions it is built
//! with, so an application declares only `fastfallback` (and tokio, for its runtime):
//! `rustls` (with `driver`: TLS configurations, handshake errors), and with `http`: `http`
//! (requests, responses), `bytes` (body chunks), `http_body` (the `Body` trait) and
//! `http_body_util` (`Full`, `Empty`, `StreamBody`, `BodyExt`). They are those crates
//! themselves, not wrappers: declaring one yourself (same major version) gives the same
//! types.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `driver` | yes | the tokio driver: `Connector`, hickory DNS, sockets, rustls |
//! | `http` | yes | `Pool` (HTTP/1.1 and HTTP/2 reuse), `HyperConnector`, tower services |
//! | `aws-lc-rs` | yes | rustls's aws-lc-rs backend, used when no process-wide provider is installed |
//! | `ring` | no | rustls's ring backend instead (turn `default-features` off) |
//! | `platform-verifier` | no | `ConnectorBuilder::platform_verifier`: the OS certificate verifier |
//!
//! With `default-features = false` the crate is the sans-IO core alone ([`plan`], [`route`],
//! [`pool`], [`proto`]): no runtime, DNS or TLS stack is compiled. Its examples (the
//! README's "Using the race") compile either way; the others need `driver` or `http`.

#[cfg(feature = "http")]
pub use fastfallback_http::*;
#[cfg(feature = "driver")]
pub use fastfallback_net::*;
/// rustls, the version the driver is built with: [`ConnectorBuilder::tls_config`] takes its
/// `ClientConfig`, and a failed handshake's cause is its `Error`.
#[cfg(feature = "driver")]
#[doc(no_inline)]
pub use rustls;

/// The `http` crate, the version the driver is built with: the requests and responses of
/// [`Pool`] and [`Exchange`].
#[cfg(feature = "http")]
#[doc(no_inline)]
pub use http;

/// The `bytes` crate: body chunks are its `Bytes`.
#[cfg(feature = "http")]
#[doc(no_inline)]
pub use bytes;

/// The `http-body` crate: the `Body` trait that request bodies implement.
#[cfg(feature = "http")]
#[doc(no_inline)]
pub use http_body;

#[doc(inline)]
pub use fastfallback_plan as plan;
#[doc(inline)]
pub use fastfallback_pool as pool;
#[doc(inline)]
pub use fastfallback_proto as proto;
#[doc(inline)]
pub use fastfallback_route as route;
/// An origin (`https://host:port`, `tcp://…`, `host:port`), validated: [`route::Address`].
pub use fastfallback_route::Address;
/// An HTTP `CONNECT` or SOCKS5 proxy to connect through: [`route::Proxy`].
pub use fastfallback_route::Proxy;
/// The `http-body-util` crate: ready-made bodies (`Full`, `Empty`, `StreamBody`) and
/// `BodyExt`.
#[cfg(feature = "http")]
#[doc(no_inline)]
pub use http_body_util;

/// The getting-started guide (`docs/getting-started.md`), included here so that every example
/// in it compiles as a doctest.
#[cfg(all(feature = "driver", feature = "http"))]
pub mod getting_started {
    #![doc = include_str!("../../../docs/getting-started.md")]
}
