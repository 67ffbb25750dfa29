//! A request body pumped onto a request stream by a task of its own, and the handle that
//! stops it: the upload lives no longer than the exchange that started it. One pump reads the
//! body for both protocols; each protocol's stream is a [`BodySink`] (HTTP/2's here, HTTP/3's
//! in `exchange/h3.rs`).

use std::future::Future;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use tokio::task::AbortHandle;

use super::BoxError;

/// The task sending one request body. Dropping this stops it, which drops the body and the
/// stream's send half (h2 then resets the stream if the response is gone too), even while it
/// waits for flow-control capacity the peer never grants.
pub(super) struct Upload(AbortHandle);

impl Upload {
    /// Starts sending `body` on `sink`.
    pub(super) fn start<B, S>(body: B, sink: S) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
        S: BodySink + 'static,
    {
        Self(tokio::spawn(pump(body, sink)).abort_handle())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a request body goes: the send half of one request stream. Each method's error
/// means the stream is gone (reset, or its connection closed), and the pump stops quietly.
pub(super) trait BodySink: Send {
    /// Sends one chunk of the body.
    fn data(&mut self, data: Bytes) -> impl Future<Output = Result<(), ()>> + Send;
    /// Sends the body's trailers, which end the stream.
    fn trailers(self, trailers: HeaderMap) -> impl Future<Output = ()> + Send;
    /// Ends the stream after the body's last chunk.
    fn end(self) -> impl Future<Output = ()> + Send;
    /// Gives up on the stream: the body failed, so the request cannot be completed.
    fn cancel(self);
}

/// Streams a request body onto `sink`: its data, then its trailers or the end of the stream.
/// A body error cancels the stream instead.
async fn pump<B, S>(body: B, mut sink: S)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    S: BodySink,
{
    let mut body = std::pin::pin!(body);
    loop {
        // Matched at once, and the match ended before any send: a body's error need not be
        // `Send`, so none may be kept across an await.
        let frame = match body.frame().await {
            None => None,
            Some(Err(_)) => return sink.cancel(),
            Some(Ok(frame)) => Some(frame),
        };
        let Some(frame) = frame else {
            return sink.end().await;
        };
        match frame.into_data() {
            Ok(data) => {
                if sink.data(data).await.is_err() {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return sink.trailers(trailers).await;
                }
            }
        }
    }
}

/// HTTP/2: each chunk waits for the peer's flow-control window (RFC 9113 §5.2), and a body
/// error resets the stream with CANCEL.
impl BodySink for h2::SendStream<Bytes> {
    async fn data(&mut self, mut data: Bytes) -> Result<(), ()> {
        while !data.is_empty() {
            self.reserve_capacity(data.len());
            let Some(Ok(granted)) = std::future::poll_fn(|cx| self.poll_capacity(cx)).await else {
                return Err(());
            };
            if granted == 0 {
                continue;
            }
            let chunk = data.split_to(granted.min(data.len()));
            self.send_data(chunk, false).map_err(drop)?;
        }
        Ok(())
    }

    async fn trailers(mut self, trailers: HeaderMap) {
        let _ = self.send_trailers(trailers);
    }

    async fn end(mut self) {
        let _ = self.send_data(Bytes::new(), true);
    }

    fn cancel(mut self) {
        self.send_reset(h2::Reason::CANCEL);
    }
}
