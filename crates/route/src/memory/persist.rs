//! The route-memory file: a bounded, versioned, checksummed binary encoding of a
//! [`RouteDatabase`](super::RouteDatabase). Pure: the driver reads and writes the bytes.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! "FFRM"  version:u8  written_wall_secs:u64  networks:u8
//!   per network:   id:u64  family × 2  quic  origins:u16
//!     family:      srtt_us:u32  rtt_age_ms:u32  path_failure_age_ms:u32
//!                  (srtt_us's top bit marks a lower bound rather than a measurement)
//!     quic:        until_ms:i64  marks:u8   (version 2 on; i64::MIN: no record)
//!     per origin:  host  port:u16  touched_age_ms:u32  routes:u8  quic  alt_svc
//!       host:      0 len:u8 name | 4 ipv4 (4 bytes) | 6 ipv6 (16 bytes)
//!       per route: target  srtt_us:u32  rtt_age_ms:u32  failed_age_ms:u32  failures:u16
//!                  touched_age_ms:u32
//!       target:    4 ipv4 port:u16 | 6 ipv6 port:u16 scope_id:u32
//!       alt_svc:   count:u8, then per alternative: port:u16  fresh_for_ms:u32  persist:u8
//!                  (version 2 on)
//! fnv1a32 of everything before it: u32
//! ```
//!
//! Times are ages in milliseconds at the moment of writing (`NONE` = absent), so a file is
//! independent of the writing process's clock. On reading, the wall-clock time since the file
//! was written is added to every age. A QUIC record's `until_ms` looks forward instead: how
//! long its broken period still ran when the file was written (negative: how long ago it
//! had ended).
//!
//! Version 1 files (no QUIC records) are still read; files are written as version 2.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use fastfallback_proto::Instant;

use super::{
    AltRecord, FamilyRecord, Inner, MAX_NETWORKS, MAX_ROUTES_PER_ORIGIN, NetworkId, NetworkMemory,
    OriginKey, OriginMemory, QuicRecord, RouteMemory, RouteRecord, Rtt, alt_svc,
};
use crate::Host;

const MAGIC: &[u8; 4] = b"FFRM";
const VERSION: u8 = 2;
/// The oldest version read: version 1 has no QUIC records.
const FIRST_VERSION: u8 = 1;
/// "No value" for a 32-bit field.
const NONE: u32 = u32::MAX;

/// The largest file read or written. Larger files are refused unread; the encoder stops adding
/// origins before it would pass it.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// Why a route-memory file was not taken. The caller should log it, ignore the file and write a
/// fresh one later.
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum PersistError {
    /// The file is larger than [`MAX_FILE_BYTES`].
    TooLarge(usize),
    /// It does not start with the format's magic bytes.
    NotAMemoryFile,
    /// It was written by another version of the format.
    UnsupportedVersion(u8),
    /// It ends in the middle of a record.
    Truncated,
    /// Its checksum does not match: it was damaged.
    Corrupt,
    /// A field holds an impossible value.
    Malformed(&'static str),
}

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge(n) => write!(
                f,
                "route-memory file is {n} bytes; the limit is {MAX_FILE_BYTES}"
            ),
            Self::NotAMemoryFile => f.write_str("not a fastfallback route-memory file"),
            Self::UnsupportedVersion(v) => write!(
                f,
                "route-memory file has format version {v}; this build reads {FIRST_VERSION} to {VERSION}"
            ),
            Self::Truncated => f.write_str("route-memory file is truncated"),
            Self::Corrupt => f.write_str("route-memory file is corrupt (checksum mismatch)"),
            Self::Malformed(what) => write!(f, "route-memory file has a malformed {what}"),
        }
    }
}

impl std::error::Error for PersistError {}

fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

fn age_ms(now: Instant, then: Instant) -> u32 {
    u32::try_from((now - then).as_millis()).unwrap_or(NONE - 1)
}

/// The top bit of a stored srtt: the value is a lower bound.
const BOUND: u32 = 1 << 31;

fn put_rtt(out: &mut Vec<u8>, rtt: &Rtt, now: Instant) {
    let srtt = rtt.srtt.map_or(NONE, |d| {
        let us = u32::try_from(d.as_micros())
            .unwrap_or(BOUND - 1)
            .min(BOUND - 1);
        if rtt.bound { us | BOUND } else { us }
    });
    out.extend_from_slice(&srtt.to_le_bytes());
    out.extend_from_slice(&age_ms(now, rtt.updated).to_le_bytes());
}

fn put_opt_age(out: &mut Vec<u8>, at: Option<Instant>, now: Instant) {
    let v = at.map_or(NONE, |t| age_ms(now, t));
    out.extend_from_slice(&v.to_le_bytes());
}

/// "No record" for a QUIC record's `until_ms`.
const NO_QUIC: i64 = i64::MIN;

fn put_quic(out: &mut Vec<u8>, quic: Option<&QuicRecord>, now: Instant) {
    let (until, marks) = quic.map_or((NO_QUIC, 0), |q| {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let until = if q.broken_until >= now {
            ms(q.broken_until - now)
        } else {
            -ms(now - q.broken_until)
        };
        (until, q.marks)
    });
    out.extend_from_slice(&until.to_le_bytes());
    out.push(marks);
}

fn put_target(out: &mut Vec<u8>, target: SocketAddr) {
    match target {
        SocketAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.ip().octets());
            out.extend_from_slice(&v4.port().to_le_bytes());
        }
        SocketAddr::V6(v6) => {
            out.push(6);
            out.extend_from_slice(&v6.ip().octets());
            out.extend_from_slice(&v6.port().to_le_bytes());
            out.extend_from_slice(&v6.scope_id().to_le_bytes());
        }
    }
}

fn put_host(out: &mut Vec<u8>, host: &Host) {
    match host {
        Host::Name(n) => {
            // Valid names are at most 253 bytes (RFC 1035), so the length fits.
            out.push(0);
            out.push(u8::try_from(n.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(&n.as_bytes()[..n.len().min(255)]);
        }
        Host::Ip(IpAddr::V4(v4)) => {
            out.push(4);
            out.extend_from_slice(&v4.octets());
        }
        Host::Ip(IpAddr::V6(v6)) => {
            out.push(6);
            out.extend_from_slice(&v6.octets());
        }
    }
}

fn put_origin(out: &mut Vec<u8>, key: &OriginKey, o: &OriginMemory, now: Instant) {
    put_host(out, &key.host);
    out.extend_from_slice(&key.port.to_le_bytes());
    out.extend_from_slice(&age_ms(now, o.touched).to_le_bytes());
    let routes = &o.routes[..o.routes.len().min(usize::from(u8::MAX))];
    out.push(routes.len() as u8);
    for (target, r) in routes {
        put_target(out, *target);
        put_rtt(out, &r.rtt, now);
        put_opt_age(out, r.failed_at, now);
        out.extend_from_slice(&u16::try_from(r.failures).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(&age_ms(now, r.touched).to_le_bytes());
    }
    put_quic(out, o.quic.as_ref(), now);
    let fresh: Vec<&AltRecord> = o.alt_svc.iter().filter(|a| a.fresh(now)).collect();
    out.push(u8::try_from(fresh.len()).unwrap_or(u8::MAX));
    for a in fresh.into_iter().take(usize::from(u8::MAX)) {
        out.extend_from_slice(&a.port.to_le_bytes());
        let left = u32::try_from((a.expires - now).as_millis()).unwrap_or(u32::MAX);
        out.extend_from_slice(&left.to_le_bytes());
        out.push(u8::from(a.persist));
    }
}

pub(super) fn encode(inner: &Inner, now: Instant, wall_secs: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&wall_secs.to_le_bytes());
    let networks = &inner.networks[..inner.networks.len().min(MAX_NETWORKS)];
    out.push(networks.len() as u8);
    // Leave room for the checksum.
    let budget = MAX_FILE_BYTES - 4;
    for n in networks {
        out.extend_from_slice(&n.id.0.to_le_bytes());
        for f in &n.families {
            put_rtt(&mut out, &f.rtt, now);
            put_opt_age(&mut out, f.path_failure_at, now);
        }
        put_quic(&mut out, n.quic.as_ref(), now);
        let count_at = out.len();
        out.extend_from_slice(&0u16.to_le_bytes());
        let mut count: u16 = 0;
        let mut origin = Vec::with_capacity(64);
        for (key, o) in &n.origins {
            origin.clear();
            put_origin(&mut origin, key, o, now);
            if count == u16::MAX || out.len() + origin.len() > budget {
                break;
            }
            out.extend_from_slice(&origin);
            count += 1;
        }
        out[count_at..count_at + 2].copy_from_slice(&count.to_le_bytes());
    }
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A cursor over the file's bytes that never reads past the end.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PersistError> {
        if self.bytes.len() < n {
            return Err(PersistError::Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PersistError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, PersistError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, PersistError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, PersistError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, PersistError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// Turns ages in the file into instants on this process's clock.
struct Ages {
    now: Instant,
    /// Wall-clock time since the file was written.
    since_written: Duration,
    ttl: Duration,
}

impl Ages {
    /// The instant `age_ms` before the writing, or `None` when absent, expired or before the
    /// clock's epoch.
    fn at(&self, age_ms: u32) -> Option<Instant> {
        if age_ms == NONE {
            return None;
        }
        let age = Duration::from_millis(u64::from(age_ms)) + self.since_written;
        if age > self.ttl {
            return None;
        }
        self.now.checked_sub(age)
    }

    /// The instant `age_ms` before the writing, however old (clamped to the clock's epoch),
    /// or `None` when absent: the `touched` of an origin kept for its QUIC record alone.
    fn at_any(&self, age_ms: u32) -> Option<Instant> {
        if age_ms == NONE {
            return None;
        }
        let age = Duration::from_millis(u64::from(age_ms)) + self.since_written;
        Some(self.now.checked_sub(age).unwrap_or(Instant::ZERO))
    }

    /// An origin's Alt-Svc alternatives (version 2 on), without those no longer fresh.
    fn alt_svc(&self, r: &mut Reader<'_>, version: u8) -> Result<Vec<AltRecord>, PersistError> {
        if version < 2 {
            return Ok(Vec::new());
        }
        let count = r.u8()?;
        let mut kept = Vec::new();
        for _ in 0..count {
            let (port, left, persist) = (r.u16()?, r.u32()?, r.u8()?);
            if persist > 1 {
                return Err(PersistError::Malformed("Alt-Svc alternative"));
            }
            let left = Duration::from_millis(u64::from(left));
            if port == 0 || left <= self.since_written || kept.len() == alt_svc::MAX_KEPT {
                continue;
            }
            kept.push(AltRecord {
                port,
                expires: self.now + (left - self.since_written),
                persist: persist == 1,
            });
        }
        Ok(kept)
    }

    /// A QUIC record (version 2 on), or `None` when absent or no longer alive.
    fn quic(&self, r: &mut Reader<'_>, version: u8) -> Result<Option<QuicRecord>, PersistError> {
        if version < 2 {
            return Ok(None);
        }
        let (until_ms, marks) = (i64::from_le_bytes(r.array()?), r.u8()?);
        if until_ms == NO_QUIC {
            return Ok(None);
        }
        if marks == 0 {
            return Err(PersistError::Malformed("QUIC record"));
        }
        // Relative to the writing, moved back by the wall time since: ms from now.
        let from_now = i128::from(until_ms) - self.since_written.as_millis() as i128;
        let ms =
            |v: i128| Duration::from_millis(u64::try_from(v.unsigned_abs()).unwrap_or(u64::MAX));
        let broken_until = if from_now >= 0 {
            self.now + ms(from_now)
        } else {
            self.now.checked_sub(ms(from_now)).unwrap_or(Instant::ZERO)
        };
        let record = QuicRecord {
            broken_until,
            marks,
        };
        Ok(record.alive(self.now, self.ttl).then_some(record))
    }

    fn rtt(&self, r: &mut Reader<'_>) -> Result<Rtt, PersistError> {
        let srtt = r.u32()?;
        let updated = self.at(r.u32()?);
        Ok(match (srtt, updated) {
            (NONE, _) | (_, None) => Rtt::default(),
            (v, Some(at)) => Rtt {
                srtt: Some(Duration::from_micros(u64::from(v & !BOUND))),
                bound: v & BOUND != 0,
                updated: at,
            },
        })
    }
}

fn host(r: &mut Reader<'_>) -> Result<Host, PersistError> {
    match r.u8()? {
        0 => {
            let len = usize::from(r.u8()?);
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| PersistError::Malformed("host name"))?;
            match name.parse::<Host>() {
                Ok(h @ Host::Name(_)) => Ok(h),
                _ => Err(PersistError::Malformed("host name")),
            }
        }
        4 => Ok(Host::Ip(IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)))),
        6 => Ok(Host::Ip(IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)))),
        _ => Err(PersistError::Malformed("host")),
    }
}

fn target(r: &mut Reader<'_>) -> Result<SocketAddr, PersistError> {
    match r.u8()? {
        4 => {
            let ip = Ipv4Addr::from(r.array::<4>()?);
            Ok(SocketAddr::new(IpAddr::V4(ip), r.u16()?))
        }
        6 => {
            let ip = Ipv6Addr::from(r.array::<16>()?);
            let port = r.u16()?;
            let scope = r.u32()?;
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)))
        }
        _ => Err(PersistError::Malformed("route address")),
    }
}

pub(super) fn decode(
    bytes: &[u8],
    now: Instant,
    wall_secs: u64,
    config: RouteMemory,
) -> Result<Inner, PersistError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(PersistError::TooLarge(bytes.len()));
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(PersistError::NotAMemoryFile);
    }
    if bytes.len() < MAGIC.len() + 1 {
        return Err(PersistError::Truncated);
    }
    let version = bytes[MAGIC.len()];
    if !(FIRST_VERSION..=VERSION).contains(&version) {
        return Err(PersistError::UnsupportedVersion(version));
    }
    if bytes.len() < MAGIC.len() + 1 + 8 + 1 + 4 {
        return Err(PersistError::Truncated);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 4);
    let mut sum_bytes = [0u8; 4];
    sum_bytes.copy_from_slice(sum);
    if fnv1a(body) != u32::from_le_bytes(sum_bytes) {
        return Err(PersistError::Corrupt);
    }
    let mut r = Reader {
        bytes: &body[MAGIC.len() + 1..],
    };
    let written = r.u64()?;
    let ages = Ages {
        now,
        since_written: Duration::from_secs(wall_secs.saturating_sub(written)),
        ttl: config.ttl,
    };
    let mut inner = Inner::default();
    let networks = r.u8()?;
    for _ in 0..networks {
        let id = NetworkId(r.u64()?);
        let mut net = NetworkMemory::new(id);
        for f in &mut net.families {
            *f = FamilyRecord {
                rtt: ages.rtt(&mut r)?,
                path_failure_at: ages.at(r.u32()?),
            };
        }
        net.quic = ages.quic(&mut r, version)?;
        let origins = r.u16()?;
        for _ in 0..origins {
            let host = host(&mut r)?;
            let port = r.u16()?;
            let touched_age = r.u32()?;
            let count = r.u8()?;
            let mut routes = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let target = target(&mut r)?;
                let rtt = ages.rtt(&mut r)?;
                let failed_at = ages.at(r.u32()?);
                let failures = u32::from(r.u16()?);
                let route_touched = ages.at(r.u32()?);
                if let Some(touched) = route_touched
                    && routes.len() < MAX_ROUTES_PER_ORIGIN
                {
                    routes.push((
                        target,
                        RouteRecord {
                            rtt,
                            failed_at,
                            failures,
                            touched,
                        },
                    ));
                }
            }
            let quic = ages.quic(&mut r, version)?;
            let alt_svc = ages.alt_svc(&mut r, version)?;
            // An origin past the TTL is kept only for a QUIC record that is still alive, or
            // for Alt-Svc alternatives still fresh.
            let touched = if quic.is_none() && alt_svc.is_empty() {
                ages.at(touched_age)
            } else {
                ages.at_any(touched_age)
            };
            let Some(touched) = touched else {
                continue;
            };
            let origin = OriginMemory {
                routes,
                touched,
                quic,
                alt_svc,
            };
            let slots = origin.slots();
            if port == 0 || slots == 0 || net.routes + slots > config.max_routes {
                continue;
            }
            net.routes += slots;
            let key = OriginKey { host, port };
            // A file naming an origin twice keeps the later entry, counted once.
            if let Some(earlier) = net.origins.insert(key, origin) {
                net.routes -= earlier.slots();
            }
        }
        if inner.networks.len() < MAX_NETWORKS && !inner.networks.iter().any(|n| n.id == id) {
            inner.networks.push(net);
        }
    }
    if !r.bytes.is_empty() {
        return Err(PersistError::Malformed(
            "trailer (bytes after the last network)",
        ));
    }
    Ok(inner)
}

#[cfg(test)]
#[path = "persist_tests.rs"]
mod tests;
