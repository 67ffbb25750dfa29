//! [`ConnectPlan`]: what one attempt does.

use std::fmt;
use std::sync::Arc;

use fastfallback_proto::{Alpn, TransportKind};
use fastfallback_route::Route;

/// The TLS step of a plan.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TlsStep {
    /// The name sent in SNI and checked against the certificate: always the origin, never an
    /// HTTPS record's TargetName (RFC 9460 §9.4).
    pub server_name: String,
    /// ALPN ids to offer, in preference order. Every protocol the client speaks over TCP is
    /// offered, whatever the HTTPS record lists (RFC 9460 §7.1.2, HEv3 §6.2).
    pub alpn: Vec<Alpn>,
    /// Which of the driver's TLS configurations to use: 0 is the first; a follow-up plan after
    /// a handshake failure that another configuration can fix names the next one (OkHttp's
    /// connection specs, "attempted in sequence until the TLS handshake succeeds").
    pub config: usize,
    /// The ECHConfigList to encrypt the ClientHello with (draft-ietf-tls-esni), from the
    /// service's HTTPS record, or from the server's retry configurations after it rejected
    /// ECH. SNI and ALPN go in the inner ClientHello; the configuration's public name goes in
    /// the outer one.
    pub ech: Option<Arc<[u8]>>,
    /// Whether this step is the one retry with the server's retry configurations (there is
    /// never a second).
    pub ech_retry: bool,
}

/// The steps of one connection attempt on one route: TCP, then an optional proxy tunnel, then
/// optional TLS with ALPN; or one QUIC handshake, TLS and ALPN `h3` included
/// ([`TransportKind::Quic`], HEv3 §6.1).
///
/// ```
/// use fastfallback_plan::{ConnectPlan, TlsStep};
/// use fastfallback_proto::{Alpn, TransportKind};
/// use fastfallback_route::Route;
/// use std::sync::Arc;
///
/// let mut plan = ConnectPlan {
///     route: Route::direct("[2001:db8::a]:443".parse().unwrap()),
///     transport: TransportKind::Tcp,
///     tunnel: false,
///     tls: Some(Arc::new(TlsStep {
///         server_name: "example.com".into(),
///         alpn: vec![Alpn::H2, Alpn::Http11],
///         config: 0,
///         ech: None,
///         ech_retry: false,
///     })),
///     attempt: 0,
///     hold_tls: false,
///     without_svcb: false,
/// };
/// assert_eq!(plan.to_string(), "tcp [2001:db8::a]:443 → tls example.com [h2, http/1.1]");
/// assert_eq!(plan.retry().attempt, 0);
///
/// plan.transport = TransportKind::Quic;
/// assert_eq!(plan.to_string(), "quic [2001:db8::a]:443 → tls example.com [h2, http/1.1]");
/// ```
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ConnectPlan {
    /// Where the socket connects.
    pub route: Route,
    /// What the attempt connects over: TCP (then the tunnel and TLS), or QUIC, whose
    /// handshake is the whole attempt and whose TLS step offers `h3` alone (HEv3 §6.2: one
    /// ALPN list per transport). QUIC plans never go through a proxy or hold TLS.
    pub transport: TransportKind,
    /// Whether to open an HTTP CONNECT tunnel through the route's proxy before TLS.
    pub tunnel: bool,
    /// The TLS step, for `https` origins (one per race, shared by its attempts).
    pub tls: Option<Arc<TlsStep>>,
    /// How many follow-ups led to this plan (0 for a first plan; OkHttp's `attempt`).
    pub attempt: u32,
    /// Whether the driver stops after TCP and waits for [`Output::ResumeAttempt`] before the
    /// tunnel and TLS: set while an ECH-capable race still waits for its HTTPS answer, so
    /// that the TCP handshake may go ahead but no ClientHello is sent before SVCB resolution
    /// has finished (draft-ietf-tls-esni; HEv3 §6.1 R-34, RFC 9460 §5.1).
    ///
    /// [`Output::ResumeAttempt`]: fastfallback_proto::Output::ResumeAttempt
    pub hold_tls: bool,
    /// Whether the attempt connects without SVCB: to the origin's own address on its own
    /// port, listed after the endpoints of the HTTPS records the race received, for when they
    /// all fail (RFC 9460 §3; [`fastfallback_route::Candidate::without_svcb`]). Shown in the
    /// plan's text.
    pub without_svcb: bool,
}

impl ConnectPlan {
    /// A fresh copy of this plan, to run again after it was cancelled (OkHttp's `retry()`).
    pub fn retry(&self) -> Self {
        self.clone()
    }

    /// A plan for `route`, tunnelling when the route's HTTP proxy must carry TLS.
    pub fn new(route: Route, tls: Option<Arc<TlsStep>>) -> Self {
        // Every proxied route opens a tunnel: HTTP CONNECT or the SOCKS5 handshake.
        let tunnel = route.proxy.is_some();
        Self {
            route,
            transport: TransportKind::Tcp,
            tunnel,
            tls,
            attempt: 0,
            hold_tls: false,
            without_svcb: false,
        }
    }
}

impl fmt::Display for ConnectPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.transport, self.route)?;
        if self.without_svcb {
            f.write_str(" (without SVCB)")?;
        }
        if self.tunnel {
            f.write_str(" → tunnel")?;
        }
        if let Some(tls) = &self.tls {
            write!(f, " → tls {} [", tls.server_name)?;
            for (i, a) in tls.alpn.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{a}")?;
            }
            f.write_str("]")?;
            if tls.config > 0 {
                write!(f, " with TLS configuration #{}", tls.config + 1)?;
            }
            match (&tls.ech, tls.ech_retry) {
                (Some(_), false) => f.write_str(" with ECH")?,
                (Some(_), true) => f.write_str(" with ECH (retry configs)")?,
                (None, _) => {}
            }
            if self.hold_tls {
                f.write_str(" (held for the HTTPS answer)")?;
            }
        }
        Ok(())
    }
}
