//! 0-RTT (the `http3` feature, [`PoolOptions::early_data`](super::PoolOptions::early_data)):
//! a request sent with a resuming QUIC attempt's first flight, before its handshake is done
//! (RFC 9001 §4.6, RFC 9114 §3.3), so its answer arrives one round trip after the attempt
//! starts instead of two.
//!
//! The race is not changed by it. A QUIC attempt that can send 0-RTT hands its connection to
//! the pool at once ([`EarlyQuic`]), and still wins only when its handshake completes (HEv3
//! §6.1, R-32): a path that drops UDP never completes it, so the request sent into it is
//! simply forgotten and goes again over the winner. Only requests that may be sent twice ride
//! early: idempotent methods (RFC 9110 §9.2.2) with their whole body in hand. After the race:
//!
//! - the winner is that connection and the server accepted the early data: the HTTP/3
//!   client made early becomes the pooled connection's, and the exchange reads the answer to
//!   the request already sent ([`Early::recv`]);
//! - the server rejected it (the session resumed without early data), or another attempt
//!   won: everything made early is dropped and the request is sent as any other.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use bytes::Bytes;
use fastfallback_net::link::{EarlyQuic, RaceEnd, Raced};
use http::Request;
use tokio::sync::mpsc::UnboundedReceiver;

use super::conn::H3Sender;
use super::exchange::{RecvHalf, h3_request};
use super::origin::Origin;

/// The HTTP/3 connection driver h3 gives a client.
pub(crate) type H3Driver = h3::client::Connection<h3_quinn::Connection, Bytes>;

/// A request that may ride a QUIC attempt's 0-RTT: its head and its whole body.
#[derive(Clone, Debug)]
pub(crate) struct EarlyRequest {
    head: http::request::Parts,
    body: Bytes,
}

impl EarlyRequest {
    /// `request`, if it may be sent early: an idempotent method (RFC 9110 §9.2.2; 0-RTT
    /// data can be replayed, RFC 9001 §9.2, RFC 8470 §3).
    pub(crate) fn of(request: &Request<Bytes>) -> Option<Self> {
        if !request.method().is_idempotent() {
            return None;
        }
        let (head, body) = super::copy_request(request, request.body().clone()).into_parts();
        Some(Self { head, body })
    }
}

/// What was made early on a QUIC attempt's connection.
pub(crate) struct Early {
    /// quinn's id of the connection.
    stable_id: usize,
    /// The HTTP/3 client made on it: its control stream went out early, so if the connection
    /// is used it must be with this client (a second control stream is a connection error,
    /// RFC 9114 §6.2.1).
    pub(crate) driver: H3Driver,
    pub(crate) send: H3Sender,
    /// The request stream the request went out on, if it did.
    pub(crate) recv: Option<RecvHalf>,
    /// Whether everything above was opened before the server's handshake flight was read,
    /// so all of it was 0-RTT (quinn gives a stream 0-RTT keys only while handshaking). When
    /// not, some of it may have gone in 1-RTT, and reached the server even if 0-RTT was
    /// rejected.
    all_early: bool,
}

/// Runs `race`, sending `request` on the first connection a QUIC attempt hands over in
/// 0-RTT (`early`). Returns how the race ended and what was made early.
pub(crate) async fn ride(
    race: impl Future<Output = RaceEnd>,
    mut early: UnboundedReceiver<EarlyQuic>,
    request: &EarlyRequest,
    origin: &Origin,
) -> (RaceEnd, Option<Early>) {
    let mut race = pin!(race);
    let mut sending = None;
    let mut made = None;
    let end = std::future::poll_fn(|cx| {
        if let Poll::Ready(end) = race.as_mut().poll(cx) {
            return Poll::Ready(end);
        }
        if sending.is_none()
            && made.is_none()
            && let Poll::Ready(Some(quic)) = early.poll_recv(cx)
        {
            sending = Some(Box::pin(send(quic, request.clone(), origin.clone())));
        }
        if let Some(f) = &mut sending
            && let Poll::Ready(done) = f.as_mut().poll(cx)
        {
            sending = None;
            made = done;
        }
        Poll::Pending
    })
    .await;
    // The race ended while the request was being written (local work, no round trip): let
    // it finish, so that a client whose control stream may be out is never half made.
    if let Some(f) = sending {
        made = f.await;
    }
    (end, made)
}

/// Makes an HTTP/3 client on `quic`'s connection and sends `request` on it, all in 0-RTT.
/// `None` if the client could not be made; an [`Early`] without `recv` if only the request
/// failed.
async fn send(quic: EarlyQuic, request: EarlyRequest, origin: Origin) -> Option<Early> {
    let stable_id = quic.stable_id();
    let connection = quic.connection;
    let (driver, send) = h3::client::builder()
        .send_grease(false)
        .build::<_, _, Bytes>(h3_quinn::Connection::new(connection.clone()))
        .await
        .ok()?;
    let recv = send_request(send.clone(), request, &origin).await;
    // The server's handshake flight (which carries its ALPN choice) not read yet: the
    // handshake was still going on when every stream above was opened.
    let all_early = connection.handshake_data().is_none();
    Some(Early {
        stable_id,
        driver,
        send,
        recv,
        all_early,
    })
}

/// Sends `request` whole on a new request stream of `send`; the stream's receiving half, or
/// `None` if it failed.
async fn send_request(
    mut send: H3Sender,
    request: EarlyRequest,
    origin: &Origin,
) -> Option<RecvHalf> {
    let EarlyRequest { head, body } = request;
    let head = h3_request(head, origin).ok()?;
    let (mut tx, rx) = send.send_request(head).await.ok()?.split();
    if !body.is_empty() {
        tx.send_data(body).await.ok()?;
    }
    tx.finish().await.ok()?;
    Some(rx)
}

impl Early {
    /// What was made early that the connection goes on with, if the race's winner is its
    /// connection:
    ///
    /// - the server accepted the early data: all of it;
    /// - it rejected it, and all of it was 0-RTT: nothing (the server saw none of it, RFC
    ///   9001 §4.6.2, so a new client starts clean);
    /// - it rejected it, and some may have gone in 1-RTT (the handshake ended while it was
    ///   being made): the client, whose control stream may have reached the server (a second
    ///   one would be a connection error, RFC 9114 §6.2.1), but not the request, which is
    ///   sent again on it.
    pub(crate) fn kept(mut self, end: &RaceEnd) -> Option<Self> {
        let Ok(Raced::Connected(conn)) = &end.result else {
            return None;
        };
        let quic = conn.stream().quic()?;
        if quic.connection().stable_id() != self.stable_id {
            return None;
        }
        match quic.early_data() {
            Some(true) => Some(self),
            _ if self.all_early => None,
            _ => {
                self.recv = None;
                Some(self)
            }
        }
    }
}
