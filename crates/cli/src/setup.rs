//! What `connect` and `get` share: the connector's options, the runtime, the progress line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use fastfallback_net::{Connector, FallbackPolicy, HickoryResolver};
use fastfallback_plan::POLICY_KEYS;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// What TLS attempts offer in ALPN.
#[derive(Clone, Copy, Debug, Eq, PartialEq, ValueEnum)]
pub(crate) enum AlpnArg {
    /// h2, then http/1.1.
    Both,
    /// h2 only.
    H2,
    /// http/1.1 only.
    #[value(name = "http/1.1", alias = "http1")]
    Http11,
}

impl AlpnArg {
    fn as_policy_value(self) -> &'static str {
        match self {
            Self::Both => "both",
            Self::H2 => "h2",
            Self::Http11 => "http/1.1",
        }
    }
}

/// The connector's options, shared by `connect` and `get`.
#[derive(Debug, Args)]
pub(crate) struct ConnectorArgs {
    /// What TLS attempts offer in ALPN.
    #[arg(long, value_enum, default_value_t = AlpnArg::Both)]
    pub(crate) alpn: AlpnArg,
    /// Set a policy knob, e.g. `--policy attempt_delay=100ms` (repeatable; see the list below).
    #[arg(long = "policy", value_name = "KEY=VALUE", value_parser = parse_knob)]
    pub(crate) policy: Vec<(String, String)>,
    /// Ask this name server (UDP and TCP) instead of the system's configuration.
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) dns: Option<SocketAddr>,
    /// Keep route memory in FILE, so the next run starts from what this one learned (a file
    /// that is not route memory is replaced, with a warning; a path that cannot be used, such
    /// as a missing directory or a FIFO, exits 3).
    #[arg(long, value_name = "FILE")]
    pub(crate) memory: Option<PathBuf>,
    /// Trust only the CA certificates in FILE (PEM, or one DER certificate) instead of the
    /// webpki roots.
    #[arg(long, value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,
    /// Connect through this proxy: `http://[user:pass@]host[:port]`, `socks5h://…` (the proxy
    /// resolves names) or `socks5://…` (we do). Repeat it to fail over to the next.
    /// (Checked by [`ConnectorArgs::check`], not by clap, whose errors would repeat a URL
    /// that may hold a password.)
    #[arg(long = "proxy", value_name = "URL")]
    pub(crate) proxies: Vec<String>,
}

fn parse_proxy(s: &str) -> Result<fastfallback_route::Proxy, String> {
    use fastfallback_route::AddressError;
    // The error never repeats the URL, which may hold a password: not even a part of it the
    // parser quotes, such as a password typed without its `@host` (`http://alice:hunter2`
    // reads as host `alice`, port `hunter2`).
    fastfallback_route::Proxy::parse(s).map_err(|e| {
        let why = match e {
            AddressError::BadPort(_) => {
                "the port is not a number in 1..=65535 (credentials go before the host: \
                 http://user:password@host:port)"
                    .to_owned()
            }
            other => crate::text::scrubbed(&other.to_string(), s).into_owned(),
        };
        format!("bad --proxy URL: {}", crate::text::escaped(&why))
    })
}

/// The narrowest and widest waterfall bars `--width` takes.
const WIDTHS: std::ops::RangeInclusive<usize> = 10..=1000;

/// `--width COLUMNS`: a number of columns in [`WIDTHS`].
pub(crate) fn parse_width(s: &str) -> Result<usize, String> {
    let width: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of columns"))?;
    if WIDTHS.contains(&width) {
        Ok(width)
    } else {
        Err(format!(
            "the waterfall's bars take {} to {} columns",
            WIDTHS.start(),
            WIDTHS.end()
        ))
    }
}

/// The list of policy knobs, for `--help`.
pub(crate) fn policy_help() -> String {
    let mut help = String::from("Policy knobs (--policy KEY=VALUE):\n");
    for (key, form) in POLICY_KEYS {
        help.push_str(&format!("  {key:<24} {form}\n"));
    }
    help
}

fn parse_knob(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
    Ok((key.trim().to_owned(), value.trim().to_owned()))
}

/// A setup failure, for exit code 3.
#[derive(Debug)]
pub(crate) struct SetupError(pub(crate) String);

impl ConnectorArgs {
    /// Checks what clap leaves unchecked (the proxy URLs, the policy knobs' values), for a
    /// usage error (exit 2).
    pub(crate) fn check(&self) -> Result<(), String> {
        self.proxies
            .iter()
            .try_for_each(|p| parse_proxy(p).map(drop))?;
        self.policy().map(drop).map_err(|SetupError(e)| e)
    }

    /// The policy these options describe.
    pub(crate) fn policy(&self) -> Result<FallbackPolicy, SetupError> {
        let mut builder = FallbackPolicy::builder()
            .set("alpn", self.alpn.as_policy_value())
            .map_err(|e| SetupError(e.to_string()))?;
        for (key, value) in &self.policy {
            builder = builder
                .set(key, value)
                .map_err(|e| SetupError(e.to_string()))?;
        }
        builder.build().map_err(|e| SetupError(e.to_string()))
    }

    /// The connector these options describe. Call inside the runtime.
    pub(crate) fn connector(&self) -> Result<Connector, SetupError> {
        let resolver = match self.dns {
            Some(server) => HickoryResolver::with_name_server(server),
            None => HickoryResolver::from_system_conf(),
        }
        .map_err(|e| SetupError(format!("DNS: {e}")))?;
        let mut builder = Connector::builder()
            .policy(self.policy()?)
            .resolver(resolver);
        if let Some(path) = &self.memory {
            builder = builder.memory_file(path);
        }
        if let Some(path) = &self.ca {
            builder = builder.root_certificates(roots_from(path)?);
        }
        for proxy in &self.proxies {
            builder = builder.proxy(parse_proxy(proxy).map_err(SetupError)?);
        }
        builder.build().map_err(|e| SetupError(e.to_string()))
    }
}

/// The certificates in a PEM file, or the one certificate of a DER file.
fn roots_from(path: &std::path::Path) -> Result<RootCertStore, SetupError> {
    let bytes =
        std::fs::read(path).map_err(|e| SetupError(format!("--ca {}: {e}", path.display())))?;
    let certs: Vec<CertificateDer<'static>> = if bytes.starts_with(b"-----BEGIN") {
        CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| SetupError(format!("--ca {}: {e}", path.display())))?
    } else {
        vec![CertificateDer::from(bytes)]
    };
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(SetupError(format!(
            "--ca {}: no usable CA certificate ({ignored} unparsable)",
            path.display()
        )));
    }
    Ok(roots)
}

/// Sends the library's log to stderr: warnings and errors unless `RUST_LOG` says otherwise
/// (`RUST_LOG=debug`, `RUST_LOG=fastfallback_net=trace,warn`). A `RUST_LOG` that does not parse
/// is reported and the default kept.
pub(crate) fn install_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = || Targets::new().with_default(LevelFilter::WARN);
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => value.parse().unwrap_or_else(|e| {
            anstream::eprintln!("fastfallback: ignoring RUST_LOG: {e}");
            default()
        }),
        _ => default(),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false);
    tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .init();
}

/// A runtime for one command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, SetupError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SetupError(format!("cannot start the runtime: {e}")))
}

/// The origin to race for a command-line target: URLs as given, `HOST:PORT` as `tcp://` (or
/// `https://` with `tls`).
pub(crate) fn origin_of(target: &str, tls: bool) -> String {
    match (target.contains("://"), tls) {
        (true, _) => target.to_owned(),
        (false, true) => format!("https://{target}"),
        (false, false) => format!("tcp://{target}"),
    }
}

/// A spinner on stderr while a race runs; drawn only on a terminal.
pub(crate) fn progress(message: String) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed_precise}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(80));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_targets_become_tcp_or_https_origins_and_urls_stay() {
        assert_eq!(origin_of("localhost:8080", false), "tcp://localhost:8080");
        assert_eq!(origin_of("localhost:8443", true), "https://localhost:8443");
        assert_eq!(
            origin_of("http://localhost:80", true),
            "http://localhost:80"
        );
    }

    #[test]
    fn knobs_must_be_key_equals_value() {
        assert_eq!(
            parse_knob("attempt_delay = 100ms").unwrap(),
            ("attempt_delay".to_owned(), "100ms".to_owned())
        );
        assert!(parse_knob("attempt_delay").is_err());
    }

    #[test]
    fn a_bad_knob_is_a_setup_error_naming_it() {
        let args = ConnectorArgs {
            alpn: AlpnArg::Both,
            policy: vec![("attempt_delay".into(), "1ms".into())],
            dns: None,
            memory: None,
            ca: None,
            proxies: Vec::new(),
        };
        let err = args.policy().unwrap_err();
        assert!(err.0.contains("attempt_delay"), "{}", err.0);
    }
}
