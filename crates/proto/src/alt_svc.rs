//! The `Alt-Svc` header field (RFC 7838 §3): what a server says about other places to reach
//! it, read without trusting a byte of it.

use std::time::Duration;

use crate::Alpn;

/// RFC 7838 §3.1: an alternative's freshness when the server names none (24 hours).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(86_400);

/// The most alternatives one field value yields; the rest are ignored (a server can send any
/// number, and each would become a route to try).
pub const MAX_ALTERNATIVES: usize = 16;

/// One alternative service (RFC 7838 §3): `protocol` at `host`:`port`, fresh for `max_age`.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct AltService {
    /// The ALPN protocol id, percent-decoded (RFC 7838 §3: `h3=":443"` is `h3`).
    pub protocol: Alpn,
    /// The alternative's host, lower case; `None` when the value names only a port (the
    /// origin's own host, RFC 7838 §3).
    pub host: Option<String>,
    /// The alternative's port.
    pub port: u16,
    /// How long the alternative stays fresh (`ma`, RFC 7838 §3.1).
    pub max_age: Duration,
    /// Whether it survives a network change (`persist=1`, RFC 7838 §3.1).
    pub persist: bool,
}

/// What one `Alt-Svc` field value says (RFC 7838 §3).
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum AltSvc {
    /// `clear`: forget every alternative of this origin.
    Clear,
    /// Alternatives, in the server's order of preference. Malformed ones are left out.
    Services(Vec<AltService>),
}

/// Reads one `Alt-Svc` field value. Never fails: an alternative that does not parse is left
/// out (RFC 7838 §3 asks clients to ignore what they do not understand), so the worst input
/// gives `Services(vec![])`.
///
/// ```
/// use fastfallback_proto::{Alpn, AltSvc, parse_alt_svc};
/// use std::time::Duration;
///
/// let AltSvc::Services(list) = parse_alt_svc(r#"h3=":443"; ma=3600, h2="alt.example:8443""#)
/// else { panic!() };
/// assert_eq!(list[0].protocol, Alpn::H3);
/// assert_eq!((list[0].host.as_deref(), list[0].port), (None, 443));
/// assert_eq!(list[0].max_age, Duration::from_secs(3600));
/// assert_eq!(list[1].host.as_deref(), Some("alt.example"));
/// assert_eq!(parse_alt_svc(" clear "), AltSvc::Clear);
/// ```
pub fn parse_alt_svc(value: &str) -> AltSvc {
    if value.trim() == "clear" {
        return AltSvc::Clear;
    }
    let list = split_outside_quotes(value, ',')
        .filter_map(|entry| alternative(entry.trim()))
        .take(MAX_ALTERNATIVES)
        .collect();
    AltSvc::Services(list)
}

/// One `alt-value`: `protocol-id "=" alt-authority *( OWS ";" OWS parameter )`.
fn alternative(entry: &str) -> Option<AltService> {
    let mut parts = split_outside_quotes(entry, ';');
    let (id, authority) = parts.next()?.trim().split_once('=')?;
    let protocol = Alpn::from_bytes(&percent_decode(id.trim())?);
    let authority = unquote(authority.trim())?;
    let (host, port) = authority.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = match host.trim_start_matches('[').trim_end_matches(']') {
        "" => None,
        h if h
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c)) =>
        {
            Some(h.to_ascii_lowercase())
        }
        _ => return None,
    };
    let mut service = AltService {
        protocol,
        host,
        port,
        max_age: DEFAULT_MAX_AGE,
        persist: false,
    };
    for param in parts {
        let Some((name, value)) = param.trim().split_once('=') else {
            continue;
        };
        let value = value.trim();
        let value = unquote(value).unwrap_or(value);
        match name.trim().to_ascii_lowercase().as_str() {
            // delta-seconds (RFC 9111 §1.2.2): digits; too large is "the greatest value".
            "ma" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                let secs = value.parse::<u64>().unwrap_or(u64::MAX);
                service.max_age = Duration::from_secs(secs);
            }
            "ma" => return None,
            "persist" => service.persist = value == "1",
            // Unknown parameters are ignored (RFC 7838 §3).
            _ => {}
        }
    }
    Some(service)
}

/// Splits `s` at every `sep` that is not inside a quoted string (RFC 9110 §5.6.4, with its
/// backslash escapes).
fn split_outside_quotes(s: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let (mut quoted, mut escaped) = (false, false);
    let mut cuts = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                cuts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    cuts.push(&s[start..]);
    cuts.into_iter().filter(|p| !p.trim().is_empty())
}

/// The inside of a quoted string, if `s` is one (escapes taken as the character they
/// escape, which an authority never needs).
fn unquote(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// A `protocol-id`'s bytes: percent-encoding decoded (RFC 7838 §3). `None` on a broken
/// escape.
fn percent_decode(id: &str) -> Option<Vec<u8>> {
    let bytes = id.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(v: &str) -> Vec<AltService> {
        match parse_alt_svc(v) {
            AltSvc::Services(list) => list,
            AltSvc::Clear => panic!("{v:?} read as clear"),
        }
    }

    #[test]
    fn the_rfc_examples_parse_with_their_defaults_and_parameters() {
        // RFC 7838 §3 and §3.1 examples.
        let list = services(r#"h2="new.example.org:80""#);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].protocol, Alpn::H2);
        assert_eq!(list[0].host.as_deref(), Some("new.example.org"));
        assert_eq!(list[0].port, 80);
        assert_eq!(list[0].max_age, DEFAULT_MAX_AGE);
        assert!(!list[0].persist);
        let list = services(r#"h2=":443"; ma=2592000; persist=1"#);
        assert_eq!(list[0].host, None);
        assert_eq!(list[0].max_age, Duration::from_secs(2_592_000));
        assert!(list[0].persist);
        let list = services(r#"w=x%3Dy=":443""#);
        assert!(
            list.is_empty(),
            "an '=' left in the id splits it wrong: {list:?}"
        );
        let list = services(r#"w%3Dx=":443""#);
        assert_eq!(list[0].protocol, Alpn::Other(b"w=x".to_vec()));
    }

    #[test]
    fn a_malformed_alternative_is_left_out_and_the_others_kept() {
        let list = services(
            r#"h3=443, h3=":0", h3=":99999", h3="bad host:1", h3=":443"; ma=soon, h3="[2001:DB8::1]:443", h2=":8443""#,
        );
        let got: Vec<(Option<&str>, u16)> =
            list.iter().map(|s| (s.host.as_deref(), s.port)).collect();
        assert_eq!(got, [(Some("2001:db8::1"), 443), (None, 8443)]);
    }

    #[test]
    fn separators_inside_quotes_do_not_split_and_unknown_parameters_are_ignored() {
        let list = services(r#"h3=":443"; foo="a,b;c"; ma=60, h2=":444""#);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].max_age, Duration::from_secs(60));
    }

    #[test]
    fn clear_forgets_and_only_clear_alone_means_it() {
        assert_eq!(parse_alt_svc("clear"), AltSvc::Clear);
        assert_eq!(services(r#"clear, h3=":443""#).len(), 1);
    }

    #[test]
    fn hostile_values_give_at_most_the_bounded_list_and_never_panic() {
        let many = vec![r#"h3=":443""#; 1000].join(",");
        assert_eq!(services(&many).len(), MAX_ALTERNATIVES);
        for v in [
            "",
            ",,,",
            "\"",
            "=\"",
            "h3=\"",
            "%",
            "%g0=\":1\"",
            "h3=\":1\";ma=99999999999999999999999",
            "é=\"ü:1\"",
            "h3=\":1\\\"\"",
            ";;;=;",
        ] {
            let _ = parse_alt_svc(v);
        }
        let huge = services(r#"h3=":1"; ma=99999999999999999999999"#);
        assert_eq!(huge[0].max_age, Duration::from_secs(u64::MAX));
    }
}
