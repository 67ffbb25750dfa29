//! Text shown to a person: what came from the network with its control characters escaped,
//! and URLs as typed with their passwords hidden.

use std::borrow::Cow;

/// `s` safe for a terminal: the driver's own escaping ([`fastfallback_net::escaped`]), so
/// the waterfall, the errors and `RaceReport`'s text escape alike.
pub(crate) use fastfallback_net::escaped;

/// Where the userinfo of a URL (or `user:password@host:port` target) ends: the byte index of
/// its `@`, if it has one. The authority runs to the first `/`, `?` or `#`; a password typed
/// with one of those unescaped still counts as userinfo when an `@` follows it.
fn userinfo_end(rest: &str) -> Option<usize> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@') {
        return Some(at);
    }
    // `u:pa/ss@host`: what reads as a port is no number, and an `@` comes after the cut; the
    // userinfo runs to the last `@` before the next `/`.
    let (_, port) = rest[..authority_end].rsplit_once(':')?;
    if port.is_empty() || port.bytes().all(|b| b.is_ascii_digit()) || port.ends_with(']') {
        return None;
    }
    let first = rest.find('@')?;
    let run = rest[first..].find('/').map_or(rest.len(), |i| first + i);
    Some(rest[first..run].rfind('@').map_or(first, |i| first + i))
}

/// The scheme part (`http://`) and the rest of `url`.
fn split_scheme(url: &str) -> (&str, &str) {
    match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    }
}

/// `url` as typed, with its password hidden: `user:***@`, or `***@` when the userinfo is one
/// token (which may be a secret itself).
pub(crate) fn redacted(url: &str) -> Cow<'_, str> {
    let (scheme, rest) = split_scheme(url);
    let Some(at) = userinfo_end(rest) else {
        return Cow::Borrowed(url);
    };
    let userinfo = &rest[..at];
    let shown = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    Cow::Owned(format!("{scheme}{shown}{}", &rest[at..]))
}

/// `text` (an error about `url`) with `url`'s secret, if it has one, replaced by `***`
/// wherever it appears: the password of its userinfo, or the whole userinfo when it is one
/// token.
pub(crate) fn scrubbed<'a>(text: &'a str, url: &str) -> Cow<'a, str> {
    let (_, rest) = split_scheme(url);
    let Some(at) = userinfo_end(rest) else {
        return Cow::Borrowed(text);
    };
    let userinfo = &rest[..at];
    let secret = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    let mut text = Cow::Borrowed(text);
    for s in [userinfo, secret] {
        if !s.is_empty() && text.contains(s) {
            text = Cow::Owned(text.replace(s, "***"));
        }
    }
    // A parser that cut the password at a `/`, `?` or `#` may quote a piece of it.
    for piece in secret.split(['/', '?', '#']).filter(|p| !p.is_empty()) {
        let quoted = format!("\"{piece}\"");
        if text.contains(&quoted) {
            text = Cow::Owned(text.replace(&quoted, "\"***\""));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_the_network_are_shown_escaped() {
        assert_eq!(
            escaped("h2\u{1b}]0;owned\u{7}\u{1b}[2J"),
            "h2\\x1b]0;owned\\x07\\x1b[2J"
        );
        assert_eq!(escaped("a\nb\r\t\u{9b}c"), "a\\nb\\r\\t\\x9bc");
        assert_eq!(escaped("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(escaped("C:\\x1b"), "C:\\\\x1b");
        assert!(matches!(escaped("h2, http/1.1 é"), Cow::Borrowed(_)));
    }

    #[test]
    fn passwords_in_urls_are_hidden_and_the_rest_kept() {
        assert_eq!(
            redacted("https://alice:hunter2@example.test:8443/x?y"),
            "https://alice:***@example.test:8443/x?y"
        );
        assert_eq!(redacted("tcp://token@host:1"), "tcp://***@host:1");
        assert_eq!(redacted("http://u:pa/ss@host/"), "http://u:***@host/");
        assert_eq!(redacted("http://u:p@ss@host"), "http://u:***@host");
        assert_eq!(redacted("alice:pw@localhost:80"), "alice:***@localhost:80");
        assert_eq!(redacted("http://host:8080/a@b"), "http://host:8080/a@b");
        assert_eq!(redacted("https://example.test/"), "https://example.test/");
    }

    #[test]
    fn an_error_echoing_the_secret_is_scrubbed() {
        assert_eq!(
            scrubbed("port \"hunter2\" is not a number", "http://alice:hunter2@x"),
            "port \"***\" is not a number"
        );
        assert_eq!(
            scrubbed("port \"pa\" is not a number", "https://alice:pa/ss@host:1"),
            "port \"***\" is not a number"
        );
        assert_eq!(scrubbed("bad host", "http://x"), "bad host");
    }
}
