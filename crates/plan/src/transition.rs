//! The refusal of a state transition that the state diagrams do not draw.
//!
//! The race's two state machines, [`crate::RacePhase`] and [`crate::AttemptState`], change
//! state only through small methods that name the move (`begin_tls`, `end`, `win`, ...) and
//! refuse it, leaving the state as it was, when the diagram has no such arrow from where the
//! state is. Inputs come from the network and from the driver, so a refused move is never a
//! panic: the caller drops the input that asked for it.

/// A move the state diagram does not draw from the current state: refused, the state was
/// left as it was.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct IllegalMove {
    /// The state the move was asked of.
    pub(crate) from: &'static str,
    /// The state the move would have led to.
    pub(crate) to: &'static str,
}
