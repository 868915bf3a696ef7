//! The hub's parsers of client input, re-exported for the cargo-fuzz targets in `fuzz/` and the
//! crate's benches (which build outside this crate and so cannot reach its private modules).
//! Not part of the hub's API: nothing here changes behaviour, and nothing else should use it.

pub use crate::net::head::{Head, HeadError, parse as parse_head};
pub use sluice_core::event_id::{
    Cursor, EventId, EventIdError, MAX_LEN as MAX_EVENT_ID_LEN, choose_cursor,
};
pub use sluice_core::recent::StartFrom;

/// The items of a `POST /publish` body as the hub splits it (`ndjson`: sent as
/// `application/x-ndjson`): `Ok(None)` for a single message, `Ok(Some(items))` for a batch,
/// `Err(status)` for a body refused as a whole.
pub fn publish_batch_items(
    ndjson: bool,
    body: &[u8],
    max_items: usize,
) -> Result<Option<Vec<&str>>, u32> {
    let headers = batch_headers(ndjson);
    match crate::http::batch::shape(&headers, body, max_items) {
        Ok(crate::http::batch::Shape::Single) => Ok(None),
        Ok(crate::http::batch::Shape::Batch(items)) => {
            Ok(Some(items.iter().map(|item| item.get()).collect()))
        }
        Err(refused) => Err(refused.error.code),
    }
}

/// The hub's own work on a batch `POST /publish` body up to the backend and back: split, each
/// item read and checked (every topic granted; `config`'s prefix; captured by `subjects`),
/// and the JSON answer written as if every item sent had been stored at the next sequence.
/// `Err(status)` for a body refused as a whole, `Err(0)` for a single message's body.
pub fn publish_batch_answer(
    config: &crate::config::Config,
    subjects: &[String],
    ndjson: bool,
    body: &bytes::Bytes,
) -> Result<Vec<u8>, u32> {
    let headers = batch_headers(ndjson);
    crate::http::publish::answer_batch_without_backend(config, subjects, &headers, body)
}

/// The request headers of a batch body: NDJSON declared, or none (a JSON array).
fn batch_headers(ndjson: bool) -> axum::http::HeaderMap {
    let mut headers = axum::http::HeaderMap::new();
    if ndjson {
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/x-ndjson"),
        );
    }
    headers
}
