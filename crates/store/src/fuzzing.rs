//! The on-disk decoders, re-exported for the cargo-fuzz targets in `fuzz/` (which build outside
//! this crate and so cannot reach its private modules). Not part of the store's API: nothing
//! here changes behaviour, and nothing else should use it.

use std::sync::Arc;

pub use crate::fsutil::{put_uvarint, put_varint};
pub use crate::index::{BlockClaim, Snapshot, decode as decode_index, encode as encode_index};
pub use crate::meta::{
    Meta, MetaDefect, checksum as meta_checksum, decode_copy, decode_primary, encode_copy,
};
pub use crate::record::{DecodeError, Kind, RecordRef, decode as decode_record};
pub use crate::sched::SCHED_VERSION;
pub use crate::sidecar::{Sidecar, decode as decode_sidecar};
pub use crate::sources::{SOURCES_VERSION, SourceIndex};
pub use crate::table::Table;
pub use crate::thw::THW_VERSION;

use crate::block::Loc;
use crate::table::MsgMeta;
use crate::{sched, thw};

/// A message table holding one message per `(sequence, subject)`, in block 1.
pub fn table_of(messages: &[(u64, &str)]) -> Table {
    let mut table = Table::default();
    for &(seq, subject) in messages {
        let meta = MsgMeta {
            subject: Arc::from(subject),
            ts: 0,
            loc: Loc {
                block: 1,
                offset: 0,
                len: 0,
            },
            flags: 0,
        };
        table.insert(seq, meta);
    }
    table
}

/// The `thw.db` entry reader as recovery runs it: the expiries in force afterwards, as
/// `(expiry ns, sequence)` ordered by time.
pub fn read_thw_entries(sidecar: &Sidecar<'_>, table: &Table) -> Result<Vec<(i64, u64)>, String> {
    Ok(thw::decode(sidecar, table)?.entries().collect())
}

/// The `sched.db` entry reader as recovery runs it: the schedules in force afterwards, as
/// `(subject, sequence, next fire ns)` ordered by subject.
pub fn read_sched_entries(
    sidecar: &Sidecar<'_>,
    table: &mut Table,
) -> Result<Vec<(String, u64, i64)>, String> {
    Ok(sched::decode(sidecar, table)?
        .entries()
        .map(|(subject, entry)| (subject.to_owned(), entry.seq, entry.next))
        .collect())
}
