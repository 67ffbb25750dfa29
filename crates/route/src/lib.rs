//! # fastfallback-route
//!
//! Turns a name and DNS answers into an ordered list of candidate endpoints. No I/O: answers,
//! source addresses and time are handed in.
//!
//! - [`Address`] and [`Host`]: what to connect to, validated ("parse, don't validate").
//! - [`Resolution`]: per-record-type answer aggregation and the Resolution Delay
//!   (RFC 8305 §3, HEv3 §4.2).
//! - [`sort`]: RFC 6724 §6 destination address selection, with source addresses as input.
//! - [`interleave`]: family interleaving with a Preferred Address Family Count
//!   (RFC 8305 §4, HEv3 §5.3).
//! - [`Nat64Prefix`]: RFC 6052 synthesis and de-synthesis (HEv3 §8).
//! - [`RouteDatabase`] and [`MemoryView`]: memory of failed routes, RTT per route and health
//!   per family, per network and per origin; bounded, expiring, and saved to a file on request.
//!   Races read a view and emit [`Lesson`]s.
//! - [`order`]: the whole ordering pipeline the race calls.
//!
//! ```
//! use fastfallback_route::{interleave, Family};
//! use std::net::IpAddr;
//!
//! let addrs: Vec<IpAddr> = ["2001:db8::a", "2001:db8::b", "192.0.2.1"]
//!     .iter().map(|s| s.parse().unwrap()).collect();
//! let out = interleave(addrs, |ip| Family::of(*ip), Family::V6, 1);
//! assert_eq!(out[1], "192.0.2.1".parse::<IpAddr>().unwrap());
//! ```

#![forbid(unsafe_code)]

mod address;
mod interleave;
mod memory;
mod nat64;
pub mod order;
mod resolution;
pub mod sort;

pub use address::{
    Address, AddressError, Credentials, Host, Proxy, ProxyDns, ProxyKind, Route, Scheme, Zone,
};
pub use fastfallback_proto::Family;
pub use interleave::interleave;
pub use memory::{
    Lesson, LessonKind, MAX_ALTERNATIVES_KEPT, MAX_FILE_BYTES, MemoryView, NetworkId, PersistError,
    QUIC_BROKEN_FOR, RouteDatabase, RouteMemory,
};
pub use nat64::{Nat64Error, Nat64Prefix};
pub use resolution::{
    AnswerLimits, Candidate, Connectivity, MAX_ALIAS_CHAIN, MAX_SKIPPED_LISTED, MAX_TARGET_NAMES,
    Resolution, ServiceInfo, Skipped,
};
pub use sort::{HostModel, Source, SourceOf, SourceSelector};

/// SplitMix64: one step of a small, well-mixed generator. The domain crates' only randomness,
/// always seeded from the race's input (`RaceInput::seed`), so runs are repeatable.
pub fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
