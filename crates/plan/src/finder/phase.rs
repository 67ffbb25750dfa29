//! The race's phase (the module's state diagram).
//!
//! The race moves from phase to phase only through the methods below, one for each arrow of
//! the diagram: each refuses ([`IllegalMove`]) a move the diagram does not draw from the
//! current phase, and leaves the phase as it was.

use fastfallback_proto::{AttemptId, Instant, Winner};

use crate::transition::IllegalMove;

/// Where the race is (see the module's state diagram).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum RacePhase {
    /// Waiting for another call's connect to the same origin before doing anything (single
    /// flight): a pooled connection may end the race ([`FastFallbackExchangeFinder::handle_pooled`]),
    /// or [`FastFallbackExchangeFinder::handle_release`] lets it go on. The connect deadline runs.
    ///
    /// [`FastFallbackExchangeFinder::handle_pooled`]: super::FastFallbackExchangeFinder::handle_pooled
    /// [`FastFallbackExchangeFinder::handle_release`]: super::FastFallbackExchangeFinder::handle_release
    Waiting,
    /// Waiting for DNS to allow the first attempt (HEv3 §4.2).
    Resolving,
    /// Attempts may start.
    Racing,
    /// One attempt won at TCP and does TLS alone; nothing else starts ([`WinAt::Tcp`]).
    ///
    /// [`WinAt::Tcp`]: crate::WinAt::Tcp
    TlsOwner(AttemptId),
    /// Won. Queries still pending are kept for the DNS tail.
    Won {
        /// What won.
        winner: Winner,
        /// When.
        at: Instant,
    },
    /// Lost: every cause went out in [`Output::Failed`].
    ///
    /// [`Output::Failed`]: fastfallback_proto::Output::Failed
    Failed,
    /// The caller gave up.
    Abandoned,
}

impl RacePhase {
    /// Whether the race still runs: it has neither won, failed nor been abandoned.
    pub(super) fn is_running(self) -> bool {
        matches!(
            self,
            Self::Waiting | Self::Resolving | Self::Racing | Self::TlsOwner(_)
        )
    }

    /// The phase's name, as the diagram writes it.
    fn name(self) -> &'static str {
        match self {
            Self::Waiting => "Waiting",
            Self::Resolving => "Resolving",
            Self::Racing => "Racing",
            Self::TlsOwner(_) => "TlsOwner",
            Self::Won { .. } => "Won",
            Self::Failed => "Failed",
            Self::Abandoned => "Abandoned",
        }
    }

    /// Moves to `to` if `allowed`, else refuses and stays.
    fn go(&mut self, allowed: bool, to: Self) -> Result<(), IllegalMove> {
        if !allowed {
            return Err(IllegalMove {
                from: self.name(),
                to: to.name(),
            });
        }
        *self = to;
        Ok(())
    }

    /// The connect a waiting race followed ended without a connection to share:
    /// `Waiting → Racing` if DNS already allows the first attempt (`moved_on`), else
    /// `Waiting → Resolving`.
    pub(super) fn release(&mut self, moved_on: bool) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Waiting);
        let to = if moved_on {
            Self::Racing
        } else {
            Self::Resolving
        };
        self.go(allowed, to)
    }

    /// The move-on rule (HEv3 §4.2) is met: `Resolving → Racing`.
    pub(super) fn move_on(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Resolving);
        self.go(allowed, Self::Racing)
    }

    /// Attempt `owner` won at TCP and does TLS alone ([`crate::WinAt::Tcp`]):
    /// `Racing → TlsOwner(owner)`.
    pub(super) fn own_tls(&mut self, owner: AttemptId) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Racing);
        self.go(allowed, Self::TlsOwner(owner))
    }

    /// Attempt `id` ended. If it owned TLS, the race goes on racing: `TlsOwner(id) → Racing`,
    /// and `true`. Any other phase, or another attempt's end, leaves the phase as it is and
    /// gives `false`: attempts end in every phase, and only the owner's end moves it.
    pub(super) fn owner_ended(&mut self, id: AttemptId) -> bool {
        let owned = matches!(self, Self::TlsOwner(owner) if *owner == id);
        self.go(owned, Self::Racing).is_ok()
    }

    /// The race won with `winner` at `at`, from any running phase: `→ Won`.
    pub(super) fn win(&mut self, winner: Winner, at: Instant) -> Result<(), IllegalMove> {
        let allowed = self.is_running();
        self.go(allowed, Self::Won { winner, at })
    }

    /// The race lost, from any running phase: `→ Failed`.
    pub(super) fn fail(&mut self) -> Result<(), IllegalMove> {
        let allowed = self.is_running();
        self.go(allowed, Self::Failed)
    }

    /// The caller gave up, in any running phase: `→ Abandoned`.
    pub(super) fn abandon(&mut self) -> Result<(), IllegalMove> {
        let allowed = self.is_running();
        self.go(allowed, Self::Abandoned)
    }

    /// The next exchange on the same finder, after a win: `Won → Racing`.
    pub(super) fn next_exchange(&mut self) -> Result<(), IllegalMove> {
        let allowed = matches!(self, Self::Won { .. });
        self.go(allowed, Self::Racing)
    }
}
