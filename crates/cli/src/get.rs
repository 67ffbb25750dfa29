//! `fastfallback get`: one HTTP request through the pool, like curl: the body streams to
//! stdout (or to a file with `-o`) as it arrives, never held whole; status, protocol, timing
//! and the race go to stderr.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use fastfallback_http::Pool;
use fastfallback_net::Source;
use http_body_util::BodyExt;

use crate::Outcome;
use crate::setup::{ConnectorArgs, SetupError, policy_help, progress, runtime};
use crate::text::{escaped, redacted, scrubbed};
use crate::waterfall;

/// `get`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = policy_help())]
pub(crate) struct GetArgs {
    /// The URL (`http://` or `https://`).
    #[arg(value_name = "URL")]
    url: String,
    /// Write the body to FILE instead of stdout (created, or truncated).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// The request method (default GET, or POST with --data).
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    method: Option<String>,
    /// Add a request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Send DATA as the request body (as given; the method becomes POST unless -X says).
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    data: Option<String>,
    /// Fail (exit 1, no body written) when the server answers 400 or above.
    #[arg(long)]
    fail: bool,
    /// Print one JSON object describing the exchange on stdout instead of the body (write the
    /// body with -o FILE): status, protocol, timing, bytes and the race report.
    #[arg(long)]
    json: bool,
    /// Accepted for compatibility: the body always goes to stdout unless -o or --json.
    #[arg(long, hide = true)]
    body: bool,
    /// Width of the waterfall's bars, in columns (10 to 1000).
    #[arg(long, default_value_t = 40, value_name = "COLUMNS", value_parser = crate::setup::parse_width)]
    width: usize,
    #[command(flatten)]
    connector: ConnectorArgs,
}

/// The request `GetArgs` describe, checked.
struct Request {
    /// The URI sent, without userinfo (a password in the URL is never sent as typed).
    uri: http::Uri,
    /// `scheme://host:port` for the pool.
    origin: String,
    method: http::Method,
    headers: http::HeaderMap,
}

impl GetArgs {
    /// Checks what clap leaves unchecked, for a usage error (exit 2): the URL, the method,
    /// the headers and the connector's options. The message never repeats a password.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.request().map(drop)?;
        self.connector.check()?;
        // A QUIC winner carries HTTP/3: only a build whose pool speaks it can take one.
        if cfg!(not(feature = "quic")) && self.connector.policy().is_ok_and(|p| p.quic) {
            return Err(
                "quic=true: this build of `get` speaks HTTP/1.1 and HTTP/2 only \
                 (build fastfallback-cli with its `quic` feature)"
                    .to_owned(),
            );
        }
        Ok(())
    }

    fn request(&self) -> Result<Request, String> {
        let shown = || escaped(&redacted(&self.url)).into_owned();
        let bad = |why: &str| format!("invalid URL {}: {}", shown(), escaped(why));
        let uri: http::Uri = self
            .url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(bad("not an absolute http:// or https:// URL"));
        };
        if !matches!(scheme, "http" | "https") {
            return Err(bad("not an http:// or https:// URL"));
        }
        let host_port = authority
            .as_str()
            .rsplit_once('@')
            .map_or(authority.as_str(), |(_, h)| h);
        let origin = format!("{scheme}://{host_port}");
        if let Err(e) = fastfallback_route::Address::parse(&origin) {
            return Err(bad(&scrubbed(&e.to_string(), &self.url)));
        }
        let mut parts = http::uri::Parts::default();
        parts.scheme = uri.scheme().cloned();
        parts.authority = Some(
            host_port
                .parse()
                .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?,
        );
        parts.path_and_query = uri.path_and_query().cloned();
        let uri = http::Uri::from_parts(parts).map_err(|e| bad(&e.to_string()))?;

        let method = match (&self.method, &self.data) {
            (Some(m), _) => http::Method::from_bytes(m.as_bytes())
                .map_err(|_| format!("invalid method {:?}", escaped(m)))?,
            (None, Some(_)) => http::Method::POST,
            (None, None) => http::Method::GET,
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("fastfallback/", env!("CARGO_PKG_VERSION"))),
        );
        for h in &self.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("header {:?} is not `Name: value`", escaped(h)))?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("invalid header name {:?}", escaped(name.trim())))?;
            let value = http::HeaderValue::from_str(value.trim())
                .map_err(|_| format!("invalid value for header {name}"))?;
            headers.insert(name, value);
        }
        Ok(Request {
            uri,
            origin,
            method,
            headers,
        })
    }
}

/// Where the body goes.
enum Sink {
    Stdout(std::io::Stdout),
    File(std::io::BufWriter<std::fs::File>),
    /// `--json` without `-o`: the body is read and counted, not kept.
    Discard,
}

impl Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stdout(out) => out.write_all(bytes),
            Self::File(f) => f.write_all(bytes),
            Self::Discard => Ok(()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(out) => out.flush(),
            Self::File(f) => f.flush(),
            Self::Discard => Ok(()),
        }
    }
}

/// What one exchange did.
struct Fetched {
    status: http::StatusCode,
    version: http::Version,
    source: Source,
    report: Option<fastfallback_net::RaceReport>,
    connect: Duration,
    first_byte: Duration,
    total: Duration,
    bytes: u64,
}

/// How an exchange failed.
enum Failure {
    /// The connection, the request or the response failed.
    Exchange(String),
    /// `--fail` and a status of 400 or more.
    Status(http::StatusCode),
    /// The body could not be written.
    Write(std::io::Error),
}

/// `HTTP/1.1`, `HTTP/2`: the protocol as people write it.
fn protocol(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/?",
    }
}

fn source_text(source: Source) -> (&'static str, &'static str) {
    match source {
        Source::New => ("new", "on a new connection"),
        Source::Pool => ("pool", "on a pooled connection"),
        Source::PooledMidRace => ("pooled_mid_race", "on a connection pooled mid-race"),
        Source::Coalesced => ("coalesced", "on a coalesced HTTP/2 connection"),
        _ => ("shared", "on a shared connection"),
    }
}

pub(crate) fn run(args: GetArgs) -> Outcome {
    let request = match args.request() {
        Ok(r) => r,
        // `check` ran first; this is only a second line of defence.
        Err(e) => {
            anstream::eprintln!("fastfallback: {e}");
            return Outcome::Failed;
        }
    };
    let shown_url = escaped(&redacted(&args.url)).into_owned();
    let mut sink = match (&args.output, args.json) {
        (Some(path), _) => match std::fs::File::create(path) {
            Ok(f) => Sink::File(std::io::BufWriter::with_capacity(64 * 1024, f)),
            Err(e) => {
                anstream::eprintln!(
                    "fastfallback: -o {}: {e}",
                    escaped(&path.display().to_string())
                );
                return Outcome::Setup;
            }
        },
        (None, true) => Sink::Discard,
        (None, false) => Sink::Stdout(std::io::stdout()),
    };
    let result = runtime().and_then(|rt| {
        rt.block_on(async {
            let pool = Pool::new(args.connector.connector()?);
            Ok::<_, SetupError>(fetch(&pool, &args, request, &mut sink).await)
        })
    });
    let fetched = match result {
        Ok(Ok(f)) => f,
        Ok(Err(Failure::Exchange(e))) => {
            let e = scrubbed(&e, &args.url);
            anstream::eprintln!("fastfallback: {shown_url}: {}", escaped(&e));
            return Outcome::Failed;
        }
        Ok(Err(Failure::Status(status))) => {
            anstream::eprintln!(
                "fastfallback: {shown_url}: the server answered {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            );
            return Outcome::Failed;
        }
        Ok(Err(Failure::Write(e))) => {
            // A closed pipe (`| head`) is the reader's choice, not a failure worth a line.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                anstream::eprintln!("fastfallback: writing the body: {e}");
            }
            return Outcome::Failed;
        }
        Err(SetupError(e)) => {
            anstream::eprintln!("fastfallback: {e}");
            return Outcome::Setup;
        }
    };
    if args.json {
        println!("{}", json(&fetched, &args.url));
    } else {
        summary(&fetched, args.width);
    }
    Outcome::Success
}

/// Status, protocol, timing and the race, on stderr.
fn summary(fetched: &Fetched, width: usize) {
    let status = fetched.status;
    let reason = status.canonical_reason().unwrap_or("");
    let style = if status.is_success() {
        anstyle::AnsiColor::Green.on_default().bold()
    } else {
        anstyle::AnsiColor::Yellow.on_default().bold()
    };
    anstream::eprintln!(
        "{style}{} {reason}{style:#} over {}, {}",
        status.as_u16(),
        protocol(fetched.version),
        source_text(fetched.source).1
    );
    anstream::eprintln!(
        "  timing  connect {:.1} ms + first byte {:.1} ms + body {:.1} ms = {:.1} ms ({} bytes)",
        ms(fetched.connect),
        ms(fetched.first_byte.saturating_sub(fetched.connect)),
        ms(fetched.total.saturating_sub(fetched.first_byte)),
        ms(fetched.total),
        fetched.bytes
    );
    if let Some(report) = &fetched.report {
        anstream::eprintln!("{}", waterfall::render(report, width));
    }
}

/// The exchange as one JSON object (docs/report-json.md, "`fastfallback get --json`").
fn json(fetched: &Fetched, url: &str) -> serde_json::Value {
    serde_json::json!({
        "url": redacted(url),
        "status": fetched.status.as_u16(),
        "protocol": protocol(fetched.version),
        "source": source_text(fetched.source).0,
        "connect_ms": ms(fetched.connect),
        "first_byte_ms": ms(fetched.first_byte),
        "total_ms": ms(fetched.total),
        "bytes": fetched.bytes,
        "report": fetched.report.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn fetch(
    pool: &Pool,
    args: &GetArgs,
    request: Request,
    sink: &mut Sink,
) -> Result<Fetched, Failure> {
    let exchange_error = |e: &dyn std::fmt::Display| Failure::Exchange(e.to_string());
    let origin = pool
        .origin(&request.origin)
        .map_err(|e| exchange_error(&e))?;
    let spinner = (std::io::stderr().is_terminal()).then(|| {
        progress(format!(
            "{} {}",
            request.method,
            escaped(&redacted(&args.url))
        ))
    });
    let start = Instant::now();
    let exchange = pool.exchange(&origin).await;
    let connect = start.elapsed();
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    let exchange = exchange.map_err(|e| exchange_error(&e))?;
    let (source, report) = (exchange.source(), exchange.report().cloned());
    let mut builder = http::Request::builder()
        .method(request.method)
        .uri(request.uri);
    if let Some(headers) = builder.headers_mut() {
        headers.extend(request.headers);
    }
    let body = Bytes::from(args.data.clone().unwrap_or_default());
    let http_request = builder.body(body).map_err(|e| exchange_error(&e))?;
    let response = exchange
        .send(http_request)
        .await
        .map_err(|e| exchange_error(&e))?;
    let first_byte = start.elapsed();
    let (status, version) = (response.status(), response.version());
    if args.fail && (status.is_client_error() || status.is_server_error()) {
        return Err(Failure::Status(status));
    }
    // Frame by frame: memory stays at one frame, whatever the body's length.
    let mut body = response.into_body();
    let mut bytes = 0u64;
    loop {
        // What has arrived reaches the file or the terminal before waiting for more.
        let next = match futures::FutureExt::now_or_never(body.frame()) {
            Some(next) => next,
            None => {
                sink.flush().map_err(Failure::Write)?;
                body.frame().await
            }
        };
        let Some(frame) = next else {
            break;
        };
        let frame = frame.map_err(|e| exchange_error(&e))?;
        if let Some(data) = frame.data_ref() {
            bytes += data.len() as u64;
            sink.write(data).map_err(Failure::Write)?;
        }
    }
    sink.flush().map_err(Failure::Write)?;
    Ok(Fetched {
        status,
        version,
        source,
        report,
        connect,
        first_byte,
        total: start.elapsed(),
        bytes,
    })
}
