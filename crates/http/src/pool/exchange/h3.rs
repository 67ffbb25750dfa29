//! An exchange over HTTP/3 (RFC 9114; the `http3` feature): one request stream of a QUIC
//! connection, with h3. The request's head goes out at once, its body (if any) is pumped by
//! a task of its own (stopped with the response body, as on HTTP/2), and the response body
//! reads the stream's DATA frames, then its trailers.

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{Request, Response};
use http_body::Frame;

use super::retry::Failed;
use super::upload::{BodySink, Upload};
use super::{Body, BodyInner, BoxError, Carrier, Exchange, Held, within};
use crate::pool::ExchangeError;
use crate::pool::conn::Proto;
use crate::pool::origin::Origin;

type SendHalf = h3::client::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
/// The receiving half of an HTTP/3 request stream.
pub(crate) type RecvHalf = h3::client::RequestStream<h3_quinn::RecvStream, Bytes>;

fn h3_error(e: impl std::fmt::Display) -> ExchangeError {
    ExchangeError::Http3(e.to_string())
}

/// A request's head as HTTP/3 sends it to `origin`: the URI keeps the path and query (`/`
/// without one), and gets `:scheme` and `:authority` from the origin (RFC 9114 §4.3.1).
pub(crate) fn h3_request(
    mut head: http::request::Parts,
    origin: &Origin,
) -> Result<Request<()>, ExchangeError> {
    let mut uri = std::mem::take(&mut head.uri).into_parts();
    if uri.path_and_query.is_none() {
        uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    uri.scheme = Some(http::uri::Scheme::HTTPS);
    uri.authority = Some(origin.authority()?.uri.clone());
    head.uri = http::Uri::from_parts(uri).map_err(ExchangeError::invalid)?;
    Ok(Request::from_parts(head, ()))
}

impl Exchange {
    /// This exchange's request already went out in 0-RTT, on request stream `rx`.
    pub(crate) fn sent_early(mut self, rx: RecvHalf) -> Self {
        self.early = Some(Box::new(rx));
        self
    }

    /// Sends `head` and `body` on a new request stream ([`h3_request`]), and waits `limit` at
    /// most for the response head. When this request already went out in 0-RTT with the
    /// race ([`Exchange::early`], set only by [`crate::Pool::send`] for this very request),
    /// only the answer is read.
    pub(super) async fn send_h3<B>(
        &mut self,
        head: http::request::Parts,
        body: B,
        origin: &Origin,
        limit: Option<std::time::Duration>,
    ) -> Result<Response<Body>, Failed>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if let Some(rx) = self.early.take() {
            let mut response = self.h3_response(*rx, None, limit).await?;
            response.extensions_mut().insert(crate::SentEarly);
            return Ok(response);
        }
        let head = h3_request(head, origin).map_err(Failed::sent)?;
        let send = match &self.carrier {
            Carrier::Pooled(lease) => match &lease.held {
                Held::Http3(s) => Some(s.clone()),
                _ => None,
            },
            Carrier::Exclusive(x) => match &x.conn.proto {
                Proto::Http3(s) => Some(s.clone()),
                _ => None,
            },
            Carrier::Spent => None,
        };
        let Some(mut send) = send else {
            return Err(Failed::unsent(ExchangeError::Closed));
        };
        let end = body.is_end_stream();
        let stream = match send.send_request(head).await {
            Ok(s) => s,
            Err(e) => {
                self.spoil();
                return Err(Failed::unsent(h3_error(e)));
            }
        };
        let (mut tx, rx) = stream.split();
        let upload = if end {
            if let Err(e) = tx.finish().await {
                return Err(Failed::sent(h3_error(e)));
            }
            None
        } else {
            Some(Upload::start(body, tx))
        };
        self.h3_response(rx, upload, limit).await
    }

    /// Waits `limit` at most for the response head on request stream `rx`, and gives the
    /// response with a body that reads the rest of it.
    async fn h3_response(
        &mut self,
        mut rx: RecvHalf,
        upload: Option<Upload>,
        limit: Option<std::time::Duration>,
    ) -> Result<Response<Body>, Failed> {
        let response = match within(limit, rx.recv_response()).await {
            Some(Ok(r)) => r,
            // RFC 9114 §4.1.1: the server did not process it, so it may go again.
            Some(Err(h3::error::StreamError::RemoteTerminate { code, .. }))
                if code == h3::error::Code::H3_REQUEST_REJECTED =>
            {
                return Err(Failed::unsent(ExchangeError::Http3(
                    "the server rejected the request unprocessed (H3_REQUEST_REJECTED)".into(),
                )));
            }
            // The QUIC connection went away under the request: it timed out (its path died,
            // QUIC's idle timeout) or was closed. An idempotent request may go again, on
            // another connection, as on HTTP/2 (h3 does not say which side closed it).
            Some(Err(e @ h3::error::StreamError::ConnectionError { .. })) => {
                self.spoil();
                return Err(Failed::connection_gone(h3_error(e)));
            }
            Some(Err(e)) => {
                self.spoil();
                return Err(Failed::sent(h3_error(e)));
            }
            None => {
                // Unlike a TCP connection, a QUIC one whose path died (UDP dropped after the
                // handshake) looks healthy until QUIC's idle timeout, tens of seconds away:
                // it takes no new exchange, so the next call races again (and, QUIC being
                // broken there, wins over TCP).
                self.spoil();
                let limit = limit.unwrap_or_default();
                return Err(Failed::sent(ExchangeError::TimedOut(limit)));
            }
        };
        let keep = self.keeper();
        let body = Body {
            inner: BodyInner::Http3(Recv {
                stream: rx,
                data_done: false,
            }),
            keep,
            _upload: upload,
        };
        Ok(response.map(|()| body))
    }
}

/// HTTP/3: DATA frames, then trailers or the end of the stream; a body error stops the
/// stream instead (H3_REQUEST_CANCELLED).
impl BodySink for SendHalf {
    async fn data(&mut self, data: Bytes) -> Result<(), ()> {
        self.send_data(data).await.map_err(drop)
    }

    async fn trailers(mut self, trailers: http::HeaderMap) {
        if self.send_trailers(trailers).await.is_ok() {
            let _ = self.finish().await;
        }
    }

    async fn end(mut self) {
        let _ = self.finish().await;
    }

    fn cancel(mut self) {
        self.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
    }
}

/// The receiving half of an HTTP/3 request stream, as a response body reads it.
pub(super) struct Recv {
    stream: RecvHalf,
    data_done: bool,
}

impl Recv {
    /// The next frame: DATA until the stream's data ends, then its trailers if any.
    pub(super) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        if !self.data_done {
            match self.stream.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Some(mut data))) => {
                    let bytes = data.copy_to_bytes(data.remaining());
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Poll::Ready(Ok(None)) => self.data_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(h3_error(e)))),
            }
        }
        match self.stream.poll_recv_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(h3_error(e)))),
        }
    }
}

impl std::fmt::Debug for Recv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recv")
            .field("data_done", &self.data_done)
            .finish_non_exhaustive()
    }
}
