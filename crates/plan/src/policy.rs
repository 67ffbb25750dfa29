//! [`FallbackPolicy`]: every knob of the race, with defaults from the standards.
//!
//! | knob | default | source |
//! |---|---|---|
//! | Resolution Delay | 50 ms | RFC 8305 §3 and §8, HEv3 §4.2 and §9 |
//! | Connection Attempt Delay (no history) | 250 ms | RFC 8305 §5, HEv3 §6 |
//! | Minimum / maximum attempt delay | 100 ms / 2 s | RFC 8305 §5 and §8 |
//! | hard floor of the attempt delay | 10 ms | RFC 8305 §5: "MUST NOT be less than 10 ms" |
//! | start after the latest attempt fails | at once | reference profile P4 (R-30); `start_floor` |
//! | adaptive delay | `clamp(3 × srtt, min, max)` | reference profile P2 (RFC 6298's first RTO, one sample) |
//! | Preferred Address Family Count | 1 | RFC 8305 §4, HEv3 §5.3 |
//! | overall connect deadline | 10 s | reference profile P12 |
//! | per-attempt timeout | 10 s | OkHttp's connect timeout |
//! | concurrent attempts | 6 | curl's cap |
//! | win at | TLS done | HEv3 §6.1 |
//! | DNS tail after success | 1 s | RFC 8305 §5, HEv3 §6 |
//! | QUIC attempts | off | the driver must speak QUIC and HTTP/3 |
//! | QUIC against TCP | interleaved per address (`Q6, T6, Q4, T4`) | reference profile P11 (PI), Chromium |

use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

use fastfallback_proto::AlpnOffer;
use fastfallback_route::order::FamilyPreference;
use fastfallback_route::{AnswerLimits, RouteMemory};

/// RFC 8305 §5: "the Connection Attempt Delay MUST NOT be less than 10 ms". No setting can go
/// below it, so no two timer-driven starts are ever closer together.
pub const HARD_MIN_ATTEMPT_DELAY: Duration = Duration::from_millis(10);

/// Which starts the 10 ms floor of RFC 8305 §5 applies to.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum StartFloor {
    /// The floor bounds the Connection Attempt Delay: timer-driven starts are at least 10 ms
    /// apart, but when the latest attempt fails (or nothing is in flight) the next starts at
    /// that instant, as Go, curl, Python, Chromium and the Mozilla crate do (reference profile
    /// P4, R-27, R-30). Such a start is serial: it waited for the previous attempt's answer.
    #[default]
    TimerDriven,
    /// The literal reading of RFC 8305 §5: no two starts, of any kind, within 10 ms.
    EveryStart,
}

/// The longest route-memory TTL accepted.
pub const MAX_MEMORY_TTL: Duration = Duration::from_secs(24 * 3600);

/// When an attempt counts as the winner.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum WinAt {
    /// When the whole plan is done: for TLS plans, the TLS handshake and certificate check
    /// (HEv3 §6.1, reference profile P5). TCP completion extends the next-attempt timer (P6).
    #[default]
    Handshake,
    /// When TCP connects, as OkHttp does: the others are cancelled at once and the winner does
    /// TLS alone. If its TLS fails, the race resumes with follow-ups first, then the losers'
    /// retries, then new routes.
    Tcp,
}

/// How a service's QUIC endpoints are ordered against its TCP ones (HEv3 §5.1 leaves it to
/// the implementation, §1.12; reference profile P11). Either way QUIC leads on each address
/// unless route memory says QUIC is broken on this network, and then TCP leads.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum QuicOrder {
    /// Protocols interleaved on each address, then families (profile PI, HEv3 drafts -00 and
    /// -01, and Chromium's "TCP joins after one attempt delay"): `Q6, T6, Q4, T4`. When UDP
    /// is blocked, TCP starts one attempt delay after QUIC.
    #[default]
    Interleaved,
    /// One combined group, QUIC first (profile CG, the current draft): every QUIC endpoint
    /// of a service, families interleaved, before any of its TCP ones: `Q6, Q4, T6, T4`.
    QuicFirst,
}

/// What to do with an attempt that connected after another already won.
#[derive(Clone, Copy, Debug, Default, Eq, Hash, PartialEq)]
pub enum SpareWinners {
    /// Close it.
    #[default]
    Close,
    /// Keep it as an idle pooled connection.
    Pool,
}

/// Pool settings.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct PoolPolicy {
    /// How long an idle connection is kept.
    pub keep_alive: Duration,
    /// The most idle connections kept.
    pub max_idle: usize,
    /// Connections kept warm per address (0: none).
    pub prewarm_per_address: usize,
}

impl Default for PoolPolicy {
    fn default() -> Self {
        // OkHttp's keep-alive (5 minutes). Its idle limit (5) goes with its dispatcher's limit
        // of 5 requests per host; we have no such limit, so a burst of HTTP/1 calls would
        // close and reopen connections all the time (the warm bench: 4 043 connections for
        // 6 144 requests with 64 in flight). 256 idle, Chromium's pool-wide socket limit,
        // bounds what stays open; hyper-util and reqwest keep every idle connection.
        Self {
            keep_alive: Duration::from_secs(300),
            max_idle: 256,
            prewarm_per_address: 0,
        }
    }
}

/// Every knob of the race. Build one with [`FallbackPolicy::builder`]; `Default` gives the
/// standards' values.
///
/// ```
/// use fastfallback_plan::FallbackPolicy;
/// use std::time::Duration;
///
/// let p = FallbackPolicy::builder().attempt_delay(Duration::from_millis(200)).build().unwrap();
/// assert_eq!(p.attempt_delay, Duration::from_millis(200));
///
/// let err = FallbackPolicy::builder().attempt_delay(Duration::from_millis(1)).build().unwrap_err();
/// assert!(err.to_string().contains("attempt_delay"));
/// ```
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub struct FallbackPolicy {
    /// How long to wait for AAAA (and HTTPS) after a positive A answer (HEv3 §4.2).
    pub resolution_delay: Duration,
    /// The Connection Attempt Delay without RTT history (HEv3 §6).
    pub attempt_delay: Duration,
    /// The lower clamp of the adaptive delay (HEv3 §6: recommended 100 ms).
    pub min_attempt_delay: Duration,
    /// The upper clamp of the adaptive delay (HEv3 §6: recommended 2 s).
    pub max_attempt_delay: Duration,
    /// Whether RTT history sets the delay (`clamp(3 × srtt, min, max)`).
    pub adaptive_attempt_delay: bool,
    /// How many preferred-family endpoints go first (HEv3 §5.3).
    pub preferred_family_count: usize,
    /// Which family leads.
    pub family: FamilyPreference,
    /// Which starts the 10 ms floor applies to.
    pub start_floor: StartFloor,
    /// The most attempts in flight at once. When full and the next attempt is due, the oldest
    /// one is cancelled to make room (as curl does), so a stuck attempt never starves later ones.
    pub max_concurrent_attempts: NonZeroUsize,
    /// Each attempt's own time limit (never past the overall deadline).
    pub attempt_timeout: Duration,
    /// The overall connect deadline, from the start of the race.
    pub connect_timeout: Duration,
    /// When an attempt wins.
    pub win_at: WinAt,
    /// Whether to query the HTTPS record for `http` and `https` origins (HEv3 §4.1).
    pub query_https: bool,
    /// Whether TLS attempts use Encrypted Client Hello when an HTTPS record carries an `ech`
    /// configuration (draft-ietf-tls-svcb-ech). When every compatible record has one, the
    /// race is SVCB-reliant: it never falls back to a connection without ECH
    /// (draft-ietf-tls-esni, "Disabling fallback"). The driver turns it off when its TLS
    /// backend has no HPKE (the `ring` build) or the TLS configuration is the caller's own.
    pub ech: bool,
    /// With [`Self::ech`], how long after the first positive address answer the race waits
    /// for a pending HTTPS answer before it connects anyway (never less than the Resolution
    /// Delay). An ECH-capable client sends no ClientHello before SVCB resolution has finished
    /// (draft-ietf-tls-esni, "Performance optimizations"; HEv3 §6.1, R-34): this bounds that
    /// wait, after which the HTTPS query counts as failed and attempts go without ECH. The
    /// cost falls only on networks whose HTTPS answers are slower than their address
    /// answers.
    pub https_wait: Duration,
    /// Whether the resolver is cryptographically protected (DNS over HTTPS, TLS or QUIC, or
    /// DNSSEC-validating): the caller says so, as only it knows its `Resolve`. Then an HTTPS
    /// query that fails (SERVFAIL, a timeout, a transport error) fails the race
    /// (`SvcbResolutionFailed`, HEv3 §6.3 R-38), and an ECH-capable race holds TLS until the
    /// HTTPS answer whatever `https_wait` says (R-39). Off: the built-in resolver is plain DNS.
    pub protected_dns: bool,
    /// How long pending DNS queries are kept after a win, to fill the cache (HEv3 §6).
    pub dns_tail: Duration,
    /// Limits on DNS answers.
    pub answer_limits: AnswerLimits,
    /// Route memory.
    pub route_memory: RouteMemory,
    /// What to do with late winners.
    pub spare_winners: SpareWinners,
    /// Pool settings.
    pub pool: PoolPolicy,
    /// What TLS attempts offer in ALPN: what the client will speak (HEv3 §6.2). HTTPS records
    /// that advertise none of it are skipped (RFC 9460 §7.1.2).
    pub alpn: AlpnOffer,
    /// Whether the client speaks HTTP/3 over QUIC: services whose HTTPS record lists `h3`
    /// then give QUIC endpoints too ([`fastfallback_proto::TransportKind::Quic`], offering
    /// ALPN `h3` alone; HEv3 §6.2, R-35), raced against TCP as [`Self::quic_order`] says.
    /// Off by default: the driver must speak QUIC (a connector refuses a policy that asks
    /// for it otherwise). A service with an ECH configuration gives no QUIC endpoint, as ECH
    /// over QUIC is not built yet, so such a race never connects without ECH.
    pub quic: bool,
    /// How QUIC endpoints are ordered against TCP ones (profile P11).
    pub quic_order: QuicOrder,
}

impl Default for FallbackPolicy {
    fn default() -> Self {
        Self {
            resolution_delay: Duration::from_millis(50),
            attempt_delay: Duration::from_millis(250),
            min_attempt_delay: Duration::from_millis(100),
            max_attempt_delay: Duration::from_secs(2),
            adaptive_attempt_delay: true,
            preferred_family_count: 1,
            family: FamilyPreference::Auto,
            start_floor: StartFloor::TimerDriven,
            max_concurrent_attempts: NonZeroUsize::new(6).expect("6 is not zero"),
            attempt_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            win_at: WinAt::Handshake,
            query_https: true,
            ech: true,
            https_wait: Duration::from_millis(150),
            protected_dns: false,
            dns_tail: Duration::from_secs(1),
            answer_limits: AnswerLimits::default(),
            route_memory: RouteMemory::default(),
            spare_winners: SpareWinners::Close,
            pool: PoolPolicy::default(),
            alpn: AlpnOffer::Both,
            quic: false,
            quic_order: QuicOrder::Interleaved,
        }
    }
}

impl FallbackPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> FallbackPolicyBuilder {
        FallbackPolicyBuilder {
            policy: Self::default(),
            zero_cap: false,
        }
    }

    /// The Connection Attempt Delay after starting an attempt whose route (or, failing that,
    /// network family) has smoothed RTT `srtt`: `clamp(3 × srtt, min, max)` with history,
    /// `attempt_delay` without (reference profile P2).
    ///
    /// ```
    /// use fastfallback_plan::FallbackPolicy;
    /// use std::time::Duration;
    /// let p = FallbackPolicy::default();
    /// let ms = Duration::from_millis;
    /// assert_eq!(p.attempt_delay_for(None), ms(250));
    /// assert_eq!(p.attempt_delay_for(Some(ms(2))), ms(100));
    /// assert_eq!(p.attempt_delay_for(Some(ms(50))), ms(150));
    /// assert_eq!(p.attempt_delay_for(Some(ms(3000))), ms(2000));
    /// ```
    pub fn attempt_delay_for(&self, srtt: Option<Duration>) -> Duration {
        match srtt {
            Some(s) if self.adaptive_attempt_delay => {
                (s.saturating_mul(3)).clamp(self.min_attempt_delay, self.max_attempt_delay)
            }
            _ => self.attempt_delay,
        }
    }
}

/// An invalid policy value: which knob, and why.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct PolicyError {
    /// The knob.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid fallback policy: {}: {}",
            self.field, self.reason
        )
    }
}

impl std::error::Error for PolicyError {}

/// Builds a [`FallbackPolicy`], checking every value in [`FallbackPolicyBuilder::build`].
#[derive(Clone, Debug)]
pub struct FallbackPolicyBuilder {
    policy: FallbackPolicy,
    zero_cap: bool,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.policy.$name = value;
                self
            }
        )*
    };
}

impl FallbackPolicyBuilder {
    setters! {
        /// Sets [`FallbackPolicy::resolution_delay`].
        resolution_delay: Duration;
        /// Sets [`FallbackPolicy::attempt_delay`]. Under 10 ms is an error.
        attempt_delay: Duration;
        /// Sets [`FallbackPolicy::min_attempt_delay`]. Under 10 ms is an error.
        min_attempt_delay: Duration;
        /// Sets [`FallbackPolicy::max_attempt_delay`].
        max_attempt_delay: Duration;
        /// Sets [`FallbackPolicy::adaptive_attempt_delay`].
        adaptive_attempt_delay: bool;
        /// Sets [`FallbackPolicy::preferred_family_count`]. 0 is an error.
        preferred_family_count: usize;
        /// Sets [`FallbackPolicy::family`].
        family: FamilyPreference;
        /// Sets [`FallbackPolicy::start_floor`].
        start_floor: StartFloor;
        /// Sets [`FallbackPolicy::attempt_timeout`].
        attempt_timeout: Duration;
        /// Sets [`FallbackPolicy::connect_timeout`].
        connect_timeout: Duration;
        /// Sets [`FallbackPolicy::win_at`].
        win_at: WinAt;
        /// Sets [`FallbackPolicy::query_https`].
        query_https: bool;
        /// Sets [`FallbackPolicy::ech`].
        ech: bool;
        /// Sets [`FallbackPolicy::https_wait`].
        https_wait: Duration;
        /// Sets [`FallbackPolicy::protected_dns`].
        protected_dns: bool;
        /// Sets [`FallbackPolicy::dns_tail`].
        dns_tail: Duration;
        /// Sets [`FallbackPolicy::answer_limits`].
        answer_limits: AnswerLimits;
        /// Sets [`FallbackPolicy::route_memory`].
        route_memory: RouteMemory;
        /// Sets [`FallbackPolicy::spare_winners`].
        spare_winners: SpareWinners;
        /// Sets [`FallbackPolicy::pool`].
        pool: PoolPolicy;
        /// Sets [`FallbackPolicy::alpn`].
        alpn: AlpnOffer;
        /// Sets [`FallbackPolicy::quic`].
        quic: bool;
        /// Sets [`FallbackPolicy::quic_order`].
        quic_order: QuicOrder;
    }

    /// Sets [`FallbackPolicy::max_concurrent_attempts`]. 0 is an error.
    pub fn max_concurrent_attempts(mut self, n: usize) -> Self {
        // 0 is kept as 0 here so `build` can report it; NonZeroUsize cannot hold it.
        self.zero_cap = n == 0;
        if let Some(n) = NonZeroUsize::new(n) {
            self.policy.max_concurrent_attempts = n;
        }
        self
    }

    /// Checks every value and returns the policy, or the first invalid value.
    pub fn build(self) -> Result<FallbackPolicy, PolicyError> {
        if self.zero_cap {
            return Err(PolicyError {
                field: "max_concurrent_attempts",
                reason: "must be at least 1".into(),
            });
        }
        self.policy.validate()?;
        Ok(self.policy)
    }
}

impl FallbackPolicy {
    /// Checks every value; the builder calls this, and so should code that edits the public
    /// fields of an existing policy.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let p = self;
        let err = |field, reason: String| Err(PolicyError { field, reason });
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if p.attempt_delay < HARD_MIN_ATTEMPT_DELAY {
            return err(
                "attempt_delay",
                format!(
                    "{} ms is under the 10 ms floor of RFC 8305 §5",
                    ms(p.attempt_delay)
                ),
            );
        }
        if p.min_attempt_delay < HARD_MIN_ATTEMPT_DELAY {
            return err(
                "min_attempt_delay",
                format!(
                    "{} ms is under the 10 ms floor of RFC 8305 §5",
                    ms(p.min_attempt_delay)
                ),
            );
        }
        if p.max_attempt_delay < p.min_attempt_delay {
            return err(
                "max_attempt_delay",
                format!(
                    "{} ms is below min_attempt_delay ({} ms)",
                    ms(p.max_attempt_delay),
                    ms(p.min_attempt_delay)
                ),
            );
        }
        if p.preferred_family_count == 0 {
            return err(
                "preferred_family_count",
                "must be at least 1 (RFC 8305 §4)".into(),
            );
        }
        if p.connect_timeout.is_zero() {
            return err("connect_timeout", "must be greater than zero".into());
        }
        if p.attempt_timeout.is_zero() {
            return err("attempt_timeout", "must be greater than zero".into());
        }
        for (field, delay) in [
            ("attempt_delay", p.attempt_delay),
            ("min_attempt_delay", p.min_attempt_delay),
        ] {
            if delay > p.connect_timeout {
                return err(
                    field,
                    format!(
                        "{} ms is longer than connect_timeout ({} ms): no second attempt could \
                         start before the race gives up",
                        ms(delay),
                        ms(p.connect_timeout)
                    ),
                );
            }
        }
        if p.route_memory.ttl > MAX_MEMORY_TTL {
            return err(
                "route_memory.ttl",
                format!(
                    "{} s is longer than a day; history that old says little about a network",
                    p.route_memory.ttl.as_secs()
                ),
            );
        }
        if p.answer_limits.max_addresses == 0 {
            return err("answer_limits.max_addresses", "must be at least 1".into());
        }
        if p.route_memory.enabled && p.route_memory.max_routes == 0 {
            return err(
                "route_memory.max_routes",
                "must be at least 1 when memory is on".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_follow_the_standards() {
        let p = FallbackPolicy::default();
        assert_eq!(p.resolution_delay, ms(50));
        assert_eq!(p.attempt_delay, ms(250));
        assert_eq!(
            (p.min_attempt_delay, p.max_attempt_delay),
            (ms(100), ms(2000))
        );
        assert_eq!(p.preferred_family_count, 1);
        assert_eq!(p.connect_timeout, ms(10_000));
        assert_eq!(FallbackPolicy::builder().build(), Ok(p));
    }

    #[test]
    fn attempt_delay_under_10ms_is_rejected() {
        let e = FallbackPolicy::builder()
            .attempt_delay(ms(1))
            .build()
            .unwrap_err();
        assert_eq!(e.field, "attempt_delay");
        assert!(e.reason.contains("10 ms floor"), "{e}");
        assert!(
            FallbackPolicy::builder()
                .attempt_delay(ms(10))
                .build()
                .is_ok()
        );
    }

    #[test]
    fn min_attempt_delay_under_10ms_is_rejected() {
        let e = FallbackPolicy::builder()
            .min_attempt_delay(ms(5))
            .build()
            .unwrap_err();
        assert_eq!(e.field, "min_attempt_delay");
    }

    #[test]
    fn max_below_min_is_rejected() {
        let e = FallbackPolicy::builder()
            .min_attempt_delay(ms(300))
            .max_attempt_delay(ms(200))
            .build()
            .unwrap_err();
        assert_eq!(e.field, "max_attempt_delay");
    }

    #[test]
    fn zero_counts_and_timeouts_are_rejected() {
        let b = FallbackPolicy::builder;
        assert_eq!(
            b().preferred_family_count(0).build().unwrap_err().field,
            "preferred_family_count"
        );
        assert_eq!(
            b().max_concurrent_attempts(0).build().unwrap_err().field,
            "max_concurrent_attempts"
        );
        assert_eq!(
            b().connect_timeout(Duration::ZERO)
                .build()
                .unwrap_err()
                .field,
            "connect_timeout"
        );
        assert_eq!(
            b().attempt_timeout(Duration::ZERO)
                .build()
                .unwrap_err()
                .field,
            "attempt_timeout"
        );
    }

    #[test]
    fn an_attempt_delay_longer_than_the_deadline_is_rejected() {
        let e = FallbackPolicy::builder()
            .connect_timeout(ms(200))
            .build()
            .unwrap_err();
        assert_eq!(e.field, "attempt_delay");
        assert_eq!(
            e.to_string(),
            "invalid fallback policy: attempt_delay: 250 ms is longer than connect_timeout \
             (200 ms): no second attempt could start before the race gives up"
        );
        let e = FallbackPolicy::builder()
            .attempt_delay(ms(50))
            .connect_timeout(ms(60))
            .build()
            .unwrap_err();
        assert_eq!(e.field, "min_attempt_delay");
        assert!(
            FallbackPolicy::builder()
                .attempt_delay(ms(50))
                .min_attempt_delay(ms(50))
                .connect_timeout(ms(60))
                .build()
                .is_ok()
        );
    }

    #[test]
    fn a_route_memory_ttl_over_a_day_is_rejected() {
        let memory = RouteMemory {
            ttl: Duration::from_secs(2 * 24 * 3600),
            ..Default::default()
        };
        let e = FallbackPolicy::builder()
            .route_memory(memory)
            .build()
            .unwrap_err();
        assert_eq!(e.field, "route_memory.ttl");
    }

    #[test]
    fn adaptive_delay_is_clamped_to_min_and_max() {
        let p = FallbackPolicy::default();
        assert_eq!(p.attempt_delay_for(Some(ms(2))), ms(100));
        assert_eq!(p.attempt_delay_for(Some(ms(50))), ms(150));
        assert_eq!(p.attempt_delay_for(Some(ms(3000))), ms(2000));
        let fixed = FallbackPolicy::builder()
            .adaptive_attempt_delay(false)
            .build()
            .unwrap();
        assert_eq!(fixed.attempt_delay_for(Some(ms(50))), ms(250));
    }
}
