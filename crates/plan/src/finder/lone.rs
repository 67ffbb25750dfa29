//! The lone opening: a race whose only move before its first timer is to start one attempt,
//! which a driver may make without building the race (see
//! [`FastFallbackExchangeFinder::lone_opening`]).

use std::net::SocketAddr;
use std::sync::Arc;

use fastfallback_proto::{AttemptId, Family, Instant, Output};
use fastfallback_route::{Address, Host, Resolution, Route};

use super::{FastFallbackExchangeFinder, RaceInput};
use crate::{ConnectPlan, FallbackPolicy};

/// The opening move of a race that has only one move to make before its first timer: start
/// one attempt, at its start ([`FastFallbackExchangeFinder::lone_opening`]).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LoneOpening {
    /// The attempt's id: the one the race gives its first attempt.
    pub id: AttemptId,
    /// Where and how it connects: plain TCP to the literal, directly.
    pub plan: ConnectPlan,
}

impl FastFallbackExchangeFinder {
    /// The opening of a race to `address` that has one move to make until its first timer,
    /// if it is such a race: it starts one attempt at its start (the [`LoneOpening`]'s), and
    /// then waits for nothing but that attempt and its own timers. When the attempt connects,
    /// the race has won, in that instant, and has learned nothing.
    ///
    /// That is a race to an IP literal [`Resolution::takes_literal_as_is`] on this
    /// connectivity, of a family the policy allows, without a zone, a proxy or TLS, with no
    /// route memory (a loopback literal's race keeps none), on a host without a NAT64 prefix,
    /// not waiting for another call's connect, and with timeouts that leave the attempt time
    /// to run. Every other race gives `None`.
    ///
    /// A driver may make such an opening itself and build the race only when something else
    /// happens (the attempt fails, or the race waits long enough to need its timers) or when
    /// someone asks what happened: [`Self::after_lone_opening`] builds it exactly as
    /// [`Self::boxed`] and a first [`Self::poll_output`] would have left it. A connect to a
    /// loopback literal that succeeds at once then never builds the race at all. A test
    /// checks the promise against the race itself, over random inputs.
    pub fn lone_opening(
        address: &Address,
        policy: &FallbackPolicy,
        input: &RaceInput,
    ) -> Option<LoneOpening> {
        let (Host::Ip(ip), port) = address.connect_host() else {
            return None;
        };
        let simple = !input.waiting
            && !input.memory.is_enabled()
            && input.connectivity.nat64.is_none()
            && address.zone().is_none()
            && address.proxy().is_none()
            && !address.is_tls()
            && !policy.connect_timeout.is_zero()
            && !policy.attempt_timeout.is_zero();
        if !simple {
            return None;
        }
        let ip = *ip;
        // The connectivity as the race sees it ([`Self::boxed`]).
        let mut conn = input.connectivity;
        conn.v6 &= policy.family.allows(Family::V6);
        conn.v4 &= policy.family.allows(Family::V4);
        let as_is = policy.family.allows(Family::of(ip))
            && Resolution::takes_literal_as_is(ip, conn)
            && conn.connect_ip(ip) == ip;
        as_is.then(|| LoneOpening {
            id: AttemptId::FIRST,
            plan: ConnectPlan::new(Route::direct(SocketAddr::new(ip, port)), None),
        })
    }

    /// The race of a [`Self::lone_opening`] made at `now`, as it stands right after it: built
    /// with [`Self::boxed`], and its first output (that opening, which the driver has acted
    /// on already) taken. `input` is the one `lone_opening` was given.
    pub fn after_lone_opening(
        address: Address,
        policy: Arc<FallbackPolicy>,
        input: RaceInput,
        now: Instant,
    ) -> Box<Self> {
        let mut race = Self::boxed(address, policy, input, now);
        let opening = race.poll_output(now);
        debug_assert!(
            matches!(opening, Some(Output::StartAttempt { id, .. }) if id == AttemptId::FIRST),
            "not a lone opening: {opening:?}"
        );
        race
    }
}
