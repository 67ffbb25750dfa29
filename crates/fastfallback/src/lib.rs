#![doc = include_str!("../../../README.md")]
//!
//! # This crate
//!
//! The paved path: the driver's types at the top ([`Connector`], [`Pool`], [`HyperConnector`],
//! [`RaceReport`] …), and each layer under its own name: [`plan`] (the sans-IO race and its
//! policy), [`route`] (addresses, DNS aggregation, ordering, route memory), [`pool`] (pool
//! bookkeeping) and [`proto`] (the shared vocabulary).

pub use fastfallback_net::*;
pub use fastfallback_plan as plan;
pub use fastfallback_pool as pool;
pub use fastfallback_proto as proto;
pub use fastfallback_route as route;
