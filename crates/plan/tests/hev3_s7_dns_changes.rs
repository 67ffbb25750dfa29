//! HEv3 §4.3 and §7: answers arriving and changing mid-race (T31–T34).

mod common;
use common::*;

use fastfallback_proto::{Query, QueryKind};
use fastfallback_sim::Scenario;

#[test]
fn late_aaaa_joins_at_the_next_slot_without_rescheduling() {
    // T31
    let run = Scenario::plain()
        .a(20, &[V4A])
        .aaaa(150, &[V6A])
        .ok(V4A, 400)
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V4A, 70), (V6A, 320)]));
    assert_eq!(run.won(), one(V6A, 340));
    assert_eq!(run.cancelled(), at(&[(V4A, 340)]));
}

#[test]
fn late_a_answer_is_placed_by_resorting_the_whole_list() {
    // T32
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(100, &[V4A])
        .ok(V4A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260)]));
    assert_eq!(run.won(), one(V4A, 280));
}

#[test]
fn withdrawn_untried_endpoint_is_never_attempted_and_in_flight_one_keeps_running() {
    // T33
    let run = Scenario::plain()
        .aaaa(10, &[V6A, V6B])
        .a(10, &[V4A])
        .aaaa(300, &[])
        .ok(V6B, 10)
        .ok(V4A, 300)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10), (V4A, 260)]));
    assert_eq!(run.won(), one(V4A, 560));
    assert_eq!(run.cancelled(), at(&[(V6A, 560)]));
}

#[test]
fn answer_after_success_starts_nothing_and_is_taken_for_the_cache() {
    // T34
    let run = Scenario::plain()
        .aaaa(10, &[V6A])
        .a(500, &[V4A])
        .ok(V6A, 20)
        .run();
    assert_eq!(run.starts(), at(&[(V6A, 10)]));
    assert_eq!(run.won(), one(V6A, 30));
    assert!(
        run.queries_cancelled().is_empty(),
        "A answered inside the tail"
    );
}

#[test]
fn unanswered_query_is_abandoned_one_second_after_success() {
    // T34, "if A had never answered"
    let run = Scenario::plain().aaaa(10, &[V6A]).ok(V6A, 20).run();
    assert_eq!(
        run.queries_cancelled(),
        [(Query::origin(QueryKind::A), 1030)]
    );
}
