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
