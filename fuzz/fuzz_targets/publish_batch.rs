//! Splitting a `POST /publish` body into a batch: never panics; a batch holds 1 to the limit
//! items, each a JSON object; a JSON array of objects within the limit is a batch of exactly its
//! elements, and a body that does not begin with `[` (not sent as NDJSON) is a single message.
//!
//! Input: a limit byte (1 to 16 items), a mode byte (odd: the body is sent as
//! `application/x-ndjson`), then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde_json::Value;
use sluice_server::fuzzing::publish_batch_items;

fuzz_target!(|data: &[u8]| {
    let [limit, mode, body @ ..] = data else {
        return;
    };
    let max = usize::from(*limit % 16) + 1;
    let ndjson = mode & 1 == 1;
    let answer = publish_batch_items(ndjson, body, max);
    if let Ok(Some(items)) = &answer {
        assert!((1..=max).contains(&items.len()), "{} items", items.len());
        for item in items {
            // Read as an object of unparsed values: a number beyond f64's range is valid
            // JSON (and stored as sent) but no `Value`.
            let object: Result<HashMap<String, IgnoredAny>, _> = serde_json::from_str(item);
            assert!(object.is_ok(), "an item is a JSON object: {item}");
        }
    }
    if ndjson {
        return;
    }
    if !body.trim_ascii_start().starts_with(b"[") {
        assert_eq!(answer, Ok(None), "not an array: a single message");
        return;
    }
    if let Ok(Value::Array(elements)) = serde_json::from_slice::<Value>(body)
        && (1..=max).contains(&elements.len())
        && elements.iter().all(Value::is_object)
    {
        let Ok(Some(items)) = answer else {
            panic!("a valid batch was refused: {answer:?}");
        };
        let parsed: Vec<Value> = items
            .iter()
            .map(|item| serde_json::from_str(item).expect("JSON"))
            .collect();
        assert_eq!(parsed, elements);
    }
});
