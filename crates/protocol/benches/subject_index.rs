//! `SubjectIndex::matches` as a hub node dispatches through it: one topic per user (`user.N`,
//! literal) at 100, 10,000 and 100,000 keys, with a few wildcard filters beside them (`audit.>`,
//! `user.*.typing`), and keys that also hold a shared `news` filter. The time per subject should
//! not grow with the number of keys, only with the keys a subject matches.
//!
//! `cargo bench -p sluice-protocol --bench subject_index`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice_protocol::subject_index::SubjectIndex;

const SIZES: [u64; 3] = [100, 10_000, 100_000];

/// `users` keys, each with `user.N`, plus wildcard filters held by a few extra keys.
fn index(users: u64) -> SubjectIndex<u64> {
    let mut index = SubjectIndex::new();
    for user in 0..users {
        index.insert(&format!("user.{user}"), user);
    }
    index.insert("audit.>", users);
    index.insert("user.*.typing", users + 1);
    index
}

fn matches(c: &mut Criterion) {
    let mut group = c.benchmark_group("subject_index");
    for users in SIZES {
        let index = index(users);
        let subject = format!("user.{}", users / 2);
        let mut out = Vec::with_capacity(16);
        group.bench_with_input(
            BenchmarkId::new("one_literal_key", users),
            &subject,
            |b, s| {
                b.iter(|| {
                    out.clear();
                    index.matches(s, &mut out);
                    assert_eq!(out.len(), 1);
                });
            },
        );
        let typing = format!("user.{}.typing", users / 2);
        group.bench_with_input(
            BenchmarkId::new("one_wildcard_key", users),
            &typing,
            |b, s| {
                b.iter(|| {
                    out.clear();
                    index.matches(s, &mut out);
                    assert_eq!(out.len(), 1);
                });
            },
        );
        group.bench_with_input(BenchmarkId::new("no_key", users), "order.7", |b, s| {
            b.iter(|| {
                out.clear();
                index.matches(s, &mut out);
                assert!(out.is_empty());
            });
        });
    }
    // Every key also holds `news`, and ten of them `user.*`: keys have several filters. A subject
    // matching one filter (`news`, 10,000 keys) appends without deduplicating; one matching two
    // filters of the same key (`user.5`: `user.5` and `user.*`) pays the deduplication.
    let mut shared = index(10_000);
    for user in 0..10_000 {
        shared.insert("news", user);
    }
    for user in 0..10 {
        shared.insert("user.*", user);
    }
    let mut out = Vec::with_capacity(10_000);
    group.bench_function("several_filters_per_key/one_filter_matches", |b| {
        b.iter(|| {
            out.clear();
            shared.matches("news", &mut out);
            assert_eq!(out.len(), 10_000);
        });
    });
    group.bench_function("several_filters_per_key/deduplicated", |b| {
        b.iter(|| {
            out.clear();
            shared.matches("user.5", &mut out);
            assert_eq!(out.len(), 10);
        });
    });
    group.finish();
}

criterion_group!(benches, matches);
criterion_main!(benches);
