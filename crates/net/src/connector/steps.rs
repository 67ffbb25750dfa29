//! An attempt's steps as futures: TCP (or a user's dialer), the proxy tunnel, TLS. The race
//! polls them in `Race::poll_event`, which hands what each ends with straight to the race.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use fastfallback_plan::ConnectPlan;
use fastfallback_proto::{Alpn, AttemptError, AttemptId, Phase};
use fastfallback_route::{Address, Host, Proxy};
use rustls::ClientConfig;

use crate::attempt::{TcpConnect, attempt_error, handshake};
use crate::{Resolve, SocketOptions, Stream, Transport};

use super::shared::*;

pub(super) type StepFuture<T> = Pin<Box<dyn Future<Output = Result<T, AttemptError>> + Send>>;

/// What an attempt does after its TCP handshake: the proxy tunnel when its route has a proxy,
/// then TLS when its plan has it. Built when TCP connects, from the plan.
pub(super) struct AfterTcp {
    pub(super) config: Arc<ClientConfig>,
    pub(super) tls: Option<Arc<fastfallback_plan::TlsStep>>,
    pub(super) tunnel: Option<Tunnel>,
}

/// A tunnel to open: through this proxy, to this origin host and port, resolving with this
/// resolver when the proxy wants an address.
pub(super) struct Tunnel {
    pub(super) proxy: Arc<Proxy>,
    pub(super) host: Host,
    pub(super) port: u16,
    pub(super) resolver: Arc<dyn Resolve>,
}

impl AfterTcp {
    pub(super) fn new(inner: &Inner, origin: &Address, plan: &ConnectPlan) -> Self {
        let config = match plan.tls.as_ref().map_or(0, |t| t.config) {
            0 => &inner.tls,
            n => inner.tls_fallbacks.get(n - 1).unwrap_or(&inner.tls),
        };
        let config = match (plan.tls.as_deref(), &inner.ech) {
            (
                Some(fastfallback_plan::TlsStep {
                    ech: Some(list), ..
                }),
                Some(ech),
            ) => {
                ech.config(list).unwrap_or_else(|e| {
                    // No configuration in the list is one rustls can use: connect as a
                    // client without ECH would.
                    tracing::warn!(error = %e, "unusable ECH configuration; connecting without ECH");
                    Arc::clone(config)
                })
            }
            (
                Some(fastfallback_plan::TlsStep {
                    ech: None,
                    config: 0,
                    ..
                }),
                Some(ech),
            ) => Arc::clone(ech.grease().unwrap_or(config)),
            _ => Arc::clone(config),
        };
        Self {
            config,
            tls: plan.tls.clone(),
            tunnel: plan
                .route
                .proxy
                .clone()
                .filter(|_| plan.tunnel)
                .map(|proxy| Tunnel {
                    proxy,
                    host: origin.host().clone(),
                    port: origin.port(),
                    resolver: Arc::clone(&inner.resolver),
                }),
        }
    }

    pub(super) async fn run(
        self,
        transport: Transport,
    ) -> Result<(Stream, Option<Alpn>), AttemptError> {
        let transport = match self.tunnel {
            Some(t) => t.open(transport).await?,
            None => transport,
        };
        match &self.tls {
            Some(step) => handshake(transport, step, &self.config).await,
            None => Ok((Stream::Plain(transport), None)),
        }
    }
}

impl Tunnel {
    /// Opens the tunnel over `transport`, connected to the proxy.
    pub(super) async fn open(self, transport: Transport) -> Result<Transport, AttemptError> {
        let Self {
            proxy,
            host,
            port,
            resolver,
        } = self;
        crate::proxy::open(transport, &proxy, &host, port, resolver.as_ref()).await
    }
}

/// The transport step of an attempt: the default TCP connect (a plain future, no box), or a
/// user's [`Dial`](crate::Dial).
pub(super) enum TcpStep {
    /// The default connect, not started: the socket opens when the driver first polls it, so
    /// an attempt cancelled in the turn that started it (a pooled connection came first)
    /// never sends a SYN.
    Unstarted(SocketAddr),
    Direct(TcpConnect),
    Dialed(crate::attempt::Dialing),
}

impl TcpStep {
    /// Opens the socket of an unstarted default connect.
    pub(super) fn start(&mut self, options: &SocketOptions) {
        if let Self::Unstarted(target) = *self {
            *self = Self::Direct(TcpConnect::start(target, options));
        }
    }

    /// Polls the step, opening its socket first if it has not (the check is inlined: only
    /// the first poll makes the call that opens it).
    #[inline]
    pub(super) fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        options: &SocketOptions,
    ) -> Poll<Result<Transport, AttemptError>> {
        if matches!(self, Self::Unstarted(_)) {
            self.start(options);
        }
        Pin::new(self).poll(cx)
    }
}

impl Future for TcpStep {
    type Output = Result<Transport, AttemptError>;

    /// Polls a started step ([`TcpStep::start`] comes first).
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Direct(f) => Pin::new(f).poll(cx),
            Self::Dialed(f) => f
                .as_mut()
                .poll(cx)
                .map_err(|e| attempt_error(&e, Phase::Tcp, "connect")),
            Self::Unstarted(_) => Poll::Ready(Err(attempt_error(
                &io::Error::other("polled before it started"),
                Phase::Tcp,
                "connect",
            ))),
        }
    }
}

/// The step an attempt is in: each is one future, dropped to cancel.
pub(super) enum Step {
    Tcp(TcpStep),
    /// TCP to the proxy is connected; the tunnel to the origin is being opened.
    Tunnel(StepFuture<Transport>),
    /// TCP is done and the plan holds TLS until the race says [`Output::ResumeAttempt`]
    /// (boxed: rare, and it keeps every running attempt small).
    Held(Option<Box<Transport>>),
    Tls(StepFuture<(Stream, Option<Alpn>)>),
}

/// An attempt in flight. Its plan is the race's record of it
/// ([`FastFallbackExchangeFinder::attempt`]): the driver keeps no copy, so a running attempt
/// is small enough to move without a call.
pub(super) struct Running {
    pub(super) id: AttemptId,
    pub(super) step: Step,
    /// The attempt's tracing span, entered whenever its step is polled.
    pub(super) span: Option<Box<tracing::Span>>,
}

impl Running {
    /// Whether the attempt holds nothing any more: a default TCP connect that handed its
    /// stream over, without a span.
    pub(super) fn is_spent(&self) -> bool {
        self.span.is_none() && matches!(&self.step, Step::Tcp(TcpStep::Direct(c)) if c.is_spent())
    }
}
