//! [`Pool`] as a `tower_service::Service` of requests, and the one request body type it
//! takes ([`RequestBody`]), so that a tower stack over the pool needs no type annotations.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

use super::conn::BoxError;
use super::{Body, ExchangeError, Pool};

/// The request body of [`Pool`]'s `tower_service::Service` implementation: bytes in memory,
/// or any `http_body::Body` of `Bytes` frames, streamed as it is produced (see
/// [`crate::Exchange::send_body`]), trailers included.
///
/// `Pool` is a `Service` of `http::Request<RequestBody>` only, not of every body type: with
/// one request type, `ServiceExt::ready` and the layers of a tower stack infer it, where a
/// service generic over its body would need `ServiceExt::<Request<B>>::ready` spelled out.
/// Any other body goes in with [`RequestBody::new`] (or `request.map(RequestBody::new)`).
///
/// ```
/// use fastfallback_http::RequestBody;
/// use http_body::Body as _;
///
/// assert_eq!(RequestBody::from("hello").size_hint().exact(), Some(5));
/// assert!(RequestBody::empty().is_end_stream());
/// let streamed = RequestBody::new(http_body_util::Full::new(bytes::Bytes::from_static(b"hi")));
/// assert_eq!(streamed.size_hint().exact(), Some(2));
/// ```
pub struct RequestBody {
    inner: UnsyncBoxBody<Bytes, BoxError>,
}

impl RequestBody {
    /// Any body of `Bytes` frames, streamed as it is produced.
    pub fn new<B>(body: B) -> Self
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        Self {
            inner: body.map_err(Into::into).boxed_unsync(),
        }
    }

    /// No body.
    pub fn empty() -> Self {
        Self::new(http_body_util::Empty::<Bytes>::new())
    }
}

impl Default for RequestBody {
    fn default() -> Self {
        Self::empty()
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody")
            .field("size_hint", &self.inner.size_hint())
            .finish_non_exhaustive()
    }
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> Self {
        Self::new(http_body_util::Full::new(bytes))
    }
}

impl From<Vec<u8>> for RequestBody {
    fn from(bytes: Vec<u8>) -> Self {
        Bytes::from(bytes).into()
    }
}

impl From<String> for RequestBody {
    fn from(text: String) -> Self {
        Bytes::from(text).into()
    }
}

impl From<&'static [u8]> for RequestBody {
    fn from(bytes: &'static [u8]) -> Self {
        Bytes::from_static(bytes).into()
    }
}

impl From<&'static str> for RequestBody {
    fn from(text: &'static str) -> Self {
        Bytes::from_static(text.as_bytes()).into()
    }
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The pool as a request-level client: send a request with an absolute URI, get the response
/// (HTTP/1.1 or HTTP/2, on a pooled or new connection). What a higher-level client links, or
/// a tower stack wraps. The body is a [`RequestBody`]: bytes, or any body streamed.
///
/// With one request type, tower's combinators need no annotations:
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use fastfallback_http::{Pool, RequestBody};
/// use fastfallback_net::Connector;
/// use tower::{Service, ServiceExt};
///
/// let pool = Pool::new(Connector::builder().build()?);
/// let mut status = pool.map_response(|response| response.status());
/// let request = http::Request::post("https://example.com/upload").body(RequestBody::from("hello"))?;
/// println!("{}", status.ready().await?.call(request).await?);
/// # Ok(()) }
/// ```
impl tower_service::Service<http::Request<RequestBody>> for Pool {
    type Response = http::Response<Body>;
    type Error = ExchangeError;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, ExchangeError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ExchangeError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let pool = self.clone();
        Box::pin(async move { pool.send_body(request).await })
    }
}
