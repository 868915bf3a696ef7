//! The hub's parsers of client input, re-exported for the cargo-fuzz targets in `fuzz/` (which
//! build outside this crate and so cannot reach its private modules). Not part of the hub's
//! API: nothing here changes behaviour, and nothing else should use it.

pub use crate::event_id::{
    Cursor, EventId, EventIdError, MAX_LEN as MAX_EVENT_ID_LEN, choose_cursor,
};
pub use crate::net::head::{Head, HeadError, parse as parse_head};
