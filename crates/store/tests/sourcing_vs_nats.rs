//! Differential test: the same sourcing scenario on sluice's store and on a real nats-server
//! 2.15 (`SLUICE_NATS_SERVER`, else `.venv/bin/nats-server`): an origin with three subjects, an
//! aggregate with two filtered sources and one with a subject transform, publishes, a purge of
//! the aggregate, a restart, more publishes. Both must source the same (origin sequence,
//! subject) set, write the same `Nats-Stream-Source` fields except the ident value, and reject a
//! forged header with 10227.

use std::collections::BTreeSet;

use async_nats::jetstream::{self, stream};
use sluice_store::{Headers, PurgeRequest, SourceConfig, Store, StoreOptions, StreamConfig};
use sluice_test_support::{NatsServer, eventually_async};

/// One sourced message: origin seq, stored subject, header fields without the ident.
type Sourced = (u64, String, Vec<String>);

/// The scenario's publishes: (subject, payload), in two rounds around the restart.
const FIRST: [&str; 5] = ["orders.a", "chat.b", "orders.a", "other.c", "chat.b"];
const SECOND: [&str; 3] = ["chat.b", "orders.a", "other.c"];
const FILTERS: [&str; 2] = ["orders.*", "chat.*"];
/// A third source renames `other.*` subjects.
const TRANSFORM: (&str, &str) = ("other.*", "moved.{{wildcard(1)}}");

fn header_fields(value: &str) -> (Vec<String>, String) {
    let mut f: Vec<String> = value.split(' ').map(str::to_string).collect();
    assert_eq!(f.len(), 6, "Nats-Stream-Source {value:?} has not 6 fields");
    let ident = f.pop().unwrap();
    (f, ident)
}

async fn run_sluice() -> (BTreeSet<Sourced>, (u16, u64, String)) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let origin = store
        .create_stream(StreamConfig::new(
            "ORIGIN",
            ["orders.*", "chat.*", "other.*"],
        ))
        .unwrap();
    let mut sources: Vec<SourceConfig> = FILTERS
        .iter()
        .map(|f| SourceConfig {
            name: "ORIGIN".into(),
            opt_start_seq: None,
            opt_start_time: None,
            filter_subject: Some(f.to_string()),
            subject_transforms: vec![],
        })
        .collect();
    sources.push(SourceConfig {
        name: "ORIGIN".into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: None,
        subject_transforms: vec![sluice_store::SubjectTransform {
            src: TRANSFORM.0.into(),
            dest: TRANSFORM.1.into(),
        }],
    });
    let agg = StreamConfig {
        sources,
        ..StreamConfig::new("AGG", ["agg"])
    };
    let agg_handle = store.create_stream(agg).unwrap();
    for s in FIRST {
        origin.publish(s, Headers::new(), "x").await.unwrap();
    }
    let mut seen = BTreeSet::new();
    let collect = |h: &sluice_store::StreamHandle, seen: &mut BTreeSet<Sourced>| {
        let st = h.info(None).state;
        for seq in st.first_seq..=st.last_seq {
            if let Some(m) = h.get(seq).unwrap() {
                let (fields, _) = header_fields(m.headers.get("Nats-Stream-Source").unwrap());
                seen.insert((fields[1].parse().unwrap(), m.subject.clone(), fields));
            }
        }
    };
    eventually_async("sluice sources 5", async || {
        agg_handle.info(None).state.msgs == 5
    })
    .await;
    collect(&agg_handle, &mut seen);
    agg_handle.purge(PurgeRequest::default()).await.unwrap();
    store.close();

    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let origin = store.stream("ORIGIN").unwrap();
    let agg_handle = store.stream("AGG").unwrap();
    for s in SECOND {
        origin.publish(s, Headers::new(), "x").await.unwrap();
    }
    eventually_async("sluice sources 3 more", async || {
        agg_handle.info(None).state.msgs == 3
    })
    .await;
    collect(&agg_handle, &mut seen);
    let mut forged = Headers::new();
    forged.insert("Nats-Stream-Source", "ORIGIN 1 > > orders.a x");
    let e = agg_handle.publish("agg", forged, "f").await.unwrap_err();
    let api = e.api().unwrap().clone();
    store.close();
    (seen, (api.status, u64::from(api.code), api.description))
}

async fn run_nats() -> (BTreeSet<Sourced>, (u16, u64, String)) {
    let mut server = NatsServer::start().await.expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "ORIGIN".into(),
        subjects: vec!["orders.*".into(), "chat.*".into(), "other.*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_stream(stream::Config {
        name: "AGG".into(),
        subjects: vec!["agg".into()],
        sources: Some(
            FILTERS
                .iter()
                .map(|f| stream::Source {
                    name: "ORIGIN".into(),
                    filter_subject: Some(f.to_string()),
                    ..Default::default()
                })
                .chain([stream::Source {
                    name: "ORIGIN".into(),
                    subject_transforms: vec![stream::SubjectTransform {
                        source: TRANSFORM.0.into(),
                        destination: TRANSFORM.1.into(),
                    }],
                    ..Default::default()
                }])
                .collect(),
        ),
        ..Default::default()
    })
    .await
    .unwrap();
    for s in FIRST {
        js.publish(s, "x".into()).await.unwrap().await.unwrap();
    }
    let mut seen = BTreeSet::new();
    async fn collect(js: &jetstream::Context, seen: &mut BTreeSet<Sourced>) {
        let mut agg = js.get_stream("AGG").await.unwrap();
        let st = agg.info().await.unwrap().state.clone();
        for seq in st.first_sequence..=st.last_sequence {
            if let Ok(m) = agg.get_raw_message(seq).await {
                let value = m.headers.get("Nats-Stream-Source").unwrap().as_str();
                let (fields, _) = header_fields(value);
                seen.insert((fields[1].parse().unwrap(), m.subject.to_string(), fields));
            }
        }
    }
    let msgs = async |js: &jetstream::Context| {
        let mut agg = js.get_stream("AGG").await.unwrap();
        agg.info().await.unwrap().state.messages
    };
    eventually_async("nats sources 5", async || msgs(&js).await == 5).await;
    collect(&js, &mut seen).await;
    js.get_stream("AGG").await.unwrap().purge().await.unwrap();

    server.restart().await.expect("nats-server restarts");
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    // After a restart the streams come back before JetStream answers for them.
    eventually_async("nats streams back", async || {
        js.get_stream("AGG").await.is_ok()
    })
    .await;
    for s in SECOND {
        js.publish(s, "x".into()).await.unwrap().await.unwrap();
    }
    eventually_async("nats sources 3 more", async || msgs(&js).await == 3).await;
    collect(&js, &mut seen).await;
    let mut forged = async_nats::HeaderMap::new();
    forged.insert("Nats-Stream-Source", "ORIGIN 1 > > orders.a x");
    let reply = client
        .request_with_headers("agg", forged, "f".into())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    let e = &v["error"];
    (
        seen,
        (
            e["code"].as_u64().unwrap() as u16,
            e["err_code"].as_u64().unwrap(),
            e["description"].as_str().unwrap().to_string(),
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sourcing_matches_nats_server() {
    let (sluice, sluice_err) = run_sluice().await;
    let (nats, nats_err) = run_nats().await;
    assert_eq!(sluice, nats);
    assert_eq!(sluice_err, nats_err);
    // Every origin message, through the filters and the transform, before and after the restart.
    let seqs: Vec<u64> = sluice.iter().map(|s| s.0).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(sluice.iter().any(|s| s.1 == "moved.c"));
    assert_eq!(sluice_err.1, 10227);
}
