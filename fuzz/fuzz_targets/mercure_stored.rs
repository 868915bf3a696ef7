//! Mercure updates as stream messages, both ways: `Scheme::decode` never panics on any subject,
//! headers and payload, and what it accepts encodes to a message that decodes to the same
//! update under the same subject; and every update built from the input (any topics, data, id,
//! type, retry) encodes to header values a NATS header block accepts and decodes to itself.
//!
//! Input: a mode byte. Even: the message, `<subject>\n<Mercure-Update value>\n<payload>`. Odd:
//! an update, `\u{1}`-separated fields `topics (\u{2}-separated)`, `data`, `id`, `type`, `retry`
//! (the flags in the mode byte say which of id, type, retry are present and whether private).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_mercure::mapping::HEADER_UPDATE;
use sluice_mercure::{Scheme, Update};

fn round_trip(scheme: &Scheme, update: &Update) -> Update {
    let stored = scheme.encode(update);
    for (_, value) in &stored.headers {
        assert!(value.bytes().all(|b| b.is_ascii_graphic()), "{value:?}");
    }
    scheme
        .decode(
            &stored.subject,
            stored.headers.iter().map(|(n, v)| (*n, v.as_str())),
            &stored.payload,
        )
        .expect("what encode writes, decode reads")
}

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else { return };
    let scheme = Scheme::new("mercure").expect("a valid prefix");
    if mode & 1 == 0 {
        let mut parts = rest.splitn(3, |&b| b == b'\n');
        let subject = String::from_utf8_lossy(parts.next().unwrap_or_default());
        let version = String::from_utf8_lossy(parts.next().unwrap_or_default());
        let payload = parts.next().unwrap_or_default();
        let headers = [(HEADER_UPDATE, version.as_ref())];
        if let Ok(update) = scheme.decode(&subject, headers, payload) {
            assert_eq!(scheme.subject(&update), subject);
            assert_eq!(round_trip(&scheme, &update), update);
        }
        return;
    }
    let text = String::from_utf8_lossy(rest);
    let mut fields = text.split('\u{1}');
    let mut next = || fields.next().unwrap_or_default().to_owned();
    let topics: Vec<String> = next().split('\u{2}').map(str::to_owned).collect();
    let update = Update {
        topics,
        data: next(),
        private: mode & 2 == 2,
        id: Some(next()).filter(|_| mode & 4 == 4),
        event_type: Some(next()).filter(|_| mode & 8 == 8),
        retry: next().parse().ok().filter(|_| mode & 16 == 16),
    };
    assert_eq!(round_trip(&scheme, &update), update);
});
