//! A fake resolver for tests: a table of answers per (name, record type), answered at once,
//! that counts the queries it is asked.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use fastfallback_net::{Answer, Resolve};
use fastfallback_proto::{DnsAnswer, DnsError, QueryKind};

/// [`Resolve`] from a table of `(name, QueryKind) -> DnsAnswer`, answering at once, and
/// counting every query it is asked.
///
/// Names are compared without case and without a trailing dot. A query the table does not
/// hold gets NXDOMAIN, or the answer set with [`Self::otherwise`]. Clones share one count of
/// queries, so a test can hand a clone to a connector and read the count off its own.
///
/// ```
/// use fastfallback_net::Resolve;
/// use fastfallback_proto::{DnsAnswer, DnsError, QueryKind};
/// use fastfallback_testkit::resolver::FakeDns;
///
/// let dns = FakeDns::new()
///     .addresses("origin.test", QueryKind::A, ["127.0.0.1".parse().unwrap()])
///     .answer("origin.test", QueryKind::Aaaa, DnsAnswer::Addresses(Vec::new()));
/// // A connector would get a clone: `Connector::builder().resolver(dns.clone())`.
/// let asked = dns.clone();
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let a = rt.block_on(asked.query("ORIGIN.test.", QueryKind::A));
/// assert_eq!(a, DnsAnswer::Addresses(vec!["127.0.0.1".parse().unwrap()]));
/// let https = rt.block_on(asked.query("origin.test", QueryKind::Https));
/// assert_eq!(https, DnsAnswer::Error(DnsError::NxDomain));
/// assert_eq!(dns.asked(), 2);
/// assert_eq!(dns.asked_for("origin.test", QueryKind::A), 1);
/// ```
#[derive(Clone, Debug)]
pub struct FakeDns {
    answers: Arc<HashMap<(String, QueryKind), DnsAnswer>>,
    otherwise: DnsAnswer,
    asked: Arc<Mutex<HashMap<(String, QueryKind), usize>>>,
}

impl Default for FakeDns {
    fn default() -> Self {
        Self {
            answers: Arc::default(),
            otherwise: DnsAnswer::Error(DnsError::NxDomain),
            asked: Arc::default(),
        }
    }
}

/// `name` as the table keys it: lower case, without its trailing dot.
fn key(name: &str, kind: QueryKind) -> (String, QueryKind) {
    (name.trim_end_matches('.').to_ascii_lowercase(), kind)
}

impl FakeDns {
    /// An empty table: every query gets NXDOMAIN.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `kind` queries for `name` with `answer` (replacing an earlier one).
    #[must_use]
    pub fn answer(mut self, name: &str, kind: QueryKind, answer: DnsAnswer) -> Self {
        Arc::make_mut(&mut self.answers).insert(key(name, kind), answer);
        self
    }

    /// Answers `kind` queries for `name` with the addresses `addrs` (none for NODATA).
    #[must_use]
    pub fn addresses(
        self,
        name: &str,
        kind: QueryKind,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Self {
        self.answer(
            name,
            kind,
            DnsAnswer::Addresses(addrs.into_iter().collect()),
        )
    }

    /// Answers every query the table does not hold with `answer` instead of NXDOMAIN.
    #[must_use]
    pub fn otherwise(mut self, answer: DnsAnswer) -> Self {
        self.otherwise = answer;
        self
    }

    /// How many queries this resolver (and its clones) has been asked, of every name and kind.
    pub fn asked(&self) -> usize {
        self.asked.lock().unwrap().values().sum()
    }

    /// How many `kind` queries for `name` this resolver (and its clones) has been asked.
    pub fn asked_for(&self, name: &str, kind: QueryKind) -> usize {
        let asked = self.asked.lock().unwrap();
        asked.get(&key(name, kind)).copied().unwrap_or(0)
    }
}

impl<'a> FromIterator<(&'a str, QueryKind, DnsAnswer)> for FakeDns {
    /// A table of the given answers.
    fn from_iter<I: IntoIterator<Item = (&'a str, QueryKind, DnsAnswer)>>(iter: I) -> Self {
        iter.into_iter()
            .fold(Self::new(), |dns, (name, kind, answer)| {
                dns.answer(name, kind, answer)
            })
    }
}

impl Resolve for FakeDns {
    fn query(&self, name: &str, kind: QueryKind) -> Answer {
        let key = key(name, kind);
        let answer = self.answers.get(&key).unwrap_or(&self.otherwise).clone();
        *self.asked.lock().unwrap().entry(key).or_insert(0) += 1;
        Box::pin(std::future::ready(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on(answer: Answer) -> DnsAnswer {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(answer)
    }

    #[test]
    fn names_match_without_case_or_trailing_dot_and_clones_share_the_count() {
        let dns =
            FakeDns::new().addresses("Origin.test.", QueryKind::A, [IpAddr::from([127, 0, 0, 1])]);
        let clone = dns.clone();
        assert_eq!(
            block_on(clone.query("origin.TEST", QueryKind::A)),
            DnsAnswer::Addresses(vec![IpAddr::from([127, 0, 0, 1])])
        );
        assert_eq!(
            block_on(clone.query("origin.test", QueryKind::Aaaa)),
            DnsAnswer::Error(DnsError::NxDomain)
        );
        assert_eq!(dns.asked(), 2);
        assert_eq!(dns.asked_for("origin.test.", QueryKind::A), 1);
        assert_eq!(dns.asked_for("origin.test", QueryKind::Https), 0);
    }

    #[test]
    fn otherwise_replaces_nxdomain_for_what_the_table_lacks() {
        let dns = FakeDns::new().otherwise(DnsAnswer::Addresses(Vec::new()));
        assert_eq!(
            block_on(dns.query("any.test", QueryKind::Aaaa)),
            DnsAnswer::Addresses(Vec::new())
        );
    }
}
