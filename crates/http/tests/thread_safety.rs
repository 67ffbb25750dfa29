//! What callers may share between threads: a pool, an exchange and a response body are `Send`
//! and `Sync`, so they can sit behind an `Arc` or in a struct that tasks share (issue 21,
//! item 17). The driver's connection and stream: crates/net/tests/thread_safety.rs.

use fastfallback_http::{Body, Exchange, ExchangeFuture, Origin, Pool};

fn shareable<T: Send + Sync>() {}

fn sendable<T: Send>() {}

#[test]
fn pools_origins_exchanges_and_bodies_are_send_and_sync() {
    shareable::<Pool>();
    shareable::<Origin>();
    shareable::<Exchange>();
    shareable::<Body>();
    sendable::<ExchangeFuture<'_>>();
}
