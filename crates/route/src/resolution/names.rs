//! The name table: the origin and every alias or service target, with each name's query
//! states and admitted addresses.

use std::net::IpAddr;
use std::sync::Arc;

use fastfallback_proto::{QueryKind, QueryName};
use smallvec::SmallVec;

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum QueryState {
    NotSent,
    Pending,
    Answered {
        positive: bool,
    },
    /// The race stopped waiting for it (after a win's DNS tail, or a failure).
    Abandoned,
}

/// One family's admitted addresses: most answers hold one or two, kept inline.
pub(super) type Addrs = SmallVec<[IpAddr; 2]>;

/// The queries and answers for one name: the origin, an alias target or a service's target.
#[derive(Clone, Debug)]
pub(super) struct NameState {
    pub(super) name: QueryName,
    pub(super) state: [QueryState; 3],
    pub(super) aaaa: Option<Addrs>,
    pub(super) a: Option<Addrs>,
}

impl NameState {
    pub(super) fn new(name: QueryName) -> Self {
        Self {
            name,
            state: [QueryState::NotSent; 3],
            aaaa: None,
            a: None,
        }
    }
}

/// The name table: the origin (index 0), then every other name in the order it appeared. The
/// origin is kept inline and the others in a `Vec`, so a race that asks only about its origin
/// allocates nothing for the table and indexes it without a spill check.
#[derive(Clone, Debug)]
pub(super) struct Names {
    pub(super) origin: NameState,
    pub(super) targets: Vec<NameState>,
}

impl Names {
    pub(super) fn len(&self) -> usize {
        1 + self.targets.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &NameState> {
        std::iter::once(&self.origin).chain(&self.targets)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut NameState> {
        std::iter::once(&mut self.origin).chain(&mut self.targets)
    }

    pub(super) fn position(&self, name: &QueryName) -> Option<usize> {
        match name {
            QueryName::Origin => Some(0),
            _ => self
                .targets
                .iter()
                // RFC 4343 §2, RFC 1034 §3.1: case and a trailing dot do not tell names apart.
                .position(|s| s.name.same_name(name))
                .map(|i| i + 1),
        }
    }

    pub(super) fn push(&mut self, state: NameState) {
        self.targets.push(state);
    }
}

impl std::ops::Index<usize> for Names {
    type Output = NameState;
    fn index(&self, i: usize) -> &NameState {
        match i {
            0 => &self.origin,
            _ => &self.targets[i - 1],
        }
    }
}

impl std::ops::IndexMut<usize> for Names {
    fn index_mut(&mut self, i: usize) -> &mut NameState {
        match i {
            0 => &mut self.origin,
            _ => &mut self.targets[i - 1],
        }
    }
}

pub(super) fn idx(k: QueryKind) -> usize {
    match k {
        QueryKind::Https => 0,
        QueryKind::Aaaa => 1,
        QueryKind::A => 2,
    }
}

/// A TargetName as a query name: lower case, without the trailing dot, checked to be a host
/// name (the network may send anything).
pub(super) fn target_name(raw: &str) -> Result<Arc<String>, String> {
    match raw.parse::<crate::Host>() {
        Ok(crate::Host::Name(n)) => Ok(Arc::new(n)),
        Ok(crate::Host::Ip(_)) => Err(format!("TargetName {raw:?} is an address, not a name")),
        Err(e) => Err(format!("TargetName {raw:?} is not a host name: {e}")),
    }
}
