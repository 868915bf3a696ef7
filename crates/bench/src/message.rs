//! What a client accepts as a message of this run: the `data` of a `message` frame must be a
//! JSON object whose `topic` is the client's topic and whose `payload` carries this run's id,
//! the message's number `n` and its send time.
//!
//! A sluice hub writes the data in one layout (compact, keys in a fixed order, the publisher's
//! payload verbatim, then the `time`); nchan hands out the published document itself, which is
//! that layout without the `time`. A client reads ten thousand of them per message, so those
//! layouts are matched byte by byte first; any other text goes through a full JSON parse, which
//! decides alone. The layout match accepts only text that the JSON parse also accepts with the
//! same values, so it changes the cost, never the verdict.

use std::borrow::Cow;

use serde::Deserialize;

/// A message of this run, as its payload describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Its number in the run's schedule (every publisher of the run writes it; the JSON parse
    /// does not insist on it, as a sluice client orders by event id and never needs it).
    pub n: Option<u64>,
    /// When it was sent, in microseconds of the run's clock.
    pub sent_us: u64,
}

/// The message in `data` if it is a message of run `run` on `topic`; `None` for anything else.
pub fn read(data: &str, topic: &str, run: &str) -> Option<Message> {
    in_hub_layout(data, topic, run).or_else(|| parsed(data, topic, run))
}

/// `data` exactly as a hub writes it:
/// `{"topic":"<topic>","payload":{"run":"<run>","n":<n>,"sent_us":<us>,"pad":"<pad>"}` and then
/// `,"time":"<time>"}` (sluice) or `}` (nchan, the published document), where the numbers are
/// JSON integers and the strings need no escapes. `topic` and `run` are plain tokens (letters,
/// digits, `.`, `_`, `-`), so they appear in JSON as they are.
fn in_hub_layout(data: &str, topic: &str, run: &str) -> Option<Message> {
    let rest = data
        .strip_prefix(r#"{"topic":""#)?
        .strip_prefix(topic)?
        .strip_prefix(r#"","payload":{"run":""#)?
        .strip_prefix(run)?
        .strip_prefix(r#"","n":"#)?;
    let (n, rest) = integer(rest)?;
    let (sent_us, rest) = integer(rest.strip_prefix(r#","sent_us":"#)?)?;
    let rest = rest.strip_prefix(r#","pad":""#)?;
    let rest = plain_string(rest)?.strip_prefix('}')?;
    let rest = match rest.strip_prefix(r#","time":""#) {
        Some(time) => plain_string(time)?,
        None => rest,
    };
    (rest == "}").then_some(Message {
        n: Some(n),
        sent_us,
    })
}

/// A JSON integer that fits a `u64` (no sign, no leading zero) at the start of `text`, and
/// the text after it.
fn integer(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || (digits > 1 && text.starts_with('0')) {
        return None;
    }
    let value = text.as_bytes()[..digits]
        .iter()
        .try_fold(0u64, |value, &digit| {
            value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })?;
    Some((value, &text[digits..]))
}

/// The rest of a JSON string without escapes, after its opening quote: the text after its
/// closing quote. A quote, backslash or control character first means no such string.
fn plain_string(text: &str) -> Option<&str> {
    let end = memchr::memchr(b'"', text.as_bytes())?;
    // A fold rather than `any`: no early exit, so the compiler vectorises it.
    let escaped = text.as_bytes()[..end]
        .iter()
        .fold(false, |escaped, &b| escaped | (b == b'\\') | (b < 0x20));
    (!escaped).then(|| &text[end + 1..])
}

/// The part of a message's data the client checks.
#[derive(Deserialize)]
struct MessageData<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    #[serde(borrow)]
    payload: Payload<'a>,
}

/// The payload every publisher of the run sends (`pad` is not checked).
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    run: Cow<'a, str>,
    n: Option<u64>,
    sent_us: u64,
}

/// `data` read by a JSON parser, in whatever layout.
fn parsed(data: &str, topic: &str, run: &str) -> Option<Message> {
    let message: MessageData = serde_json::from_str(data).ok()?;
    (message.topic == topic && message.payload.run == run).then_some(Message {
        n: message.payload.n,
        sent_us: message.payload.sent_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "0123456789abcdef";
    const HUB: &str = r#"{"topic":"bench.0","payload":{"run":"0123456789abcdef","n":3,"sent_us":17,"pad":"xx"},"time":"2026-11-30T00:24:15.123456789Z"}"#;

    /// Both readings of `data`, as send times: the layout match and the JSON parse.
    fn both(data: &str) -> (Option<u64>, Option<u64>) {
        let sent_us = |message: Option<Message>| message.map(|m| m.sent_us);
        (
            sent_us(in_hub_layout(data, "bench.0", RUN)),
            sent_us(parsed(data, "bench.0", RUN)),
        )
    }

    /// What [`read`] makes of `data`, as a send time.
    fn sent_us(data: &str, topic: &str, run: &str) -> Option<u64> {
        read(data, topic, run).map(|message| message.sent_us)
    }

    #[test]
    fn the_hubs_layout_is_matched_without_parsing() {
        assert_eq!(both(HUB), (Some(17), Some(17)));
        let zeros = HUB.replace(
            r#""n":3,"sent_us":17,"pad":"xx""#,
            r#""n":0,"sent_us":0,"pad":"""#,
        );
        assert_eq!(both(&zeros), (Some(0), Some(0)));
        let max = HUB.replace(r#""sent_us":17"#, &format!(r#""sent_us":{}"#, u64::MAX));
        assert_eq!(both(&max), (Some(u64::MAX), Some(u64::MAX)));
    }

    #[test]
    fn the_published_document_as_nchan_hands_it_out_is_matched_too() {
        let nchan = HUB.replace(r#","time":"2026-11-30T00:24:15.123456789Z""#, "");
        assert_eq!(
            nchan,
            r#"{"topic":"bench.0","payload":{"run":"0123456789abcdef","n":3,"sent_us":17,"pad":"xx"}}"#
        );
        let message = Message {
            n: Some(3),
            sent_us: 17,
        };
        assert_eq!(in_hub_layout(&nchan, "bench.0", RUN), Some(message));
        assert_eq!(parsed(&nchan, "bench.0", RUN), Some(message));
        assert_eq!(in_hub_layout(HUB, "bench.0", RUN), Some(message));
        for broken in [
            nchan.replace("}}", "}"),
            nchan.replace("}}", "}}}"),
            nchan.replace("}}", "},}"),
            HUB.replace(r#","time":"#, r#","tim":"#),
        ] {
            assert_eq!(in_hub_layout(&broken, "bench.0", RUN), None, "{broken}");
        }
    }

    #[test]
    fn a_message_without_its_number_is_read_by_the_json_parse_alone() {
        let data = r#"{"topic":"bench.0","payload":{"run":"0123456789abcdef","sent_us":17}}"#;
        assert_eq!(in_hub_layout(data, "bench.0", RUN), None);
        assert_eq!(
            read(data, "bench.0", RUN),
            Some(Message {
                n: None,
                sent_us: 17
            })
        );
    }

    #[test]
    fn other_layouts_of_the_same_message_are_parsed() {
        for data in [
            r#"{"payload":{"sent_us":17,"run":"0123456789abcdef"},"topic":"bench.0"}"#,
            r#"{ "topic": "bench.0", "payload": {"run": "0123456789abcdef", "sent_us": 17} }"#,
            &HUB.replace(r#""pad":"xx""#, r#""pad":"x\u0078""#),
            &HUB.replace(r#""time":"#, r#""more":[1,{}],"time":"#),
            &format!("{HUB}\n"),
        ] {
            assert_eq!(both(data), (None, Some(17)), "{data}");
            assert_eq!(sent_us(data, "bench.0", RUN), Some(17), "{data}");
        }
    }

    #[test]
    fn other_runs_topics_and_broken_json_are_refused_by_both() {
        for data in [
            HUB.replace("bench.0", "bench.1"),
            HUB.replace(RUN, "fedcba9876543210"),
            HUB.replace(r#""n":3"#, r#""n":03"#),
            HUB.replace(r#""sent_us":17"#, r#""sent_us":-17"#),
            HUB.replace(r#""sent_us":17"#, r#""sent_us":18446744073709551616"#),
            HUB.replace(r#""sent_us":17"#, r#""sent_us":"17""#),
            HUB.replace(r#""pad":"xx""#, "\"pad\":\"x\tx\""),
            HUB.replace('Z', "Z\u{1}"),
            format!("{HUB}}}"),
            HUB[..HUB.len() - 1].to_owned(),
            r#"{"topic":"bench.0","payload":"text"}"#.to_owned(),
        ] {
            assert_eq!(both(&data), (None, None), "{data}");
        }
    }
}
