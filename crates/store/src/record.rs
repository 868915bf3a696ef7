//! The record codec: one length-prefixed, checksummed record per message, tombstone or purge
//! marker. Layout in FORMAT.md. Decoding borrows from the buffer, checks every length against
//! the bytes that remain before using it, and never panics or allocates.

use xxhash_rust::xxh3::xxh3_64;

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;
/// Fixed bytes after the length prefix: kind, flags, seq, ts, subject length, checksum.
const FIXED: usize = 1 + 1 + 8 + 8 + 2 + 8;
/// Largest record accepted by the decoder (a corrupt length cannot ask for more).
pub const MAX_RECORD: usize = 256 << 20;

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A stored message.
    Msg = 0,
    /// Deletes the one sequence `seq`.
    Tombstone = 1,
    /// Deletes every sequence below `seq` (front removal, purge).
    PurgeTo = 2,
    /// The stream's last sequence was `seq` when this block began (first record of a block).
    LastSeq = 3,
}

/// Per-record flags; `HEADERS` shapes the layout, the others save recovery from parsing headers.
pub mod flags {
    /// A header block follows the subject.
    pub const HEADERS: u8 = 1;
    /// The message has a `Nats-TTL`.
    pub const TTL: u8 = 2;
    /// The message carries a `Nats-Schedule`.
    pub const SCHEDULE: u8 = 4;
    /// The message was sourced (`Nats-Stream-Source`).
    pub const SOURCED: u8 = 8;
    /// The message has a `Nats-Msg-Id`.
    pub const MSG_ID: u8 = 16;
    /// The message's TTL is `never` (exempt from max_age).
    pub const TTL_NEVER: u8 = 32;
    /// On a purge marker: the messages below it went as their publisher meant (their own TTL,
    /// a delete), so readers are not told of them. Without it they were removed by a limit or
    /// a purge, and readers that asked for them are told (`expired`).
    pub const INTENDED: u8 = 64;
}

/// A decoded record borrowing from its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// What it is.
    pub kind: Kind,
    /// Flags (see the `flags` module).
    pub flags: u8,
    /// Sequence (the message's, the deleted one, or the purge bound).
    pub seq: u64,
    /// Store time, ns since the Unix epoch.
    pub ts: i64,
    /// Subject (empty for tombstones and purge markers).
    pub subject: &'a [u8],
    /// `NATS/1.0` header block (empty when absent).
    pub headers: &'a [u8],
    /// Message body.
    pub payload: &'a [u8],
}

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends inside the record (a torn write at the tail).
    Incomplete,
    /// The bytes are not a valid record (bad length, kind or checksum).
    Corrupt,
}

impl RecordRef<'_> {
    /// Encoded size of this record.
    pub fn encoded_len(&self) -> usize {
        let hdr = if self.flags & flags::HEADERS != 0 {
            4 + self.headers.len()
        } else {
            0
        };
        LEN_PREFIX + FIXED + self.subject.len() + hdr + self.payload.len()
    }

    /// Appends the encoded record to `out` and returns its checksum.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> u64 {
        let start = out.len();
        let body = (self.encoded_len() - LEN_PREFIX) as u32;
        out.extend_from_slice(&body.to_le_bytes());
        out.push(self.kind as u8);
        out.push(self.flags);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.ts.to_le_bytes());
        out.extend_from_slice(&(self.subject.len() as u16).to_le_bytes());
        out.extend_from_slice(self.subject);
        if self.flags & flags::HEADERS != 0 {
            out.extend_from_slice(&(self.headers.len() as u32).to_le_bytes());
            out.extend_from_slice(self.headers);
        }
        out.extend_from_slice(self.payload);
        let sum = xxh3_64(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        sum
    }
}

/// A small bounds-checked reader.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Corrupt);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Decodes the record at the start of `buf`; returns it, its encoded length and its checksum.
pub fn decode(buf: &[u8]) -> Result<(RecordRef<'_>, usize, u64), DecodeError> {
    if buf.len() < LEN_PREFIX {
        return Err(DecodeError::Incomplete);
    }
    let body = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if !(FIXED..=MAX_RECORD).contains(&body) {
        return Err(DecodeError::Corrupt);
    }
    let total = LEN_PREFIX + body;
    if buf.len() < total {
        return Err(DecodeError::Incomplete);
    }
    let (signed, sum) = buf[..total].split_at(total - 8);
    let sum = u64::from_le_bytes(sum.try_into().map_err(|_| DecodeError::Corrupt)?);
    if xxh3_64(signed) != sum {
        return Err(DecodeError::Corrupt);
    }
    let mut c = Cursor(&signed[LEN_PREFIX..]);
    let [kind, flag_bits] = c.array::<2>()?;
    let kind = match kind {
        0 => Kind::Msg,
        1 => Kind::Tombstone,
        2 => Kind::PurgeTo,
        3 => Kind::LastSeq,
        _ => return Err(DecodeError::Corrupt),
    };
    let seq = u64::from_le_bytes(c.array()?);
    let ts = i64::from_le_bytes(c.array()?);
    let subject_len = u16::from_le_bytes(c.array()?) as usize;
    let subject = c.take(subject_len)?;
    let headers = if flag_bits & flags::HEADERS != 0 {
        let n = u32::from_le_bytes(c.array()?) as usize;
        c.take(n)?
    } else {
        &[]
    };
    let payload = c.0;
    Ok((
        RecordRef {
            kind,
            flags: flag_bits,
            seq,
            ts,
            subject,
            headers,
            payload,
        },
        total,
        sum,
    ))
}

/// Every valid record found at any offset of `data` (after damage), as `(offset, record,
/// length)`: a valid record resumes the walk after itself, anything else moves on one byte.
pub fn resync(data: &[u8]) -> impl Iterator<Item = (usize, RecordRef<'_>, usize)> {
    let mut off = 0;
    std::iter::from_fn(move || {
        while off + LEN_PREFIX < data.len() {
            // Cheap filters first: a plausible length and kind before the checksum is computed.
            let len = u32::from_le_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]])
                as usize;
            let plausible = len >= FIXED && off + 4 + len <= data.len() && data[off + 4] <= 3;
            if plausible && let Ok((rec, used, _)) = decode(&data[off..]) {
                let at = off;
                off += used;
                return Some((at, rec, used));
            }
            off += 1;
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arb_record() -> impl Strategy<Value = (u8, u8, u64, i64, Vec<u8>, Vec<u8>, Vec<u8>)> {
        (
            0u8..4,
            any::<u8>(),
            any::<u64>(),
            any::<i64>(),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(any::<u8>(), 0..256),
        )
    }

    proptest! {
        #[test]
        fn round_trip((kind, fl, seq, ts, subject, headers, payload) in arb_record()) {
            let kind = [Kind::Msg, Kind::Tombstone, Kind::PurgeTo, Kind::LastSeq][kind as usize];
            let headers = if fl & flags::HEADERS != 0 { headers } else { Vec::new() };
            let rec = RecordRef { kind, flags: fl, seq, ts, subject: &subject, headers: &headers, payload: &payload };
            let mut buf = Vec::new();
            let sum = rec.encode_into(&mut buf);
            prop_assert_eq!(buf.len(), rec.encoded_len());
            let (back, used, back_sum) = decode(&buf).unwrap();
            prop_assert_eq!(back, rec);
            prop_assert_eq!(used, buf.len());
            prop_assert_eq!(back_sum, sum);
            // Every strict prefix is incomplete, never a different record.
            for cut in 0..buf.len() {
                prop_assert!(decode(&buf[..cut]).is_err());
            }
        }

        #[test]
        fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok((rec, used, _)) = decode(&bytes) {
                prop_assert!(used <= bytes.len());
                prop_assert!(rec.subject.len() + rec.headers.len() + rec.payload.len() <= bytes.len());
            }
        }

        #[test]
        fn any_single_bit_flip_is_detected((seq, payload, bit) in (any::<u64>(), proptest::collection::vec(any::<u8>(), 1..64), any::<usize>())) {
            let rec = RecordRef { kind: Kind::Msg, flags: 0, seq, ts: 1, subject: b"a.b", headers: &[], payload: &payload };
            let mut buf = Vec::new();
            rec.encode_into(&mut buf);
            let bit = bit % (buf.len() * 8);
            buf[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&buf).is_err());
        }
    }
}
