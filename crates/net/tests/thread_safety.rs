//! What callers may share between threads: a connection and its stream are `Send` and `Sync`,
//! so they can sit behind an `Arc` or in a struct that tasks share (issue 21, item 17; the
//! HTTP crate's exchanges and bodies in crates/http/tests/thread_safety.rs). A connection is
//! shared for real: two threads read its report while a third holds it.

use std::sync::Arc;

use fastfallback_net::{Connection, Connector, Stream};
use fastfallback_testkit::loopback;

fn shareable<T: Send + Sync>() {}

#[test]
fn connections_streams_and_connectors_are_send_and_sync() {
    shareable::<Connection>();
    shareable::<Stream>();
    shareable::<Connector>();
}

#[tokio::test]
async fn one_connection_is_read_from_two_threads_at_once() {
    let (listener, port) = loopback::bind().await;
    let accept = loopback::accept_one(listener);
    let connector = Connector::builder().build().unwrap();
    let conn = Arc::new(
        connector
            .connect(&format!("tcp://127.0.0.1:{port}"))
            .await
            .unwrap(),
    );
    let _server_side = accept.await.unwrap().unwrap();

    let peers: Vec<_> = (0..2)
        .map(|_| {
            let conn = Arc::clone(&conn);
            std::thread::spawn(move || (conn.peer_addr(), conn.report().attempts.len()))
        })
        .map(|t| t.join().unwrap())
        .collect();

    assert_eq!(peers, vec![(conn.peer_addr(), 1); 2]);
    assert_eq!(conn.peer_addr().port(), port);
}
