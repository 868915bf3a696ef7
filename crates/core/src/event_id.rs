//! Event ids: the position a client resumes from.
//!
//! An id is `<seq>-<incarnation>`: the stream sequence of the last event the client has seen, in
//! decimal, a dash, and the stream's incarnation in lower-case hexadecimal — e.g.
//! `42-18c3f0a1b2`. The incarnation changes when a stream is deleted and created again, so a cursor
//! from an earlier incarnation is recognised instead of silently pointing into the new one.
//!
//! Parsing is strict and canonical: digits only, no sign, no leading zeros, at most 20 decimal
//! and 16 hex digits, and a sequence below `u64::MAX` (so `seq + 1` always exists). A bare
//! `<seq>` without incarnation is also accepted (for hand-written `?last-id=` values); it is taken to
//! belong to the current incarnation.

use std::fmt;

/// The longest valid id: 20 decimal digits, a dash and 16 hex digits.
pub const MAX_LEN: usize = 20 + 1 + 16;

/// A parsed event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId {
    /// The stream sequence of the last event seen (0: none yet).
    pub seq: u64,
    /// The stream's incarnation, when the id carries one.
    pub incarnation: Option<u64>,
}

/// Why a string is not an event id; names the value (shortened when long).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event id {shown:?}: {reason}")]
pub struct EventIdError {
    /// The offending value, cut to [`MAX_LEN`] + 3 characters.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl EventId {
    /// The id of the position just before `next_seq` in incarnation `incarnation`.
    pub fn before(next_seq: u64, incarnation: u64) -> Self {
        Self {
            seq: next_seq.saturating_sub(1),
            incarnation: Some(incarnation),
        }
    }

    /// The first sequence after this position.
    pub fn next_seq(&self) -> u64 {
        self.seq + 1
    }

    /// Parses an id strictly (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, EventIdError> {
        let fail = |reason| EventIdError {
            shown: text.chars().take(MAX_LEN + 3).collect(),
            reason,
        };
        if text.len() > MAX_LEN {
            return Err(fail("longer than 37 characters"));
        }
        let (seq_text, incarnation_text) = match text.split_once('-') {
            Some((seq, incarnation)) => (seq, Some(incarnation)),
            None => (text, None),
        };
        let seq = number(seq_text, 10, 20)
            .ok_or_else(|| fail("the sequence is not a canonical decimal number"))?;
        if seq == u64::MAX {
            return Err(fail("the sequence is out of range"));
        }
        let incarnation = incarnation_text
            .map(|incarnation| {
                number(incarnation, 16, 16)
                    .ok_or_else(|| fail("the incarnation is not canonical lower-case hex"))
            })
            .transpose()?;
        Ok(Self { seq, incarnation })
    }
}

/// A canonical unsigned number in `radix`: 1..=`max_digits` digits, no leading zero (except
/// `0` itself), lower-case hex digits only.
fn number(text: &str, radix: u32, max_digits: usize) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.len() <= max_digits
        && (text == "0" || !text.starts_with('0'))
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (radix == 16 && (b'a'..=b'f').contains(&b)));
    if !canonical {
        return None;
    }
    u64::from_str_radix(text, radix).ok()
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.incarnation {
            Some(incarnation) => write!(f, "{}-{incarnation:x}", self.seq),
            None => write!(f, "{}", self.seq),
        }
    }
}

/// The resume position a request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The position, when the request named a valid one.
    pub id: Option<EventId>,
    /// A `Last-Event-ID` header that was ignored because it is invalid (for a warning log).
    pub ignored_header: Option<EventIdError>,
}

/// Chooses the resume position: a valid `Last-Event-ID` header wins (a browser sends it on
/// reconnect while re-using the original URL, whose `last-id` is stale); an invalid header is
/// ignored and reported; then `?last-id=`, whose invalidity is the caller's 400.
pub fn choose_cursor(header: Option<&str>, query: Option<&str>) -> Result<Cursor, EventIdError> {
    let mut ignored_header = None;
    if let Some(header) = header.filter(|h| !h.is_empty()) {
        match EventId::parse(header) {
            Ok(id) => {
                return Ok(Cursor {
                    id: Some(id),
                    ignored_header: None,
                });
            }
            Err(err) => ignored_header = Some(err),
        }
    }
    let id = query
        .filter(|q| !q.is_empty())
        .map(EventId::parse)
        .transpose()?;
    Ok(Cursor { id, ignored_header })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_sequence_dash_hex_incarnation() {
        let id = EventId {
            seq: 42,
            incarnation: Some(0xbeef),
        };
        assert_eq!(id.to_string(), "42-beef");
        assert_eq!(EventId::parse("42-beef"), Ok(id));
        assert_eq!(
            EventId::parse("7"),
            Ok(EventId {
                seq: 7,
                incarnation: None
            })
        );
        assert_eq!(EventId::before(1, 3).to_string(), "0-3");
    }

    #[test]
    fn rejects_non_canonical_and_hostile_input() {
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "01-1",
            "1-01",
            "+1",
            "1-BEEF",
            "1 -1",
            "1-1-1",
            "x",
            "18446744073709551615",
            "99999999999999999999",
            "1-10000000000000000",
            "1\n-1",
            "１",
        ] {
            assert!(EventId::parse(bad).is_err(), "{bad:?} must be rejected");
        }
        let long = "1".repeat(10_000);
        let err = EventId::parse(&long).expect_err("too long");
        assert_eq!(err.shown, "1".repeat(MAX_LEN + 3), "cut to MAX_LEN + 3");
        let err = EventId::parse("1-x").expect_err("bad incarnation");
        assert_eq!(err.shown, "1-x", "a short value is shown whole");
    }

    #[test]
    fn valid_header_wins_over_query() {
        let cursor = choose_cursor(Some("5-a"), Some("2-a")).expect("valid");
        assert_eq!(
            cursor.id,
            Some(EventId {
                seq: 5,
                incarnation: Some(10)
            })
        );
    }

    #[test]
    fn invalid_header_is_ignored_and_reported() {
        let cursor = choose_cursor(Some("garbage"), Some("2-a")).expect("query valid");
        assert_eq!(
            cursor.id,
            Some(EventId {
                seq: 2,
                incarnation: Some(10)
            })
        );
        assert!(cursor.ignored_header.is_some());
        let cursor = choose_cursor(Some("garbage"), None).expect("nothing to reject");
        assert_eq!(cursor.id, None);
    }

    #[test]
    fn invalid_query_is_an_error() {
        assert!(choose_cursor(None, Some("nope")).is_err());
        assert!(
            choose_cursor(Some("3-1"), Some("nope")).is_ok(),
            "header wins, query unused"
        );
    }

    proptest! {
        #[test]
        fn round_trips(seq in 0..u64::MAX, incarnation in proptest::option::of(any::<u64>())) {
            let id = EventId { seq, incarnation };
            let text = id.to_string();
            prop_assert!(text.len() <= MAX_LEN);
            prop_assert_eq!(EventId::parse(&text), Ok(id));
        }

        #[test]
        fn accepted_strings_are_canonical(text in "[0-9a-f-]{0,40}") {
            if let Ok(id) = EventId::parse(&text) {
                prop_assert_eq!(id.to_string(), text);
            }
        }
    }
}
