//! One exchange on a pooled (or exclusive) connection: the lease that counts it, the request
//! it sends and the response body that gives the connection back when it ends.

use std::fmt;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use fastfallback_proto::{PooledId, Protocol};
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Full};

#[cfg(feature = "http3")]
mod h3;
#[cfg(feature = "http3")]
pub(crate) use h3::{RecvHalf, h3_request};
mod retry;
mod upload;

use super::conn::{BoxError, Conn, H1Sender};
use super::origin::{ExchangeError, Origin};
use fastfallback_net::RaceReport;
use fastfallback_net::link::Story;
use fastfallback_net::{CallEvent, ConnectionEvent, EventListener, Source};
use retry::Failed;
use upload::Upload;

/// One exchange counted against a pooled connection. Dropping it gives the exchange back:
/// an HTTP/2 stream is freed; an HTTP/1 connection goes back idle if the exchange ended
/// cleanly, and is closed otherwise.
pub(crate) struct Lease {
    /// The origin the exchange goes to; its pool is the one the lease releases to.
    origin: Origin,
    id: PooledId,
    /// The connection's sender while this exchange holds it.
    held: Held,
    /// Whether the connection can carry another exchange after this one.
    reusable: bool,
    /// Whether listeners heard this exchange acquired (they then hear it released).
    announced: bool,
    /// The call's own listener, told `ConnectionReleased` and `CallEnd` when the lease ends.
    call: CallEnd,
    /// Whether the connection is HTTP/2, for a race this lease is offered to
    /// ([`fastfallback_net::link::Lease::multiplexed`]).
    multiplexed: bool,
}

/// The sender a lease holds.
pub(crate) enum Held {
    Nothing,
    /// Taken out of the pooled connection; put back when the exchange ends cleanly.
    Http1(H1Sender),
    /// A clone of the connection's sender (one stream).
    Http2(h2::client::SendRequest<Bytes>),
    /// A clone of the connection's sender (one request stream).
    #[cfg(feature = "http3")]
    Http3(super::conn::H3Sender),
}

impl Lease {
    /// A lease on an exchange the pool already counted against `id`.
    pub(crate) fn new(origin: Origin, id: PooledId) -> Self {
        Self {
            origin,
            id,
            held: Held::Nothing,
            reusable: true,
            announced: false,
            call: CallEnd(None),
            multiplexed: false,
        }
    }

    /// Marks the connection as HTTP/2 (`true`) or HTTP/1 for the race it is offered to.
    pub(crate) fn multiplexed(mut self, multiplexed: bool) -> Self {
        self.multiplexed = multiplexed;
        self
    }

    /// The pooled connection this lease is on.
    pub(crate) fn id(&self) -> PooledId {
        self.id
    }

    /// Holds the connection's sender while the exchange runs; dropping the lease at any point
    /// gives an HTTP/1 sender back.
    pub(crate) fn hold(&mut self, held: Held) {
        self.held = held;
    }

    /// The HTTP/1 sender this lease holds.
    pub(crate) fn h1_mut(&mut self) -> Option<&mut H1Sender> {
        match &mut self.held {
            Held::Http1(s) => Some(s),
            _ => None,
        }
    }

    /// The connection must not carry another exchange.
    pub(crate) fn spoil(&mut self) {
        self.reusable = false;
    }

    /// Hands the lease back without releasing anything: the caller releases `id` itself
    /// (used under the pool's lock, where dropping a lease would deadlock).
    pub(crate) fn into_id(mut self) -> PooledId {
        self.reusable = true;
        let id = self.id;
        self.id = PooledId(0);
        id
    }
}

/// What the race holds while it decides: the driver hands an offered lease back unchanged
/// ([`fastfallback_net::link::Raced::Pooled`]), or drops it, which gives the reservation back.
impl fastfallback_net::link::Lease for Lease {
    fn id(&self) -> PooledId {
        self.id
    }

    fn multiplexed(&self) -> bool {
        self.multiplexed
    }
}

impl Lease {
    /// Offered to a race ([`fastfallback_net::link::Offer::Pooled`]).
    pub(crate) fn offered(self) -> Box<dyn fastfallback_net::link::Lease> {
        Box::new(self)
    }

    /// A lease the driver handed back: ours, since this pool offered it (`None` for one of
    /// another kind, which no race of this pool can hold).
    pub(crate) fn handed_back(lease: Box<dyn fastfallback_net::link::Lease>) -> Option<Self> {
        let lease: Box<dyn std::any::Any + Send> = lease;
        lease.downcast::<Self>().ok().map(|l| *l)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.id.0 != 0 {
            let h1 = match std::mem::replace(&mut self.held, Held::Nothing) {
                Held::Http1(s) => Some(s),
                _ => None,
            };
            let shared = &self.origin.inner.shared;
            shared.release(self.id, h1, self.reusable, self.announced);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("id", &self.id).finish()
    }
}

/// Tells a call's listener that the call ended (its connection released) when dropped: the
/// end of the response body, or of an exchange never sent. Boxed, and only when someone
/// listens: most calls have no listener and should not carry one.
struct CallEnd(Option<Box<CallEndInner>>);

struct CallEndInner {
    listener: Arc<dyn EventListener>,
    connection: Option<u64>,
    failure: Option<String>,
}

impl CallEnd {
    fn new(listener: Option<Arc<dyn EventListener>>, connection: Option<u64>) -> Self {
        Self(listener.map(|listener| {
            Box::new(CallEndInner {
                listener,
                connection,
                failure: None,
            })
        }))
    }

    /// The call failed: its end is reported as `CallFailed`.
    fn fail(&mut self, error: &ExchangeError) {
        if let Some(inner) = &mut self.0 {
            inner.failure = Some(error.to_string());
        }
    }
}

impl Drop for CallEnd {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            let l = &inner.listener;
            l.event(&CallEvent::ConnectionReleased {
                connection: inner.connection,
            });
            match inner.failure {
                Some(error) => l.event(&CallEvent::CallFailed { error }),
                None => l.event(&CallEvent::CallEnd),
            }
        }
    }
}

/// Where an exchange's connection lives.
enum Carrier {
    /// In the pool: the lease counts the exchange.
    Pooled(Lease),
    /// Exclusive: never pooled, closed when the exchange ends.
    Exclusive(Box<Exclusive>),
    /// Moved into the response body.
    Spent,
}

/// An exclusive connection, the origin it goes to and the call's end.
struct Exclusive {
    conn: Conn,
    origin: Origin,
    end: CallEnd,
}

/// A connection ready to carry one exchange to an origin: from the pool, or new. Send the
/// request with [`Exchange::send`]; the connection goes back to the pool when the response
/// body ends (or is dropped).
///
/// Kept small (it is moved on every checkout): the race's story is one pointer (the race's
/// own allocation, which keeps its report once formatted), present only when a race ran.
pub struct Exchange {
    carrier: Carrier,
    protocol: Protocol,
    source: Source,
    peer: SocketAddr,
    story: Option<Story>,
    /// The request stream of the request [`crate::Pool::send`] sent in 0-RTT with the race
    /// (`pool/early.rs`): the exchange only reads its answer.
    #[cfg(feature = "http3")]
    early: Option<Box<RecvHalf>>,
}

impl fmt::Debug for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("origin", &self.origin().map(ToString::to_string))
            .field("protocol", &self.protocol)
            .field("peer", &self.peer)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What [`Exchange::pooled`] needs to know about the connection (its sender travels in the
/// lease).
pub(crate) struct Parts {
    pub(crate) protocol: Protocol,
    pub(crate) peer: SocketAddr,
}

impl Exchange {
    /// An exchange on a pooled connection; `parts` came out of the pool with the lease.
    pub(crate) fn pooled(
        mut lease: Lease,
        parts: Parts,
        source: Source,
        story: Option<Story>,
        listener: Option<Arc<dyn EventListener>>,
    ) -> Result<Self, ExchangeError> {
        if matches!(lease.held, Held::Nothing) {
            lease.reusable = false;
            return Err(ExchangeError::Closed);
        }
        let connection = lease.id.0;
        if let Some(l) = &lease.origin.inner.shared.listener {
            l.event(&ConnectionEvent::Acquired { connection });
        }
        if let Some(l) = &listener {
            l.event(&CallEvent::ConnectionAcquired {
                connection: Some(connection),
                source,
            });
            lease.call = CallEnd::new(Some(Arc::clone(l)), Some(connection));
        }
        lease.announced = true;
        Ok(Self {
            carrier: Carrier::Pooled(lease),
            protocol: parts.protocol,
            source,
            peer: parts.peer,
            story,
            #[cfg(feature = "http3")]
            early: None,
        })
    }

    /// An exchange on a connection that is never pooled.
    pub(crate) fn exclusive(
        conn: Conn,
        origin: Origin,
        story: Story,
        listener: Option<Arc<dyn EventListener>>,
    ) -> Self {
        if let Some(l) = &listener {
            l.event(&CallEvent::ConnectionAcquired {
                connection: None,
                source: Source::New,
            });
        }
        Self {
            protocol: conn.protocol(),
            peer: conn.peer,
            carrier: Carrier::Exclusive(Box::new(Exclusive {
                conn,
                origin,
                end: CallEnd::new(listener, None),
            })),
            source: Source::New,
            story: Some(story),
            #[cfg(feature = "http3")]
            early: None,
        }
    }

    /// The origin this exchange goes to.
    fn origin(&self) -> Option<&Origin> {
        match &self.carrier {
            Carrier::Pooled(lease) => Some(&lease.origin),
            Carrier::Exclusive(x) => Some(&x.origin),
            Carrier::Spent => None,
        }
    }

    /// The protocol of the connection.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The address the connection is connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// How the call got this connection.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Whether the connection existed before this call (pooled or coalesced).
    pub fn is_reused(&self) -> bool {
        self.source != Source::New
    }

    /// The report of the race this call ran, if it ran one (a connection found in the pool
    /// at the start has none).
    pub fn report(&self) -> Option<&RaceReport> {
        self.story.as_ref().map(Story::report)
    }

    /// The pooled connection's id, if it is pooled.
    pub fn pooled_id(&self) -> Option<PooledId> {
        match &self.carrier {
            Carrier::Pooled(l) => Some(l.id),
            Carrier::Exclusive(_) | Carrier::Spent => None,
        }
    }

    /// Sends `request` and waits for the response head. The request's URI may be a path
    /// (`/index.html`) or absolute; it is sent to this exchange's origin either way, with the
    /// `host` header (HTTP/1) or `:authority` (HTTP/2) of the origin.
    ///
    /// The connection is given back when the returned body ends or is dropped.
    ///
    /// On HTTP/2 a request the server did not process is sent once more, through the pool
    /// (RFC 9113 §8.7): one the server refused (REFUSED_STREAM, for example past its stream
    /// limit), one a GOAWAY cut off (graceful, or for an idempotent request), one that could
    /// not be sent because the connection went away. So is a request that a coalesced
    /// connection answered with 421 Misdirected Request (RFC 9110 §15.5.20), on the host's own
    /// connection; that connection is not used for the host again. HTTP/3 does the same, with
    /// H3_REQUEST_REJECTED for REFUSED_STREAM (RFC 9114 §4.1.1), and a request sent in 0-RTT
    /// that was answered 425 Too Early goes once more (RFC 8470 §5.2).
    pub async fn send(self, request: Request<Bytes>) -> Result<Response<Body>, ExchangeError> {
        let again = self.replay_of(&request, || request.body().clone());
        self.send_with(request.map(Full::new), again).await
    }

    /// [`Self::send`] with any request body: a `http_body::Body` of `Bytes` frames
    /// (`Full`, `Empty`, a stream, a `String` …), streamed as it is produced. On HTTP/2 the
    /// body is pumped by a task of its own, under the peer's flow control, so the response can
    /// arrive before the body ends; trailers are sent. A body that fails resets the stream
    /// (HTTP/2) or the connection (HTTP/1), which is then not reused. Dropping the response
    /// (or its future) stops the upload, even one stalled on a closed flow-control window.
    ///
    /// A request with an empty body is sent again as [`Self::send`] says; one with a body is
    /// not (the body is gone once sent): it gets the error, or the 421.
    pub async fn send_body<B>(self, request: Request<B>) -> Result<Response<Body>, ExchangeError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let again = if request.body().is_end_stream() {
            self.replay_of(&request, Bytes::new)
        } else {
            None
        };
        self.send_with(request, again).await
    }

    /// Sends once, marking the call failed if it did.
    async fn send_once<B>(&mut self, request: Request<B>) -> Result<Response<Body>, Failed>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        // Taken first: a response carries the connection (and its origin) away. Cloned only
        // when the connector races QUIC, the one use of what `Alt-Svc` says.
        let alt_svc = self.origin().filter(|o| o.reads_alt_svc()).cloned();
        let coalesced = self.coalesced_on();
        let sent = self.send_inner(request).await;
        if let (Ok(response), Some(origin)) = (&sent, alt_svc) {
            origin.note_alt_svc(response.headers());
        }
        if let (Ok(response), Some((id, origin))) = (&sent, coalesced) {
            origin.misdirected_if(response.status(), id);
        }
        if let Err(e) = &sent {
            match &mut self.carrier {
                Carrier::Pooled(lease) => lease.call.fail(&e.error),
                Carrier::Exclusive(x) => x.end.fail(&e.error),
                Carrier::Spent => {}
            }
        }
        sent
    }

    async fn send_inner<B>(&mut self, request: Request<B>) -> Result<Response<Body>, Failed>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut head, body) = request.into_parts();
        let Some(origin) = self.origin().cloned() else {
            return Err(Failed::unsent(ExchangeError::Closed));
        };
        let limit = origin.inner.shared.options.response_timeout;
        #[cfg(feature = "http3")]
        if self.protocol == Protocol::Http3 {
            return self.send_h3(head, body, &origin, limit).await;
        }
        // The request goes to the origin whatever its URI names: only its path and query
        // are kept (moved, not copied).
        let mut uri = std::mem::take(&mut head.uri).into_parts();
        if uri.path_and_query.is_none() {
            uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        }
        if self.protocol == Protocol::Http11 {
            // Origin form (RFC 9112 §3.2.1), the authority in `host`.
            uri.scheme = None;
            uri.authority = None;
            head.uri = http::Uri::from_parts(uri).map_err(Failed::invalid)?;
            if !head.headers.contains_key(http::header::HOST) {
                let host = origin.authority().map_err(Failed::sent)?.header.clone();
                head.headers.insert(http::header::HOST, host);
            }
            let request = Request::from_parts(head, body.map_err(Into::into).boxed_unsync());
            let send = match &mut self.carrier {
                Carrier::Pooled(lease) => lease.h1_mut(),
                Carrier::Exclusive(x) => match &mut x.conn.proto {
                    super::conn::Proto::Http1(s) => s.as_mut(),
                    _ => None,
                },
                Carrier::Spent => None,
            };
            let Some(send) = send else {
                return Err(Failed::unsent(ExchangeError::Closed));
            };
            // A connection handed over the moment its last response ended (offered to a race,
            // or checked out) may still be finishing that response in its task: wait for it,
            // as hyper asks before `send_request`. At once when it is ready.
            if let Err(e) = send.ready().await {
                self.spoil();
                return Err(Failed::unsent(ExchangeError::Http1(e)));
            }
            let response = match within(limit, send.send_request(request)).await {
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    self.spoil();
                    return Err(Failed::sent(ExchangeError::Http1(e)));
                }
                None => {
                    // The request is in flight on it: the connection cannot be reused.
                    self.spoil();
                    let limit = limit.unwrap_or_default();
                    return Err(Failed::sent(ExchangeError::TimedOut(limit)));
                }
            };
            let keep = self.keeper();
            return Ok(response.map(|b| Body::http1(b, keep)));
        }
        // Scheme and authority become `:scheme` and `:authority` (RFC 9113 §8.3.1).
        uri.scheme = Some(if origin.is_tls() {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        });
        uri.authority = Some(origin.authority().map_err(Failed::sent)?.uri.clone());
        head.uri = http::Uri::from_parts(uri).map_err(Failed::invalid)?;
        let send = match &self.carrier {
            Carrier::Pooled(lease) => match &lease.held {
                Held::Http2(s) => Some(s.clone()),
                _ => None,
            },
            Carrier::Exclusive(x) => match &x.conn.proto {
                super::conn::Proto::Http2 { send, .. } => Some(send.clone()),
                _ => None,
            },
            Carrier::Spent => None,
        };
        let Some(send) = send else {
            return Err(Failed::unsent(ExchangeError::Closed));
        };
        let mut ready = match send.ready().await {
            Ok(r) => r,
            Err(e) => {
                self.spoil();
                return Err(Failed::unsent(ExchangeError::Http2(e)));
            }
        };
        let end = body.is_end_stream();
        let (response, tx) = match ready.send_request(Request::from_parts(head, ()), end) {
            Ok(x) => x,
            Err(e) => {
                self.spoil();
                return Err(Failed::unsent(ExchangeError::Http2(e)));
            }
        };
        // Stopped when dropped: with this future, or later with the response body.
        let upload = (!end).then(|| Upload::start(body, tx));
        // On timeout the response future is dropped, which resets only this stream.
        let response = match within(limit, response).await {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(Failed::h2(e)),
            None => {
                let limit = limit.unwrap_or_default();
                return Err(Failed::sent(ExchangeError::TimedOut(limit)));
            }
        };
        let keep = self.keeper();
        Ok(response.map(|b| Body::http2(b, keep, upload)))
    }

    /// The connection cannot carry another exchange (an error on it).
    fn spoil(&mut self) {
        if let Carrier::Pooled(lease) = &mut self.carrier {
            lease.reusable = false;
            lease.origin.inner.shared.no_new_exchanges(lease.id);
        }
    }

    /// Moves what keeps the connection counted into the response body.
    fn keeper(&mut self) -> Keeper {
        let carrier = std::mem::replace(&mut self.carrier, Carrier::Spent);
        match carrier {
            Carrier::Pooled(lease) => Keeper::Lease(lease),
            Carrier::Exclusive(x) => Keeper::Exclusive(x),
            Carrier::Spent => Keeper::None,
        }
    }
}

/// What keeps a connection counted while a response body is read.
enum Keeper {
    Lease(Lease),
    /// Held until the body ends: dropping it closes the connection and ends the call.
    Exclusive(#[allow(dead_code)] Box<Exclusive>),
    None,
}

/// A response body. It implements `http_body::Body`; [`Body::bytes`] collects it.
///
/// When it ends, its connection is given back: HTTP/1 goes back to the pool idle (if the
/// server keeps it alive), an HTTP/2 stream is freed. Dropping it before the end frees an
/// HTTP/2 stream (the stream is reset) and closes an HTTP/1 connection, whose unread bytes
/// would otherwise corrupt the next exchange.
pub struct Body {
    inner: BodyInner,
    keep: Keeper,
    /// The HTTP/2 request body still being sent, stopped when the response body is dropped.
    _upload: Option<Upload>,
}

enum BodyInner {
    Http1(hyper::body::Incoming),
    Http2 {
        stream: h2::RecvStream,
        data_done: bool,
    },
    #[cfg(feature = "http3")]
    Http3(h3::Recv),
    Done,
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.inner {
            BodyInner::Http1(_) => "http/1.1",
            BodyInner::Http2 { .. } => "h2",
            #[cfg(feature = "http3")]
            BodyInner::Http3(_) => "h3",
            BodyInner::Done => "done",
        };
        f.debug_struct("Body").field("state", &state).finish()
    }
}

impl Body {
    fn http1(body: hyper::body::Incoming, keep: Keeper) -> Self {
        Self {
            inner: BodyInner::Http1(body),
            keep,
            _upload: None,
        }
    }

    fn http2(stream: h2::RecvStream, keep: Keeper, upload: Option<Upload>) -> Self {
        Self {
            inner: BodyInner::Http2 {
                stream,
                data_done: false,
            },
            keep,
            _upload: upload,
        }
    }

    /// Reads the whole body.
    pub async fn bytes(self) -> Result<Bytes, ExchangeError> {
        use http_body_util::BodyExt;
        Ok(self.collect().await?.to_bytes())
    }

    /// The body ended cleanly: give the connection back for reuse.
    fn finish(&mut self) {
        self.inner = BodyInner::Done;
        self.keep = Keeper::None;
    }

    /// The body failed: the connection takes no new exchange.
    fn fail(&mut self) {
        if let Keeper::Lease(lease) = &mut self.keep {
            lease.reusable = false;
            lease.origin.inner.shared.no_new_exchanges(lease.id);
        }
        self.finish();
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        // An HTTP/1 response not read to its end leaves bytes on the wire: never reuse it.
        if matches!(self.inner, BodyInner::Http1(_))
            && let Keeper::Lease(lease) = &mut self.keep
        {
            lease.reusable = false;
        }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = ExchangeError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        let this = self.get_mut();
        match &mut this.inner {
            BodyInner::Done => Poll::Ready(None),
            BodyInner::Http1(body) => match Pin::new(body).poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(e))) => {
                    this.fail();
                    Poll::Ready(Some(Err(ExchangeError::Http1(e))))
                }
                Poll::Ready(None) => {
                    this.finish();
                    Poll::Ready(None)
                }
            },
            BodyInner::Http2 { stream, data_done } => {
                if !*data_done {
                    match stream.poll_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok(data))) => {
                            // Reading frees the window for more (RFC 9113 §6.9).
                            let _ = stream.flow_control().release_capacity(data.len());
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        Poll::Ready(Some(Err(e))) => {
                            this.finish();
                            return Poll::Ready(Some(Err(ExchangeError::Http2(e))));
                        }
                        Poll::Ready(None) => *data_done = true,
                    }
                }
                match stream.poll_trailers(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Ok(Some(trailers))) => {
                        this.finish();
                        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                    }
                    Poll::Ready(Ok(None)) => {
                        this.finish();
                        Poll::Ready(None)
                    }
                    Poll::Ready(Err(e)) => {
                        this.finish();
                        Poll::Ready(Some(Err(ExchangeError::Http2(e))))
                    }
                }
            }
            #[cfg(feature = "http3")]
            BodyInner::Http3(rx) => match rx.poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if frame.is_trailers() {
                        this.finish();
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => {
                    this.finish();
                    Poll::Ready(Some(Err(e)))
                }
                Poll::Ready(None) => {
                    this.finish();
                    Poll::Ready(None)
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            BodyInner::Done => true,
            BodyInner::Http1(b) => b.is_end_stream(),
            BodyInner::Http2 { stream, .. } => stream.is_end_stream(),
            #[cfg(feature = "http3")]
            BodyInner::Http3(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            BodyInner::Done => SizeHint::with_exact(0),
            BodyInner::Http1(b) => b.size_hint(),
            BodyInner::Http2 { .. } => SizeHint::default(),
            #[cfg(feature = "http3")]
            BodyInner::Http3(_) => SizeHint::default(),
        }
    }
}

/// `f`, or `None` if `limit` passes first.
async fn within<F: Future>(limit: Option<std::time::Duration>, f: F) -> Option<F::Output> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.ok(),
        None => Some(f.await),
    }
}
