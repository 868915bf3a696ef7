//! What one update costs a subscription's selectors at the limits a subscriber may reach: the
//! cost the dispatch of Mercure's feeds pays per update and feed.
//!
//! `cargo bench -p sluice-mercure --bench selectors`; docs/BENCHMARKS.md has the figures.

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_mercure::{DEFAULT_BASE_URL, SelectorSet};
use std::hint::black_box;

/// A 4 KiB topic, the longest an update may carry.
fn long_topic() -> String {
    let path = "a/".repeat(2040);
    format!("https://ex.com/{path}")
}

fn selectors(c: &mut Criterion) {
    let topic = long_topic();
    let topics = [topic.as_str()];
    let mut group = c.benchmark_group("selectors_4k_topic");
    // The outside audit's selector, at the most groups allowed.
    let wildcards = format!("https://ex.com/{}", "*/".repeat(24));
    let one = SelectorSet::from_query([("match_urlpattern", wildcards.as_str())], DEFAULT_BASE_URL)
        .expect("within the limits");
    group.bench_function("one_pattern_24_wildcards", |b| {
        b.iter(|| black_box(one.matches_any(black_box(&topics))))
    });
    // A hundred distinct patterns (the most selectors a subscription may have), none matching.
    let many: Vec<String> = (0..100)
        .map(|i| format!("https://ex.com/{}:x{i}([a-z]+)/z", "*/".repeat(8)))
        .collect();
    let set = SelectorSet::from_query(
        many.iter().map(|p| ("match_urlpattern", p.as_str())),
        DEFAULT_BASE_URL,
    )
    .expect("within the limits");
    group.bench_function("hundred_patterns", |b| {
        b.iter(|| black_box(set.matches_any(black_box(&topics))))
    });
    // A 0.x URI Template with 32 variables (the most allowed).
    let template: String = (0..32).map(|i| format!("{{+v{i}}}/")).collect();
    let template = format!("https://ex.com/{template}");
    let uri_template =
        SelectorSet::from_query([("topic", template.as_str())], DEFAULT_BASE_URL).unwrap();
    group.bench_function("one_template_32_variables", |b| {
        b.iter(|| black_box(uri_template.matches_any(black_box(&topics))))
    });
    let exact = SelectorSet::from_query([("topic", topic.as_str())], DEFAULT_BASE_URL).unwrap();
    group.bench_function("one_exact", |b| {
        b.iter(|| black_box(exact.matches_any(black_box(&topics))))
    });
    group.finish();
}

criterion_group!(benches, selectors);
criterion_main!(benches);
