#![doc = include_str!("../../../README.md")]
//!
//! # This crate
//!
//! The paved path: the driver's types at the top ([`Connector`], [`Pool`], [`HyperConnector`],
//! [`RaceReport`] …), and each layer under its own name: [`plan`] (the sans-IO race and its
//! policy), [`route`] (addresses, DNS aggregation, ordering, route memory), [`pool`] (pool
//! bookkeeping) and [`proto`] (the shared vocabulary).
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
//! [`pool`], [`proto`]): no runtime, DNS or TLS stack is compiled.

#[cfg(feature = "driver")]
pub use fastfallback_net::*;
pub use fastfallback_plan as plan;
pub use fastfallback_pool as pool;
pub use fastfallback_proto as proto;
pub use fastfallback_route as route;

/// The getting-started guide (`docs/getting-started.md`), included here so that every example
/// in it compiles as a doctest.
#[cfg(all(feature = "driver", feature = "http"))]
pub mod getting_started {
    #![doc = include_str!("../../../docs/getting-started.md")]
}
