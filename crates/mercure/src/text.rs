//! Checks and display helpers shared by the parsers: which strings the protocol accepts, and how
//! an offending value is shown in an error.

/// The longest part of an offending value an error shows, in characters.
const SHOWN_CHARS: usize = 64;

/// Why a string is not a protocol string.
pub(crate) const NOT_PROTOCOL_STRING: &str = "must not contain control characters (U+0000–U+001F, U+007F–U+009F) or format characters (Unicode Cf)";

/// Whether `text` may be used as a topic, selector, id or event type: no C0 or C1 control
/// character and no Unicode format character (category Cf: zero-width and bidirectional marks,
/// the BOM…), as Mercure requires.
pub(crate) fn is_protocol_string(text: &str) -> bool {
    !text.chars().any(|c| c.is_control() || is_format(c))
}

/// Unicode general category Cf (Unicode 15.1).
fn is_format(c: char) -> bool {
    matches!(u32::from(c),
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
}

/// `value` as an error shows it: at most [`SHOWN_CHARS`] characters, `…` marking a cut.
pub(crate) fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_format_characters_are_not_protocol_strings() {
        assert!(is_protocol_string("https://example.com/books/1 é 🙂"));
        assert!(is_protocol_string(""));
        for bad in [
            "a\nb",
            "a\u{0}",
            "\u{7F}",
            "\u{85}",
            "\u{200B}",
            "\u{FEFF}x",
            "\u{E0041}",
        ] {
            assert!(!is_protocol_string(bad), "{bad:?}");
        }
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        assert_eq!(shown("abc"), "abc");
        let long = "é".repeat(100);
        assert_eq!(shown(&long), format!("{}…", "é".repeat(64)));
    }
}
