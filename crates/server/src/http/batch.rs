//! Telling a batch `POST /publish` body from a single message, and splitting it into its
//! items: a JSON array of objects, or `application/x-ndjson` (one object per non-empty line).
//! Each item is then judged as a single publish body is; only the shape of the whole is
//! checked here.

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::value::RawValue;

use super::refusal;
use sluice_backend::ApiError;

/// The NDJSON media type.
const NDJSON: &str = "application/x-ndjson";

/// A body as `POST /publish` reads it.
pub enum Shape<'a> {
    /// One message: today's body, answered by one object.
    Single,
    /// Several messages, in order, each still unparsed.
    Batch(Vec<&'a RawValue>),
}

/// Why a batch body was refused as a whole.
#[derive(Debug)]
pub struct Refused {
    /// The label of `sluice_publish_refusals_total` and of the log line.
    pub reason: &'static str,
    /// The answer.
    pub error: ApiError,
}

impl Refused {
    fn invalid(description: String) -> Self {
        Self {
            reason: "invalid_batch",
            error: refusal(StatusCode::BAD_REQUEST, description),
        }
    }
}

/// The shape of `body`: NDJSON by its content type, a batch when it is a JSON array, else a
/// single message. A batch holds 1 to `max_items` items, each a JSON object.
pub fn shape<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
    max_items: usize,
) -> Result<Shape<'a>, Refused> {
    let items = if is_ndjson(headers) {
        ndjson_items(body)?
    } else if body.trim_ascii_start().starts_with(b"[") {
        array_items(body)?
    } else {
        return Ok(Shape::Single);
    };
    if items.is_empty() {
        return Err(Refused::invalid(
            "an empty batch publishes nothing".to_owned(),
        ));
    }
    if items.len() > max_items {
        return Err(Refused {
            reason: "batch_too_large",
            error: refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "batch of {} messages; at most {max_items} are allowed (limits.max_publish_batch)",
                    items.len()
                ),
            ),
        });
    }
    Ok(Shape::Batch(items))
}

fn is_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(NDJSON))
}

/// The elements of a JSON array, each of them an object. (The body is bounded by
/// `limits.max_publish_body`, and so is this list.)
fn array_items(body: &[u8]) -> Result<Vec<&RawValue>, Refused> {
    let items: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|err| Refused::invalid(format!("invalid publish batch: {err}")))?;
    if let Some(index) = items.iter().position(|item| !is_object(item)) {
        return Err(Refused::invalid(format!(
            "invalid publish batch: element {index} is not a JSON object"
        )));
    }
    Ok(items)
}

/// The non-empty lines of an NDJSON body, each of them a JSON object.
fn ndjson_items(body: &[u8]) -> Result<Vec<&RawValue>, Refused> {
    let mut items = Vec::new();
    for (index, line) in body.split(|&byte| byte == b'\n').enumerate() {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let number = index + 1;
        let item: &RawValue = serde_json::from_slice(line).map_err(|err| {
            Refused::invalid(format!("invalid publish batch: line {number}: {err}"))
        })?;
        if !is_object(item) {
            return Err(Refused::invalid(format!(
                "invalid publish batch: line {number} is not a JSON object"
            )));
        }
        items.push(item);
    }
    Ok(items)
}

fn is_object(item: &RawValue) -> bool {
    item.get().starts_with('{')
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn items(headers: &HeaderMap, body: &str) -> Result<Vec<String>, Refused> {
        match shape(headers, body.as_bytes(), 3)? {
            Shape::Single => Ok(Vec::new()),
            Shape::Batch(items) => Ok(items.iter().map(|item| item.get().to_owned()).collect()),
        }
    }

    #[test]
    fn an_object_is_a_single_publish_and_an_array_a_batch() {
        let json = HeaderMap::new();
        assert_eq!(
            items(&json, r#"{"topic":"a","payload":1}"#).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            items(&json, r#" [{"a":1}, {"b":2}]"#).unwrap(),
            [r#"{"a":1}"#, r#"{"b":2}"#]
        );
        let mut ndjson = HeaderMap::new();
        ndjson.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson; charset=utf-8"),
        );
        assert_eq!(
            items(&ndjson, "{\"a\":1}\r\n\n {\"b\":2}\n").unwrap(),
            [r#"{"a":1}"#, r#"{"b":2}"#]
        );
    }

    #[test]
    fn malformed_empty_and_oversized_batches_are_refused_as_a_whole() {
        let json = HeaderMap::new();
        let mut ndjson = HeaderMap::new();
        ndjson.insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
        for (headers, body, reason, status) in [
            (&json, "[", "invalid_batch", 400),
            (&json, "[{}, 2]", "invalid_batch", 400),
            (&json, "[]", "invalid_batch", 400),
            (&ndjson, "{}\nnot json\n", "invalid_batch", 400),
            (&ndjson, "[1]\n", "invalid_batch", 400),
            (&ndjson, "\n\n", "invalid_batch", 400),
            (&json, "[{},{},{},{}]", "batch_too_large", 413),
        ] {
            let refused = items(headers, body).unwrap_err();
            assert_eq!(
                (refused.reason, refused.error.status),
                (reason, status),
                "{body:?}"
            );
        }
        let refused = items(&ndjson, "{}\nnot json\n").unwrap_err();
        assert!(
            refused.error.description.contains("line 2"),
            "{}",
            refused.error.description
        );
        let refused = items(&json, "[{},{},{},{}]").unwrap_err();
        assert!(
            refused
                .error
                .description
                .contains("limits.max_publish_batch")
        );
    }
}
