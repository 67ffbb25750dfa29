//! The candidates a resolution yields: each service's addresses, then the origin's own, with
//! hints standing in for answers not yet in (HEv3 §7).

use std::net::IpAddr;
use std::sync::Arc;

use fastfallback_proto::Family;

use super::Resolution;
use super::names::NameState;

/// One address the race may connect to, with the service it belongs to.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Candidate<'a> {
    /// The logical address (see
    /// [`Connectivity::destinations`](super::Connectivity::destinations)).
    pub ip: IpAddr,
    /// The port the service names, if it names one (RFC 9460 §7.2).
    pub port: Option<u16>,
    /// The priority group: services in the order their records are tried (RFC 9460 §2.4.1,
    /// HEv3 §4.3), then the origin's own addresses on its own port. Lower goes first.
    pub group: u16,
    /// Whether this is the origin's own address on its own port, listed after every
    /// compatible service's endpoints so that the race connects without SVCB when they all
    /// fail (RFC 9460 §3: "the client now attempts to use non-SVCB connection modes"). False
    /// when no compatible HTTPS record came (then nothing is a fallback).
    pub without_svcb: bool,
    /// The service's ECH configuration, if it has one (draft-ietf-tls-svcb-ech §4).
    pub ech: Option<&'a Arc<[u8]>>,
    /// Whether it is reached over TCP ([`ServiceInfo::tcp`](super::ServiceInfo::tcp); always
    /// for the origin's own addresses).
    pub tcp: bool,
    /// Whether it is reached over QUIC ([`ServiceInfo::quic`](super::ServiceInfo::quic); for
    /// the origin's own addresses only at the ports of its Alt-Svc alternatives,
    /// [`Resolution::with_alternatives`]).
    pub quic: bool,
}

impl Resolution {
    /// The current address set, in DNS order and without repeats: see
    /// [`Self::for_each_candidate`].
    pub fn addresses(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        self.for_each_candidate(|c| {
            if !out.contains(&c.ip) {
                out.push(c.ip);
            }
        });
        out
    }

    /// Calls `f` with every candidate, group by group: each compatible service's addresses
    /// in record order, then the origin's own addresses on its own port (RFC 9460 §3: the
    /// connection without SVCB when every service's endpoints fail; none when the client is
    /// SVCB-reliant, [`Self::svcb_reliant`]). Per name
    /// and family, the real answer if one arrived, else the service's hints (HEv3 §7: real
    /// records replace hints); IPv6 first, then IPv4. A candidate may come twice (the caller
    /// de-duplicates, keeping the first).
    pub fn for_each_candidate<'a>(&'a self, mut f: impl FnMut(Candidate<'a>)) {
        // HEv3 §7: a real answer replaces its family's hints, an empty one too, unless that
        // would leave no address at all: then the hints stay (a race never fails with "no
        // addresses" while a usable hint remains).
        let any_hint = self.services.iter().any(|s| !s.hints.is_empty());
        let mut keep_hints = false;
        if any_hint {
            let mut none = true;
            self.visit(false, |_| none = false);
            keep_hints = none;
        }
        self.visit(keep_hints, &mut f);
    }

    fn visit<'a>(&'a self, keep_hints: bool, mut f: impl FnMut(Candidate<'a>)) {
        let mut group = 0u16;
        for s in &self.services {
            self.visit_name(&self.names[s.name], &s.hints, keep_hints, |ip| {
                f(Candidate {
                    ip,
                    port: s.info.port,
                    group,
                    ech: s.info.ech.as_ref(),
                    without_svcb: false,
                    tcp: s.info.tcp,
                    quic: s.info.quic,
                })
            });
            group = group.saturating_add(1);
        }
        // RFC 9460 §3 (S-07): the origin's own addresses on its own port come last, even when
        // a "." record listed them already (maybe on another port: the race tries an address
        // and port once, in its first group). Not when every service carries ECH: then the
        // client is SVCB-reliant and never connects without it (RFC 9848, "Disabling
        // fallback", E-01).
        if !self.svcb_reliant() {
            let without_svcb = !self.services.is_empty();
            // Alt-Svc's QUIC alternatives, ahead of TCP, when nothing in DNS contradicts
            // them (R-37: no compatible record, and none still to come).
            let alt_svc = self.quic && self.services.is_empty() && !self.https_pending();
            for &port in self.alternatives.iter().filter(|_| alt_svc) {
                self.visit_name(&self.names[0], &[], keep_hints, |ip| {
                    f(Candidate {
                        ip,
                        port: Some(port),
                        group,
                        ech: None,
                        without_svcb: false,
                        tcp: false,
                        quic: true,
                    })
                });
            }
            self.visit_name(&self.names[0], &[], keep_hints, |ip| {
                f(Candidate {
                    ip,
                    port: None,
                    group,
                    ech: None,
                    without_svcb,
                    tcp: true,
                    quic: false,
                })
            });
        }
    }

    fn visit_name(
        &self,
        ns: &NameState,
        hints: &[IpAddr],
        keep_hints: bool,
        mut f: impl FnMut(IpAddr),
    ) {
        for fam in Family::ALL {
            let real = if fam == Family::V6 { &ns.aaaa } else { &ns.a };
            let source: &[IpAddr] = match real.as_deref() {
                Some([]) if keep_hints => hints,
                Some(list) => list,
                None => hints,
            };
            source
                .iter()
                .copied()
                .filter(|ip| Family::of(*ip) == fam)
                .for_each(&mut f);
            // De-synthesized DNS64 answers (HEv3 §8.2) land in the AAAA list as IPv4.
            if fam == Family::V4
                && let Some(list) = &ns.aaaa
            {
                list.iter()
                    .copied()
                    .filter(|ip| ip.is_ipv4())
                    .for_each(&mut f);
            }
        }
    }
}
