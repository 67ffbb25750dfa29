//! Setting [`FallbackPolicy`] knobs from text (`key=value`), for command lines and
//! configuration files.

use std::time::Duration;

use fastfallback_proto::AlpnOffer;
use fastfallback_route::order::FamilyPreference;

use crate::policy::{
    FallbackPolicyBuilder, PolicyError, QuicOrder, SpareWinners, StartFloor, WinAt,
};

/// Every knob [`FallbackPolicyBuilder::set`] knows, with the form of its value.
pub const POLICY_KEYS: &[(&str, &str)] = &[
    ("resolution_delay", "duration, e.g. 50ms"),
    ("attempt_delay", "duration, at least 10ms"),
    ("min_attempt_delay", "duration, at least 10ms"),
    ("max_attempt_delay", "duration"),
    ("adaptive_attempt_delay", "true | false"),
    ("preferred_family_count", "integer, at least 1"),
    ("family", "auto | v6-first | v4-first | v6-only | v4-only"),
    ("start_floor", "timer-driven | every-start"),
    ("max_concurrent_attempts", "integer, at least 1"),
    ("attempt_timeout", "duration"),
    ("connect_timeout", "duration"),
    ("win_at", "handshake | tcp"),
    ("query_https", "true | false"),
    ("ech", "true | false"),
    ("https_wait", "duration, e.g. 150ms"),
    ("protected_dns", "true | false"),
    ("dns_tail", "duration"),
    ("spare_winners", "close | pool"),
    ("alpn", "both | h2 | http/1.1"),
    ("quic", "true | false"),
    ("quic_order", "interleaved | quic-first"),
];

impl FallbackPolicyBuilder {
    /// Sets the knob named `key` from its text form (see [`POLICY_KEYS`]). Durations take a
    /// unit: `250ms`, `2s`, `1.5s`, `500us`.
    ///
    /// The value's range is checked by [`Self::build`], as for the typed setters.
    ///
    /// ```
    /// use fastfallback_plan::FallbackPolicy;
    /// use std::time::Duration;
    ///
    /// let p = FallbackPolicy::builder().set("attempt_delay", "100ms").unwrap().build().unwrap();
    /// assert_eq!(p.attempt_delay, Duration::from_millis(100));
    /// assert!(FallbackPolicy::builder().set("attempt_delay", "fast").is_err());
    /// assert!(FallbackPolicy::builder().set("no_such_knob", "1").is_err());
    /// ```
    pub fn set(self, key: &str, value: &str) -> Result<Self, PolicyError> {
        let value = value.trim();
        Ok(match key.trim() {
            "resolution_delay" => self.resolution_delay(duration("resolution_delay", value)?),
            "attempt_delay" => self.attempt_delay(duration("attempt_delay", value)?),
            "min_attempt_delay" => self.min_attempt_delay(duration("min_attempt_delay", value)?),
            "max_attempt_delay" => self.max_attempt_delay(duration("max_attempt_delay", value)?),
            "adaptive_attempt_delay" => {
                self.adaptive_attempt_delay(boolean("adaptive_attempt_delay", value)?)
            }
            "preferred_family_count" => {
                self.preferred_family_count(integer("preferred_family_count", value)?)
            }
            "family" => self.family(choice(
                "family",
                value,
                &[
                    ("auto", FamilyPreference::Auto),
                    ("v6-first", FamilyPreference::V6First),
                    ("v4-first", FamilyPreference::V4First),
                    ("v6-only", FamilyPreference::V6Only),
                    ("v4-only", FamilyPreference::V4Only),
                ],
            )?),
            "start_floor" => self.start_floor(choice(
                "start_floor",
                value,
                &[
                    ("timer-driven", StartFloor::TimerDriven),
                    ("every-start", StartFloor::EveryStart),
                ],
            )?),
            "max_concurrent_attempts" => {
                self.max_concurrent_attempts(integer("max_concurrent_attempts", value)?)
            }
            "attempt_timeout" => self.attempt_timeout(duration("attempt_timeout", value)?),
            "connect_timeout" => self.connect_timeout(duration("connect_timeout", value)?),
            "win_at" => self.win_at(choice(
                "win_at",
                value,
                &[("handshake", WinAt::Handshake), ("tcp", WinAt::Tcp)],
            )?),
            "query_https" => self.query_https(boolean("query_https", value)?),
            "ech" => self.ech(boolean("ech", value)?),
            "https_wait" => self.https_wait(duration("https_wait", value)?),
            "protected_dns" => self.protected_dns(boolean("protected_dns", value)?),
            "dns_tail" => self.dns_tail(duration("dns_tail", value)?),
            "spare_winners" => self.spare_winners(choice(
                "spare_winners",
                value,
                &[("close", SpareWinners::Close), ("pool", SpareWinners::Pool)],
            )?),
            "alpn" => self.alpn(choice(
                "alpn",
                value,
                &[
                    ("both", AlpnOffer::Both),
                    ("h2", AlpnOffer::Http2Only),
                    ("http/1.1", AlpnOffer::Http11Only),
                ],
            )?),
            "quic" => self.quic(boolean("quic", value)?),
            "quic_order" => self.quic_order(choice(
                "quic_order",
                value,
                &[
                    ("interleaved", QuicOrder::Interleaved),
                    ("quic-first", QuicOrder::QuicFirst),
                ],
            )?),
            other => {
                let known: Vec<&str> = POLICY_KEYS.iter().map(|(k, _)| *k).collect();
                return Err(PolicyError {
                    field: "policy",
                    reason: format!("unknown knob `{other}`; known: {}", known.join(", ")),
                });
            }
        })
    }
}

fn bad(field: &'static str, value: &str, expected: &str) -> PolicyError {
    PolicyError {
        field,
        reason: format!("`{value}` is not {expected}"),
    }
}

/// `250ms`, `2s`, `1.5s`, `500us`: a number and a unit.
fn duration(field: &'static str, value: &str) -> Result<Duration, PolicyError> {
    let expected = "a duration with a unit (250ms, 2s, 500us)";
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| bad(field, value, expected))?;
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad(field, value, expected))?;
    let seconds = match unit.trim() {
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" | "min" => number * 60.0,
        _ => return Err(bad(field, value, expected)),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| bad(field, value, expected))
}

fn boolean(field: &'static str, value: &str) -> Result<bool, PolicyError> {
    match value {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(bad(field, value, "true or false")),
    }
}

fn integer(field: &'static str, value: &str) -> Result<usize, PolicyError> {
    value
        .parse()
        .map_err(|_| bad(field, value, "a whole number"))
}

fn choice<T: Copy>(
    field: &'static str,
    value: &str,
    options: &[(&str, T)],
) -> Result<T, PolicyError> {
    options
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
            bad(field, value, &format!("one of {}", names.join(", ")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FallbackPolicy;

    #[test]
    fn every_listed_knob_is_settable_from_text() {
        fn sample(form: &str) -> &str {
            match form.split([' ', ',']).next().unwrap() {
                "duration" => "20ms",
                "true" => "false",
                "integer" => "2",
                first => first,
            }
        }
        for (key, form) in POLICY_KEYS {
            let builder = FallbackPolicy::builder().set(key, sample(form));
            assert!(builder.is_ok(), "{key}: {:?}", builder.err());
        }
    }

    #[test]
    fn text_values_reach_the_policy() {
        let p = FallbackPolicy::builder()
            .set("attempt_delay", "1.5s")
            .and_then(|b| b.set("family", "v4-first"))
            .and_then(|b| b.set("alpn", "http/1.1"))
            .and_then(|b| b.set("query_https", "off"))
            .and_then(|b| b.set("max_concurrent_attempts", "3"))
            .and_then(|b| b.set("quic", "true"))
            .and_then(|b| b.set("quic_order", "quic-first"))
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(p.attempt_delay, Duration::from_millis(1500));
        assert_eq!(p.family, FamilyPreference::V4First);
        assert_eq!(p.alpn, AlpnOffer::Http11Only);
        assert!(!p.query_https);
        assert_eq!(p.max_concurrent_attempts.get(), 3);
        assert!(p.quic);
        assert_eq!(p.quic_order, QuicOrder::QuicFirst);
    }

    #[test]
    fn bad_text_names_the_knob_and_what_was_expected() {
        let err = FallbackPolicy::builder()
            .set("attempt_delay", "250")
            .unwrap_err();
        assert_eq!(err.field, "attempt_delay");
        assert!(err.reason.contains("with a unit"), "{err}");
        let err = FallbackPolicy::builder().set("family", "v7").unwrap_err();
        assert!(err.reason.contains("one of auto, v6-first"), "{err}");
        let err = FallbackPolicy::builder()
            .set("atempt_delay", "1s")
            .unwrap_err();
        assert!(err.reason.contains("unknown knob `atempt_delay`"), "{err}");
        let err = FallbackPolicy::builder()
            .set("dns_tail", "-1s")
            .unwrap_err();
        assert_eq!(err.field, "dns_tail");
        let err = FallbackPolicy::builder()
            .set("dns_tail", "1e400s")
            .unwrap_err();
        assert_eq!(err.field, "dns_tail");
        // Range checks stay with build().
        let b = FallbackPolicy::builder()
            .set("attempt_delay", "1ms")
            .unwrap();
        assert_eq!(b.build().unwrap_err().field, "attempt_delay");
    }
}
