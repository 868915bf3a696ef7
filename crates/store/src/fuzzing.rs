//! The on-disk decoders, re-exported for the cargo-fuzz targets in `fuzz/` (which build outside
//! this crate and so cannot reach its private modules), and the `store_open` target's body
//! (a whole stream directory opened, read, written to and closed), which
//! `tests/open_fuzzed_dirs.rs` runs too. Not part of the store's API: nothing here changes
//! behaviour, and nothing else should use it.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};

pub use crate::fsutil::{put_uvarint, put_varint};
pub use crate::index::{BlockClaim, Snapshot, decode as decode_index, encode as encode_index};
pub use crate::meta::{Meta, checksum as meta_checksum, decode_copy, decode_primary, encode_copy};
pub use crate::meta_refusal::MetaDefect;
pub use crate::record::{DecodeError, Kind, RecordRef, decode as decode_record};
pub use crate::sched::SCHED_VERSION;
pub use crate::sidecar::{Sidecar, decode as decode_sidecar};
pub use crate::sources::{SOURCES_VERSION, SourceIndex};
pub use crate::table::{Table, table_of};
pub use crate::thw::THW_VERSION;

use crate::config::{StreamConfig, SyncPolicy};
use crate::error::StoreError;
use crate::proto::{FilterSet, Headers};
use crate::record::flags;
use crate::store::{Store, StoreOptions};
use crate::stream::StreamHandle;
use crate::types::Delivery;
use crate::{sched, thw};

/// The `thw.db` entry reader as recovery runs it: the expiries in force afterwards, as
/// `(expiry ns, sequence)` ordered by time.
pub fn read_thw_entries(
    sidecar: &Sidecar<'_>,
    table: &Table,
) -> Result<Vec<(i64, u64)>, crate::FileDecodeError> {
    Ok(thw::decode(sidecar, table)?.entries().collect())
}

/// The `sched.db` entry reader as recovery runs it: the schedules in force afterwards, as
/// `(subject, sequence, next fire ns)` ordered by subject.
pub fn read_sched_entries(
    sidecar: &Sidecar<'_>,
    table: &mut Table,
) -> Result<Vec<(String, u64, i64)>, crate::FileDecodeError> {
    Ok(sched::decode(sidecar, table)?
        .entries()
        .map(|(subject, entry)| (subject.to_owned(), entry.seq, entry.next))
        .collect())
}

// ---- `store_open`: a whole stream directory, opened, read, written to, closed ----

/// The stream every directory of `store_open` holds.
pub const STREAM: &str = "F";
/// The block size the template is written with and every open uses: three blocks hold it.
const BLOCK_SIZE: u64 = 700;
/// Inputs are cut to this many bytes, and no file grows past it: memory stays bounded.
pub const MAX_INPUT: usize = 64 << 10;

/// The files of a stream directory the input can change, relative to it.
pub const FILES: [&str; 12] = [
    "meta.inf",
    "meta.sum",
    "meta.bak",
    "msgs/1.blk",
    "msgs/2.blk",
    "msgs/3.blk",
    "msgs/index.db",
    "msgs/lost.db",
    "msgs/lease.db",
    "msgs/thw.db",
    "msgs/sched.db",
    "sources.db",
];

fn options() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Never,
        block_size: BLOCK_SIZE,
        flush_interval: std::time::Duration::from_secs(3600),
        ..StoreOptions::default()
    }
}

/// A real stream directory written by the store (a clean close): what the inputs mutate.
#[derive(Debug, Clone)]
pub struct Template {
    /// The contents of each of [`FILES`] (`None`: the store wrote none).
    pub files: Vec<Option<Vec<u8>>>,
    /// Every message published into it, deleted or damaged ones too: `seq → (subject,
    /// payload)`. (Damage to a block holding a tombstone brings the deleted message back: it is
    /// still the message published at that sequence.)
    pub messages: BTreeMap<u64, (String, Bytes)>,
    /// Its last sequence.
    pub last_seq: u64,
}

impl Template {
    /// Writes the template stream in the empty directory `scratch` (left holding it): about
    /// twenty messages over three blocks, with message ids, TTLs, a schedule, a deleted
    /// message and a damaged one, so that every file but sources.db exists.
    pub fn build(scratch: &Path) -> Template {
        let (store, _) = Store::open(scratch, options()).expect("template store opens");
        let config = StreamConfig {
            allow_msg_ttl: true,
            allow_msg_schedules: true,
            ..StreamConfig::new(STREAM, ["f.>"])
        };
        let s = store.create_stream(config).expect("template stream");
        let mut messages = BTreeMap::new();
        for i in 0..20u64 {
            let mut h = Headers::new();
            match i % 5 {
                1 => h.insert("Nats-Msg-Id", format!("id-{i}")),
                2 => h.insert("Nats-TTL", "1h"),
                3 if i == 3 => {
                    h.insert("Nats-Schedule", "@every 1h");
                    h.insert("Nats-Schedule-Target", "f.out");
                }
                _ => {}
            }
            let subject = format!("f.{}", ["a", "b", "c.d"][i as usize % 3]);
            let payload = Bytes::from(format!("payload {i} {}", "x".repeat(i as usize % 7)));
            let ack = futures::executor::block_on(s.publish(subject.clone(), h, payload.clone()))
                .expect("template publish");
            messages.insert(ack.seq, (subject, payload));
        }
        for seq in [5, 6] {
            assert!(futures::executor::block_on(s.delete_msg(seq)).expect("template delete"));
        }
        let last_seq = s.info(None).state.last_seq;
        store.close();
        // A stream that lived through damage: one record of block 2 fails its checksum, so
        // the rebuild on reopen records it in lost.db and readers are told of it.
        let dir = scratch.join("streams").join(STREAM);
        let block = dir.join("msgs/2.blk");
        let mut bytes = std::fs::read(&block).expect("template block 2");
        let (first, first_len, _) = decode_record(&bytes).expect("block 2 starts with a record");
        assert_eq!(first.kind, Kind::LastSeq);
        let (_, len, _) = decode_record(&bytes[first_len..]).expect("a second record");
        bytes[first_len + len - 1] ^= 1;
        std::fs::write(&block, bytes).expect("template block 2");
        std::fs::remove_file(dir.join("msgs/index.db")).expect("template index.db");
        let (store, _) = Store::open(scratch, options()).expect("template store reopens");
        store.close();
        let files = FILES
            .iter()
            .map(|f| std::fs::read(dir.join(f)).ok())
            .collect();
        Template {
            files,
            messages,
            last_seq,
        }
    }
}

/// One change to the template directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Removes the file.
    Delete(usize),
    /// Replaces the file with these bytes.
    Replace(usize, Vec<u8>),
    /// Replaces the file with these bytes and their xxh3 trailer (reaches the sidecar and
    /// index.db decoders behind their checksum).
    Signed(usize, Vec<u8>),
    /// Replaces the file with validly checksummed records built from a description (see
    /// [`forge_records`]): reaches what recovery does with records that verify.
    Records(usize, Vec<u8>),
    /// XORs the bytes in at an offset (modulo the file's length).
    Xor(usize, usize, Vec<u8>),
    /// Cuts the file to a length (modulo its length + 1).
    Truncate(usize, usize),
    /// Zeroes `len` bytes from an offset (modulo the file's length).
    Zero(usize, usize, usize),
    /// Appends the bytes.
    Append(usize, Vec<u8>),
}

impl Op {
    /// The file it changes.
    pub fn file(&self) -> usize {
        match self {
            Op::Delete(f)
            | Op::Replace(f, _)
            | Op::Signed(f, _)
            | Op::Records(f, _)
            | Op::Xor(f, ..)
            | Op::Truncate(f, _)
            | Op::Zero(f, ..)
            | Op::Append(f, _) => *f,
        }
    }

    /// Whether the op can make a record or file verify that the store never wrote: the
    /// template's payloads then no longer say what a sequence holds.
    pub fn forges(&self) -> bool {
        matches!(self, Op::Signed(..) | Op::Records(..))
    }
}

/// Reads the ops from fuzz bytes: per op a byte (`op = b >> 5`, file = `b & 31` modulo the
/// number of files), then its arguments (u16 little-endian lengths and offsets).
pub fn ops_from_bytes(data: &[u8]) -> Vec<Op> {
    let mut r = crate::fsutil::Reader::new(&data[..data.len().min(MAX_INPUT)]);
    let mut ops = Vec::new();
    let u16 = |r: &mut crate::fsutil::Reader<'_>| {
        r.bytes(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    while let Some(b) = r.u8() {
        let file = (b & 31) as usize % FILES.len();
        let bytes = |r: &mut crate::fsutil::Reader<'_>| {
            let n = u16(r)?.min(r.remaining());
            r.bytes(n).map(<[u8]>::to_vec)
        };
        let op = match b >> 5 {
            0 => Some(Op::Delete(file)),
            1 => bytes(&mut r).map(|b| Op::Replace(file, b)),
            2 => bytes(&mut r).map(|b| Op::Signed(file, b)),
            3 => bytes(&mut r).map(|b| Op::Records(file, b)),
            4 => u16(&mut r).and_then(|at| Some(Op::Xor(file, at, bytes(&mut r)?))),
            5 => u16(&mut r).map(|n| Op::Truncate(file, n)),
            6 => u16(&mut r).and_then(|at| Some(Op::Zero(file, at, u16(&mut r)?))),
            _ => bytes(&mut r).map(|b| Op::Append(file, b)),
        };
        let Some(op) = op else { break };
        ops.push(op);
    }
    ops
}

/// The fuzz bytes [`ops_from_bytes`] reads as `ops` (for seeding a corpus).
pub fn ops_to_bytes(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |out: &mut Vec<u8>, code: u8, file: usize, args: &[usize], bytes: &[u8]| {
        out.push(code << 5 | file as u8);
        for a in args {
            out.extend_from_slice(&(*a as u16).to_le_bytes());
        }
        if code != 0 && code != 5 && code != 6 {
            out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    };
    for op in ops {
        match op {
            Op::Delete(f) => put(&mut out, 0, *f, &[], &[]),
            Op::Replace(f, b) => put(&mut out, 1, *f, &[], b),
            Op::Signed(f, b) => put(&mut out, 2, *f, &[], b),
            Op::Records(f, b) => put(&mut out, 3, *f, &[], b),
            Op::Xor(f, at, b) => put(&mut out, 4, *f, &[*at], b),
            Op::Truncate(f, n) => put(&mut out, 5, *f, &[*n], &[]),
            Op::Zero(f, at, n) => put(&mut out, 6, *f, &[*at, *n], &[]),
            Op::Append(f, b) => put(&mut out, 7, *f, &[], b),
        }
    }
    out
}

/// Records with valid checksums from a description: per record a byte (kind = low 2 bits,
/// bit 2: headers, bit 3: a `Nats-Msg-Id` flag, bit 4: TTL flag, bit 5: schedule flag, bit 6:
/// subject outside the stream, bit 7: an absolute sequence of 8 bytes follows, else one byte
/// added to the previous sequence), the sequence, then a payload length byte and the payload.
pub fn forge_records(desc: &[u8]) -> Vec<u8> {
    let mut r = crate::fsutil::Reader::new(desc);
    let mut out = Vec::new();
    let mut seq = 0u64;
    while let Some(b) = r.u8() {
        let kind = [Kind::Msg, Kind::Tombstone, Kind::PurgeTo, Kind::LastSeq][(b & 3) as usize];
        seq = if b & 0x80 != 0 {
            match r.u64() {
                Some(s) => s,
                None => break,
            }
        } else {
            match r.u8() {
                Some(d) => seq.wrapping_add(u64::from(d)),
                None => break,
            }
        };
        let Some(n) = r.u8() else { break };
        let payload = r.bytes((n as usize).min(r.remaining())).unwrap_or_default();
        let mut fl = 0;
        for (bit, flag) in [
            (4, flags::HEADERS),
            (8, flags::MSG_ID),
            (16, flags::TTL),
            (32, flags::SCHEDULE),
        ] {
            if b & bit != 0 {
                fl |= flag;
            }
        }
        let headers: &[u8] = if fl & flags::HEADERS != 0 {
            b"NATS/1.0\r\nNats-Msg-Id: forged\r\nNats-TTL: 1h\r\n\r\n"
        } else {
            &[]
        };
        let subject: &[u8] = match kind {
            Kind::Msg if b & 64 != 0 => b"other.subject",
            Kind::Msg => b"f.a",
            _ => b"",
        };
        let rec = RecordRef {
            kind,
            flags: fl,
            seq,
            ts: seq as i64,
            subject,
            headers,
            payload,
        };
        rec.encode_into(&mut out);
    }
    out
}

/// The template's files after `ops`.
pub fn apply(template: &Template, ops: &[Op]) -> Vec<Option<Vec<u8>>> {
    let mut files = template.files.clone();
    for op in ops {
        match op {
            Op::Delete(f) => files[*f] = None,
            Op::Replace(f, b) => files[*f] = Some(b.clone()),
            Op::Signed(f, b) => {
                let mut b = b.clone();
                let sum = xxhash_rust::xxh3::xxh3_64(&b);
                b.extend_from_slice(&sum.to_le_bytes());
                files[*f] = Some(b);
            }
            Op::Records(f, desc) => files[*f] = Some(forge_records(desc)),
            Op::Xor(f, at, x) => {
                if let Some(b) = files[*f].as_mut().filter(|b| !b.is_empty()) {
                    let len = b.len();
                    for (i, v) in x.iter().enumerate() {
                        b[(at + i) % len] ^= v;
                    }
                }
            }
            Op::Truncate(f, n) => {
                if let Some(b) = files[*f].as_mut() {
                    b.truncate(n % (b.len() + 1));
                }
            }
            Op::Zero(f, at, n) => {
                if let Some(b) = files[*f].as_mut().filter(|b| !b.is_empty()) {
                    let len = b.len();
                    let start = at % len;
                    b[start..(start + n).min(len)].fill(0);
                }
            }
            Op::Append(f, x) => {
                let b = files[*f].get_or_insert_with(Vec::new);
                let room = MAX_INPUT.saturating_sub(b.len());
                b.extend_from_slice(&x[..x.len().min(room)]);
            }
        }
    }
    files
}

/// Named seeds for the `store_open` corpus, each a kind of damage an operator meets (or a
/// file that verifies but names what the store never wrote): the ops on the template.
pub fn seeds(template: &Template) -> Vec<(String, Vec<Op>)> {
    let mut out = block_damage_seeds(template);
    out.extend(file_damage_seeds());
    for (name, top) in [("max", u64::MAX), ("past_i64", 1 << 63)] {
        out.extend(forged_seeds_at(name, top));
    }
    out.push(forged_marker_claims_a_billion());
    out
}

/// The position of `name` in [`FILES`].
fn file_index(name: &str) -> usize {
    FILES.iter().position(|f| *f == name).expect("a known file")
}

/// A version-1 sidecar's header and body; the op that writes it appends the checksum.
fn sidecar_bytes(count: u64, stamp: u64, body: &[u8]) -> Vec<u8> {
    let mut b = vec![1];
    b.extend_from_slice(&count.to_le_bytes());
    b.extend_from_slice(&stamp.to_le_bytes());
    b.extend_from_slice(body);
    b
}

/// The template as written, and its blocks and index damaged, cut or deleted.
fn block_damage_seeds(template: &Template) -> Vec<(String, Vec<Op>)> {
    let len = |f: usize| template.files[f].as_ref().map_or(0, Vec::len);
    let [block2, block3, index, lease] =
        ["msgs/2.blk", "msgs/3.blk", "msgs/index.db", "msgs/lease.db"].map(file_index);
    vec![
        ("as_written".into(), vec![]),
        ("no_index".into(), vec![Op::Delete(index)]),
        (
            "flip_in_block2".into(),
            vec![
                Op::Delete(index),
                Op::Xor(block2, len(block2) / 2, vec![0x40]),
            ],
        ),
        (
            "flip_in_block2_index_kept".into(),
            vec![Op::Xor(block2, len(block2) / 2, vec![0x40])],
        ),
        ("block2_deleted".into(), vec![Op::Delete(block2)]),
        (
            "block2_cut_in_half".into(),
            vec![Op::Delete(index), Op::Truncate(block2, len(block2) / 2)],
        ),
        (
            "torn_tail".into(),
            vec![Op::Truncate(block3, len(block3).saturating_sub(5))],
        ),
        (
            "tail_cut_lease_kept".into(),
            vec![Op::Delete(index), Op::Truncate(block3, len(block3) / 2)],
        ),
        (
            "tail_cut_lease_lost".into(),
            vec![
                Op::Delete(index),
                Op::Delete(lease),
                Op::Truncate(block3, len(block3) / 2),
            ],
        ),
    ]
}

/// The metadata files, lost.db and the other sidecars damaged.
fn file_damage_seeds() -> Vec<(String, Vec<Op>)> {
    let [inf, bak, lost, thw, sched] = [
        "meta.inf",
        "meta.bak",
        "msgs/lost.db",
        "msgs/thw.db",
        "msgs/sched.db",
    ]
    .map(file_index);
    vec![
        ("meta_inf_damaged".into(), vec![Op::Xor(inf, 10, vec![1])]),
        (
            "every_meta_damaged".into(),
            vec![Op::Xor(inf, 10, vec![1]), Op::Xor(bak, 10, vec![1])],
        ),
        ("lost_db_damaged".into(), vec![Op::Xor(lost, 20, vec![1])]),
        (
            "sidecars_garbage".into(),
            vec![
                Op::Replace(thw, b"garbage".to_vec()),
                Op::Signed(sched, sidecar_bytes(u64::MAX, 1, b"x")),
            ],
        ),
    ]
}

/// Records, a lease and a lost run that verify but name sequence `top` (called `name`).
fn forged_seeds_at(name: &str, top: u64) -> Vec<(String, Vec<Op>)> {
    let [block3, index, lost, lease] = [
        "msgs/3.blk",
        "msgs/index.db",
        "msgs/lost.db",
        "msgs/lease.db",
    ]
    .map(file_index);
    let mut out = Vec::new();
    for (kind, what) in ["msg", "tombstone", "purge", "marker"].iter().enumerate() {
        // An absolute sequence, no payload.
        let mut desc = vec![0x80 | kind as u8];
        desc.extend_from_slice(&top.to_le_bytes());
        desc.push(0);
        out.push((
            format!("forged_{what}_at_{name}"),
            vec![Op::Delete(index), Op::Records(block3, desc)],
        ));
    }
    out.push((
        format!("forged_lease_at_{name}"),
        vec![Op::Signed(lease, sidecar_bytes(0, top, &[]))],
    ));
    // One damaged run from 0 spanning `top` sequences, no bytes.
    let mut body = vec![0, 0, 0];
    put_uvarint(&mut body, top);
    out.push((
        format!("forged_lost_run_of_{name}"),
        vec![Op::Signed(lost, sidecar_bytes(1, 1, &body))],
    ));
    out
}

/// A marker claiming a billion sequences after block 2: the claim costs a range, not a
/// sequence each.
fn forged_marker_claims_a_billion() -> (String, Vec<Op>) {
    let mut desc = vec![0x83];
    desc.extend_from_slice(&(1u64 << 30).to_le_bytes());
    desc.extend_from_slice(&[0, 1, 1, 1]);
    (
        "forged_marker_claims_a_billion".into(),
        vec![
            Op::Delete(file_index("msgs/index.db")),
            Op::Records(file_index("msgs/3.blk"), desc),
        ],
    )
}

/// What opening one directory gave.
#[derive(Debug, Default)]
pub struct Opened {
    /// The stream loaded (else it was refused, or the store did not open).
    pub loaded: bool,
    /// The store's error, when it did not open: a clean refusal.
    pub error: Option<String>,
    /// Every message a reader from sequence 1 was given: `seq → (subject, payload)`.
    pub messages: BTreeMap<u64, (String, Bytes)>,
    /// The sequence the message published after open got (None: the publish was refused).
    pub published: Option<u64>,
}

/// The `store_open` body: writes `files` (contents of [`FILES`]) as stream [`STREAM`] in
/// the empty directory `data_dir`, opens the store, and when the stream loads reads every
/// message from sequence 1 up to its last sequence, with `next_matching` and with a
/// subscription (the two must agree, message for message and loss for loss), reads each
/// one again with `get`, takes `info`, publishes one message and reads it back, and closes.
/// Panics on any inconsistency; a store that does not open must fail with an error.
pub fn open_dir(data_dir: &Path, files: &[Option<Vec<u8>>]) -> Opened {
    write_stream_dir(data_dir, files);
    let mut out = Opened::default();
    let store = match Store::open(data_dir, options()) {
        Ok((store, _reports)) => store,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let Some(s) = store.stream(STREAM) else {
        store.close();
        return out;
    };
    out.loaded = true;
    let all = FilterSet::new([">"]).expect("filter");
    let info = s.info(None);
    let last = info.state.last_seq;
    assert!(info.state.first_seq <= last.saturating_add(1));
    let seen = read_with_next_matching(&s, &all, last);
    check_subscription_agrees(&s, &all, &seen);
    out.messages = read_again(&s, seen);
    let _ = s.info(Some(&all));
    out.published = publish_after_open(&s, last);
    let _ = s.info(None);
    store.close();
    out
}

/// Writes `files` (contents of [`FILES`]) as stream [`STREAM`]'s directory in `data_dir`.
fn write_stream_dir(data_dir: &Path, files: &[Option<Vec<u8>>]) {
    let dir = data_dir.join("streams").join(STREAM);
    std::fs::create_dir_all(dir.join("msgs")).expect("scratch directory");
    for (name, bytes) in FILES.iter().zip(files) {
        if let Some(bytes) = bytes {
            std::fs::write(dir.join(name), bytes).expect("scratch file");
        }
    }
}

/// Every position up to the last sequence through next_matching, stepping over losses.
fn read_with_next_matching(s: &StreamHandle, all: &FilterSet, last: u64) -> Vec<Delivery> {
    let mut seen: Vec<Delivery> = Vec::new();
    let mut from = 1u64;
    while from <= last {
        match s.next_matching(from, all) {
            Ok(Some(m)) => {
                assert!(
                    m.seq >= from && m.seq <= last,
                    "message {} read from {from}",
                    m.seq
                );
                from = m.seq + 1;
                seen.push(Delivery::Message(m));
            }
            Ok(None) => break,
            Err(StoreError::Lost { lost, .. }) => {
                assert!(
                    lost.first >= from && lost.first <= lost.last,
                    "{lost:?} from {from}"
                );
                seen.push(Delivery::Lost(lost));
                match lost.last.checked_add(1) {
                    Some(next) => from = next,
                    None => break,
                }
            }
            // A block that cannot be read at all is an error for the reader, not a panic.
            Err(_) => break,
        }
    }
    seen
}

/// Whether `d` is a message no longer stored.
fn is_gone(s: &StreamHandle, d: &Delivery) -> bool {
    matches!(d, Delivery::Message(m) if matches!(s.get(m.seq), Ok(None)))
}

/// A subscription from 1 covers the same positions as `seen` (what next_matching gave) without
/// waiting for any: the same messages, and losses over the same sequences (a run found while
/// reading may be told in pieces to the first reader and whole to a later one).
///
/// A message with a TTL (a forged record's may be long past) can expire between the two
/// reads, or during the second: a deliberate removal, told to no reader. Both are compared
/// on what is still stored.
fn check_subscription_agrees(s: &StreamHandle, all: &FilterSet, seen: &[Delivery]) {
    let told = read_with_subscription(s, all, seen);
    // IMPORTANT: which messages are gone is read once, for both lists: read for each list in
    // turn, a message whose TTL ran out between the two would be kept in one and not the other.
    let gone_now: std::collections::HashSet<u64> = seen
        .iter()
        .chain(&told)
        .filter(|d| is_gone(s, d))
        .map(Delivery::last_seq)
        .collect();
    let still_stored = |deliveries: &[Delivery]| -> Vec<Delivery> {
        deliveries
            .iter()
            .filter(|d| !matches!(d, Delivery::Message(m) if gone_now.contains(&m.seq)))
            .cloned()
            .collect()
    };
    assert_eq!(
        coverage(&still_stored(seen)),
        coverage(&still_stored(&told)),
        "next_matching, then the subscription"
    );
}

/// What a subscription from 1 gives without waiting, up to where `seen` reached; panics when it
/// would wait for a position `seen` holds that is still stored.
fn read_with_subscription(s: &StreamHandle, all: &FilterSet, seen: &[Delivery]) -> Vec<Delivery> {
    let reached = seen.last().map_or(0, Delivery::last_seq);
    let mut told = Vec::new();
    let mut sub = Box::pin(s.subscribe(1, all.clone()));
    loop {
        let at = told.last().map_or(0, Delivery::last_seq);
        if at >= reached {
            break;
        }
        match sub.next().now_or_never() {
            Some(Some(Ok(d))) => told.push(d),
            None if seen
                .iter()
                .filter(|d| d.last_seq() > at)
                .all(|d| is_gone(s, d)) =>
            {
                break;
            }
            other => panic!(
                "the subscription gave {other:?} before {reached}: {told:?}, next_matching {seen:?}"
            ),
        }
    }
    told
}

/// Each message of `seen` read again with `get` (it must not have changed, if still there):
/// `seq → (subject, payload)`.
fn read_again(s: &StreamHandle, seen: Vec<Delivery>) -> BTreeMap<u64, (String, Bytes)> {
    let mut messages = BTreeMap::new();
    for d in seen {
        let Delivery::Message(m) = d else { continue };
        if let Ok(Some(again)) = s.get(m.seq) {
            assert_eq!((&again.subject, &again.payload), (&m.subject, &m.payload));
        }
        messages.insert(m.seq, (m.subject, m.payload));
    }
    messages
}

/// Publishes one message and reads it back; the sequence it got (None: the publish was
/// refused), which must be past `last`.
fn publish_after_open(s: &StreamHandle, last: u64) -> Option<u64> {
    let payload = Bytes::from_static(b"published after open");
    let ack =
        futures::executor::block_on(s.publish("f.new", Headers::new(), payload.clone())).ok()?;
    assert!(
        ack.seq > last,
        "publish after open got {} ≤ last {last}",
        ack.seq
    );
    if let Ok(Some(m)) = s.get(ack.seq) {
        assert_eq!(m.payload, payload);
    }
    Some(ack.seq)
}

/// What deliveries cover: each message, and each run of lost positions (adjacent runs merged).
type Covered = Vec<Result<(u64, String, Bytes), (u64, u64)>>;

fn coverage(deliveries: &[Delivery]) -> Covered {
    let mut out: Covered = Vec::new();
    for d in deliveries {
        match d {
            Delivery::Message(m) => out.push(Ok((m.seq, m.subject.clone(), m.payload.clone()))),
            Delivery::Lost(lost) => match out.last_mut() {
                Some(Err((_, last))) if *last + 1 == lost.first => *last = lost.last,
                _ => out.push(Err((lost.first, lost.last))),
            },
            // Told to a subscriber only: `next_matching` passes removed messages over.
            Delivery::Removed(_) => {}
        }
    }
    out
}

/// [`open_dir`] on the template after `ops`, checking the messages given against the
/// template's when no op forged anything: every message a reader gets is the one published
/// at its sequence, and the message published after open never takes a sequence the template
/// used while its lease and index survive.
pub fn open_mutated(data_dir: &Path, template: &Template, ops: &[Op]) -> Opened {
    let files = apply(template, ops);
    let opened = open_dir(data_dir, &files);
    if ops.iter().any(Op::forges) {
        return opened;
    }
    for (seq, (subject, payload)) in &opened.messages {
        let Some((want_subject, want_payload)) = template.messages.get(seq) else {
            panic!("sequence {seq} read, but the template never held it");
        };
        assert_eq!(
            (subject, payload),
            (want_subject, want_payload),
            "sequence {seq}"
        );
    }
    let lease = FILES.iter().position(|f| *f == "msgs/lease.db");
    let lease_kept = !ops.iter().any(|op| Some(op.file()) == lease);
    if let Some(seq) = opened.published.filter(|_| lease_kept) {
        assert!(seq > template.last_seq, "sequence {seq} handed out again");
    }
    opened
}
