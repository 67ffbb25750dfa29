//! Races to one or more origins and shows what happened.
//!
//! ```text
//! cargo run --release --example connect -- ORIGIN [ORIGIN ...] [--tls] [--json] [--dns IP:PORT] [--memory FILE]
//! ```
//!
//! - An origin is `HOST:PORT` (plain TCP) or a URL (`tcp://`, `http://`, `https://`).
//! - Names are resolved through the system configuration (`/etc/resolv.conf`, `/etc/hosts`),
//!   or through one name server with `--dns`.
//! - `--tls` connects `HOST:PORT` origins with TLS (`https://HOST:PORT`), offering h2 and
//!   http/1.1.
//! - `--memory FILE` keeps route memory in FILE: a later run starts from what this one learned.
//! - Several origins are contacted in turn by one connector, so the second contact shows what
//!   route memory learned from the first.
//! - `--json` prints one JSON object: `{"contacts": [report, ...]}`.
//!
//! The exit status is 0 when every contact connected, 1 otherwise, 2 for bad arguments.

use std::process::ExitCode;

use fastfallback_net::{Connector, HickoryResolver, RaceReport};

struct Args {
    targets: Vec<String>,
    tls: bool,
    json: bool,
    dns: Option<std::net::SocketAddr>,
    memory: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        targets: Vec::new(),
        tls: false,
        json: false,
        dns: None,
        memory: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--tls" => args.tls = true,
            "--json" => args.json = true,
            "--dns" => {
                let v = it.next().ok_or("--dns needs IP:PORT")?;
                args.dns = Some(v.parse().map_err(|e| format!("--dns {v}: {e}"))?);
            }
            "--memory" => {
                let v = it.next().ok_or("--memory needs a FILE")?;
                args.memory = Some(v.into());
            }
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            target => args.targets.push(target.to_owned()),
        }
    }
    if args.targets.is_empty() {
        return Err("give at least one HOST:PORT".to_owned());
    }
    Ok(args)
}

const USAGE: &str =
    "usage: connect ORIGIN [ORIGIN ...] [--tls] [--json] [--dns IP:PORT] [--memory FILE]";

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let resolver = match args.dns {
        Some(server) => HickoryResolver::with_name_server(server),
        None => HickoryResolver::from_system_conf(),
    };
    let connector = match resolver.map_err(|e| e.to_string()).and_then(|r| {
        let builder = Connector::builder().resolver(r);
        let builder = match &args.memory {
            Some(path) => builder.memory_file(path),
            None => builder,
        };
        builder.build().map_err(|e| e.to_string())
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut reports: Vec<RaceReport> = Vec::new();
    let mut all_ok = true;
    for target in &args.targets {
        let origin = match (target.contains("://"), args.tls) {
            (true, _) => target.clone(),
            (false, true) => format!("https://{target}"),
            (false, false) => format!("tcp://{target}"),
        };
        let report = match connector.connect(&origin).await {
            Ok(conn) => conn.into_parts().1,
            Err(e) => {
                all_ok = false;
                match e.report() {
                    Some(r) => r.clone(),
                    None => {
                        eprintln!("{origin}: {e}");
                        continue;
                    }
                }
            }
        };
        if !args.json {
            println!("{report}\n");
        }
        reports.push(report);
    }
    if args.json {
        let body: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or_default())
            .collect();
        println!("{}", serde_json::json!({ "contacts": body }));
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
