//! Why a race failed, as its report keeps it.

use std::fmt;

use fastfallback_proto::{RaceError, RaceErrorKind};
use serde::{Serialize, Serializer};

/// A failed race's error in its [`RaceReport`](super::RaceReport): the kind, to match on,
/// and the whole text (every attempt's cause; [`RaceError`]'s `Display`). In the JSON form it
/// is that text (`docs/report-json.md`).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ReportError {
    /// How the race failed.
    pub kind: RaceErrorKind,
    /// The error's text.
    pub message: String,
}

impl From<&RaceError> for ReportError {
    fn from(e: &RaceError) -> Self {
        Self {
            kind: e.kind,
            message: e.to_string(),
        }
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Serialize for ReportError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.message)
    }
}
