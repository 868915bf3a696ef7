//! Writing a response on the connection itself: an event stream (the head, then the session's
//! frames as chunks, each batch one `writev` of the shared frames — over TLS, one batch of
//! records), or a small complete answer.
//!
//! A write the socket takes no byte of for `sse.write_timeout` fails and marks the connection
//! stalled, so the session ends with `slow_client` — the rule of [`WriteStall`], which
//! [`super::TimedIo`] applies to the socket under TLS.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::stall::{TimedIo, WriteStall};
use sluice_core::conn::ConnState;
use sluice_core::session::Session;

/// Largest complete answer written by the connection layer (its error and refusal bodies
/// are small JSON documents).
const MAX_ANSWER_BODY: usize = 64 * 1024;
/// How long, and how many bytes, to read from a client after a complete answer.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// What a connection's bytes travel over.
pub enum Transport {
    /// The TCP stream itself.
    Plain(TcpStream),
    /// TLS over it, whose socket applies the write-stall rule itself ([`TimedIo`]). Boxed:
    /// rustls's state is large, and a plain stream's task keeps only the pointer's room.
    Tls(Box<TlsStream<TimedIo>>),
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

/// One connection with its write-stall rule.
pub struct Socket {
    /// The stream, plain or TLS.
    pub transport: Transport,
    /// `sse.write_timeout`.
    pub write_timeout: Duration,
    /// Marked when a write stalls.
    pub state: ConnState,
}

impl Socket {
    /// Writes all of `bufs` (over TLS: and sends the records); fails when the socket accepts
    /// nothing for the write timeout.
    async fn write_all(&mut self, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        let mut bufs = bufs;
        IoSlice::advance_slices(&mut bufs, 0);
        let mut stall = WriteStall::new(self.write_timeout);
        while !bufs.is_empty() {
            let written = match &mut self.transport {
                Transport::Plain(stream) => {
                    std::future::poll_fn(|cx| stall.poll_write(cx, stream, bufs, &self.state))
                        .await?
                }
                Transport::Tls(tls) => tls.write_vectored(bufs).await?,
            };
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut bufs, written);
        }
        match &mut self.transport {
            Transport::Plain(_) => Ok(()),
            // rustls holds the records the socket did not take yet.
            Transport::Tls(tls) => tls.flush().await,
        }
    }

    /// Completes when the client has closed its side (or the connection failed); bytes it
    /// sends meanwhile are read and ignored.
    async fn closed_by_peer(&mut self) {
        let mut discard = [0u8; 64];
        match &mut self.transport {
            Transport::Plain(stream) => loop {
                // `poll_read_ready` keeps one waker slot (no waiter list to join and leave on
                // every wake-up of the stream); this task is its only user.
                if std::future::poll_fn(|cx| stream.poll_read_ready(cx))
                    .await
                    .is_err()
                {
                    return;
                }
                match stream.try_read(&mut discard) {
                    Ok(0) => return,
                    Err(err) if err.kind() != io::ErrorKind::WouldBlock => return,
                    _ => {}
                }
            },
            // Through rustls: a close_notify or the socket's end reads as 0. Cancelling the
            // read loses nothing (rustls keeps what it took from the socket).
            Transport::Tls(tls) => loop {
                match tls.read(&mut discard).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            },
        }
    }

    /// Closes our side (over TLS, with a close_notify first).
    async fn shutdown(&mut self) {
        let _ = match &mut self.transport {
            Transport::Plain(stream) => stream.shutdown().await,
            Transport::Tls(tls) => tls.shutdown().await,
        };
    }

    /// Takes a socket moved from another runtime into this one's reactor.
    fn register(moved: MovedSocket) -> io::Result<Self> {
        Ok(Self {
            transport: Transport::Plain(TcpStream::from_std(moved.stream)?),
            write_timeout: moved.write_timeout,
            state: moved.state,
        })
    }

    /// Writes `head` (status line and headers) and then `session`'s frames as chunks until
    /// the session ends, the client goes or a write fails. `head` is emptied once sent (its
    /// buffer is not kept for the stream's life).
    async fn write_frames(&mut self, head: &mut Bytes, session: &mut Session) -> Stop {
        let mut frames = Vec::new();
        loop {
            frames.clear();
            let more = tokio::select! {
                biased;
                more = session.next_frames(&mut frames) => more,
                () = self.closed_by_peer() => return Stop::ConnectionGone,
            };
            if !more {
                return Stop::SessionEnded;
            }
            let len: usize = frames.iter().map(Bytes::len).sum();
            if len == 0 {
                continue;
            }
            let mut size = [0u8; CHUNK_SIZE_LINE];
            let size = chunk_size_line(len, &mut size);
            let mut bufs = Vec::with_capacity(frames.len() + 3);
            // The head goes with the first frames (the preamble is ready at once): one write,
            // not two.
            bufs.push(IoSlice::new(head));
            bufs.push(IoSlice::new(size));
            bufs.extend(frames.iter().map(|frame| IoSlice::new(frame)));
            bufs.push(IoSlice::new(b"\r\n"));
            if self.write_all(&mut bufs).await.is_err() {
                return Stop::ConnectionGone;
            }
            *head = Bytes::new();
            if frames.capacity() > KEPT_FRAME_SLOTS {
                // A burst needed many slots; an idle stream keeps few.
                frames = Vec::new();
            }
        }
    }

    /// Ends a chunked body cleanly (after `head`, empty once sent) and closes our side.
    async fn end_body(&mut self, head: &[u8]) {
        let _ = self
            .write_all(&mut [IoSlice::new(head), IoSlice::new(b"0\r\n\r\n")])
            .await;
        self.shutdown().await;
    }

    /// Writes `response` as a complete answer and closes the connection.
    pub async fn write_answer(&mut self, response: Response) {
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, MAX_ANSWER_BODY)
            .await
            .unwrap_or_default();
        let mut head = head(parts.status, &parts.headers);
        head.put_slice(
            format!(
                "content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        if self
            .write_all(&mut [IoSlice::new(&head), IoSlice::new(&body)])
            .await
            .is_ok()
        {
            self.linger().await;
        }
    }

    /// Closes our side, then reads what the client still sends for a moment: closing a
    /// socket with unread input resets the connection, and the client could lose the answer.
    async fn linger(&mut self) {
        self.shutdown().await;
        let mut discard = [0u8; 1024];
        let mut left = LINGER_BYTES;
        let _ = tokio::time::timeout(LINGER_TIME, async {
            while left > 0 {
                match self.transport.read(&mut discard).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        })
        .await;
    }
}

/// A socket on its way to the runtime of its stream, whose reactor [`write_stream`]
/// registers it with.
pub struct MovedSocket {
    /// The TCP stream, out of the runtime that accepted it.
    pub stream: std::net::TcpStream,
    /// `sse.write_timeout`.
    pub write_timeout: Duration,
    /// Marked when a write stalls.
    pub state: ConnState,
}

/// An event stream's connection on its way to the task that writes it.
pub enum Pending {
    /// A plain socket moved out of the accepting runtime, to register with the stream's.
    Moved(MovedSocket),
    /// A connection that stays where it is (TLS: rustls's state is tied to its socket).
    Ready(Socket),
}

/// How writing an event stream's frames stopped.
enum Stop {
    /// The session ended (and logged why): the body is to be ended cleanly.
    SessionEnded,
    /// The client closed the connection, or a write failed.
    ConnectionGone,
}

/// The task of one event stream for its whole life, on the runtime that polls it: registers
/// a moved socket there, writes `head` (status line and headers) and then `session`'s frames with
/// chunked transfer encoding until the session ends, the client goes or a write fails.
/// `held` (the connection's place under the limits) is let go last.
///
/// This future is all the memory an open stream keeps besides its socket buffers in the
/// kernel, so it is one `async move` block that keeps each of its values once: an `async fn`
/// would store every argument twice (as given, and in the local it is moved into), and a
/// future awaited inside that took the session by value would hold a copy of its own.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep a second copy of each argument"
)]
pub fn write_stream<H: Send + 'static>(
    held: H,
    pending: Pending,
    mut head: Bytes,
    mut session: Session,
) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let mut socket = match pending {
            Pending::Ready(socket) => socket,
            Pending::Moved(moved) => match Socket::register(moved) {
                Ok(socket) => socket,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot register a stream's socket");
                    return;
                }
            },
        };
        let stop = socket.write_frames(&mut head, &mut session).await;
        drop(session);
        if let Stop::SessionEnded = stop {
            socket.end_body(&head).await;
        }
        drop(held);
    }
}

/// Room for a chunk's size line: up to 16 hex digits and CRLF.
const CHUNK_SIZE_LINE: usize = 18;
/// Frame slots a stream keeps between writes.
const KEPT_FRAME_SLOTS: usize = 4;

/// Writes `len` as a chunk-size line (`<hex>\r\n`) into `buf`.
fn chunk_size_line(len: usize, buf: &mut [u8; CHUNK_SIZE_LINE]) -> &[u8] {
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for (i, slot) in buf[..digits].iter_mut().enumerate() {
        let nibble = (len >> (4 * (digits - 1 - i))) & 0xf;
        *slot = b"0123456789abcdef"[nibble];
    }
    buf[digits..digits + 2].copy_from_slice(b"\r\n");
    &buf[..digits + 2]
}

/// The head of an event-stream response: `response`'s status and headers, chunked.
pub fn stream_head(response: &Response<Body>) -> Bytes {
    let mut head = head(response.status(), response.headers());
    head.put_slice(b"transfer-encoding: chunked\r\n\r\n");
    head.freeze()
}

/// Status line and headers, without the blank line; framing headers are left out (the
/// caller adds its own). A `date` is added when the handler set none: an origin server with
/// a clock sends one (RFC 9110, section 6.6.1), as hyper does for the answers it writes.
fn head(status: StatusCode, headers: &HeaderMap) -> BytesMut {
    let mut head = BytesMut::with_capacity(256);
    head.put_slice(b"HTTP/1.1 ");
    head.put_slice(status.as_str().as_bytes());
    head.put_u8(b' ');
    head.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.put_slice(b"\r\n");
    if !headers.contains_key(header::DATE) {
        head.put_slice(b"date: ");
        head.put_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
        head.put_slice(b"\r\n");
    }
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            continue;
        }
        head.put_slice(name.as_str().as_bytes());
        head.put_slice(b": ");
        head.put_slice(value.as_bytes());
        head.put_slice(b"\r\n");
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunk_size_lines_are_lowercase_hex(len in any::<usize>()) {
            let mut buf = [0u8; CHUNK_SIZE_LINE];
            let line = chunk_size_line(len, &mut buf);
            let expected = format!("{len:x}\r\n");
            prop_assert_eq!(line, expected.as_bytes());
        }
    }

    #[test]
    fn heads_carry_status_and_headers_but_no_framing() {
        let mut response = Response::new(Body::empty());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        headers.insert(
            header::DATE,
            HeaderValue::from_static("Thu, 03 Dec 2026 15:00:00 GMT"),
        );
        let head = stream_head(&response);
        assert_eq!(
            &head[..],
            &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ndate: Thu, 03 Dec 2026 15:00:00 GMT\r\ntransfer-encoding: chunked\r\n\r\n"[..]
        );
        response.headers_mut().remove(header::DATE);
        let head = String::from_utf8(stream_head(&response).to_vec()).unwrap();
        let date = head
            .lines()
            .find_map(|line| line.strip_prefix("date: "))
            .expect("a date of its own");
        assert!(httpdate::parse_http_date(date).is_ok(), "{head}");
    }
}
