//! Sending an HTTP/2 or HTTP/3 request once more, through the pool, when the server never
//! processed it (RFC 9113 §8.7, RFC 9114 §4.1.1) or a coalesced connection turned out to be
//! the wrong one (RFC 9110 §15.5.20), or a request sent in 0-RTT was answered 425 Too Early
//! (RFC 8470 §5.2). Once only: the second answer, whatever it is, is the caller's.

use std::sync::Arc;

use bytes::Bytes;
use fastfallback_proto::PooledId;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

use super::{BoxError, CallEnd, Carrier, Exchange, Keeper};
use crate::pool::{Body, Call, ExchangeError, Origin, SentEarly, copy_request};
use fastfallback_net::{CallEvent, EventListener, Source};

/// A send that failed, and what is known of whether the request reached the server's
/// processing.
pub(in crate::pool) struct Failed {
    pub(super) error: ExchangeError,
    reach: Reach,
}

/// How far a failed request may have got.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// It never left, or the server said it did not process it.
    Unsent,
    /// It may have been processed.
    Sent,
    /// It may have been processed, and then its connection went away under it (a broken
    /// connection, a GOAWAY; on HTTP/3 a QUIC connection that timed out or was closed).
    ConnectionGone,
}

impl Failed {
    /// The request never left.
    pub(super) fn unsent(error: ExchangeError) -> Self {
        Self {
            error,
            reach: Reach::Unsent,
        }
    }

    /// The request may have reached the server.
    pub(super) fn sent(error: ExchangeError) -> Self {
        Self {
            error,
            reach: Reach::Sent,
        }
    }

    /// The request may have reached the server, and its connection went away before the
    /// answer came (HTTP/3's; HTTP/2's errors are placed by [`Self::h2`]).
    #[cfg(feature = "http3")]
    pub(super) fn connection_gone(error: ExchangeError) -> Self {
        Self {
            error,
            reach: Reach::ConnectionGone,
        }
    }

    /// The request cannot be sent as given (never retried: it would fail the same way).
    pub(super) fn invalid(e: impl std::fmt::Display) -> Self {
        Self::sent(ExchangeError::invalid(e))
    }

    /// An HTTP/2 stream's error, placed by what h2 says of it: the server did not process
    /// the request (REFUSED_STREAM, RFC 9113 §8.7; its graceful GOAWAY, NO_ERROR: it finishes
    /// what it processed, §6.8), or the connection went away under it (any other GOAWAY from
    /// the server, a broken connection). h2 does not say which stream a GOAWAY named as the
    /// last processed one, hence the reading of the reason.
    pub(super) fn h2(e: h2::Error) -> Self {
        let reach = if e.is_io() {
            Reach::ConnectionGone
        } else if !e.is_remote() {
            Reach::Sent
        } else if e.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR))
        {
            Reach::Unsent
        } else if e.is_go_away() {
            Reach::ConnectionGone
        } else {
            Reach::Sent
        };
        Self {
            error: ExchangeError::Http2(e),
            reach,
        }
    }

    /// Whether the request may be sent again: the server did not process it (never sent,
    /// or refused unprocessed: RFC 9113 §8.7, RFC 9114 §4.1.1), or it is idempotent (RFC 9110
    /// §9.2.2) and its connection went away under it.
    fn may_send_again(&self, idempotent: bool) -> bool {
        match self.reach {
            Reach::Unsent => true,
            Reach::ConnectionGone => idempotent,
            Reach::Sent => false,
        }
    }
}

impl Origin {
    /// After an answer with `status` over coalesced connection `id`: a 421 means that
    /// connection must not carry this host again (RFC 9110 §15.5.20; HTTP/2 and HTTP/3 alike,
    /// HTTP/1.1 connections are never coalesced).
    pub(super) fn misdirected_if(&self, status: StatusCode, id: PooledId) {
        if status == StatusCode::MISDIRECTED_REQUEST {
            self.inner.shared.misdirected(id, self);
        }
    }
}

impl CallEnd {
    /// The exchange is given up for another one of the same call: the listener hears its
    /// connection released (not the call's end) and is handed back for the next exchange.
    fn hand_over(&mut self) -> Option<Arc<dyn EventListener>> {
        let inner = self.0.take()?;
        inner.listener.event(&CallEvent::ConnectionReleased {
            connection: inner.connection,
        });
        Some(inner.listener)
    }
}

impl Exchange {
    /// The pooled connection and origin of an exchange on a coalesced connection.
    pub(super) fn coalesced_on(&self) -> Option<(PooledId, Origin)> {
        match &self.carrier {
            Carrier::Pooled(lease) if self.source == Source::Coalesced => {
                Some((lease.id, lease.origin.clone()))
            }
            _ => None,
        }
    }

    /// Whether `response` asks for the request on another exchange: 421 Misdirected Request
    /// on a coalesced connection (RFC 9110 §15.5.20), or 425 Too Early to a request sent in
    /// 0-RTT (RFC 8470 §5.2: the server wants it after the handshake, which is now done).
    fn answer_asks_again(&self, response: &Response<Body>) -> bool {
        match response.status() {
            StatusCode::MISDIRECTED_REQUEST => self.source == Source::Coalesced,
            StatusCode::TOO_EARLY => response.extensions().get::<SentEarly>().is_some(),
            _ => false,
        }
    }

    /// A copy of `request` (with `body()`) to send again if need be: only for HTTP/2 and
    /// HTTP/3 on a pooled connection, the only exchanges retried here.
    pub(super) fn replay_of<B>(
        &self,
        request: &Request<B>,
        body: impl FnOnce() -> Bytes,
    ) -> Option<Request<Bytes>> {
        if !self.protocol.is_multiplexed() || !matches!(self.carrier, Carrier::Pooled(_)) {
            return None;
        }
        Some(copy_request(request, body()))
    }

    /// Sends `request`; with `again`, sends that once more on another exchange of the pool
    /// when the first answer allows it (see [`Exchange::send`]).
    pub(super) async fn send_with<B>(
        mut self,
        request: Request<B>,
        again: Option<Request<Bytes>>,
    ) -> Result<Response<Body>, ExchangeError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let sent = self.send_once(request).await;
        let Some(again) = again else {
            return sent.map_err(|f| f.error);
        };
        let (origin, listener, why) = match sent {
            Err(failed) if failed.may_send_again(again.method().is_idempotent()) => {
                if let ExchangeError::Http2(e) = &failed.error
                    && (e.is_go_away() || e.is_io())
                {
                    // That connection is going away: the next exchange must not land on it.
                    self.spoil();
                }
                let Carrier::Pooled(lease) = &mut self.carrier else {
                    return Err(failed.error);
                };
                let origin = lease.origin.clone();
                let listener = lease.call.hand_over();
                drop(self);
                (origin, listener, failed.error.to_string())
            }
            Ok(mut response) if self.answer_asks_again(&response) => {
                let Keeper::Lease(lease) = &mut response.body_mut().keep else {
                    return Ok(response);
                };
                let origin = lease.origin.clone();
                let listener = lease.call.hand_over();
                let why = response.status().to_string();
                // Dropping the body resets the stream and frees it.
                drop(response);
                (origin, listener, why)
            }
            other => return other.map_err(|f| f.error),
        };
        tracing::debug!(origin = %origin, reason = %why, "sending the request once more");
        Box::pin(resend(origin, listener, again)).await
    }
}

/// The second try: a new exchange from the pool (the call's listener goes on hearing it),
/// and `request` on it.
async fn resend(
    origin: Origin,
    listener: Option<Arc<dyn EventListener>>,
    request: Request<Bytes>,
) -> Result<Response<Body>, ExchangeError> {
    let call = Call {
        listener,
        ..Call::default()
    };
    let shared = Arc::clone(&origin.inner.shared);
    let mut exchange = shared.acquire(&origin, &call).await?;
    exchange
        .send_once(request.map(Full::new))
        .await
        .map_err(|f| f.error)
}
