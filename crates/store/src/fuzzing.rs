//! The on-disk decoders, re-exported for the cargo-fuzz targets in `fuzz/` (which build outside
//! this crate and so cannot reach its private modules). Not part of the store's API: nothing
//! here changes behaviour, and nothing else should use it.

pub use crate::index::{BlockClaim, Snapshot, decode as decode_index};
pub use crate::meta::Meta;
pub use crate::persist::{SCHED_VERSION, THW_VERSION};
pub use crate::record::{DecodeError, Kind, RecordRef, decode as decode_record};
pub use crate::sidecar::{Sidecar, decode as decode_sidecar};
pub use crate::sources::{SOURCES_VERSION, SourceIndex};
pub use crate::table::Table;
