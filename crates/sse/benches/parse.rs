//! Parser throughput on the stream a bench client reads: `message` frames as the hub writes
//! them (id, event, one JSON `data` line of about 250 bytes), fed in 4 KiB chunks,
//! returned as owned frames (`feed`) or lent (`feed_with`).
//!
//! `cargo bench -p sluice-sse`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_sse::{Frame, Parser};

const FRAMES: usize = 1000;
const CHUNK: usize = 4096;

/// `FRAMES` message frames shaped like the hub's.
fn stream() -> Vec<u8> {
    let mut wire = Vec::new();
    for n in 0..FRAMES {
        let data = format!(
            r#"{{"topic":"bench.0","payload":{{"run":"0123456789abcdef","n":{n},"sent_us":{},"pad":"{}"}},"time":"2026-11-30T00:24:15.123456789Z"}}"#,
            1_000_000 + n,
            "x".repeat(40)
        );
        let frame = Frame::data(data)
            .with_id(format!("{}-18c3f0a1b2", n + 1))
            .with_event("message");
        wire.extend_from_slice(&frame.encode().expect("valid frame"));
    }
    wire
}

fn parse(c: &mut Criterion) {
    let wire = stream();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("feed", |b| {
        b.iter(|| {
            let mut parser = Parser::new();
            let mut frames = 0;
            for chunk in wire.chunks(CHUNK) {
                frames += parser.feed(chunk).expect("valid stream").len();
            }
            assert_eq!(frames, FRAMES);
        });
    });
    group.bench_function("feed_with", |b| {
        b.iter(|| {
            let mut parser = Parser::new();
            let mut frames = 0;
            for chunk in wire.chunks(CHUNK) {
                parser
                    .feed_with(chunk, |_| frames += 1)
                    .expect("valid stream");
            }
            assert_eq!(frames, FRAMES);
        });
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
