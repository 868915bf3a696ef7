//! Mercure token claims: `Claims::from_json` and `Claims::grants` never panic on any JSON; claims
//! that decode, written back as JSON, decode to the same claims; grants answer `can_publish`
//! and `can_receive` for any topics without panicking, never allow publishing to no topic, and
//! let a public update through while nothing lets a private one through without a grant.
//!
//! Input: `<claims JSON>`, then `\n`-separated topics to ask about.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_mercure::{Claims, DEFAULT_BASE_URL, Grants, Update};

fuzz_target!(|data: &[u8]| {
    let (json, topics) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(claims) = Claims::from_json(json) else {
        return;
    };
    let written = serde_json::to_vec(&claims).expect("claims serialize");
    assert_eq!(Claims::from_json(&written).as_ref(), Ok(&claims));
    let Ok(grants) = claims.grants(DEFAULT_BASE_URL) else {
        return;
    };
    let text = String::from_utf8_lossy(topics);
    let topics: Vec<&str> = text.split('\n').filter(|t| !t.is_empty()).take(8).collect();
    assert!(!grants.can_publish(&[]));
    let _ = grants.can_publish(&topics);
    if topics.is_empty() {
        return;
    }
    let mut update = Update {
        topics: topics.iter().map(|t| t.to_string()).collect(),
        data: String::new(),
        private: false,
        id: None,
        event_type: None,
        retry: None,
    };
    assert!(grants.can_receive(&update));
    update.private = true;
    let _ = grants.can_receive(&update);
    assert!(!Grants::none().can_receive(&update));
    for topic in &topics {
        let _ = grants.payload_for(topic);
    }
});
