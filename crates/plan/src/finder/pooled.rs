//! Connections that come from elsewhere: a pooled connection offered mid-race, and the end of
//! the connect a [`RacePhase::Waiting`] race follows (single flight).
//!
//! [`RacePhase::Waiting`]: super::RacePhase::Waiting

use fastfallback_proto::{Instant, PooledId, Winner};
use fastfallback_route::Lesson;

use super::FastFallbackExchangeFinder;

impl FastFallbackExchangeFinder {
    /// Offers a pooled connection that became usable mid-race (for example another call's new
    /// HTTP/2 connection). It wins at once and every attempt in flight is cancelled. Returns
    /// whether it was taken: `false` once the race has ended.
    pub fn handle_pooled(&mut self, pooled: PooledId, now: Instant) -> bool {
        let now = self.clock(now);
        if !self.phase.is_running() {
            return false;
        }
        self.needs_decision = true;
        self.win(Winner::Pooled(pooled), None, now);
        self.rearm();
        true
    }

    /// Lets a [`RacePhase::Waiting`] race go on: the connect it followed ended without a
    /// connection it can share. `news` is what that connect taught route memory (for example
    /// the route that just won on HTTP/1), applied to this race's view first, so it orders its
    /// attempts with it (news from a concurrent race comes in as an explicit input). Does
    /// nothing in any other phase.
    ///
    /// [`RacePhase::Waiting`]: super::RacePhase::Waiting
    pub fn handle_release(&mut self, news: &[Lesson], now: Instant) {
        let now = self.clock(now);
        if self.phase.release(self.resolution.moved_on()).is_err() {
            return;
        }
        for lesson in news {
            self.memory.learn(lesson);
        }
        self.needs_decision = true;
        self.order_dirty = true;
        self.try_move_on(now);
        self.rearm();
    }
}
