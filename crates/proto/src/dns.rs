//! DNS queries and answers, as the race sees them.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crate::Alpn;

/// The DNS queries a race sends for a name (HEv3 §4.1: HTTPS, then AAAA, then A).
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub enum QueryKind {
    /// The HTTPS resource record (RFC 9460).
    Https,
    /// IPv6 addresses.
    Aaaa,
    /// IPv4 addresses.
    A,
}

impl QueryKind {
    /// All kinds, in the order HEv3 §4.1 sends them.
    pub const ALL: [Self; 3] = [Self::Https, Self::Aaaa, Self::A];
}

impl fmt::Display for QueryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Https => "HTTPS",
            Self::Aaaa => "AAAA",
            Self::A => "A",
        })
    }
}

/// The name a query asks about.
#[derive(Clone, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub enum QueryName {
    /// The origin's own host name, as the caller gave it.
    Origin,
    /// Another name the HTTPS records led to: an AliasMode TargetName (RFC 9460 §2.4.2) or a
    /// ServiceMode TargetName whose addresses the race needs (RFC 9460 §3, HEv3 §4.1). Stored
    /// without the trailing dot, in lower case. (An `Arc<String>`, a thin pointer, so a
    /// query is 16 bytes: races log every query they send.)
    Target(Arc<String>),
}

impl QueryName {
    /// Whether two query names name the same DNS name: compared without regard to ASCII case
    /// (RFC 4343 §2), a trailing dot ignored (RFC 1034 §3.1). [`Query::target`] writes names
    /// so that `==` agrees; this also holds for a [`QueryName::Target`] built by hand.
    pub fn same_name(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Origin, Self::Origin) => true,
            (Self::Target(a), Self::Target(b)) => {
                let bare = |n: &'_ str| -> usize {
                    if n.len() > 1 && n.ends_with('.') {
                        n.len() - 1
                    } else {
                        n.len()
                    }
                };
                a[..bare(a)].eq_ignore_ascii_case(&b[..bare(b)])
            }
            _ => false,
        }
    }

    /// The name to put in the query: `origin` for [`QueryName::Origin`].
    pub fn resolve<'a>(&'a self, origin: &'a str) -> &'a str {
        match self {
            Self::Origin => origin,
            Self::Target(n) => n,
        }
    }
}

/// One DNS query of a race: which record type, for which name.
#[derive(Clone, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct Query {
    /// The record type.
    pub kind: QueryKind,
    /// The name asked about.
    pub name: QueryName,
}

impl Query {
    /// A query for the origin's own name.
    pub const fn origin(kind: QueryKind) -> Self {
        Self {
            kind,
            name: QueryName::Origin,
        }
    }

    /// A query for another name (see [`QueryName::Target`]), written the way the race writes
    /// it: in lower case, without a trailing dot. DNS compares names without regard to ASCII
    /// case (RFC 4343 §2), and a trailing dot only marks a name as absolute (RFC 1034 §3.1),
    /// so `Query::target(kind, "SVC.Example.")` is the query the race sent for `svc.example`.
    ///
    /// ```
    /// use fastfallback_proto::{Query, QueryKind};
    /// let q = Query::target(QueryKind::Aaaa, "SVC.Example.");
    /// assert_eq!(q, Query::target(QueryKind::Aaaa, "svc.example"));
    /// assert_eq!(q.to_string(), "AAAA svc.example");
    /// ```
    pub fn target(kind: QueryKind, name: impl Into<String>) -> Self {
        let mut name = name.into();
        if name.len() > 1 && name.ends_with('.') {
            name.pop();
        }
        name.make_ascii_lowercase();
        Self {
            kind,
            name: QueryName::Target(Arc::new(name)),
        }
    }

    /// Whether it asks about the origin's own name.
    pub fn is_origin(&self) -> bool {
        self.name == QueryName::Origin
    }
}

impl From<QueryKind> for Query {
    fn from(kind: QueryKind) -> Self {
        Self::origin(kind)
    }
}

impl PartialEq<QueryKind> for Query {
    fn eq(&self, kind: &QueryKind) -> bool {
        self.is_origin() && self.kind == *kind
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            QueryName::Origin => write!(f, "{}", self.kind),
            QueryName::Target(n) => write!(f, "{} {n}", self.kind),
        }
    }
}

/// One answer to one query, handed to the race by the driver.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum DnsAnswer {
    /// Addresses from an A or AAAA query. An empty list is NODATA (a negative answer,
    /// HEv3 §4.2).
    Addresses(Vec<IpAddr>),
    /// The records of an HTTPS query. An empty list is NODATA.
    Https(Vec<HttpsRecord>),
    /// The query failed. Every error counts as a negative answer (HEv3 §4.2; the reference
    /// profile also counts SERVFAIL and timeouts).
    Error(DnsError),
}

impl DnsAnswer {
    /// Whether this answer carries at least one address (HEv3 §4.2 "positive").
    pub fn is_positive(&self) -> bool {
        match self {
            Self::Addresses(a) => !a.is_empty(),
            Self::Https(r) => r
                .iter()
                .any(|r| !r.ipv4hint.is_empty() || !r.ipv6hint.is_empty()),
            Self::Error(_) => false,
        }
    }
}

/// Why a DNS query failed.
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum DnsError {
    /// The name does not exist (NXDOMAIN).
    NxDomain,
    /// The server failed (SERVFAIL).
    ServFail,
    /// No answer in time.
    TimedOut,
    /// Anything else, described.
    Other(String),
}

impl fmt::Display for DnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NxDomain => f.write_str("name does not exist (NXDOMAIN)"),
            Self::ServFail => f.write_str("server failure (SERVFAIL)"),
            Self::TimedOut => f.write_str("query timed out"),
            Self::Other(s) => write!(f, "{s}"),
        }
    }
}

/// One ServiceMode or AliasMode record of an HTTPS RRset (RFC 9460 §2), reduced to the
/// parameters a TCP client uses.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct HttpsRecord {
    /// SvcPriority. 0 is AliasMode (RFC 9460 §2.4.1).
    pub priority: u16,
    /// TargetName. `"."` (or empty) means the owner name in ServiceMode (RFC 9460 §2.5).
    pub target: String,
    /// The `alpn` SvcParam.
    pub alpn: Vec<Alpn>,
    /// The `no-default-alpn` SvcParam.
    pub no_default_alpn: bool,
    /// The `port` SvcParam.
    pub port: Option<u16>,
    /// The `ipv4hint` SvcParam.
    pub ipv4hint: Vec<Ipv4Addr>,
    /// The `ipv6hint` SvcParam.
    pub ipv6hint: Vec<Ipv6Addr>,
    /// The `ech` SvcParam: an ECHConfigList in wire form (draft-ietf-tls-svcb-ech §3), shared
    /// with every attempt that uses it.
    pub ech: Option<Arc<[u8]>>,
    /// Whether the `mandatory` SvcParam names a key this client does not understand, which makes
    /// the record incompatible (RFC 9460 §8).
    pub unknown_mandatory: bool,
    /// Why the record is malformed as received, if it is (a key `mandatory` names is missing,
    /// `mandatory` names itself, RFC 9460 §8; `no-default-alpn` without `alpn`, §7.1.1). A
    /// malformed record is skipped, with this reason.
    pub malformed: Option<String>,
}

impl HttpsRecord {
    /// Whether the TargetName is the owner name (`"."`, RFC 9460 §2.5).
    pub fn targets_owner(&self) -> bool {
        self.target.is_empty() || self.target == "."
    }

    /// Whether this is an AliasMode record (priority 0).
    pub fn is_alias(&self) -> bool {
        self.priority == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_are_compared_without_case_or_a_trailing_dot() {
        let written = |n: &str| QueryName::Target(Arc::new(n.to_owned()));
        let svc = written("svc.example");
        assert!(svc.same_name(&written("SVC.Example.")));
        assert!(svc.same_name(&written("svc.example.")));
        assert!(!svc.same_name(&written("svc.example..")));
        assert!(!svc.same_name(&written("svc.exampl")));
        assert!(!svc.same_name(&QueryName::Origin));
        assert!(QueryName::Origin.same_name(&QueryName::Origin));
        // The root keeps its dot.
        assert_eq!(Query::target(QueryKind::A, ".").name, written("."));
    }
}
