//! Header blocks: valid header sets round-trip through encode/decode, decode never panics and
//! only accepts what it can re-encode, and the validators accept exactly their grammar.

use proptest::prelude::*;
use sluice_protocol::headers::{
    HeaderError, Headers, MAX_HEADER_BLOCK_LEN, validate_name, validate_value,
};

fn name() -> impl Strategy<Value = String> {
    "[!-9;-~]{1,24}"
}

fn value() -> impl Strategy<Value = String> {
    "[^\\p{Cc}]{0,24}|[a-z\t ]{0,8}".prop_map(|v| v.trim_matches([' ', '\t']).to_owned())
}

fn headers() -> impl Strategy<Value = Headers> {
    (
        prop::collection::vec((name(), value()), 0..8),
        prop::option::of((
            0u16..1000,
            prop::option::of("[A-Za-z][A-Za-z ]{0,20}[A-Za-z]"),
        )),
    )
        .prop_map(|(entries, status)| {
            let mut h = Headers::new();
            for (n, v) in entries {
                h.try_append(n, v).unwrap();
            }
            if let Some((code, description)) = status {
                h.set_status(code, description.as_deref()).unwrap();
            }
            h
        })
}

fn name_grammar(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (b'!'..=b'~').contains(&b) && b != b':')
}

fn value_grammar(value: &str) -> bool {
    !value.chars().any(|c| c.is_control() && c != '\t')
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
}

fn tricky_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "Z", ":", " ", "\t", "\r", "\n", "\0", "é", "\u{7f}", "-",
        ]),
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_then_decode_is_identity(h in headers()) {
        let block = h.encode();
        prop_assert_eq!(block.len(), h.encoded_len());
        prop_assert_eq!(h.validate(), Ok(()));
        prop_assert_eq!(Headers::decode(&block), Ok(h));
    }

    #[test]
    fn decode_never_panics_and_accepts_only_what_it_reencodes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_decoded(&bytes)?;
    }

    #[test]
    fn decode_of_damaged_blocks_is_safe(h in headers(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), cut in any::<prop::sample::Index>()) {
        let mut block = h.encode();
        for (at, byte) in edits {
            let i = at.index(block.len());
            block[i] = byte;
        }
        check_decoded(&block)?;
        let truncated = &block[..cut.index(block.len() + 1)];
        check_decoded(truncated)?;
    }

    #[test]
    fn validators_accept_exactly_the_grammar(n in prop_oneof![tricky_text(), any::<String>()], v in prop_oneof![tricky_text(), any::<String>()]) {
        prop_assert_eq!(validate_name(&n).is_ok(), name_grammar(&n), "{:?}", n);
        prop_assert_eq!(validate_value("X", &v).is_ok(), value_grammar(&v), "{:?}", v);
        let mut h = Headers::new();
        prop_assert_eq!(h.try_append(n.clone(), v.clone()).is_ok(), name_grammar(&n) && value_grammar(&v));
    }
}

/// Decoding must not panic; when it succeeds the result is valid and re-encodes to a block that
/// decodes to the same headers.
fn check_decoded(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(h) = Headers::decode(bytes) {
        prop_assert_eq!(h.validate(), Ok(()));
        prop_assert_eq!(Headers::decode(&h.encode()), Ok(h));
    }
    Ok(())
}

#[test]
fn oversized_block_is_refused_by_length() {
    let mut h = Headers::new();
    h.append("X", "y".repeat(MAX_HEADER_BLOCK_LEN));
    let block = h.encode();
    assert_eq!(
        Headers::decode(&block),
        Err(HeaderError::TooLong { len: block.len() })
    );
}
