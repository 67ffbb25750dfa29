//! Text from the network made safe to show a person: [`RaceReport`](crate::RaceReport)'s
//! timeline prints names, ALPN ids and error texts that a DNS server or a peer chose.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as it is: C0 and C1 controls (escape sequences) and
/// the invisible format characters that reorder or hide text (bidirectional overrides and
/// isolates, zero-width characters).
fn unsafe_to_show(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}')
}

/// `s` safe to show a person on a terminal: each control or invisible format character
/// escaped (`\x1b`, `\n`, `\u{202e}`) and each backslash doubled, so an escape sequence a DNS
/// server or a peer put in a name, an ALPN id or an error text is shown, not obeyed.
/// Borrowed when there is nothing to escape.
///
/// ```
/// assert_eq!(fastfallback_net::escaped("h2\u{1b}]0;owned\u{7}"), "h2\\x1b]0;owned\\x07");
/// assert_eq!(fastfallback_net::escaped("plain.example"), "plain.example");
/// ```
pub fn escaped(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c == '\\' || unsafe_to_show(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_to_show(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_to_show(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}
