//! Write-stall detection: the rule that decides when a client is too slow to keep.
//!
//! A connection is "slow" only when its socket accepts **no byte at all** for
//! `sse.write_timeout` while the server has bytes to write. Waiting for the socket to be
//! reported writable is not enough to tell: Linux reports a TCP socket writable only once
//! about a third of its send buffer is free again, which for a client reading slowly through a
//! multi-megabyte send buffer can take longer than the timeout although the client reads all
//! along. So while a write waits, [`WriteStall`] also offers the bytes to the socket directly
//! every quarter of the timeout (at most every second); any byte taken is progress and starts
//! the wait afresh. When the timeout passes with nothing taken, the write fails, which ends
//! the connection, and the connection is marked in its [`ConnState`] so the stream logs
//! `slow_client`.
//!
//! [`TimedIo`] applies the rule to connections served by hyper; event streams written by the
//! connection layer itself apply it in [`super::stream`].

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use sluice_core::conn::ConnState;

/// The longest time between two direct offers of a waiting write.
const MAX_OFFER_INTERVAL: Duration = Duration::from_secs(1);

/// The write-stall rule for one socket: how long its pending write has been refused, and
/// when to offer the bytes again.
#[derive(Debug)]
pub struct WriteStall {
    timeout: Duration,
    /// When the pending write was first refused; `None` while writes make progress.
    refused_since: Option<Instant>,
    /// The next direct offer of the pending write.
    next_offer: Option<Pin<Box<Sleep>>>,
}

impl WriteStall {
    /// The rule for `timeout` (`sse.write_timeout`).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            refused_since: None,
            next_offer: None,
        }
    }

    /// Writes as much of `bufs` to `stream` as it takes now or, failing that, once it is
    /// reported writable or a direct offer succeeds. Fails with `TimedOut`, marking `state`
    /// stalled, when the socket has taken nothing for the timeout.
    pub fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut TcpStream,
        bufs: &[IoSlice<'_>],
        state: &ConnState,
    ) -> Poll<io::Result<usize>> {
        if let Poll::Ready(result) = Pin::new(&mut *stream).poll_write_vectored(cx, bufs) {
            self.progressed();
            return Poll::Ready(result);
        }
        let refused_since = *self.refused_since.get_or_insert_with(Instant::now);
        let interval = (self.timeout / 4).min(MAX_OFFER_INTERVAL);
        loop {
            let offer = self
                .next_offer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(interval)));
            ready!(offer.as_mut().poll(cx));
            self.next_offer = None;
            // The readiness tokio waits for may be far away; the socket itself says whether it
            // takes a byte now (a plain non-blocking writev on the same descriptor).
            match rustix::io::writev(&*stream, bufs) {
                Ok(written) => {
                    self.progressed();
                    return Poll::Ready(Ok(written));
                }
                Err(rustix::io::Errno::AGAIN) => {}
                Err(err) => {
                    self.progressed();
                    return Poll::Ready(Err(err.into()));
                }
            }
            if refused_since.elapsed() >= self.timeout {
                self.progressed();
                state.mark_stalled();
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("socket accepted nothing for {:?}", self.timeout),
                )));
            }
        }
    }

    /// Starts the next wait afresh.
    fn progressed(&mut self) {
        self.refused_since = None;
        self.next_offer = None;
    }
}

/// A TCP stream whose writes fail after `timeout` without progress.
#[derive(Debug)]
pub struct TimedIo {
    inner: TcpStream,
    stall: WriteStall,
    state: ConnState,
}

impl TimedIo {
    /// Wraps `inner`; a stall marks `state`.
    pub fn new(inner: TcpStream, timeout: Duration, state: ConnState) -> Self {
        Self {
            inner,
            stall: WriteStall::new(timeout),
            state,
        }
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stall
            .poll_write(cx, &mut this.inner, bufs, &this.state)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A TCP stream buffers nothing itself: there is nothing to wait for.
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
