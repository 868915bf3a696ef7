//! The frame being built from the lines of one event block, in buffers reused frame after
//! frame so that parsing a stream does not allocate per line or per frame.

use crate::FrameRef;

/// Capacity a reused buffer may keep after a frame; a rare large frame does not pin its
/// memory for the rest of the stream.
const KEEP_CAPACITY: usize = 16 << 10;

/// One text field of the frame being built: whether a line set it, and its value.
#[derive(Debug, Default)]
struct Text {
    value: String,
    set: bool,
}

impl Text {
    fn get(&self) -> Option<&str> {
        self.set.then_some(self.value.as_str())
    }

    /// A field that keeps its last line's value (`id`, `event`).
    fn replace(&mut self, value: &str) {
        self.value.clear();
        self.value.push_str(value);
        self.set = true;
    }

    /// A field whose lines are joined with `\n` (`data`, comments).
    fn append_line(&mut self, value: &str) {
        if self.set {
            self.value.push('\n');
        }
        self.value.push_str(value);
        self.set = true;
    }

    fn clear(&mut self) {
        self.set = false;
        if self.value.capacity() > KEEP_CAPACITY {
            self.value = String::new();
        } else {
            self.value.clear();
        }
    }
}

/// The fields seen so far in the current block, and the id that persists across blocks.
#[derive(Debug, Default)]
pub(crate) struct FrameBuilder {
    id: Text,
    event: Text,
    data: Text,
    comment: Text,
    retry: Option<u64>,
    /// A field took effect or a comment was seen: the block yields a frame.
    used: bool,
    /// Bytes of the block's lines so far, without line breaks.
    pub(crate) bytes: usize,
    pub(crate) last_event_id: String,
}

impl FrameBuilder {
    /// Applies one non-empty line of the block.
    pub(crate) fn field(&mut self, line: &str) {
        let (name, value) = match memchr::memchr(b':', line.as_bytes()) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match name {
            "" => self.comment.append_line(value),
            "data" => self.data.append_line(value),
            "event" => self.event.replace(value),
            "id" if !value.contains('\0') => {
                self.id.replace(value);
                value.clone_into(&mut self.last_event_id);
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // All digits but too large for u64: ignored like any invalid retry value.
                let Ok(millis) = value.parse() else { return };
                self.retry = Some(millis);
            }
            _ => return,
        }
        self.used = true;
    }

    /// The blank line: hands the frame to `on_frame` if the block yields one, and starts the
    /// next block.
    pub(crate) fn dispatch(&mut self, on_frame: &mut impl FnMut(FrameRef<'_>)) {
        if self.used {
            on_frame(FrameRef {
                id: self.id.get(),
                event: self.event.get(),
                data: self.data.get(),
                retry: self.retry,
                comment: self.comment.get(),
            });
        }
        self.clear();
    }

    /// Forgets the current block (the persisting last event id stays).
    pub(crate) fn clear(&mut self) {
        for text in [
            &mut self.id,
            &mut self.event,
            &mut self.data,
            &mut self.comment,
        ] {
            text.clear();
        }
        self.retry = None;
        self.used = false;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_frame_does_not_pin_its_buffer() {
        let mut builder = FrameBuilder::default();
        builder.field("data: small");
        builder.dispatch(&mut |_| {});
        assert!(
            builder.data.value.capacity() > 0,
            "small buffers are reused"
        );
        builder.field(&format!("data: {}", "x".repeat(KEEP_CAPACITY + 1)));
        builder.dispatch(&mut |_| {});
        assert_eq!(builder.data.value.capacity(), 0);
    }
}
