//! The hub's own work per message of a batch `POST /publish`, without the store: the body split
//! into its items, each item read and checked (topic, subject, headers, payload) into a request,
//! and the answer written, for batches of 100 messages of about 65 bytes (the body of
//! `scripts/publish-batch.lua`) as a JSON array and as NDJSON, and of 100 messages that each
//! carry a `msg_id`, a `ttl` and a text payload. Throughput is in messages.
//!
//! `cargo bench -p sluice-server --bench publish_batch`

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_server::config::Config;
use sluice_server::fuzzing::publish_batch_answer;

const ITEMS: usize = 100;

/// The message of `scripts/publish-batch.lua`.
const PLAIN: &str = r#"{"topic":"bench.t","payload":{"n":1,"pad":"xxxxxxxxxxxxxxxx"}}"#;

fn with_options(i: usize) -> String {
    format!(
        r#"{{"topic":"bench.t{}","payload":"text {i}","msg_id":"id-{i}","ttl":"30s"}}"#,
        i % 10
    )
}

fn batch(c: &mut Criterion) {
    let config = Config::default();
    let subjects = vec![">".to_owned()];
    let array = |items: Vec<String>| Bytes::from(format!("[{}]", items.join(",")));
    let bodies = [
        ("array", false, array(vec![PLAIN.to_owned(); ITEMS])),
        ("ndjson", true, Bytes::from(vec![PLAIN; ITEMS].join("\n"))),
        (
            "array_options",
            false,
            array((0..ITEMS).map(with_options).collect()),
        ),
    ];
    let mut group = c.benchmark_group("publish_batch");
    group.throughput(Throughput::Elements(ITEMS as u64));
    for (name, ndjson, body) in &bodies {
        let answer = publish_batch_answer(&config, &subjects, *ndjson, body).expect("a batch");
        let answers: Vec<serde_json::Value> = serde_json::from_slice(&answer).expect("JSON");
        assert!(
            answers.len() == ITEMS && answers.iter().all(|a| a["seq"].is_u64()),
            "every item stored: {answers:?}"
        );
        group.bench_with_input(
            BenchmarkId::new("decode_and_answer", name),
            body,
            |b, body| {
                b.iter(|| publish_batch_answer(&config, &subjects, *ndjson, body));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, batch);
criterion_main!(benches);
