//! Encoding frames into bytes that cannot break the stream's framing.

use bytes::{BufMut, Bytes, BytesMut};

use crate::Frame;

/// Why a frame cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// An `id` or `event` value contains a character that would end its line (CR or LF) or
    /// that makes browsers ignore the field (NUL). Such values are rejected, never rewritten.
    #[error("SSE field `{field}` must not contain CR, LF or NUL, got {value:?}")]
    ForbiddenCharacter {
        /// The field name: `id` or `event`.
        field: &'static str,
        /// The offending value.
        value: String,
    },
}

impl Frame {
    /// Encodes the frame, terminated by the blank line that dispatches it.
    ///
    /// `data` and the comment may contain any text: each line (split at CR, LF or CRLF) becomes
    /// its own `data:` or `:` line, so a parser gives back the text with its line breaks
    /// normalised to `\n`. A frame with no field set encodes to no bytes at all.
    ///
    /// # Errors
    /// [`EncodeError::ForbiddenCharacter`] when `id` or `event` contains CR, LF or NUL.
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::with_capacity(self.encoded_len_hint());
        self.encode_into(&mut out)?;
        Ok(out.freeze())
    }

    /// Appends the encoded frame to `out` (see [`Frame::encode`]); on error `out` is unchanged.
    ///
    /// # Errors
    /// [`EncodeError::ForbiddenCharacter`] when `id` or `event` contains CR, LF or NUL.
    pub fn encode_into(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let id = self
            .id
            .as_deref()
            .map(|id| single_line("id", id))
            .transpose()?;
        let event = self
            .event
            .as_deref()
            .map(|event| single_line("event", event))
            .transpose()?;
        if self.is_empty() {
            return Ok(());
        }
        if let Some(comment) = &self.comment {
            put_lines(out, b":", comment);
        }
        if let Some(retry) = self.retry {
            put_line(out, b"retry:", &retry.to_string());
        }
        if let Some(id) = id {
            put_line(out, b"id:", id);
        }
        if let Some(event) = event {
            put_line(out, b"event:", event);
        }
        if let Some(data) = &self.data {
            put_lines(out, b"data:", data);
        }
        out.put_u8(b'\n');
        Ok(())
    }

    fn encoded_len_hint(&self) -> usize {
        let text = [&self.id, &self.event, &self.data, &self.comment]
            .into_iter()
            .flatten()
            .map(String::len)
            .sum::<usize>();
        text + 64
    }
}

fn single_line<'a>(field: &'static str, value: &'a str) -> Result<&'a str, EncodeError> {
    if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | b'\0')) {
        return Err(EncodeError::ForbiddenCharacter {
            field,
            value: value.to_owned(),
        });
    }
    Ok(value)
}

/// Writes `prefix value` for every line of `text`, treating CRLF, CR and LF as line breaks.
fn put_lines(out: &mut BytesMut, prefix: &[u8], text: &str) {
    let mut rest = text;
    loop {
        // A byte search: both breaks are ASCII, so the position is a char boundary (and a
        // `char` pattern search costs more than the copy, on every frame).
        match rest.bytes().position(|b| b == b'\r' || b == b'\n') {
            None => return put_line(out, prefix, rest),
            Some(at) => {
                put_line(out, prefix, &rest[..at]);
                let skip = if rest[at..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[at + skip..];
            }
        }
    }
}

/// Writes one `prefix value` line. The space after the colon is always written so that a value
/// starting with a space survives (the parser strips exactly one).
fn put_line(out: &mut BytesMut, prefix: &[u8], value: &str) {
    out.put_slice(prefix);
    out.put_u8(b' ');
    out.put_slice(value.as_bytes());
    out.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(frame: &Frame) -> String {
        String::from_utf8(frame.encode().expect("encodable").to_vec()).expect("utf-8")
    }

    #[test]
    fn encodes_every_field_in_order() {
        let frame = Frame::data("{\"a\":1}")
            .with_id("7")
            .with_event("message")
            .with_retry(3000)
            .with_comment("hello");
        assert_eq!(
            text(&frame),
            ": hello\nretry: 3000\nid: 7\nevent: message\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn splits_multi_line_data_at_cr_lf_and_crlf() {
        let frame = Frame::data("a\nb\r\nc\rd\n");
        assert_eq!(
            text(&frame),
            "data: a\ndata: b\ndata: c\ndata: d\ndata: \n\n"
        );
    }

    #[test]
    fn splits_multi_line_comments() {
        assert_eq!(text(&Frame::comment("a\r\nb")), ": a\n: b\n\n");
    }

    #[test]
    fn rejects_line_breaks_and_nul_in_id_and_event() {
        for bad in ["a\nb", "a\rb", "a\0b"] {
            let err = Frame::data("x").with_id(bad).encode().unwrap_err();
            assert_eq!(
                err,
                EncodeError::ForbiddenCharacter {
                    field: "id",
                    value: bad.to_owned()
                }
            );
            let err = Frame::data("x").with_event(bad).encode().unwrap_err();
            assert!(err.to_string().contains("`event`"), "{err}");
        }
    }

    #[test]
    fn failed_encode_into_leaves_buffer_unchanged() {
        let mut out = BytesMut::from(&b"keep"[..]);
        assert!(
            Frame::data("x")
                .with_id("\n")
                .encode_into(&mut out)
                .is_err()
        );
        assert_eq!(&out[..], b"keep");
    }

    #[test]
    fn empty_frame_encodes_to_nothing() {
        assert!(Frame::default().encode().unwrap().is_empty());
    }
}
