//! Write-stall detection for connections served by hyper.
//!
//! A connection is "slow" only when its socket accepts nothing for `sse.write_timeout` while
//! the server has bytes to write. [`TimedIo`] measures exactly that: a timer starts when a
//! write would block, is cleared by any progress, and when it fires the write fails, which
//! ends the connection and marks it in its [`ConnState`](crate::conn::ConnState) so the stream logs `slow_client`.
//! (Event streams written by the connection layer itself apply the same rule in
//! [`super::stream`].)

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::conn::ConnState;

/// A TCP stream whose writes fail after `timeout` without progress.
#[derive(Debug)]
pub struct TimedIo {
    inner: TcpStream,
    timeout: Duration,
    stall: Option<Pin<Box<Sleep>>>,
    state: ConnState,
}

impl TimedIo {
    /// Wraps `inner`; a stall marks `state`.
    pub fn new(inner: TcpStream, timeout: Duration, state: ConnState) -> Self {
        Self {
            inner,
            timeout,
            stall: None,
            state,
        }
    }

    fn poll_progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stall = None;
            return poll;
        }
        let timeout = self.timeout;
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(stall.as_mut().poll(cx));
        self.state.mark_stalled();
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("socket accepted nothing for {timeout:?}"),
        )))
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.poll_progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.poll_progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.poll_progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
