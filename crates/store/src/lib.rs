//! sluice's embedded durable stream store.
//!
//! Streams follow JetStream's model (subjects, sequences, limits, TTL, schedules, dedupe,
//! sourcing) and live in append-only, checksummed block files laid out like nats-server's
//! file store. See `FORMAT.md` for the on-disk formats.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice_store::StoreError> {
//! use sluice_store::{Store, StoreOptions, StreamConfig, Headers};
//! let (store, _reports) = Store::open("/var/lib/sluice", StoreOptions::default())?;
//! let orders = store.create_stream(StreamConfig::new("ORDERS", ["orders.>"]))?;
//! let ack = orders.publish("orders.new", Headers::new(), "hello").await?;
//! assert_eq!(orders.get(ack.seq)?.unwrap().payload, "hello");
//! # Ok(()) }
//! ```

mod block;
mod config;
mod decode;
mod dedupe;
mod error;
mod fsutil;
/// The on-disk decoders and the `store_open` body, exposed only for the fuzz targets in `fuzz/`
/// and `tests/open_fuzzed_dirs.rs` (see `fuzz/README.md`).
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod index;
mod lease;
mod limits;
mod losses;
mod markers;
mod meta;
mod meta_refusal;
mod persist;
mod proto;
mod purge;
mod ranges;
mod recent;
mod record;
mod recovery;
mod removals;
mod rollback;
mod rules;
mod sched;
mod schedule;
mod sidecar;
mod sources;
mod sourcing;
mod state;
mod store;
mod stream;
mod subscribe;
mod table;
mod thw;
mod time;
mod ttl;
mod types;
mod writer;

pub use config::{
    DiscardPolicy, SourceConfig, StorageType, StreamConfig, SubjectTransform, SyncPolicy,
    validate_stream_name,
};
pub use decode::{BlockProblem, FileDecodeError};
pub use error::{ApiError, Result, StoreError};
pub use fsutil::fsyncs;
pub use losses::{LossCause, Lost};
pub use meta::{MetaFile, MetaRepair};
pub use meta_refusal::{MetaDefect, MetaProblem, MetaRefusal};
pub use proto::{FilterSet, Headers};
pub use removals::Removed;
pub use sources::SourcePosition;
pub use store::{INDEX_BYTES_PER_MESSAGE, Store, StoreOptions};
pub use stream::StreamHandle;
pub use types::{
    Delivery, LostState, PubAck, PurgeRequest, RecoveryPath, RecoveryReport, Retained,
    SidecarRecovery, SourceResume, SourceStatus, StoredMessage, StreamInfo, StreamState,
    Truncation, WriteHealth, WriteStats,
};
