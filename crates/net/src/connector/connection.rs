//! [`Connection`]: the winning stream and the story of its race.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use fastfallback_proto::Alpn;

use crate::report::Story;
use crate::{RaceReport, Stream};

/// The winner of a race: a connected stream, and the story of how it was found.
#[derive(Debug)]
pub struct Connection {
    pub(super) stream: Stream,
    /// The race itself, in its own allocation: it holds the peer address, the ALPN and the
    /// report once formatted, so a `Connection` is the stream and one pointer.
    pub(super) story: Story,
}

impl Connection {
    /// The race's report, formatted on first use (a connect that nobody asks about never pays
    /// for formatting it).
    pub fn report(&self) -> &RaceReport {
        self.story.report()
    }

    /// The address the winner connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.story.peer()
    }

    /// The protocol ALPN chose, if TLS negotiated one.
    pub fn alpn(&self) -> Option<&Alpn> {
        self.story.alpn()
    }

    /// The stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Takes the stream and the report apart.
    pub fn into_parts(self) -> (Stream, RaceReport) {
        (self.stream, self.story.into_report())
    }

    /// Takes the stream, dropping the report.
    pub fn into_stream(self) -> Stream {
        self.stream
    }

    /// The stream and what the race recorded, unformatted: a pool keeps the story for its
    /// exchanges' reports, and renders one only if asked ([`Story::report`]). The story also
    /// has the peer address and ALPN.
    pub fn into_story(self) -> (Stream, Story) {
        (self.stream, self.story)
    }
}

impl tokio::io::AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
