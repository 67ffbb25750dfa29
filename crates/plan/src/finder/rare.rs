//! The parts of a race that most races never touch, kept in one allocation made the first
//! time one of them is needed.
//!
//! A literal's race and most races to a name queue no plan and meet no ECH configuration or
//! QUIC endpoint. Kept inline, each empty part would still be built with the race and
//! dropped with it (an out-of-line drop call apiece); kept here, they cost one null pointer.

use std::sync::Arc;

use super::FastFallbackExchangeFinder;
use crate::{ConnectPlan, TlsStep};

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(super) struct Rare {
    /// Plans to run before the next endpoint (OkHttp's deferred plans), as a stack: the last
    /// runs first. A follow-up goes on top, a lost attempt's retry underneath.
    pub(super) deferred: Vec<ConnectPlan>,
    /// The race's TLS step with each ECH configuration its services carry, and for QUIC
    /// endpoints (`h3` alone): an endpoint's `tls_variant` `n` is the `n`-th.
    pub(super) tls_steps: Vec<Arc<TlsStep>>,
}

impl FastFallbackExchangeFinder {
    /// The rare parts, made now if they were not yet.
    pub(super) fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// The queued plans, last to run first.
    pub(super) fn deferred(&self) -> &[ConnectPlan] {
        self.rare.as_ref().map_or(&[], |r| &r.deferred)
    }

    /// Takes the plan to run next from the queue, if one waits.
    pub(super) fn pop_deferred(&mut self) -> Option<ConnectPlan> {
        self.rare.as_mut().and_then(|r| r.deferred.pop())
    }

    /// The TLS steps endpoints' variants name (see [`Rare::tls_steps`]).
    pub(super) fn tls_steps(&self) -> &[Arc<TlsStep>] {
        self.rare.as_ref().map_or(&[], |r| &r.tls_steps)
    }
}
