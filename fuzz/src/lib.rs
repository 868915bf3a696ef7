//! Oracles shared by the fuzz targets: the grammars and a reference matcher, restated
//! independently of the code under test so a target can check "accepted ⇔ valid".

/// Splits a fuzz input at its first newline: `(first, Some(rest))`, or `(all, None)`.
pub fn split_line(text: &str) -> (&str, Option<&str>) {
    match text.split_once('\n') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    }
}

/// The subject (`filter == false`) or filter grammar: non-empty, at most 1024 bytes, no
/// whitespace or control character, no empty token, `*` tokens and a last `>` token only in
/// filters.
pub fn subject_grammar(value: &str, filter: bool) -> bool {
    let tokens: Vec<&str> = value.split('.').collect();
    !value.is_empty()
        && value.len() <= 1024
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
        && tokens.iter().all(|t| !t.is_empty())
        && tokens.iter().enumerate().all(|(i, t)| match *t {
            "*" => filter,
            ">" => filter && i == tokens.len() - 1,
            _ => true,
        })
}

/// A reference token matcher: `*` matches one token, `>` one or more.
pub fn reference_match(filter: &str, subject: &str) -> bool {
    fn go(f: &[&str], s: &[&str]) -> bool {
        match (f.split_first(), s.split_first()) {
            (None, None) => true,
            (Some((&">", _)), Some(_)) => true,
            (Some((a, f_rest)), Some((b, s_rest))) => (*a == "*" || a == b) && go(f_rest, s_rest),
            _ => false,
        }
    }
    let f: Vec<&str> = filter.split('.').collect();
    let s: Vec<&str> = subject.split('.').collect();
    go(&f, &s)
}

/// Go's `time.ParseDuration` grammar: optional sign, then `0` or one or more
/// `<digits>[.<digits>]<unit>` parts with at least one digit per number.
pub fn duration_grammar(value: &str) -> bool {
    const UNITS: [&str; 8] = ["ns", "us", "\u{b5}s", "\u{3bc}s", "ms", "s", "m", "h"];
    let body = value.strip_prefix(['+', '-']).unwrap_or(value);
    if body == "0" {
        return true;
    }
    let mut rest = body;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let int = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest = &rest[int..];
        let mut frac = 0;
        if let Some(after) = rest.strip_prefix('.') {
            frac = after.bytes().take_while(u8::is_ascii_digit).count();
            rest = &after[frac..];
        }
        if int + frac == 0 {
            return false;
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !UNITS.contains(&&rest[..unit_len]) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

/// `bytes` followed by their little-endian xxh3-64, the trailer every store file ends with, so
/// the store targets reach the decoding behind the checksum check.
pub fn with_checksum(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
    out
}

/// Takes one unsigned LEB128 varint as the store writes it (7 bits a byte, low bits first, a
/// clear top bit ends it, at most 10 bytes; bits past 64 are dropped as the store's reader does).
pub fn take_uvarint(bytes: &mut &[u8]) -> Option<u64> {
    let end = bytes.iter().take(10).position(|b| b & 0x80 == 0)?;
    let (varint, rest) = bytes.split_at(end + 1);
    *bytes = rest;
    Some(
        varint
            .iter()
            .rev()
            .fold(0u64, |v, b| (v << 7) | u64::from(b & 0x7f)),
    )
}

/// Takes one zigzag signed varint (0, -1, 1, -2, … as 0, 1, 2, 3, …).
pub fn take_varint(bytes: &mut &[u8]) -> Option<i64> {
    let u = take_uvarint(bytes)?;
    let magnitude = (u >> 1) as i64;
    Some(if u & 1 == 0 { magnitude } else { !magnitude })
}

/// The `thw.db` body grammar: `count` entries of `varint expiry, uvarint sequence`, each at
/// least 2 bytes (so a count above half the body is refused before reading); bytes after the
/// last entry are ignored. `None` when the body does not hold them.
pub fn thw_grammar(mut body: &[u8], count: u64) -> Option<Vec<(i64, u64)>> {
    if count > body.len() as u64 / 2 {
        return None;
    }
    (0..count)
        .map(|_| Some((take_varint(&mut body)?, take_uvarint(&mut body)?)))
        .collect()
}

/// The `sched.db` body grammar: `count` entries of `u16 LE length, UTF-8 subject, varint next
/// fire, uvarint sequence`, each at least 4 bytes; bytes after the last entry are ignored.
pub fn sched_grammar(mut body: &[u8], count: u64) -> Option<Vec<(String, i64, u64)>> {
    if count > body.len() as u64 / 4 {
        return None;
    }
    (0..count)
        .map(|_| {
            let (len, rest) = body.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let subject = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
            body = &rest[len..];
            Some((subject, take_varint(&mut body)?, take_uvarint(&mut body)?))
        })
        .collect()
}

/// The entry count byte of the store entry targets: small counts as they are, and with the top
/// bit set counts near `u64::MAX`, which the readers must refuse without allocating.
pub fn entry_count(byte: u8) -> u64 {
    if byte & 0x80 == 0 {
        u64::from(byte)
    } else {
        u64::MAX - u64::from(byte & 0x7f)
    }
}

/// The message table of the store entry targets: bit `i` of `mask` puts a message at sequence
/// `i + 1`, on subject `SUBJECTS[i % 4]`.
pub fn table_messages(mask: u8) -> Vec<(u64, &'static str)> {
    const SUBJECTS: [&str; 4] = ["a", "b.c", "s.x", "s.y"];
    (0..8u8)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| (u64::from(i) + 1, SUBJECTS[usize::from(i % 4)]))
        .collect()
}

/// The stream name grammar: 1 to 255 bytes, no whitespace, control character, `.`, `*`, `>`,
/// `/` or `\` (so a name is one safe path component and never `..`).
pub fn stream_name_grammar(name: &str) -> bool {
    (1..=255).contains(&name.len())
        && !name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        })
}

/// The checksum of the store's metadata files (`meta.sum`, the first line of `meta.bak`): 16
/// lowercase hex digits of xxh3-64 of the bytes, seeded by xxh3-64 of the stream name.
pub fn meta_checksum(name: &str, bytes: &[u8]) -> String {
    use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};
    format!(
        "{:016x}",
        xxh3_64_with_seed(bytes, xxh3_64(name.as_bytes()))
    )
}
