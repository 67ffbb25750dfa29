//! What a race takes in besides the origin and the policy.

use fastfallback_route::{Connectivity, MemoryView};

/// What a race takes in besides the origin and the policy: all of it plain data.
#[derive(Clone, Debug)]
pub struct RaceInput {
    /// Which families the host can use, and its NAT64 prefix.
    pub connectivity: Connectivity,
    /// What route memory knows about this origin on this network
    /// ([`fastfallback_route::RouteDatabase::view`]).
    pub memory: MemoryView,
    /// Seeds every random choice of the race (today: whether it ignores history, see
    /// [`fastfallback_route::RouteMemory::explore_one_in`]).
    pub seed: u64,
    /// Whether the race starts [`RacePhase::Waiting`] (it follows another call's connect).
    ///
    /// [`RacePhase::Waiting`]: super::RacePhase::Waiting
    pub waiting: bool,
    /// The ports of the origin's HTTP/3 alternatives on its own host, from Alt-Svc
    /// ([`fastfallback_route::RouteDatabase::alternatives`]): QUIC endpoints for a QUIC
    /// client when no HTTPS record speaks for the origin
    /// ([`fastfallback_route::Resolution::with_alternatives`], R-37).
    pub alternatives: Vec<u16>,
}

impl RaceInput {
    /// Input for a host with `connectivity`, no route memory, seed 0.
    pub fn new(connectivity: Connectivity) -> Self {
        Self {
            connectivity,
            memory: MemoryView::disabled(),
            seed: 0,
            waiting: false,
            alternatives: Vec::new(),
        }
    }

    /// Starting [`RacePhase::Waiting`], for a call that follows another's connect.
    ///
    /// [`RacePhase::Waiting`]: super::RacePhase::Waiting
    #[must_use]
    pub fn waiting(mut self, waiting: bool) -> Self {
        self.waiting = waiting;
        self
    }

    /// With route memory.
    #[must_use]
    pub fn memory(mut self, memory: MemoryView) -> Self {
        self.memory = memory;
        self
    }

    /// With a seed.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// With the origin's Alt-Svc HTTP/3 alternatives ([`Self::alternatives`]).
    #[must_use]
    pub fn alternatives(mut self, ports: Vec<u16>) -> Self {
        self.alternatives = ports;
        self
    }
}
