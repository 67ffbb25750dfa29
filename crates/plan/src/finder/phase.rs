//! The race's phase (the module's state diagram).

use fastfallback_proto::{AttemptId, Instant, Winner};

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
}
