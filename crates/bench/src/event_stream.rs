//! An event stream as the clients read it: the bytes of its `text/event-stream` body handed
//! to the caller piece by piece, whichever protocol carries them.
//!
//! Over HTTP/1.1 the client writes `GET /events…` on its own connection, reads the response
//! head with `httparse`, then decodes the chunked body itself, handing each piece of the event
//! stream to the caller as it lies in one reused read buffer: ten thousand clients each wake
//! for every few frames, so what a wake-up costs is most of what a client costs, and here it
//! is one `read` and the chunk framing, with no body channel, per-chunk buffer or connection
//! task in between.
//!
//! Over HTTP/2 the stream is one of many on a shared connection ([`Multiplex`]); hyper's
//! connection task reads the socket and the stream's DATA frames are handed on as they come.

use std::io;
use std::net::IpAddr;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http::Target;
use crate::multiplex::Multiplex;
use crate::transport::Io;

/// Bytes read from the socket at a time; also the largest response head accepted.
const READ_BUFFER: usize = 4096;
/// Most response headers looked at.
const MAX_HEADERS: usize = 32;
/// At most this much of an error answer is quoted.
const QUOTED_BODY: usize = 200;
/// The media type of an event stream.
const EVENT_STREAM: &str = "text/event-stream";

/// How the rest of an HTTP/1.1 body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Before a chunk-size line.
    ChunkSize,
    /// Inside a chunk, with this many data bytes left.
    ChunkData(u64),
    /// After a chunk's data: its CRLF.
    ChunkEnd,
    /// The last chunk arrived: the body is complete.
    Done,
    /// No transfer encoding: the body runs until the hub closes the connection.
    UntilClose,
}

/// Why a stream stopped delivering.
#[derive(Debug)]
pub enum End {
    /// The body ended as HTTP allows: the last chunk, the close of an unframed body, or the
    /// end of an HTTP/2 stream.
    Finished,
    /// The connection or the stream failed, or the chunked framing was broken.
    Failed(String),
}

/// An open `text/event-stream` response.
#[derive(Debug)]
pub struct EventStream {
    carrier: Carrier,
}

/// What carries the body.
#[derive(Debug)]
enum Carrier {
    Http1(Http1Body),
    Http2(Http2Body),
}

impl EventStream {
    /// Sends `GET <path_and_query>` as an `EventSource` would and reads the response head:
    /// over HTTP/1.1 on a connection of its own from `source` when given (see
    /// [`Target::connect_tcp`]), over HTTP/2 as a stream on client `client`'s connection of
    /// `multiplex`.
    ///
    /// # Errors
    /// When the connection fails, the head is malformed (or over HTTP/1.1 larger than 4 KiB),
    /// the status is not a success (the error quotes the start of the body), or the content
    /// type is not `text/event-stream`.
    pub async fn open(
        target: &Target,
        multiplex: Option<&Multiplex>,
        client: usize,
        source: Option<IpAddr>,
        path_and_query: &str,
    ) -> anyhow::Result<Self> {
        let carrier = match multiplex {
            None => Carrier::Http1(Http1Body::open(target, source, path_and_query).await?),
            Some(multiplex) => {
                let sender = multiplex.sender(target, client, source).await?;
                Carrier::Http2(Http2Body::open(target, sender, path_and_query).await?)
            }
        };
        Ok(Self { carrier })
    }

    /// Waits for the next bytes of the body, for [`EventStream::decode`]. Cancel-safe: a
    /// cancelled call has taken nothing.
    ///
    /// # Errors
    /// What ended the stream: the connection closed (normal only for an HTTP/1.1 body without
    /// framing, or the end of an HTTP/2 stream) or failed.
    pub async fn read(&mut self) -> Result<(), End> {
        match &mut self.carrier {
            Carrier::Http1(body) => body.read().await,
            Carrier::Http2(body) => body.read().await,
        }
    }

    /// Hands the event-stream bytes among those read to `on_data` (in one or more pieces).
    ///
    /// # Errors
    /// What ended the stream: its last chunk arrived, or its chunk framing is broken.
    pub fn decode(&mut self, mut on_data: impl FnMut(&[u8])) -> Result<(), End> {
        match &mut self.carrier {
            Carrier::Http1(body) => body.decode(&mut on_data),
            Carrier::Http2(body) => {
                body.decode(&mut on_data);
                Ok(())
            }
        }
    }
}

/// An HTTP/1.1 event stream read straight from its own connection.
#[derive(Debug)]
struct Http1Body {
    socket: Io,
    buffer: Box<[u8]>,
    /// `buffer[start..end]` holds bytes read but not yet decoded.
    start: usize,
    end: usize,
    /// Some of those bytes were never offered to [`Http1Body::decode`] (the body's start
    /// came with the head), so the next read must not wait for more.
    fresh: bool,
    framing: Framing,
}

impl Http1Body {
    async fn open(
        target: &Target,
        source: Option<IpAddr>,
        path_and_query: &str,
    ) -> anyhow::Result<Self> {
        let mut socket = target.connect_io(source).await?;
        let request = target.get_head(path_and_query, EVENT_STREAM);
        socket
            .write_all(request.as_bytes())
            .await
            .with_context(|| format!("GET {path_and_query}"))?;
        let mut buffer = vec![0; READ_BUFFER].into_boxed_slice();
        let mut end = 0;
        loop {
            let read = socket.read(&mut buffer[end..]).await?;
            if read == 0 {
                bail!("GET {path_and_query}: connection closed without an answer");
            }
            end += read;
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            let status = response
                .parse(&buffer[..end])
                .with_context(|| format!("GET {path_and_query}: malformed response head"))?;
            let httparse::Status::Complete(head_len) = status else {
                if end == buffer.len() {
                    bail!("GET {path_and_query}: response head larger than {READ_BUFFER} bytes");
                }
                continue;
            };
            let header = |name: &str| {
                response
                    .headers
                    .iter()
                    .find(|header| header.name.eq_ignore_ascii_case(name))
                    .map(|header| String::from_utf8_lossy(header.value).into_owned())
            };
            let status = response.code.unwrap_or_default();
            let framing = check_head(status, header, &buffer[head_len..end])
                .and_then(|()| framing(header))
                .with_context(|| format!("GET {path_and_query}"))?;
            return Ok(Self {
                socket,
                buffer,
                start: head_len,
                end,
                fresh: head_len < end,
                framing,
            });
        }
    }

    async fn read(&mut self) -> Result<(), End> {
        if std::mem::take(&mut self.fresh) {
            return Ok(());
        }
        if self.start == self.end {
            // Everything read was decoded: read into the whole buffer again.
            self.start = 0;
            self.end = 0;
        }
        if self.end == self.buffer.len() {
            // Only an unfinished chunk-size line is left, and it fills the buffer.
            return Err(End::Failed(format!(
                "chunk-size line longer than {READ_BUFFER} bytes"
            )));
        }
        match self.socket.read(&mut self.buffer[self.end..]).await {
            Ok(0) if self.framing == Framing::UntilClose => Err(End::Finished),
            Ok(0) => Err(End::Failed("connection closed inside the body".into())),
            Ok(read) => {
                self.end += read;
                Ok(())
            }
            Err(err) => Err(End::Failed(err.to_string())),
        }
    }

    fn decode(&mut self, on_data: &mut impl FnMut(&[u8])) -> Result<(), End> {
        match self.decode_framing(on_data) {
            Err(err) => Err(End::Failed(err.to_string())),
            Ok(()) if self.framing == Framing::Done => Err(End::Finished),
            Ok(()) => Ok(()),
        }
    }

    /// Decodes the buffered bytes as far as they go, keeping an unfinished chunk-size line or
    /// chunk end at the front of the buffer for the next read.
    fn decode_framing(&mut self, on_data: &mut impl FnMut(&[u8])) -> io::Result<()> {
        loop {
            let pending = &self.buffer[self.start..self.end];
            if pending.is_empty() {
                return Ok(());
            }
            let used = match self.framing {
                Framing::UntilClose => {
                    on_data(pending);
                    pending.len()
                }
                Framing::ChunkData(left) => {
                    let take = pending
                        .len()
                        .min(usize::try_from(left).unwrap_or(usize::MAX));
                    on_data(&pending[..take]);
                    self.framing = match left - take as u64 {
                        0 => Framing::ChunkEnd,
                        left => Framing::ChunkData(left),
                    };
                    take
                }
                // `parse_chunk_size` reads a line without digits as size 0: the last chunk.
                Framing::ChunkSize if !pending[0].is_ascii_hexdigit() => {
                    return Err(invalid("invalid chunk-size line"));
                }
                Framing::ChunkSize => match httparse::parse_chunk_size(pending) {
                    Ok(httparse::Status::Complete((used, 0))) => {
                        self.framing = Framing::Done;
                        used
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.framing = Framing::ChunkData(size);
                        used
                    }
                    Ok(httparse::Status::Partial) => {
                        self.keep_pending();
                        return Ok(());
                    }
                    Err(_) => return Err(invalid("invalid chunk-size line")),
                },
                Framing::ChunkEnd => match pending {
                    [b'\r', b'\n', ..] => {
                        self.framing = Framing::ChunkSize;
                        2
                    }
                    [b'\r'] => {
                        self.keep_pending();
                        return Ok(());
                    }
                    _ => return Err(invalid("chunk data not followed by CRLF")),
                },
                // Trailers, if any, are not read: no event follows the last chunk.
                Framing::Done => return Ok(()),
            };
            self.start += used;
        }
    }

    /// Moves the undecoded bytes to the front of the buffer, so the next read completes them.
    fn keep_pending(&mut self) {
        self.buffer.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// An HTTP/2 event stream: a stream of a shared connection, whose DATA frames hyper hands
/// over (returning their flow-control window as they are taken).
#[derive(Debug)]
struct Http2Body {
    body: Incoming,
    /// The last DATA frame taken, not yet offered to [`Http2Body::decode`].
    data: Bytes,
}

impl Http2Body {
    async fn open(
        target: &Target,
        mut sender: SendRequest<Full<Bytes>>,
        path_and_query: &str,
    ) -> anyhow::Result<Self> {
        let request = target
            .request(hyper::Method::GET, path_and_query)
            .header(ACCEPT, EVENT_STREAM)
            .body(Full::default())
            .with_context(|| format!("GET {path_and_query}"))?;
        let opened = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let (head, mut body) = response.into_parts();
            let status = head.status.as_u16();
            let mut quoted = Vec::new();
            if !head.status.is_success()
                && let Some(Ok(frame)) = body.frame().await
                && let Ok(data) = frame.into_data()
            {
                quoted = data.to_vec();
            }
            let header = |name: &str| {
                let value = head.headers.get(name)?;
                Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
            };
            check_head(status, header, &quoted)?;
            anyhow::Ok(Self {
                body,
                data: Bytes::new(),
            })
        };
        opened
            .await
            .with_context(|| format!("GET {path_and_query}"))
    }

    async fn read(&mut self) -> Result<(), End> {
        loop {
            match self.body.frame().await {
                None => return Err(End::Finished),
                Some(Err(err)) => return Err(End::Failed(err.to_string())),
                Some(Ok(frame)) => {
                    // Trailers carry no events: the stream's end follows them.
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        self.data = data;
                        return Ok(());
                    }
                }
            }
        }
    }

    fn decode(&mut self, on_data: &mut impl FnMut(&[u8])) {
        let data = std::mem::take(&mut self.data);
        if !data.is_empty() {
            on_data(&data);
        }
    }
}

/// Checks the status and headers of an event-stream answer, `header` giving a header's value
/// by its (lower-case) name; `body_start` is the body's start, quoted when the status is an
/// error.
fn check_head(
    status: u16,
    header: impl Fn(&str) -> Option<String>,
    body_start: &[u8],
) -> anyhow::Result<()> {
    if !(200..300).contains(&status) {
        let quoted = &body_start[..body_start.len().min(QUOTED_BODY)];
        bail!("answered {status}: {}", String::from_utf8_lossy(quoted));
    }
    let content_type = header(CONTENT_TYPE.as_str());
    if !content_type
        .as_deref()
        .is_some_and(|value| value.starts_with(EVENT_STREAM))
    {
        bail!("answered {status} with Content-Type {content_type:?}, not text/event-stream");
    }
    if header(CONTENT_LENGTH.as_str()).is_some() {
        bail!("answered an event stream with a Content-Length");
    }
    Ok(())
}

/// How an HTTP/1.1 event stream's body is framed, from its `Transfer-Encoding`.
fn framing(header: impl Fn(&str) -> Option<String>) -> anyhow::Result<Framing> {
    match header(TRANSFER_ENCODING.as_str()) {
        Some(coding) if coding.eq_ignore_ascii_case("chunked") => Ok(Framing::ChunkSize),
        Some(coding) => bail!("answered with Transfer-Encoding {coding:?}, not chunked"),
        None => Ok(Framing::UntilClose),
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::http::Protocol;

    const SSE_HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    /// A server on 127.0.0.1 that answers one request with `pieces` and then closes the
    /// connection: the first piece at once, each further one when the client says (through the
    /// returned sender) that it is about to read again — so every read gets one piece, and
    /// framing split across reads is met.
    async fn serve(pieces: Vec<Vec<u8>>) -> (Target, mpsc::UnboundedSender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (more, mut wanted) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            for (i, piece) in pieces.into_iter().enumerate() {
                if i > 0 && wanted.recv().await.is_none() {
                    return;
                }
                socket.write_all(&piece).await.unwrap();
            }
        });
        (Target::parse(&url, Protocol::Http1, None).unwrap(), more)
    }

    /// Everything the stream delivers, and how it ended.
    async fn read_all(pieces: Vec<Vec<u8>>) -> anyhow::Result<(Vec<u8>, End)> {
        let (target, more) = serve(pieces).await;
        let mut stream = EventStream::open(&target, None, 0, None, "/events?topic=a").await?;
        let mut data = Vec::new();
        loop {
            // The server may be done already.
            let _ = more.send(());
            let step = stream.read().await;
            if let Err(end) =
                step.and_then(|()| stream.decode(|bytes| data.extend_from_slice(bytes)))
            {
                return Ok((data, end));
            }
        }
    }

    #[tokio::test]
    async fn chunked_framing_split_anywhere_is_decoded() {
        let mut pieces = vec![SSE_HEAD.to_vec(), b"7\r\ndata: a".to_vec(), b"\r".to_vec()];
        pieces.extend([
            b"\n1".to_vec(),
            b"0;ext=1\r\n\n\ndata: bcdefghi\r".to_vec(),
            b"\n".to_vec(),
            b"3\r\n\n\n\n\r\n0\r\ntrailer: x\r\n\r\n".to_vec(),
        ]);
        let (data, end) = read_all(pieces).await.unwrap();
        assert_eq!(data, b"data: a\n\ndata: bcdefghi\n\n\n");
        assert!(matches!(end, End::Finished), "{end:?}");
    }

    #[tokio::test]
    async fn events_that_came_with_the_head_are_decoded_without_waiting_for_more() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = Target::parse(&url, Protocol::Http1, None).unwrap();
        let (done, held) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            let answer = [SSE_HEAD, b"9\r\ndata: a\n\n\r\n"].concat();
            socket.write_all(&answer).await.unwrap();
            // The connection stays open, with nothing more to read, until the client is done.
            let _ = held.await;
        });
        let mut stream = EventStream::open(&target, None, 0, None, "/events?topic=a")
            .await
            .unwrap();
        let mut data = Vec::new();
        let wait = std::time::Duration::from_secs(30);
        let read = tokio::time::timeout(wait, stream.read()).await;
        assert!(read.is_ok(), "the body's start waited for more bytes");
        assert!(read.unwrap().is_ok());
        stream
            .decode(|bytes| data.extend_from_slice(bytes))
            .unwrap();
        assert_eq!(data, b"data: a\n\n");
        let _ = done.send(());
    }

    #[tokio::test]
    async fn a_body_without_framing_runs_until_close() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: a\n\n";
        let (data, end) = read_all(vec![head.to_vec(), b"data: b\n\n".to_vec()])
            .await
            .unwrap();
        assert_eq!(data, b"data: a\n\ndata: b\n\n");
        assert!(matches!(end, End::Finished), "{end:?}");
    }

    #[tokio::test]
    async fn broken_or_unfinished_chunks_fail_the_stream() {
        for (body, why) in [
            (&b"3\r\nabcX"[..], "chunk data not followed by CRLF"),
            (b"zz\r\n", "invalid chunk-size line"),
            (b"3\r\nabc\r\n\r\n", "invalid chunk-size line"),
            (b"5\r\nab", "connection closed inside the body"),
        ] {
            let (_, end) = read_all(vec![SSE_HEAD.to_vec(), body.to_vec()])
                .await
                .unwrap();
            let End::Failed(failure) = end else {
                panic!("{body:?} ended with {end:?}");
            };
            assert_eq!(failure, why);
        }
    }

    #[tokio::test]
    async fn refuses_errors_other_types_and_lengths() {
        for (head, why) in [
            (
                &b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nno topic!"[..],
                "answered 404: no topic!",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n",
                "not text/event-stream",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 5\r\n\r\n",
                "with a Content-Length",
            ),
            (b"HTTP/1.1 2", "connection closed without an answer"),
            (b"HTTX/1.1 200 OK\r\n\r\n", "malformed response head"),
        ] {
            let err = read_all(vec![head.to_vec()]).await.unwrap_err();
            let err = format!("{err:#}");
            assert!(err.contains(why), "{err}");
            assert!(err.contains("GET /events?topic=a"), "{err}");
        }
    }
}
