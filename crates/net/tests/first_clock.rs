//! The race clock of a process whose first race is never built.
//!
//! A race that is never built (a loopback literal that connects at once) leaves its two clock
//! readings as tokio read them, and its report turns them into the race clock. The race
//! clock's epoch must then come before both readings, even when nothing before the report
//! touched the clock. This file holds one test, so that its race is the first of its process.

use std::time::Duration;

use fastfallback_net::Connector;
use fastfallback_route::Connectivity;
use fastfallback_testkit::loopback;

#[tokio::test]
async fn the_first_race_of_a_process_reports_its_real_duration_even_when_never_built() {
    let (listener, port) = loopback::bind().await;
    let accept = loopback::accept_one(listener);
    // No route memory and a known network: nothing reads the clock before the race does.
    let mut policy = fastfallback_net::FallbackPolicy::default();
    policy.route_memory.enabled = false;
    let connector = Connector::builder()
        .policy(policy)
        .connectivity(Connectivity::DUAL_STACK)
        .build()
        .unwrap();
    let connection = connector
        .connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    let _server_side = accept.await.unwrap().unwrap();
    let report = connection.report();
    assert_eq!(report.winner, Some(1), "{report}");
    // A loopback connect takes microseconds, never no time at all: a report built from
    // readings older than the clock's epoch would read zero for both.
    assert!(report.elapsed > Duration::ZERO, "{report}");
    let attempt = &report.attempts[0];
    assert!(attempt.duration(report) > Duration::ZERO, "{report}");
    assert!(report.elapsed < Duration::from_secs(5), "{report}");
}
