//! The pacing of starts (the module docs' launch rules): the Connection Attempt Delay after
//! each start (RFC 8305 §5, HEv3 §6), the serial start after the latest attempt ended, and the
//! hold on a second choice while a better answer may still come.

use std::net::SocketAddr;
use std::time::Duration;

use fastfallback_proto::{AttemptId, Family, Instant};

use super::FastFallbackExchangeFinder;
use crate::StartFloor;
use crate::policy::HARD_MIN_ATTEMPT_DELAY;

/// The pacing of starts: the latest start and the Connection Attempt Delay deadline after it
/// (kept after the list runs out, profile P7).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pacing {
    pub(super) last_start: Option<Instant>,
    pub(super) latest: Option<AttemptId>,
    pub(super) next_at: Option<Instant>,
}

impl FastFallbackExchangeFinder {
    pub(super) fn latest_ended(&self) -> bool {
        self.pacing
            .latest
            .and_then(|id| self.attempt(id))
            .is_some_and(|a| !a.in_flight())
    }

    /// When the next attempt may start: see the module's launch rules.
    pub(super) fn launch_gate(&self) -> Instant {
        let at = match self.pacing.last_start {
            None => self.started,
            Some(last) => {
                let floor = last + HARD_MIN_ATTEMPT_DELAY;
                if self.in_flight() == 0 || self.latest_ended() {
                    match self.policy.start_floor {
                        StartFloor::TimerDriven => last,
                        StartFloor::EveryStart => floor,
                    }
                } else {
                    self.pacing.next_at.map_or(floor, |t| t.max(floor))
                }
            }
        };
        self.second_choice_hold().map_or(at, |hold| at.max(hold))
    }

    /// How long the next candidate waits because route memory says it is a second choice.
    ///
    /// The move-on rule (HEv3 §4.2) starts the first attempt as soon as the preferred family's
    /// answer is in. When memory says that answer holds only second choices (routes that
    /// failed within the TTL, or a family whose path failed or is slower), an answer still
    /// pending may bring a better one: the candidate then waits for it, but never past the
    /// Resolution Delay after the first positive answer (RFC 8305 §3, the same bound the
    /// standard puts on waiting for AAAA). Without this, a second contact whose AAAA answer
    /// happens to arrive first would start the remembered-bad route anyway.
    fn second_choice_hold(&self) -> Option<Instant> {
        if !self.deferred().is_empty() || !self.resolution.pending() || !self.memory.is_enabled() {
            return None;
        }
        let first = self.resolution.first_positive_at()?;
        let next = self.endpoints.iter().find(|e| !e.tried)?;
        let now = self.last_now;
        let family = Family::of(next.logical);
        let m = &self.memory;
        let second_choice = m.is_postponed(next.target, now)
            || m.family_path_failed(family, now)
            || m.family_is_worse(family, self.policy.min_attempt_delay, now);
        second_choice.then(|| first + self.policy.resolution_delay)
    }

    /// The Connection Attempt Delay after starting an attempt to `target` (profile P2): from
    /// the route's RTT, else the family's recent RTT on this network, else the fixed default.
    pub(super) fn attempt_delay(&self, target: SocketAddr) -> Duration {
        let now = self.last_now;
        // A disabled view (a loopback literal's race) knows no RTT: not asked.
        let memory = Some(&self.memory).filter(|m| m.is_enabled());
        let srtt = memory.and_then(|m| {
            m.srtt(target, now)
                .or_else(|| m.family_srtt(Family::of(target.ip()), now))
        });
        self.policy.attempt_delay_for(srtt)
    }
}
