//! # fastfallback-net
//!
//! The driver: it runs fastfallback's sans-IO race ([`fastfallback_plan`]) on tokio, with real
//! DNS, sockets and TLS.
//!
//! - [`Connector`]: the entry point. `connect("https://host")` races and returns a
//!   [`Connection`] whose [`RaceReport`] tells what happened.
//! - [`Resolve`]: one DNS query per record type; [`HickoryResolver`] implements it with
//!   hickory-resolver (separate AAAA, A and HTTPS lookups, each fed to the race as it arrives).
//! - [`SocketOptions`]: `TCP_NODELAY`, keepalive, local address and interface, set before
//!   connect.
//! - [`KernelSources`]: RFC 6724 source address selection asked of the kernel, outside the
//!   race; the answers go in with each DNS answer.
//! - [`Dial`]: the seam for supplying your own sockets (and fakes in tests).
//! - [`link`]: the seam a connection pool links races through (single flight, connections
//!   offered mid-race, resolved addresses, kept attempts). `fastfallback-http` builds its
//!   `Pool` on it; this crate knows nothing of HTTP.
//!
//! Features: `aws-lc-rs` (default) or `ring`: rustls's crypto backend, used when the application installed no process-wide `CryptoProvider`;
//! `platform-verifier`: `ConnectorBuilder::platform_verifier`, the operating system's
//! certificate verifier instead of the webpki roots; `quic`: QUIC attempts with quinn
//! (a policy with `FallbackPolicy::quic` on races QUIC against TCP, HEv3 §6, and a QUIC
//! winner is a [`Stream::Quic`]).
//!
//! All clocks, sockets and sleeps of fastfallback live here; the domain crates get time and
//! results handed in.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fastfallback_net::Connector;
//!
//! let connector = Connector::builder().build()?;
//! let conn = connector.connect("example.com:80").await?;
//! println!("connected to {} in {:.1} ms", conn.peer_addr(), conn.report().elapsed.as_secs_f64() * 1e3);
//! println!("{}", conn.report());
//! # Ok(()) }
//! ```

mod answer_cache;
mod attempt;
mod connectivity;
mod connector;
mod ech;
mod events;
pub mod link;
mod memory_file;
mod proxy;
#[cfg(feature = "quic")]
mod quic;
mod report;
mod resolve;
mod shown;
mod source;

pub use attempt::{Dial, Dialing, Io, SocketOptions, Stream, Transport};
pub use connectivity::{NetworkState, detect_connectivity, detect_network};
pub use connector::{
    BuildError, ConnectError, Connection, Connector, ConnectorBuilder, RaceFailure,
};
pub use events::{CallEvent, ConnectionEvent, ConnectionListener, EventListener, Source};
#[cfg(feature = "quic")]
pub use quic::QuicConnection;
/// quinn, whose `Connection` a QUIC winner carries ([`QuicConnection::connection`]).
#[cfg(feature = "quic")]
pub use quinn;
pub use report::{
    AnswerReport, AttemptOutcome, AttemptReport, Breakdown, HttpsReport, MAX_RECORDS_LISTED,
    QueryReport, RaceReport, ReportError,
};
pub use resolve::{Answer, HickoryResolver, Resolve, ResolverError, StaticResolver};
pub use shown::escaped;
pub use source::KernelSources;

pub use fastfallback_plan::FallbackPolicy;
pub use fastfallback_proto::{DnsAnswer, QueryKind};
pub use fastfallback_route::{Connectivity, NetworkId};
