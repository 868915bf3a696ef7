//! The listening socket and per-connection write-stall detection.
//!
//! A connection is "slow" only when its socket accepts nothing for `sse.write_timeout` while
//! the server has bytes to write. [`TimedIo`] measures exactly that: a timer starts when a
//! write would block, is cleared by any progress, and when it fires the write fails, which
//! ends the connection and marks it in its [`ConnState`] so the stream logs `slow_client`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// Shared state of one TCP connection.
#[derive(Debug, Clone, Default)]
pub struct ConnState(Arc<AtomicBool>);

impl ConnState {
    /// True once a write stalled for the whole write timeout.
    pub fn stalled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn mark_stalled(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A TCP stream whose writes fail after `timeout` without progress.
#[derive(Debug)]
pub struct TimedIo {
    inner: TcpStream,
    timeout: Duration,
    stall: Option<Pin<Box<Sleep>>>,
    state: ConnState,
}

impl TimedIo {
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

/// The server's listener: accepts TCP connections and wraps them in [`TimedIo`].
#[derive(Debug)]
pub struct TimedListener {
    inner: TcpListener,
    write_timeout: Duration,
}

impl TimedListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, write_timeout: Duration) -> Self {
        Self {
            inner,
            write_timeout,
        }
    }
}

impl Listener for TimedListener {
    type Io = TimedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    // Frames are small and latency matters more than packet count.
                    let _ = stream.set_nodelay(true);
                    let io = TimedIo {
                        inner: stream,
                        timeout: self.write_timeout,
                        stall: None,
                        state: ConnState::default(),
                    };
                    return (io, addr);
                }
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// What a handler learns about its connection.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection's shared state.
    pub state: ConnState,
}

impl Connected<IncomingStream<'_, TimedListener>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, TimedListener>) -> Self {
        Self {
            peer: *stream.remote_addr(),
            state: stream.io().state.clone(),
        }
    }
}
