//! Behaviour of `RaceBoard`: which watching race is offered which connection, coalescing
//! proposals, and which waiting races are released when a flight lands or a connection
//! retires.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use fastfallback_pool::{
    ConnectionPool, Join, Landing, OfferTo, PoolConfig, PoolKey, RaceBoard, RaceId, ReleaseTo,
};
use fastfallback_proto::{Instant, PooledId, Protocol};

const T0: Instant = Instant::ZERO;

fn key(host: &str) -> PoolKey {
    PoolKey::new(host, 443, true)
}

fn pool() -> ConnectionPool<()> {
    ConnectionPool::new(PoolConfig::default())
}

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// An HTTP/2 connection for `host` with `streams` streams, connected to 192.0.2.`last`:443.
fn h2(p: &mut ConnectionPool<()>, host: &str, streams: u32, last: u8) -> PooledId {
    let id = p.insert(key(host), (), Protocol::Http2, streams, T0);
    p.set_peer(id, SocketAddr::new(ip(last), 443));
    id
}

fn races<T>(offers: &[OfferTo<T>]) -> Vec<RaceId> {
    offers.iter().map(|o| o.race).collect()
}

fn released(races: &[RaceId], lead: bool) -> Vec<ReleaseTo> {
    races.iter().map(|&race| ReleaseTo { race, lead }).collect()
}

#[test]
fn a_new_h2_connection_is_offered_to_every_waiting_race_of_its_key() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, 0).race;
    let followers: Vec<RaceId> = (1..=3)
        .map(|n| b.watch(key("a.example"), true, n))
        .inspect(|w| assert_eq!(w.join, Some(Join::Follow)))
        .map(|w| w.race)
        .collect();
    let other = b.watch(key("b.example"), true, 9).race;

    b.unwatch(leader);
    let id = h2(&mut p, "a.example", 10, 1);
    assert!(p.acquire_id(id), "the leader's own exchange");
    let offers = b.offer_capacity(&mut p, id);

    assert_eq!(races(&offers), followers, "oldest first");
    assert!(offers.iter().all(|o| o.id == id));
    assert_eq!(p.allocations(id), Some(4), "each offer counts one exchange");
    assert_eq!(
        b.races().collect::<Vec<_>>(),
        [other],
        "offered races left the board"
    );
}

#[test]
fn an_h2_connection_is_offered_no_more_streams_than_it_has_free() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let all: Vec<RaceId> = (0..5)
        .map(|n| b.watch(key("a.example"), false, n).race)
        .collect();
    let id = h2(&mut p, "a.example", 2, 1);

    let offers = b.offer_capacity(&mut p, id);
    assert_eq!(races(&offers), all[..2]);
    assert_eq!(p.allocations(id), Some(2));
    assert!(b.offer_capacity(&mut p, id).is_empty(), "full");

    // One exchange ends: the next race is offered it. The peer raises its limit: two more.
    let _ = p.release(id, T0);
    assert_eq!(races(&b.offer_capacity(&mut p, id)), all[2..3]);
    p.set_max_streams(id, 4);
    assert_eq!(races(&b.offer_capacity(&mut p, id)), all[3..5]);
    assert!(b.is_empty());
}

#[test]
fn a_freed_http1_connection_is_offered_to_the_oldest_watching_race() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let first = b.watch(key("a.example"), false, "first").race;
    let _second = b.watch(key("a.example"), false, "second").race;
    let id = p.insert(key("a.example"), (), Protocol::Http11, 0, T0);

    let offers = b.offer_capacity(&mut p, id);
    assert_eq!(offers.len(), 1, "HTTP/1 carries one exchange");
    assert_eq!((offers[0].race, offers[0].payload), (first, "first"));
    assert_eq!(
        p.acquire(&key("a.example"), T0),
        None,
        "reserved for the race"
    );
    assert_eq!(b.len(), 1);
}

#[test]
fn a_connection_is_never_offered_to_a_race_that_unwatched() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let gone = b.watch(key("a.example"), false, 1).race;
    let stays = b.watch(key("a.example"), false, 2).race;
    assert_eq!(b.unwatch(gone), Some(1));
    assert_eq!(b.unwatch(gone), None, "once");

    let id = h2(&mut p, "a.example", 10, 1);
    assert_eq!(races(&b.offer_capacity(&mut p, id)), [stays]);
    assert!(b.offer(&mut p, gone, id).is_none());
    assert_eq!(
        p.allocations(id),
        Some(1),
        "nothing counted for the race that left"
    );
}

#[test]
fn a_race_is_offered_a_coalescable_connection_only_once_its_addresses_overlap() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let id = h2(&mut p, "a.example", 10, 1);
    let race = b.watch(key("b.example"), false, ()).race;

    assert!(b.resolved(&p, race, &[ip(7)]).is_empty(), "another address");
    assert!(b.coalescable(&p, id).is_empty());
    let proposals = b.resolved(&p, race, &[ip(1), ip(7)]);
    assert_eq!(proposals.len(), 1);
    assert_eq!((proposals[0].race, proposals[0].id), (race, id));
    assert_eq!(
        proposals[0].host, "b.example",
        "the certificate must cover this host"
    );
    assert_eq!(
        b.addresses(race),
        Some(&[ip(7), ip(1)][..]),
        "kept once each"
    );

    // The driver checked the certificate: the offer is made, once.
    let offer = b.offer(&mut p, race, id).expect("the race still watches");
    assert_eq!(offer.race, race);
    assert_eq!(p.allocations(id), Some(1));
    assert!(
        b.offer(&mut p, race, id).is_none(),
        "an offered race left the board"
    );
}

#[test]
fn a_new_h2_connection_is_proposed_to_the_races_of_other_hosts_that_resolved_its_address() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let same_host = b.watch(key("a.example"), false, ()).race;
    let other_host = b.watch(key("b.example"), false, ()).race;
    let other_port = b
        .watch(PoolKey::new("c.example", 8443, true), false, ())
        .race;
    let proxied = b
        .watch(key("d.example").with_proxy("http proxy:3128"), false, ())
        .race;
    let no_answer = b.watch(key("e.example"), false, ()).race;
    for race in [same_host, other_host, other_port, proxied] {
        let _ = b.resolved(&p, race, &[ip(1)]);
    }
    let _ = no_answer;

    let id = h2(&mut p, "a.example", 10, 1);
    let proposals = b.coalescable(&p, id);
    assert_eq!(
        proposals.iter().map(|c| c.race).collect::<Vec<_>>(),
        [other_host],
        "not its own host (offered by key), nor another port, a proxy, or no answer yet"
    );

    p.forbid_coalescing(id, "b.example");
    assert!(b.coalescable(&p, id).is_empty(), "a 421 bars the host");
}

#[test]
fn an_h1_landing_releases_the_followers() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let followers: Vec<RaceId> = (0..3)
        .map(|_| b.watch(key("a.example"), true, ()).race)
        .collect();

    b.unwatch(leader);
    let id = p.insert(key("a.example"), (), Protocol::Http11, 0, T0);
    assert!(p.acquire_id(id), "the leader's exchange");
    assert!(
        b.offer_capacity(&mut p, id).is_empty(),
        "nothing free on HTTP/1"
    );

    let releases = b.land(&p, &key("a.example"), leader, Landing::Connected);
    assert_eq!(
        releases,
        released(&followers, false),
        "with the leader's lessons"
    );
    assert!(followers.iter().all(|&f| b.is_waiting(f) == Some(false)));
    assert_eq!(b.flights(), 0);
    assert_eq!(b.len(), 3, "they race on, still watching");
}

#[test]
fn a_failed_landing_releases_the_followers() {
    let p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let follower = b.watch(key("a.example"), true, ()).race;
    b.unwatch(leader);
    let releases = b.land(&p, &key("a.example"), leader, Landing::Failed);
    assert_eq!(releases, released(&[follower], false));
    assert_eq!(
        b.watch(key("a.example"), true, ()).join,
        Some(Join::Lead),
        "a new flight"
    );
}

#[test]
fn an_h2_landing_leaves_the_followers_waiting_for_streams() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let followers: Vec<RaceId> = (0..3)
        .map(|_| b.watch(key("a.example"), true, ()).race)
        .collect();
    b.unwatch(leader);
    let id = h2(&mut p, "a.example", 2, 1);
    assert!(p.acquire_id(id));
    assert_eq!(races(&b.offer_capacity(&mut p, id)), followers[..1]);

    assert!(
        b.land(&p, &key("a.example"), leader, Landing::Connected)
            .is_empty()
    );
    assert_eq!(b.flights(), 0);
    assert_eq!(b.is_waiting(followers[1]), Some(true), "waits for a stream");
    let _ = p.release(id, T0);
    assert_eq!(races(&b.offer_capacity(&mut p, id)), followers[1..2]);
}

#[test]
fn a_dropped_leader_hands_the_connect_to_its_first_follower() {
    let p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let next = b.watch(key("a.example"), true, ()).race;
    let last = b.watch(key("a.example"), true, ()).race;
    b.unwatch(leader);

    let releases = b.land(&p, &key("a.example"), leader, Landing::Dropped);
    assert_eq!(
        releases,
        released(&[next], true),
        "it takes the connect over"
    );
    assert_eq!(b.leader(&key("a.example")), Some(next));
    assert_eq!(b.is_waiting(last), Some(true), "the others keep following");

    b.unwatch(next);
    let releases = b.land(&p, &key("a.example"), next, Landing::Failed);
    assert_eq!(releases, released(&[last], false));
}

#[test]
fn only_the_leader_lands_its_flight() {
    let p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let follower = b.watch(key("a.example"), true, ()).race;
    let loner = b.watch(key("a.example"), false, ()).race;
    for race in [follower, loner] {
        assert!(
            b.land(&p, &key("a.example"), race, Landing::Failed)
                .is_empty()
        );
    }
    assert_eq!(b.leader(&key("a.example")), Some(leader));
    assert_eq!(b.is_waiting(follower), Some(true));
    assert_eq!(
        b.is_waiting(loner),
        Some(false),
        "no single flight: it races at once"
    );
}

#[test]
fn an_offered_follower_is_never_handed_the_connect() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let offered = b.watch(key("a.example"), true, ()).race;
    let next = b.watch(key("a.example"), true, ()).race;
    // Two HTTP/1 connections of the key come free (other calls'): the leader, which watches
    // too, takes the first; the first follower the second.
    for race in [leader, offered] {
        let id = p.insert(key("a.example"), (), Protocol::Http11, 0, T0);
        assert_eq!(races(&b.offer_capacity(&mut p, id)), [race]);
    }

    b.unwatch(leader);
    let releases = b.land(&p, &key("a.example"), leader, Landing::Dropped);
    assert_eq!(releases, released(&[next], true));
}

#[test]
fn a_dropped_follower_is_not_released_nor_handed_the_connect() {
    let p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let dropped = b.watch(key("a.example"), true, ()).race;
    b.unwatch(dropped);
    assert_eq!(b.len(), 1);
    b.unwatch(leader);
    assert!(
        b.land(&p, &key("a.example"), leader, Landing::Dropped)
            .is_empty()
    );
    assert_eq!((b.len(), b.flights()), (0, 0), "nothing left registered");
}

#[test]
fn when_the_last_h2_connection_retires_the_first_waiter_leads_a_new_connect() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let waiters: Vec<RaceId> = (0..3)
        .map(|_| b.watch(key("a.example"), true, ()).race)
        .collect();
    b.unwatch(leader);
    let id = h2(&mut p, "a.example", 1, 1);
    assert!(p.acquire_id(id), "its one stream is the leader's");
    assert!(
        b.land(&p, &key("a.example"), leader, Landing::Connected)
            .is_empty()
    );

    // A GOAWAY: no stream will free up for the waiters.
    p.mark_no_new_exchanges(id);
    assert_eq!(
        b.retired(&p, id),
        Some(ReleaseTo {
            race: waiters[0],
            lead: true
        })
    );
    assert_eq!(b.leader(&key("a.example")), Some(waiters[0]));
    assert_eq!(
        b.is_waiting(waiters[1]),
        Some(true),
        "the others follow the new connect"
    );
    assert_eq!(b.retired(&p, id), None, "a connect is in flight now");
}

#[test]
fn retiring_a_connection_releases_nobody_while_another_h2_connection_serves_the_key() {
    let mut p = pool();
    let mut b = RaceBoard::default();
    let leader = b.watch(key("a.example"), true, ()).race;
    let waiter = b.watch(key("a.example"), true, ()).race;
    b.unwatch(leader);
    let old = h2(&mut p, "a.example", 1, 1);
    let new = h2(&mut p, "a.example", 1, 2);
    assert!(p.acquire_id(old) && p.acquire_id(new));
    assert!(
        b.land(&p, &key("a.example"), leader, Landing::Connected)
            .is_empty()
    );

    p.mark_no_new_exchanges(old);
    assert_eq!(b.retired(&p, old), None);
    assert_eq!(b.is_waiting(waiter), Some(true));
}
