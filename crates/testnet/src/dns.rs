//! The test network's authoritative DNS server (hickory-server on
//! [`DNS_V4`](crate::DNS_V4) port 53, UDP and TCP), answering from records the test sets.
//!
//! Every name the test set with [`TestNet::set_dns`](crate::TestNet::set_dns) answers A,
//! AAAA and HTTPS queries from its [`DnsZone`], each after that type's own delay. Every
//! query is answered by a task of its own, over UDP and TCP alike, so a delayed AAAA never
//! holds back the A answer. Types without records answer NODATA (NOERROR, no answers, an SOA
//! in the authority section so resolvers get a negative TTL); names never set answer
//! NXDOMAIN with an SOA; [`DnsZone::rcode`] forces an error code for every type.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Edns, Header, HeaderCounts, Metadata, ResponseCode};
use hickory_proto::rr::rdata::svcb::{Alpn, EchConfigList, IpHint, SvcParamKey, SvcParamValue};
use hickory_proto::rr::rdata::{A, AAAA, HTTPS, SOA, SVCB};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinDecoder;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{MessageResponseBuilder, Queries};

use crate::wire::lock;

/// TTL of every answer record.
const TTL: u32 = 60;
/// The SOA's minimum field, which resolvers take as the negative-answer TTL.
const NEGATIVE_TTL: u32 = 30;
/// The EDNS payload size the server advertises when the query used EDNS.
const EDNS_PAYLOAD: u16 = 1232;

/// A DNS error code that [`DnsZone::rcode`] can force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    /// NXDOMAIN (with an SOA in the authority section).
    NxDomain,
    /// SERVFAIL.
    ServFail,
    /// REFUSED.
    Refused,
}

/// The records of one name, and how slowly each type is answered.
///
/// ```
/// use std::time::Duration;
/// use fastfallback_testnet::{DnsZone, HttpsSpec, server_v4, server_v6};
/// let zone = DnsZone {
///     aaaa: vec![server_v6(0)],
///     a: vec![server_v4(0)],
///     https: vec![HttpsSpec::service(1).alpn(["h2"])],
///     aaaa_delay: Duration::from_millis(300),
///     ..DnsZone::default()
/// };
/// # drop(zone);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsZone {
    /// AAAA records (empty: NODATA).
    pub aaaa: Vec<Ipv6Addr>,
    /// A records (empty: NODATA).
    pub a: Vec<Ipv4Addr>,
    /// HTTPS records (empty: NODATA).
    pub https: Vec<HttpsSpec>,
    /// How long the server waits before answering an AAAA query.
    pub aaaa_delay: Duration,
    /// How long the server waits before answering an A query.
    pub a_delay: Duration,
    /// How long the server waits before answering an HTTPS query.
    pub https_delay: Duration,
    /// If set, every query for the name is answered with this code instead (after the
    /// type's delay).
    pub rcode: Option<Rcode>,
}

/// One HTTPS (SVCB) record (RFC 9460). Its SvcParams are sent in ascending key order:
/// alpn, no-default-alpn, port, ipv4hint, ech, ipv6hint; empty lists, `false` and `None` are
/// left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpsSpec {
    /// SvcPriority: 0 is AliasMode, 1 and up ServiceMode.
    pub priority: u16,
    /// TargetName; `"."` (or empty) means the owner name itself.
    pub target: String,
    /// ALPN ids (`alpn` param), e.g. `["h2", "http/1.1"]`.
    pub alpn: Vec<String>,
    /// The `no-default-alpn` param.
    pub no_default_alpn: bool,
    /// Alternative port (`port` param).
    pub port: Option<u16>,
    /// IPv4 address hints (`ipv4hint` param).
    pub ipv4hint: Vec<Ipv4Addr>,
    /// IPv6 address hints (`ipv6hint` param).
    pub ipv6hint: Vec<Ipv6Addr>,
    /// An ECHConfigList in wire form (`ech` param; see [`crate::ech_config_list`]).
    pub ech: Option<Vec<u8>>,
}

impl HttpsSpec {
    /// A ServiceMode record with `priority` for the owner name (target "."), no params.
    pub fn service(priority: u16) -> Self {
        Self {
            priority,
            target: ".".to_owned(),
            ..Self::default()
        }
    }

    /// Sets the ALPN ids.
    #[must_use]
    pub fn alpn<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.alpn = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the port.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Sets the IPv4 hints.
    #[must_use]
    pub fn ipv4hint(mut self, hints: impl IntoIterator<Item = Ipv4Addr>) -> Self {
        self.ipv4hint = hints.into_iter().collect();
        self
    }

    /// Sets the ECH configuration list.
    #[must_use]
    pub fn ech(mut self, list: Vec<u8>) -> Self {
        self.ech = Some(list);
        self
    }

    /// Sets the IPv6 hints.
    #[must_use]
    pub fn ipv6hint(mut self, hints: impl IntoIterator<Item = Ipv6Addr>) -> Self {
        self.ipv6hint = hints.into_iter().collect();
        self
    }

    /// The record data, or `None` if the target is not a valid name.
    fn rdata(&self) -> Option<RData> {
        let target = match self.target.as_str() {
            "" | "." => Name::root(),
            t => {
                let mut n = Name::from_ascii(t).ok()?;
                n.set_fqdn(true);
                n
            }
        };
        let mut params = Vec::new();
        if !self.alpn.is_empty() {
            params.push((
                SvcParamKey::Alpn,
                SvcParamValue::Alpn(Alpn(self.alpn.clone())),
            ));
        }
        if self.no_default_alpn {
            params.push((SvcParamKey::NoDefaultAlpn, SvcParamValue::NoDefaultAlpn));
        }
        if let Some(port) = self.port {
            params.push((SvcParamKey::Port, SvcParamValue::Port(port)));
        }
        if !self.ipv4hint.is_empty() {
            let hints = self.ipv4hint.iter().copied().map(A).collect();
            params.push((
                SvcParamKey::Ipv4Hint,
                SvcParamValue::Ipv4Hint(IpHint(hints)),
            ));
        }
        if let Some(list) = &self.ech {
            params.push((
                SvcParamKey::EchConfigList,
                SvcParamValue::EchConfigList(EchConfigList(list.clone())),
            ));
        }
        if !self.ipv6hint.is_empty() {
            let hints = self.ipv6hint.iter().copied().map(AAAA).collect();
            params.push((
                SvcParamKey::Ipv6Hint,
                SvcParamValue::Ipv6Hint(IpHint(hints)),
            ));
        }
        Some(RData::HTTPS(HTTPS(SVCB::new(
            self.priority,
            target,
            params,
        ))))
    }
}

/// How many queries of each type the server received for one name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DnsCounts {
    /// A queries.
    pub a: usize,
    /// AAAA queries.
    pub aaaa: usize,
    /// HTTPS queries.
    pub https: usize,
}

/// Lower case, without a trailing dot: the key of the zone and count tables.
pub(crate) fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Zones and counters, shared by the [`TestNet`](crate::TestNet) handle and the server.
#[derive(Debug, Default)]
pub(crate) struct DnsState {
    pub(crate) zones: Mutex<HashMap<String, DnsZone>>,
    pub(crate) counts: Mutex<HashMap<String, DnsCounts>>,
    /// When set, the server answers like DNS64 (RFC 6147) with this /96 prefix.
    pub(crate) dns64: Mutex<Option<Ipv6Addr>>,
}

/// The IPv4-embedded IPv6 address of `v4` under the /96 `prefix` (RFC 6052 §2.2).
pub fn synthesize(prefix: Ipv6Addr, v4: Ipv4Addr) -> Ipv6Addr {
    let mut o = prefix.octets();
    o[12..].copy_from_slice(&v4.octets());
    Ipv6Addr::from(o)
}

/// A planned answer: after `delay`, send `rcode` with these records.
struct Answer {
    delay: Duration,
    rcode: ResponseCode,
    answers: Vec<Record>,
    soa: Vec<Record>,
}

impl DnsState {
    /// Counts the query and plans its answer from the zone as it is now.
    fn plan(&self, name: &Name, qtype: RecordType) -> Answer {
        let key = normalise(&name.to_ascii());
        {
            let mut counts = lock(&self.counts);
            let c = counts.entry(key.clone()).or_default();
            match qtype {
                RecordType::A => c.a += 1,
                RecordType::AAAA => c.aaaa += 1,
                RecordType::HTTPS => c.https += 1,
                _ => {}
            }
        }
        let dns64 = *lock(&self.dns64);
        if let (Some(prefix), "ipv4only.arpa", RecordType::AAAA) = (dns64, key.as_str(), qtype) {
            // RFC 7050 §2.2: the well-known name answers with 192.0.0.170 and .171 under the
            // prefix, so a client can find it.
            let answers = [170, 171]
                .into_iter()
                .map(|last| synthesize(prefix, Ipv4Addr::new(192, 0, 0, last)))
                .map(|ip| Record::from_rdata(name.clone(), TTL, RData::AAAA(AAAA(ip))))
                .collect();
            return Answer {
                delay: Duration::ZERO,
                rcode: ResponseCode::NoError,
                answers,
                soa: Vec::new(),
            };
        }
        let Some(zone) = lock(&self.zones).get(&key).cloned() else {
            return Answer {
                delay: Duration::ZERO,
                rcode: ResponseCode::NXDomain,
                answers: Vec::new(),
                soa: soa_for(name),
            };
        };
        let delay = match qtype {
            RecordType::A => zone.a_delay,
            RecordType::AAAA => zone.aaaa_delay,
            RecordType::HTTPS => zone.https_delay,
            _ => Duration::ZERO,
        };
        match zone.rcode {
            Some(Rcode::NxDomain) => {
                return Answer {
                    delay,
                    rcode: ResponseCode::NXDomain,
                    answers: Vec::new(),
                    soa: soa_for(name),
                };
            }
            Some(code) => {
                return Answer {
                    delay,
                    rcode: if code == Rcode::Refused {
                        ResponseCode::Refused
                    } else {
                        ResponseCode::ServFail
                    },
                    answers: Vec::new(),
                    soa: Vec::new(),
                };
            }
            None => {}
        }
        let rdatas: Vec<RData> = match qtype {
            RecordType::A => zone.a.iter().map(|ip| RData::A(A(*ip))).collect(),
            // RFC 6147 §5.1.6: DNS64 synthesizes only when the name has no AAAA record.
            RecordType::AAAA => match dns64 {
                Some(prefix) if zone.aaaa.is_empty() => zone
                    .a
                    .iter()
                    .map(|v4| RData::AAAA(AAAA(synthesize(prefix, *v4))))
                    .collect(),
                _ => zone.aaaa.iter().map(|ip| RData::AAAA(AAAA(*ip))).collect(),
            },
            RecordType::HTTPS => zone.https.iter().filter_map(HttpsSpec::rdata).collect(),
            _ => Vec::new(),
        };
        let answers: Vec<Record> = rdatas
            .into_iter()
            .map(|rd| Record::from_rdata(name.clone(), TTL, rd))
            .collect();
        let soa = if answers.is_empty() {
            soa_for(name)
        } else {
            Vec::new()
        };
        Answer {
            delay,
            rcode: ResponseCode::NoError,
            answers,
            soa,
        }
    }
}

/// The SOA put in the authority section of a negative answer for `name`: owned by the
/// name's top-level domain (the root for a single-label name).
fn soa_for(name: &Name) -> Vec<Record> {
    let mut apex = if name.num_labels() > 1 {
        name.trim_to(1)
    } else {
        Name::root()
    };
    apex.set_fqdn(true);
    let (Ok(mname), Ok(rname)) = (
        Name::from_ascii("ns").and_then(|n| n.append_domain(&apex)),
        Name::from_ascii("hostmaster").and_then(|n| n.append_domain(&apex)),
    ) else {
        return Vec::new();
    };
    let soa = SOA::new(mname, rname, 1, 3600, 600, 86400, NEGATIVE_TTL);
    vec![Record::from_rdata(apex, NEGATIVE_TTL, RData::SOA(soa))]
}

/// The hickory-server request handler.
pub(crate) struct Handler {
    pub(crate) state: Arc<DnsState>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let info = ResponseInfo::from(Header {
            metadata,
            counts: HeaderCounts::default(),
        });
        let Ok(req_info) = request.request_info() else {
            // Not exactly one query: FORMERR, at once.
            metadata.response_code = ResponseCode::FormErr;
            metadata.authoritative = false;
            let resp =
                MessageResponseBuilder::from_message_request(request).build_no_records(metadata);
            return response_handle.send_response(resp).await.unwrap_or(info);
        };
        let query = req_info.query.original().clone();
        let answer = self.state.plan(query.name(), query.query_type());
        metadata.response_code = answer.rcode;
        // Answer from a task of its own, so that this query's delay holds back no other
        // query (hickory handles the queries of one TCP connection one after another).
        // An owned copy of the question section, re-read from the bytes the client sent.
        let original = request.queries.as_bytes();
        let Ok(queries) = Queries::read(&mut BinDecoder::new(original), request.queries.len())
        else {
            return info;
        };
        let edns = request.edns.as_ref().map(|_| {
            let mut e = Edns::new();
            e.set_max_payload(EDNS_PAYLOAD);
            e
        });
        tokio::spawn(async move {
            // tokio's timer wheel rounds even a zero sleep up to its next 1 ms tick: skip it,
            // so an undelayed answer leaves at once.
            if !answer.delay.is_zero() {
                tokio::time::sleep(answer.delay).await;
            }
            let resp = MessageResponseBuilder::new(&queries, edns.as_ref()).build(
                metadata,
                answer.answers.iter(),
                std::iter::empty(),
                answer.soa.iter(),
                std::iter::empty(),
            );
            // The client may be gone (timed out): nothing to do then.
            let _ = response_handle.send_response(resp).await;
        });
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::from_ascii(s).expect("name")
    }

    #[test]
    fn names_are_stored_lower_case_without_the_dot() {
        assert_eq!(normalise("Origin.TEST."), "origin.test");
        assert_eq!(normalise("origin.test"), "origin.test");
    }

    #[test]
    fn plans_answers_nodata_nxdomain_and_rcodes() {
        let state = DnsState::default();
        lock(&state.zones).insert(
            "origin.test".into(),
            DnsZone {
                a: vec![Ipv4Addr::new(10, 201, 0, 10)],
                a_delay: Duration::from_millis(5),
                ..DnsZone::default()
            },
        );
        lock(&state.zones).insert(
            "broken.test".into(),
            DnsZone {
                rcode: Some(Rcode::ServFail),
                ..DnsZone::default()
            },
        );
        let a = state.plan(&name("ORIGIN.test."), RecordType::A);
        assert_eq!(
            (a.rcode, a.answers.len(), a.soa.len()),
            (ResponseCode::NoError, 1, 0)
        );
        assert_eq!(a.delay, Duration::from_millis(5));
        let nodata = state.plan(&name("origin.test."), RecordType::AAAA);
        assert_eq!(
            (nodata.rcode, nodata.answers.len()),
            (ResponseCode::NoError, 0)
        );
        assert_eq!(nodata.soa.len(), 1);
        assert_eq!(nodata.soa[0].name, name("test."));
        let nx = state.plan(&name("nowhere.test."), RecordType::A);
        assert_eq!((nx.rcode, nx.soa.len()), (ResponseCode::NXDomain, 1));
        let sf = state.plan(&name("broken.test."), RecordType::HTTPS);
        assert_eq!(sf.rcode, ResponseCode::ServFail);
        let counts = lock(&state.counts).clone();
        assert_eq!(
            counts["origin.test"],
            DnsCounts {
                a: 1,
                aaaa: 1,
                https: 0
            }
        );
        assert_eq!(counts["broken.test"].https, 1);
    }

    #[test]
    fn https_params_come_in_ascending_key_order() {
        let spec = HttpsSpec::service(1)
            .ipv6hint([Ipv6Addr::LOCALHOST])
            .port(8443)
            .ipv4hint([Ipv4Addr::LOCALHOST])
            .alpn(["h2", "http/1.1"]);
        let Some(RData::HTTPS(HTTPS(svcb))) = spec.rdata() else {
            panic!("not HTTPS");
        };
        let keys: Vec<u16> = svcb.svc_params.iter().map(|(k, _)| u16::from(*k)).collect();
        assert_eq!(keys, vec![1, 3, 4, 6]);
        assert_eq!(svcb.target_name, Name::root());
        let alias = HttpsSpec {
            priority: 0,
            target: "pool.origin.test".into(),
            ..HttpsSpec::default()
        };
        let Some(RData::HTTPS(HTTPS(svcb))) = alias.rdata() else {
            panic!("not HTTPS");
        };
        assert!(svcb.target_name.is_fqdn());
        assert!(svcb.svc_params.is_empty());
    }
}
