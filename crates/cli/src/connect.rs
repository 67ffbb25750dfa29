//! `fastfallback connect`: race to origins for real and draw each race.

use std::io::IsTerminal;

use clap::Args;
use fastfallback_net::{Connector, RaceReport};

use crate::Outcome;
use crate::setup::{ConnectorArgs, SetupError, origin_of, policy_help, progress, runtime};
use crate::text::{escaped, redacted, scrubbed};
use crate::waterfall;

/// `connect`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = policy_help())]
pub(crate) struct ConnectArgs {
    /// Origins: URLs (`tcp://`, `http://`, `https://`) or HOST:PORT (plain TCP, or TLS with
    /// --tls). IPv6 literals go in brackets: `[2001:db8::1]:443`.
    #[arg(required = true, value_name = "URL|HOST:PORT")]
    targets: Vec<String>,
    /// Connect HOST:PORT targets with TLS.
    #[arg(long)]
    tls: bool,
    /// Print one JSON object, `{"contacts": [report, ...]}` (docs/report-json.md), instead of
    /// waterfalls.
    #[arg(long)]
    json: bool,
    /// Width of the waterfall's bars, in columns (10 to 1000).
    #[arg(long, default_value_t = 40, value_name = "COLUMNS", value_parser = crate::setup::parse_width)]
    width: usize,
    #[command(flatten)]
    connector: ConnectorArgs,
}

impl ConnectArgs {
    /// Checks what clap leaves unchecked, for a usage error (exit 2): every target is an
    /// origin, and the connector's options. The message never repeats a password.
    pub(crate) fn check(&self) -> Result<(), String> {
        for target in &self.targets {
            let origin = origin_of(target, self.tls);
            if let Err(e) = fastfallback_route::Address::parse(&origin) {
                return Err(format!(
                    "invalid origin {}: {}",
                    escaped(&redacted(&origin)),
                    escaped(&scrubbed(&e.to_string(), &origin))
                ));
            }
        }
        self.connector.check()
    }
}

/// One contact's result: a report, or an error that came before any race.
enum Contact {
    Raced { report: RaceReport, ok: bool },
    Refused { origin: String, error: String },
}

pub(crate) fn run(args: ConnectArgs) -> Outcome {
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let connector = args.connector.connector()?;
            Ok::<_, SetupError>(contact_all(&connector, &args).await)
        })
    });
    let contacts = match result {
        Ok(c) => c,
        Err(SetupError(e)) => {
            anstream::eprintln!("fastfallback: {e}");
            return Outcome::Setup;
        }
    };
    let all_ok = contacts
        .iter()
        .all(|c| matches!(c, Contact::Raced { ok: true, .. }));
    if args.json {
        let body: Vec<serde_json::Value> = contacts
            .iter()
            .map(|c| match c {
                Contact::Raced { report, .. } => {
                    serde_json::to_value(report).unwrap_or(serde_json::Value::Null)
                }
                Contact::Refused { origin, error } => {
                    serde_json::json!({ "origin": origin, "error": error })
                }
            })
            .collect();
        println!("{}", serde_json::json!({ "contacts": body }));
    }
    if all_ok {
        Outcome::Success
    } else {
        Outcome::Failed
    }
}

async fn contact_all(connector: &Connector, args: &ConnectArgs) -> Vec<Contact> {
    let mut contacts = Vec::with_capacity(args.targets.len());
    for target in &args.targets {
        let origin = origin_of(target, args.tls);
        let spinner = (std::io::stderr().is_terminal() && !args.json)
            .then(|| progress(format!("racing to {}", escaped(&redacted(&origin)))));
        let result = connector.connect(&origin).await;
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        let contact = match result {
            Ok(conn) => Contact::Raced {
                report: conn.into_parts().1,
                ok: true,
            },
            Err(e) => match e.report() {
                Some(r) => Contact::Raced {
                    report: r.clone(),
                    ok: false,
                },
                // Never the origin as typed, which may hold a password.
                None => Contact::Refused {
                    origin: redacted(&origin).into_owned(),
                    error: scrubbed(&e.to_string(), &origin).into_owned(),
                },
            },
        };
        if !args.json {
            match &contact {
                Contact::Raced { report, .. } => {
                    anstream::println!("{}", waterfall::render(report, args.width));
                }
                Contact::Refused { origin, error } => {
                    anstream::eprintln!("fastfallback: {}: {}", escaped(origin), escaped(error));
                }
            }
        }
        contacts.push(contact);
    }
    contacts
}
