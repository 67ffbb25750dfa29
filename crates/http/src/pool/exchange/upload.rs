//! A request body pumped onto an HTTP/2 stream by a task of its own, and the handle that stops
//! it: the upload lives no longer than the exchange that started it.

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::task::AbortHandle;

use super::BoxError;

/// The task sending one request body. Dropping this stops it, which drops the body and the
/// stream's send half (h2 then resets the stream if the response is gone too), even while it
/// waits for flow-control capacity the peer never grants.
pub(super) struct Upload(AbortHandle);

impl Upload {
    /// An upload already running as the task `task` (HTTP/3's, `exchange/h3.rs`).
    #[cfg(feature = "http3")]
    pub(super) fn spawned(task: AbortHandle) -> Self {
        Self(task)
    }

    /// Starts sending `body` on `tx`.
    pub(super) fn start<B>(body: B, tx: h2::SendStream<Bytes>) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        Self(tokio::spawn(pump(body, tx)).abort_handle())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Streams a request body onto an HTTP/2 stream: each data frame waits for the peer's flow
/// control window (RFC 9113 §5.2), trailers end the stream, and a body error resets it with
/// CANCEL. Ends early, quietly, when the stream is reset or the connection closes.
async fn pump<B>(body: B, mut tx: h2::SendStream<Bytes>)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    loop {
        let frame = match body.frame().await {
            None => {
                let _ = tx.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                tx.send_reset(h2::Reason::CANCEL);
                return;
            }
            Some(Ok(frame)) => frame,
        };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let _ = tx.send_trailers(trailers);
                    return;
                }
                continue;
            }
        };
        while !data.is_empty() {
            tx.reserve_capacity(data.len());
            let Some(Ok(granted)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else {
                return;
            };
            if granted == 0 {
                continue;
            }
            let chunk = data.split_to(granted.min(data.len()));
            if tx.send_data(chunk, false).is_err() {
                return;
            }
        }
    }
}
