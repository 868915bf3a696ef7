//! Quoting offending values in error messages.

/// Longest excerpt of an offending value quoted in an error message.
const SHOWN_CHARS: usize = 64;

/// Quotes a value for an error message (escaped, as Rust's `{:?}` does), cutting it short with
/// `…` if it is long, so a huge input cannot make a huge error message.
pub(crate) fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{:?}…", &value[..cut]),
        None => format!("{value:?}"),
    }
}

/// Quotes raw bytes for an error message, invalid UTF-8 shown as U+FFFD.
pub(crate) fn shown_bytes(bytes: &[u8]) -> String {
    shown(&String::from_utf8_lossy(
        &bytes[..bytes.len().min(SHOWN_CHARS * 4)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_short() {
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
        let long = "é".repeat(100);
        assert_eq!(shown(&long), format!("\"{}\"…", "é".repeat(SHOWN_CHARS)));
        assert_eq!(shown_bytes(b"a\xffb"), "\"a\u{fffd}b\"");
        let long = "é".repeat(100);
        assert_eq!(
            shown_bytes(long.as_bytes()),
            format!("\"{}\"…", "é".repeat(SHOWN_CHARS))
        );
    }
}
