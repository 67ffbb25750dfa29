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
        // Most ends are not the owner's: they ask nothing of `go`, and build no refusal.
        let owned = matches!(self, Self::TlsOwner(owner) if *owner == id);
        owned && self.go(true, Self::Racing).is_ok()
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

#[cfg(test)]
mod tests {
    use fastfallback_proto::{PooledId, Winner};

    use super::*;

    fn won() -> RacePhase {
        RacePhase::Won {
            winner: Winner::Attempt(AttemptId::FIRST),
            at: Instant::from_millis(40),
        }
    }

    fn second() -> AttemptId {
        AttemptId::FIRST.next().unwrap()
    }

    /// Asks `phase` for `step`, and checks that it was refused and changed nothing.
    fn refused(
        mut phase: RacePhase,
        step: impl FnOnce(&mut RacePhase) -> Result<(), IllegalMove>,
        to: &'static str,
    ) {
        let before = phase;
        let from = before.name();
        assert_eq!(step(&mut phase), Err(IllegalMove { from, to }));
        assert_eq!(phase, before, "a refused move changes nothing");
    }

    fn pooled_win(phase: &mut RacePhase) -> Result<(), IllegalMove> {
        phase.win(Winner::Pooled(PooledId(1)), Instant::from_millis(50))
    }

    #[test]
    fn a_race_that_has_ended_cannot_win() {
        refused(RacePhase::Failed, pooled_win, "Won");
        refused(RacePhase::Abandoned, pooled_win, "Won");
        refused(won(), pooled_win, "Won");
    }

    #[test]
    fn a_race_that_has_ended_cannot_fail_or_be_abandoned() {
        for ended in [RacePhase::Failed, RacePhase::Abandoned, won()] {
            refused(ended, RacePhase::fail, "Failed");
            refused(ended, RacePhase::abandon, "Abandoned");
        }
    }

    #[test]
    fn every_running_phase_can_win_fail_or_be_abandoned() {
        let running = [
            RacePhase::Waiting,
            RacePhase::Resolving,
            RacePhase::Racing,
            RacePhase::TlsOwner(AttemptId::FIRST),
        ];
        for phase in running {
            let (mut a, mut b, mut c) = (phase, phase, phase);
            assert_eq!(pooled_win(&mut a), Ok(()));
            assert!(matches!(a, RacePhase::Won { .. }));
            assert_eq!(b.fail(), Ok(()));
            assert_eq!(b, RacePhase::Failed);
            assert_eq!(c.abandon(), Ok(()));
            assert_eq!(c, RacePhase::Abandoned);
        }
    }

    #[test]
    fn only_a_won_race_starts_its_next_exchange() {
        refused(RacePhase::Racing, RacePhase::next_exchange, "Racing");
        refused(RacePhase::Failed, RacePhase::next_exchange, "Racing");
        refused(RacePhase::Abandoned, RacePhase::next_exchange, "Racing");
        let mut phase = won();
        assert_eq!(phase.next_exchange(), Ok(()));
        assert_eq!(phase, RacePhase::Racing);
    }

    #[test]
    fn only_a_waiting_race_is_released() {
        refused(RacePhase::Resolving, |p| p.release(true), "Racing");
        refused(RacePhase::Racing, |p| p.release(false), "Resolving");
        refused(RacePhase::Abandoned, |p| p.release(true), "Racing");
        let (mut ready, mut not_yet) = (RacePhase::Waiting, RacePhase::Waiting);
        assert_eq!(ready.release(true), Ok(()));
        assert_eq!(ready, RacePhase::Racing);
        assert_eq!(not_yet.release(false), Ok(()));
        assert_eq!(not_yet, RacePhase::Resolving);
    }

    #[test]
    fn only_a_resolving_race_moves_on() {
        refused(RacePhase::Waiting, RacePhase::move_on, "Racing");
        refused(RacePhase::Racing, RacePhase::move_on, "Racing");
        refused(won(), RacePhase::move_on, "Racing");
        let mut phase = RacePhase::Resolving;
        assert_eq!(phase.move_on(), Ok(()));
        assert_eq!(phase, RacePhase::Racing);
    }

    #[test]
    fn a_race_whose_tls_has_an_owner_gives_it_to_no_other_attempt() {
        let owned = RacePhase::TlsOwner(AttemptId::FIRST);
        refused(owned, |p| p.own_tls(second()), "TlsOwner");
        refused(RacePhase::Resolving, |p| p.own_tls(second()), "TlsOwner");
        refused(RacePhase::Failed, |p| p.own_tls(second()), "TlsOwner");
        let mut phase = RacePhase::Racing;
        assert_eq!(phase.own_tls(second()), Ok(()));
        assert_eq!(phase, RacePhase::TlsOwner(second()));
    }

    #[test]
    fn only_the_tls_owners_end_returns_the_race_to_racing() {
        let mut phase = RacePhase::TlsOwner(AttemptId::FIRST);
        assert!(!phase.owner_ended(second()));
        assert_eq!(phase, RacePhase::TlsOwner(AttemptId::FIRST));
        assert!(phase.owner_ended(AttemptId::FIRST));
        assert_eq!(phase, RacePhase::Racing);
        assert!(!phase.owner_ended(AttemptId::FIRST));
        assert_eq!(phase, RacePhase::Racing);
        let mut ended = won();
        assert!(!ended.owner_ended(AttemptId::FIRST));
        assert_eq!(ended, won());
    }
}
