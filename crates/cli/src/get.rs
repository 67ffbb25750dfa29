//! `fastfallback get`: one HTTP request through the pool.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use fastfallback_net::{Pool, Source};

use crate::Outcome;
use crate::setup::{ConnectorArgs, SetupError, policy_help, progress, runtime};
use crate::waterfall;

/// `get`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = policy_help())]
pub(crate) struct GetArgs {
    /// The URL (`http://` or `https://`).
    #[arg(value_name = "URL")]
    url: String,
    /// Also write the response body to stdout, after the summary.
    #[arg(long)]
    body: bool,
    /// Width of the waterfall's bars, in columns.
    #[arg(long, default_value_t = 40, value_name = "COLUMNS")]
    width: usize,
    #[command(flatten)]
    connector: ConnectorArgs,
}

impl GetArgs {
    /// The connector's options.
    pub(crate) fn connector(&self) -> &ConnectorArgs {
        &self.connector
    }
}

/// What one request did.
struct Fetched {
    status: http::StatusCode,
    version: http::Version,
    source: Source,
    report: Option<fastfallback_net::RaceReport>,
    connect: Duration,
    first_byte: Duration,
    total: Duration,
    body: Bytes,
}

pub(crate) fn run(args: GetArgs) -> Outcome {
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let pool = Pool::new(args.connector.connector()?);
            Ok::<_, SetupError>(fetch(&pool, &args).await)
        })
    });
    let fetched = match result {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            anstream::eprintln!("fastfallback: GET {}: {e}", args.url);
            return Outcome::Failed;
        }
        Err(SetupError(e)) => {
            anstream::eprintln!("fastfallback: {e}");
            return Outcome::Setup;
        }
    };
    let status = fetched.status;
    let reason = status.canonical_reason().unwrap_or("");
    let style = if status.is_success() {
        anstyle::AnsiColor::Green.on_default().bold()
    } else {
        anstyle::AnsiColor::Yellow.on_default().bold()
    };
    anstream::println!(
        "{style}{} {reason}{style:#} over {:?}, {}",
        status.as_u16(),
        fetched.version,
        match fetched.source {
            Source::New => "on a new connection",
            Source::Pool => "on a pooled connection",
            Source::PooledMidRace => "on a connection pooled mid-race",
            Source::Coalesced => "on a coalesced HTTP/2 connection",
            _ => "on a shared connection",
        }
    );
    anstream::println!(
        "  timing  connect {:.1} ms + first byte {:.1} ms + body {:.1} ms = {:.1} ms ({} bytes)",
        ms(fetched.connect),
        ms(fetched.first_byte - fetched.connect),
        ms(fetched.total - fetched.first_byte),
        ms(fetched.total),
        fetched.body.len()
    );
    if let Some(report) = &fetched.report {
        anstream::println!("{}", waterfall::render(report, args.width));
    }
    if args.body {
        let mut out = std::io::stdout();
        if out
            .write_all(&fetched.body)
            .and_then(|()| out.flush())
            .is_err()
        {
            return Outcome::Failed;
        }
    }
    Outcome::Success
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn fetch(pool: &Pool, args: &GetArgs) -> Result<Fetched, Box<dyn std::error::Error>> {
    let uri: http::Uri = args.url.parse()?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("`{}` is not an absolute http(s) URL", args.url).into());
    };
    let origin = pool.origin(&format!("{scheme}://{authority}"))?;
    let spinner = std::io::stderr()
        .is_terminal()
        .then(|| progress(format!("GET {}", args.url)));
    let start = Instant::now();
    let exchange = pool.exchange(&origin).await;
    let connect = start.elapsed();
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    let exchange = exchange?;
    let (source, report) = (exchange.source(), exchange.report().cloned());
    let request = http::Request::get(uri)
        .header(
            http::header::USER_AGENT,
            concat!("fastfallback/", env!("CARGO_PKG_VERSION")),
        )
        .body(Bytes::new())?;
    let response = exchange.send(request).await?;
    let first_byte = start.elapsed();
    let (status, version) = (response.status(), response.version());
    let body = response.into_body().bytes().await?;
    Ok(Fetched {
        status,
        version,
        source,
        report,
        connect,
        first_byte,
        total: start.elapsed(),
        body,
    })
}
