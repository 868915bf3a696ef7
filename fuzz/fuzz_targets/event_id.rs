//! Event ids, both ways: `EventId::parse` never panics and what it accepts formats back to the
//! same text (the form is canonical); every id it can produce formats to text it accepts; and
//! `choose_cursor` follows its precedence rules.
//!
//! Input: `<id>` or `<Last-Event-ID header>\n<?last-id= value>`; the first 9 bytes also build an
//! id directly (a flag byte for the incarnation, then 8 bytes of sequence, incarnation = sequence reversed).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::split_line;
use sluice_server::fuzzing::{EventId, MAX_EVENT_ID_LEN, choose_cursor};

fuzz_target!(|data: &[u8]| {
    // Valid ⇒ accepted.
    if let [flag, bytes @ ..] = data
        && let Some(seq) = bytes.first_chunk::<8>().map(|b| u64::from_le_bytes(*b))
        && seq < u64::MAX
    {
        let id = EventId {
            seq,
            incarnation: (flag & 1 == 1).then(|| seq.reverse_bits()),
        };
        let text = id.to_string();
        assert!(text.len() <= MAX_EVENT_ID_LEN);
        assert_eq!(EventId::parse(&text), Ok(id));
        assert_eq!(id.next_seq(), seq + 1);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Accepted ⇒ canonical.
    match EventId::parse(text) {
        Ok(id) => {
            assert_eq!(id.to_string(), text);
            assert!(id.seq < u64::MAX);
        }
        Err(err) => {
            assert!(err.shown.chars().count() <= MAX_EVENT_ID_LEN + 3);
            assert!(text.starts_with(&err.shown));
        }
    }
    let (header, query) = split_line(text);
    let cursor = choose_cursor(Some(header), query);
    let header_id = EventId::parse(header).ok();
    let query_id = query.filter(|q| !q.is_empty()).map(EventId::parse);
    match (header_id, query_id) {
        (Some(id), _) => {
            let cursor = cursor.expect("a valid header always wins");
            assert_eq!((cursor.id, cursor.ignored_header), (Some(id), None));
        }
        (None, Some(Err(err))) => assert_eq!(cursor, Err(err)),
        (None, query_id) => {
            let cursor = cursor.expect("no invalid query value");
            assert_eq!(cursor.id, query_id.map(|q| q.expect("valid")));
            assert_eq!(cursor.ignored_header.is_some(), !header.is_empty());
        }
    }
});
