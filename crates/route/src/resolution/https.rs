//! HTTPS (SVCB) records: following AliasMode chains, choosing and ordering compatible
//! ServiceMode records, and the transports each service is reached over (RFC 9460).

use std::net::IpAddr;
use std::sync::Arc;

use fastfallback_proto::{Alpn, HttpsRecord, Query, QueryKind, QueryName};
use smallvec::SmallVec;

use super::names::{NameState, QueryState, idx, target_name};
use super::{MAX_ALIAS_CHAIN, MAX_TARGET_NAMES, Resolution};

/// What a compatible HTTPS record tells a TCP client (RFC 9460 §7).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ServiceInfo {
    /// The name whose A and AAAA answers are the service's addresses: the record's TargetName,
    /// or its owner for `"."` (RFC 9460 §2.5).
    pub name: QueryName,
    /// The `port` SvcParam (RFC 9460 §7.2).
    pub port: Option<u16>,
    /// Its ALPN set, defaults included (RFC 9460 §7.1.2).
    pub alpn: Vec<Alpn>,
    /// Its ECH configuration, when the record has one and the client uses ECH.
    pub ech: Option<Arc<[u8]>>,
    /// Whether the client reaches it over TCP: its ALPN set holds a protocol the client
    /// speaks over TCP (RFC 9460 §7.1.2, HEv3 §6.2).
    pub tcp: bool,
    /// Whether the client reaches it over QUIC too: the client speaks QUIC, the ALPN set
    /// holds `h3`, and the service has no ECH configuration (ECH over QUIC is not built, and
    /// a service with ECH is never reached without it).
    pub quic: bool,
}

/// A compatible ServiceMode record, as the race uses it.
#[derive(Clone, Debug)]
pub(super) struct Service {
    pub(super) info: ServiceInfo,
    /// Index of `info.name` in `Resolution::names`.
    pub(super) name: usize,
    /// Its admitted address hints, IPv6 first.
    pub(super) hints: Vec<IpAddr>,
}

impl Resolution {
    /// The index of `name` in the name table, adding it (and queueing its queries: HTTPS if
    /// `https`, and the address queries the host's connectivity calls for) if it is new.
    /// `None` when [`MAX_TARGET_NAMES`] names are known already.
    fn name_index(&mut self, name: Arc<String>, https: bool) -> Option<usize> {
        if self.origin.as_deref() == Some(name.as_str()) {
            return Some(0);
        }
        let name = QueryName::Target(name);
        if let Some(i) = self.names.position(&name) {
            return Some(i);
        }
        if self.names.len() > MAX_TARGET_NAMES {
            return None;
        }
        let mut state = NameState::new(name.clone());
        let kinds = self.conn.queries(https);
        for kind in kinds {
            state.state[idx(kind)] = QueryState::Pending;
            self.unsent.push(Query {
                kind,
                name: name.clone(),
            });
        }
        self.names.push(state);
        Some(self.names.len() - 1)
    }

    /// Whether `name` is the origin or a name already on the alias chain (whose HTTPS
    /// records were asked for): following it again would loop.
    fn on_chain(&self, name: &Arc<String>) -> bool {
        self.origin.as_deref() == Some(name.as_str())
            || self.names.iter().any(|s| {
                s.state[0] != QueryState::NotSent
                    && matches!(&s.name, QueryName::Target(t) if t == name)
            })
    }

    /// Takes the HTTPS RRset of name `n` (empty for NODATA or a failure). Returns whether it
    /// brought a usable address hint.
    pub(super) fn take_https(&mut self, n: usize, records: &[HttpsRecord]) -> bool {
        if n != usize::from(self.chain_end) {
            // An answer for an earlier link of an alias chain: the chain has moved on.
            return false;
        }
        self.services.clear();
        let aliases: SmallVec<[&HttpsRecord; 1]> =
            records.iter().filter(|r| r.is_alias()).collect();
        if !aliases.is_empty() {
            // RFC 9460 §2.4.2: ServiceMode records beside an alias are ignored, and one of
            // several aliases is picked at random.
            self.seed = crate::splitmix64(self.seed);
            let alias = aliases[(self.seed % aliases.len() as u64) as usize];
            let what = format!("HTTPS AliasMode record {:?}", alias.target);
            let target = if alias.targets_owner() {
                // RFC 9460 §2.5.1: an alias to "." says the service does not exist.
                Err("AliasMode to \".\": the service is unavailable".to_owned())
            } else {
                target_name(&alias.target)
            };
            match target {
                Err(why) => self.skip(what, why),
                Ok(_) if usize::from(self.alias_links) == MAX_ALIAS_CHAIN => self.skip(
                    what,
                    format!("alias chain longer than {MAX_ALIAS_CHAIN} links"),
                ),
                Ok(name) if self.on_chain(&name) => {
                    self.skip(what, "alias loop (RFC 9460 §3.1)");
                }
                Ok(name) => {
                    // RFC 9460 §3 step 3: ask the same questions about the TargetName.
                    let Some(i) = self.name_index(name, true) else {
                        self.skip(
                            what,
                            format!("more than {MAX_TARGET_NAMES} names to ask about"),
                        );
                        return false;
                    };
                    self.alias_links += 1;
                    if self.names[i].state[0] != QueryState::Pending {
                        // Known already as a service target: ask for its HTTPS records too.
                        self.names[i].state[0] = QueryState::Pending;
                        let name = self.names[i].name.clone();
                        self.unsent.push(Query {
                            kind: QueryKind::Https,
                            name,
                        });
                    }
                    // Below MAX_TARGET_NAMES + 1, so it fits.
                    self.chain_end = u8::try_from(i).unwrap_or(u8::MAX);
                }
            }
            // A broken chain is an SVCB resolution failure (RFC 9460 §3): no service, so the
            // origin's own addresses are used.
            return false;
        }
        let mut compatible: Vec<(&HttpsRecord, Vec<Alpn>, (bool, bool))> =
            Vec::with_capacity(records.len());
        for r in records {
            let mut alpn = r.alpn.clone();
            if !r.no_default_alpn && !alpn.contains(&Alpn::Http11) {
                alpn.push(Alpn::Http11);
            }
            let reach = self.transports(&alpn, r.ech.is_some());
            if r.port == Some(0) {
                // RFC 9460 §7.2: the port to connect to; 0 is no port at all.
                self.skip(format!("HTTPS record {}", r.priority), "port=0");
            } else if let Some(why) = &r.malformed {
                self.skip(format!("HTTPS record {}", r.priority), why.clone());
            } else if r.unknown_mandatory {
                self.skip(
                    format!("HTTPS record {}", r.priority),
                    "unknown mandatory SvcParam",
                );
            } else if reach == (false, false) {
                // RFC 9460 §7.1.2, HEv3 §6.2: no protocol we speak.
                let why = if self.quic && alpn.contains(&Alpn::H3) {
                    "no supported ALPN (h3 only, and QUIC with ECH is not built)"
                } else {
                    "no supported ALPN"
                };
                self.skip(format!("HTTPS record {}", r.priority), why);
            } else {
                compatible.push((r, alpn, reach));
            }
        }
        compatible.sort_by_key(|(r, ..)| r.priority);
        // RFC 9460 §2.4.1: records of equal priority are tried in random order. Fisher–Yates
        // within each run of equal priority, driven by the race's seed.
        // (Mixed with a constant, so it is not the draw that decides whether history is
        // ignored.)
        let mut state = self.seed ^ 0x5348_5546_464c_4521;
        let mut start = 0;
        while start < compatible.len() {
            let p = compatible[start].0.priority;
            let end = start
                + compatible[start..]
                    .iter()
                    .take_while(|(r, ..)| r.priority == p)
                    .count();
            for i in (start + 1..end).rev() {
                state = crate::splitmix64(state);
                let j = start + (state % (i - start + 1) as u64) as usize;
                compatible.swap(i, j);
            }
            start = end;
        }
        let mut any_hint = false;
        for (r, alpn, (tcp, quic)) in compatible {
            let name = if r.targets_owner() {
                n
            } else {
                match target_name(&r.target) {
                    // RFC 9460 §3: the addresses of a ServiceMode TargetName are asked for.
                    Ok(t) => match self.name_index(t, false) {
                        Some(i) => i,
                        None => {
                            self.skip(
                                format!("HTTPS record {}", r.priority),
                                format!("more than {MAX_TARGET_NAMES} names to ask about"),
                            );
                            continue;
                        }
                    },
                    Err(why) => {
                        self.skip(format!("HTTPS record {}", r.priority), why);
                        continue;
                    }
                }
            };
            let mut raw = Vec::with_capacity(r.ipv6hint.len() + r.ipv4hint.len());
            raw.extend(r.ipv6hint.iter().map(|&v| IpAddr::V6(v)));
            raw.extend(r.ipv4hint.iter().map(|&v| IpAddr::V4(v)));
            let mut hints = SmallVec::<[IpAddr; 0]>::with_capacity(raw.len());
            self.admit(raw, &mut hints);
            any_hint |= !hints.is_empty();
            self.services.push(Service {
                info: ServiceInfo {
                    name: self.names[name].name.clone(),
                    port: r.port,
                    alpn,
                    ech: r.ech.clone().filter(|_| self.ech),
                    tcp,
                    quic,
                },
                name,
                hints: hints.into_vec(),
            });
        }
        self.end_of_chain_service(n);
        any_hint
    }

    /// Which transports reach a service with ALPN set `alpn` (defaults included), and with
    /// an ECH configuration if `ech` (RFC 9460 §7.1.2, HEv3 §6.2): TCP when the set holds a
    /// protocol the client speaks over TCP; QUIC when the client speaks QUIC, the set holds
    /// `h3`, and the client would not use ECH on it (ECH over QUIC is not built, so a
    /// service with ECH is reached over TCP only, never without ECH).
    fn transports(&self, alpn: &[Alpn], ech: bool) -> (bool, bool) {
        let tcp = alpn.iter().any(|a| self.offer.speaks(a));
        let quic = self.quic && alpn.contains(&Alpn::H3) && !(ech && self.ech);
        (tcp, quic)
    }

    /// RFC 9460 §2.4.2: an alias chain that ends on a name with no usable ServiceMode record
    /// leads to that name's own A and AAAA records, as one service ahead of the origin's.
    fn end_of_chain_service(&mut self, n: usize) {
        let end = usize::from(self.chain_end);
        let settled = end == n;
        if settled && end != 0 && self.services.is_empty() {
            self.services.push(Service {
                info: ServiceInfo {
                    name: self.names[end].name.clone(),
                    port: None,
                    alpn: self.offer.ids().to_vec(),
                    ech: None,
                    tcp: true,
                    quic: false,
                },
                name: end,
                hints: Vec::new(),
            });
        }
    }
}
