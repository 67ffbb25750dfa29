//! A race report drawn as a waterfall: one row per DNS query and per attempt, bars scaled to
//! time, then the winner and where the time went.
//!
//! The text carries ANSI styles; print it through `anstream`, which strips them when the
//! output is not a terminal or `NO_COLOR` is set. Every string that came from the network
//! (names, ALPN ids, TargetNames, error texts) is drawn with its control characters escaped
//! ([`escaped`]), so a DNS answer cannot restyle, retitle or clear the terminal.

use std::fmt::Write as _;
use std::time::Duration;

use anstyle::{AnsiColor, Style};
use fastfallback_net::{AttemptOutcome, RaceReport};
use fastfallback_proto::{Family, TransportKind};

use crate::text::escaped;

const TCP: char = '▒';
const TLS: char = '█';
const DNS: char = '░';
/// A QUIC attempt: one handshake, TLS inside it (HEv3 §6.1).
const QUIC: char = '▓';

const DIM: Style = Style::new().dimmed();
const BOLD: Style = Style::new().bold();
const GREEN: Style = AnsiColor::Green.on_default();
const RED: Style = AnsiColor::Red.on_default();
const YELLOW: Style = AnsiColor::Yellow.on_default();
const CYAN: Style = AnsiColor::Cyan.on_default();
const BLUE: Style = AnsiColor::Blue.on_default();

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Where time `t` falls on a bar `width` columns wide covering `total`.
fn column(t: Duration, total: Duration, width: usize) -> usize {
    if total.is_zero() {
        return 0;
    }
    let col = (t.as_secs_f64() / total.as_secs_f64() * width as f64).round() as usize;
    col.min(width)
}

/// A bar: blank up to `start`, then `first` up to `mid`, then `second` up to `end`; at least
/// one column is drawn, so an instant event still shows.
fn bar(start: usize, mid: usize, end: usize, first: char, second: char, width: usize) -> String {
    let all_first = mid >= end;
    let start = start.min(width.saturating_sub(1));
    let end = end.max(start + 1).min(width);
    let mid = if all_first {
        end
    } else {
        mid.clamp(start, end)
    };
    let mut s = String::with_capacity(width * 3);
    for col in 0..width {
        s.push(match col {
            c if c < start || c >= end => ' ',
            c if c < mid => first,
            _ => second,
        });
    }
    s
}

fn outcome_style(outcome: &AttemptOutcome) -> Style {
    match outcome {
        AttemptOutcome::Won => GREEN.bold(),
        AttemptOutcome::Failed(_) => RED,
        AttemptOutcome::Cancelled { .. } => YELLOW,
        AttemptOutcome::InFlight(_) | AttemptOutcome::FollowedUp => CYAN,
    }
}

fn family(f: Family) -> &'static str {
    match f {
        Family::V6 => "v6",
        Family::V4 => "v4",
    }
}

/// The waterfall of `report`, with bars `width` columns wide.
pub(crate) fn render(report: &RaceReport, width: usize) -> String {
    let width = width.max(10);
    let total = report
        .attempts
        .iter()
        .filter_map(|a| a.ended)
        .chain(report.queries.iter().filter_map(|q| q.answered))
        .fold(report.elapsed, Duration::max);
    let mut out = String::new();
    let verdict = match (report.pooled, report.winner, &report.error) {
        (Some(id), _, _) => format!("{GREEN}ended on pooled connection {id}{GREEN:#}"),
        (None, Some(id), _) => format!("{GREEN}won by #{id}{GREEN:#}"),
        (None, None, Some(_)) => format!("{RED}failed{RED:#}"),
        (None, None, None) => "unfinished".to_owned(),
    };
    let _ = writeln!(
        out,
        "{BOLD}race to {}{BOLD:#}: {verdict} in {:.1} ms",
        escaped(&report.origin),
        ms(report.elapsed)
    );

    let labels: Vec<String> = report
        .queries
        .iter()
        .map(|q| match &q.name {
            Some(name) => format!("dns {} {}", q.kind, escaped(name)),
            None => format!("dns {}", q.kind),
        })
        .chain(report.attempts.iter().map(|a| {
            let quic = if a.transport == TransportKind::Quic {
                " quic"
            } else {
                ""
            };
            match &a.proxy {
                Some(proxy) => format!(
                    "#{} {}{quic} {} ({})",
                    a.id,
                    family(a.family),
                    a.route,
                    escaped(proxy)
                ),
                None => format!("#{} {}{quic} {}", a.id, family(a.family), a.route),
            }
        }))
        .collect();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let scale = format!(
        "0 ms{:>pad$}",
        format!("{:.1} ms", ms(total)),
        pad = width.saturating_sub(4)
    );
    let _ = writeln!(
        out,
        "  {:<label_width$}  {:>7}  {:>7}  {DIM}{scale}{DIM:#}",
        "", "start", "end"
    );

    let mut labels = labels.into_iter();
    for q in &report.queries {
        let label = labels.next().unwrap_or_default();
        let start = column(q.sent, total, width);
        let end = q.answered.map_or(width, |t| column(t, total, width));
        let bar = bar(start, end, end, DNS, DNS, width);
        let end_text = q
            .answered
            .map_or_else(|| "—".to_owned(), |t| format!("{:.1}", ms(t)));
        let answer = match &q.answer {
            Some(a) if q.unlisted > 0 => {
                format!("{}, and {} more", escaped(&a.to_string()), q.unlisted)
            }
            Some(a) => escaped(&a.to_string()).into_owned(),
            None => "no answer before the race ended".to_owned(),
        };
        let _ = writeln!(
            out,
            "  {label:<label_width$}  {:>7.1}  {end_text:>7}  {DIM}│{DIM:#}{BLUE}{bar}{BLUE:#}{DIM}│{DIM:#} {DIM}{answer}{DIM:#}",
            ms(q.sent),
        );
    }
    for a in &report.attempts {
        let label = labels.next().unwrap_or_default();
        let end_t = a.ended.unwrap_or(total);
        let start = column(a.started, total, width);
        let end = column(end_t, total, width);
        // TCP until the handshake finished, TLS after it; a plan without TLS is all TCP, and
        // a QUIC attempt is one handshake.
        let mid = match (a.tls, a.tcp_connected) {
            (true, Some(t)) => column(t, total, width),
            _ => end,
        };
        let style = outcome_style(&a.outcome);
        let bar = match a.transport {
            TransportKind::Tcp => bar(start, mid, end, TCP, TLS, width),
            TransportKind::Quic => bar(start, end, end, QUIC, QUIC, width),
        };
        let end_text = a
            .ended
            .map_or_else(|| "—".to_owned(), |t| format!("{:.1}", ms(t)));
        let _ = writeln!(
            out,
            "  {label:<label_width$}  {:>7.1}  {end_text:>7}  {DIM}│{DIM:#}{style}{bar}{style:#}{DIM}│{DIM:#} {style}{}{style:#}",
            ms(a.started),
            escaped(&a.outcome.to_string()),
        );
    }
    let quic_legend = if report
        .attempts
        .iter()
        .any(|a| a.transport == TransportKind::Quic)
    {
        format!("  {QUIC} quic")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  {DIM}{TCP} tcp  {TLS} tls{quic_legend}  {DNS} dns{DIM:#}"
    );

    if let Some(won) = report.winning_attempt() {
        let _ = write!(
            out,
            "  winner  #{} {} ({})",
            won.id,
            won.route,
            if won.family == Family::V6 {
                "IPv6"
            } else {
                "IPv4"
            }
        );
        match &report.alpn {
            Some(alpn) => {
                let _ = writeln!(out, ", ALPN {}", escaped(&alpn.to_string()));
            }
            None => out.push('\n'),
        }
    }
    let quic_won = report
        .winning_attempt()
        .is_some_and(|a| a.transport == TransportKind::Quic);
    if let Some(b) = report.breakdown().filter(|_| quic_won) {
        // One handshake, TLS inside it: the breakdown counts it as TLS.
        let _ = writeln!(
            out,
            "  timing  dns {:.1} ms + waiting {:.1} ms + quic {:.1} ms = {:.1} ms",
            ms(b.dns),
            ms(b.waiting),
            ms(b.tls),
            ms(report.elapsed)
        );
    } else if let Some(b) = report.breakdown() {
        let _ = writeln!(
            out,
            "  timing  dns {:.1} ms + waiting {:.1} ms + tcp {:.1} ms + tls {:.1} ms = {:.1} ms",
            ms(b.dns),
            ms(b.waiting),
            ms(b.tcp),
            ms(b.tls),
            ms(report.elapsed)
        );
    }
    if let Some(e) = &report.error {
        let _ = writeln!(out, "  {RED}error{RED:#}   {}", escaped(&e.message));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_net::{AnswerReport, AttemptReport, QueryReport, ReportError};
    use fastfallback_proto::{CancelReason, Phase, QueryKind, RaceErrorKind};

    /// A failed race's error with this text.
    fn failure(message: String) -> ReportError {
        ReportError {
            kind: RaceErrorKind::AllAttemptsFailed,
            message,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn plain(s: &str) -> String {
        anstream::adapter::strip_str(s).to_string()
    }

    fn report() -> RaceReport {
        let v6 = "[2001:db8::a]:443".parse().unwrap();
        let v4 = "192.0.2.1:443".parse().unwrap();
        RaceReport {
            origin: "https://example.test:443".to_owned(),
            elapsed: ms(200),
            queries: vec![
                QueryReport {
                    kind: QueryKind::Aaaa,
                    name: None,
                    sent: ms(0),
                    answered: Some(ms(10)),
                    answer: Some(AnswerReport::Addresses(vec![
                        "2001:db8::a".parse().unwrap(),
                    ])),
                    unlisted: 0,
                },
                QueryReport {
                    kind: QueryKind::A,
                    name: None,
                    sent: ms(0),
                    answered: None,
                    answer: None,
                    unlisted: 0,
                },
            ],
            attempts: vec![
                AttemptReport {
                    id: 1,
                    route: v6,
                    family: Family::V6,
                    transport: TransportKind::Tcp,
                    plan: String::new(),
                    tls: true,
                    tls_config: Some(0),
                    proxy: None,
                    started: ms(10),
                    tcp_connected: None,
                    ended: Some(ms(200)),
                    outcome: AttemptOutcome::Cancelled {
                        reason: CancelReason::LostRace,
                        phase: Phase::Tcp,
                    },
                },
                AttemptReport {
                    id: 2,
                    route: v4,
                    family: Family::V4,
                    transport: TransportKind::Tcp,
                    plan: String::new(),
                    tls: true,
                    tls_config: Some(0),
                    proxy: None,
                    started: ms(100),
                    tcp_connected: Some(ms(150)),
                    ended: Some(ms(200)),
                    outcome: AttemptOutcome::Won,
                },
            ],
            winner: Some(2),
            pooled: None,
            alpn: Some(fastfallback_proto::Alpn::H2),
            error: None,
        }
    }

    #[test]
    fn bars_are_scaled_to_time_with_tcp_then_tls() {
        let text = plain(&render(&report(), 20));
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(
            rows[0],
            "race to https://example.test:443: won by #2 in 200.0 ms"
        );
        // 20 columns for 200 ms: 10 ms per column.
        assert!(
            rows[2].ends_with("│░                   │ 2001:db8::a"),
            "{}",
            rows[2]
        );
        assert!(
            rows[3].ends_with("│░░░░░░░░░░░░░░░░░░░░│ no answer before the race ended"),
            "{}",
            rows[3]
        );
        assert!(
            rows[4].contains("#1 v6 [2001:db8::a]:443     10.0    200.0  │ ▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒│ cancelled: lost the race (in tcp)"),
            "{}",
            rows[4]
        );
        assert!(
            rows[5].contains("│          ▒▒▒▒▒█████│ won"),
            "{}",
            rows[5]
        );
        assert_eq!(rows[7], "  winner  #2 192.0.2.1:443 (IPv4), ALPN h2");
        assert_eq!(
            rows[8],
            "  timing  dns 10.0 ms + waiting 90.0 ms + tcp 50.0 ms + tls 50.0 ms = 200.0 ms"
        );
    }

    #[test]
    fn a_quic_attempt_is_one_bar_of_its_own_and_a_quic_winner_times_one_handshake() {
        // T44's shape: QUIC on v6 from 10 to 40 ms wins; TCP never started.
        let mut r = report();
        r.attempts.truncate(1);
        let quic = &mut r.attempts[0];
        quic.transport = TransportKind::Quic;
        quic.ended = Some(ms(40));
        quic.outcome = AttemptOutcome::Won;
        r.winner = Some(1);
        r.elapsed = ms(40);
        r.alpn = Some(fastfallback_proto::Alpn::H3);
        let text = plain(&render(&r, 20));
        let rows: Vec<&str> = text.lines().collect();
        let attempt = rows
            .iter()
            .find(|l| l.contains("#1 v6"))
            .expect("the attempt row");
        assert!(
            attempt.contains("#1 v6 quic [2001:db8::a]:443")
                && attempt.contains("▓▓▓▓▓▓▓▓▓▓▓▓▓▓▓│ won"),
            "{text}"
        );
        assert!(!attempt.contains('▒') && !attempt.contains('█'), "{text}");
        assert!(text.contains("▓ quic"), "the legend names it\n{text}");
        assert!(text.contains("ALPN h3"), "{text}");
        assert!(
            text.contains("timing  dns 10.0 ms + waiting 0.0 ms + quic 30.0 ms = 40.0 ms"),
            "{text}"
        );
        // A race without QUIC keeps its legend as it was.
        assert!(!plain(&render(&report(), 20)).contains("quic"));
    }

    #[test]
    fn colour_marks_outcomes_and_is_stripped_to_plain_text() {
        let styled = render(&report(), 20);
        assert!(styled.contains(&format!("{}won", GREEN.bold())), "{styled}");
        assert!(styled.contains(&format!("{YELLOW}cancelled")));
        assert!(!plain(&styled).contains('\u{1b}'));
    }

    #[test]
    fn a_failed_race_shows_its_error_and_no_timing() {
        let mut r = report();
        r.winner = None;
        r.attempts[1].outcome = AttemptOutcome::Failed(fastfallback_proto::AttemptError::new(
            fastfallback_proto::AttemptErrorKind::Refused,
            Phase::Tcp,
            "refused",
        ));
        r.error = Some(failure("every attempt failed".to_owned()));
        let text = plain(&render(&r, 20));
        assert!(text.starts_with("race to https://example.test:443: failed in 200.0 ms"));
        assert!(text.contains("failed: connection refused"), "{text}");
        assert!(text.contains("  error   every attempt failed"));
        assert!(!text.contains("timing"));
    }

    #[test]
    fn strings_from_the_network_are_drawn_escaped_even_in_colour() {
        const TITLE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J";
        let mut r = report();
        r.queries.push(QueryReport {
            kind: QueryKind::Https,
            name: Some(format!("svc{TITLE}.example.test")),
            sent: ms(0),
            answered: Some(ms(5)),
            answer: Some(AnswerReport::Https(vec![fastfallback_net::HttpsReport {
                priority: 1,
                target: format!("t{TITLE}.example.test"),
                alpn: vec![format!("h2{TITLE}")],
                port: None,
                hints: Vec::new(),
                ech: false,
            }])),
            unlisted: 0,
        });
        r.alpn = Some(fastfallback_proto::Alpn::Other(
            format!("x{TITLE}").into_bytes(),
        ));
        r.attempts[0].outcome = AttemptOutcome::Failed(fastfallback_proto::AttemptError::new(
            fastfallback_proto::AttemptErrorKind::Tls,
            Phase::Tls,
            format!("alert from the peer{TITLE}"),
        ));
        r.error = Some(failure(format!("the server said{TITLE}")));
        let styled = render(&r, 20);
        // Our own styles are there; none of the network's escapes are.
        assert!(styled.contains(&format!("{}won", GREEN.bold())), "{styled}");
        assert!(
            !styled.contains("\u{1b}]") && !styled.contains("\u{1b}[2J"),
            "{styled:?}"
        );
        assert!(!styled.contains('\u{7}'), "{styled:?}");
        let text = plain(&styled);
        let shown = "\\x1b]0;owned\\x07\\x1b[2J";
        for expected in [
            format!("dns HTTPS svc{shown}.example.test"),
            format!("1 t{shown}.example.test alpn=h2{shown}"),
            format!("alert from the peer{shown}"),
            format!("ALPN x{shown}"),
            format!("error   the server said{shown}"),
        ] {
            assert!(
                text.contains(&expected),
                "{expected:?} missing from\n{text}"
            );
        }
    }

    #[test]
    fn a_long_answer_is_listed_in_part_with_a_count_of_the_rest() {
        let mut r = report();
        r.queries[0].answer = Some(AnswerReport::Addresses(
            (1..=16u16)
                .map(|i| std::net::IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, i]))
                .collect(),
        ));
        r.queries[0].unlisted = 3_984;
        let text = plain(&render(&r, 20));
        let row = text.lines().nth(2).unwrap();
        assert!(row.ends_with("2001:db8::10, and 3984 more"), "{row}");
    }

    #[test]
    fn an_instant_attempt_still_gets_one_column() {
        assert_eq!(bar(3, 3, 3, TCP, TLS, 5), "   ▒ ");
        assert_eq!(bar(5, 5, 5, TCP, TLS, 5), "    ▒");
    }
}
