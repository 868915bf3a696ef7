//! Subject transforms: `SubjectTransform::new` never panics on any `src`/`dest`; an accepted
//! transform maps every valid subject its `src` matches to a valid subject (or refuses one that
//! would grow past the maximum length) and leaves the others alone; `$N` and
//! `{{wildcard(N)}}` are the same reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::subject::{MAX_SUBJECT_LEN, validate_subject};
use sluice_protocol::transform::SubjectTransform;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let (src, dest, subject) = (
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
    );
    let Ok(t) = SubjectTransform::new(src, dest) else {
        return;
    };
    if validate_subject(subject).is_err() {
        return;
    }
    let out = t.apply(subject);
    match &out {
        Some(o) => {
            assert!(t.matches(subject));
            assert!(
                validate_subject(o).is_ok(),
                "{src:?} -> {dest:?} on {subject:?} gave {o:?}"
            );
        }
        // Refused while matching only when the result would be too long: each dest token
        // adds at most itself or the whole subject.
        None => assert!(
            !t.matches(subject)
                || dest.len() + dest.split('.').count() * subject.len() > MAX_SUBJECT_LEN
        ),
    }
    if dest.is_empty() || dest == src {
        return;
    }
    // The same dest written with functions instead of `$N` maps identically.
    let functions: Vec<String> = dest
        .split('.')
        .map(|tok| match tok.strip_prefix('$') {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{{{{wildcard({n})}}}}")
            }
            _ => tok.to_string(),
        })
        .collect();
    let rewritten = functions.join(".");
    if rewritten.len() <= MAX_SUBJECT_LEN {
        let t2 = SubjectTransform::new(src, &rewritten).expect("the function form is accepted too");
        assert_eq!(t2.apply(subject), out);
    }
});
