//! The embedded store's own metrics, read from the store at each scrape:
//! - `sluice_store_write_errors_total{file}`: failed writes of every stream, by file — `blocks`
//!   (message batches, each answered with an error and undone) and `snapshots` (index.db and
//!   the sidecars, retried);
//! - what durability costs: `sluice_store_write_batches_total` (message batches written, every
//!   stream: concurrent publishes share one) and `sluice_store_fsyncs_total` (every fsync of
//!   the store: blocks, index.db, sidecars, the sequence lease, directories);
//! - the served stream's known losses: `sluice_store_lost_messages` (damaged messages found so
//!   far), `sluice_store_lost_bytes` (damaged bytes recovery stepped over or cut) and
//!   `sluice_store_unconfirmed_positions` (positions after a crash that may have been handed
//!   out), its message schedules in force, `sluice_store_schedules`, and the messages whose
//!   index entries it keeps in memory, `sluice_store_index_messages`.
//!
//! The hub's per-stream gauges read every stream of the store
//! through [`stream_stats`].

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use sluice_store::{LostState, Store};

use crate::StreamStats;

/// The counts and positions of every stream of `store`; `served` is the hub's.
pub fn stream_stats(store: &Store, served: &str) -> Vec<StreamStats> {
    store
        .list()
        .into_iter()
        .filter_map(|name| {
            let state = store.stream(&name)?.info(None).state;
            Some(StreamStats {
                served: name == served,
                name,
                messages: state.msgs,
                bytes: state.bytes,
                first_seq: state.first_seq,
                last_seq: state.last_seq,
                lost_messages: state.lost.msgs,
            })
        })
        .collect()
}

/// The store's metrics, for the served `stream`.
#[derive(Debug)]
pub struct StoreMetrics {
    /// The backend's store (`None` once it was taken at shutdown).
    pub store: Arc<Mutex<Option<Store>>>,
    /// The served stream.
    pub stream: String,
}

impl StoreMetrics {
    /// The failed writes of every stream, `(blocks, snapshots)`, the served stream's losses,
    /// `(schedules, messages indexed in memory)`, and the batches written by every stream.
    fn read(&self) -> ((u64, u64), LostState, (u64, u64), u64) {
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(store) = store else {
            return ((0, 0), LostState::default(), (0, 0), 0);
        };
        let (mut errors, mut batches) = ((0, 0), 0);
        for stream in store.list().iter().filter_map(|name| store.stream(name)) {
            let health = stream.write_health();
            errors.0 += health.write_errors;
            errors.1 += health.snapshot_errors;
            batches += stream.write_stats().batches;
        }
        let (lost, schedules, in_memory) = store
            .stream(&self.stream)
            .map(|handle| {
                let state = handle.info(None).state;
                (state.lost, state.num_schedules, handle.index_messages())
            })
            .unwrap_or_default();
        (errors, lost, (schedules, in_memory), batches)
    }
}

impl Collector for StoreMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ((blocks, snapshots), lost, (schedules, in_memory), batches) = self.read();
        let counter = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "sluice_store_write_errors",
            "Failed writes of the embedded store, by file (blocks: message batches, answered with an error; snapshots: index.db and sidecars, retried)",
            None,
            counter.metric_type(),
        )?;
        for (file, count) in [("blocks", blocks), ("snapshots", snapshots)] {
            let labels = [("file", file)];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        let counters = [
            (
                "sluice_store_write_batches",
                "Message batches the embedded store wrote, every stream (concurrent publishes share one)",
                batches,
            ),
            (
                "sluice_store_fsyncs",
                "fsyncs the embedded store made: block files, index.db, sidecars, the sequence lease, directories",
                sluice_store::fsyncs(),
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        let unconfirmed: u64 = lost.unconfirmed.iter().map(|(a, b)| b - a + 1).sum();
        let gauges = [
            (
                "sluice_store_lost_messages",
                "Messages of the served stream found damaged or missing (counted once found: recovery, or a read of their block)",
                lost.msgs,
            ),
            (
                "sluice_store_lost_bytes",
                "Bytes of damaged records the served stream's recovery stepped over or cut (cut bytes are kept aside)",
                lost.bytes,
            ),
            (
                "sluice_store_unconfirmed_positions",
                "Positions of the served stream above its last intact record after a crash, up to the sequence lease",
                unconfirmed,
            ),
            (
                "sluice_store_schedules",
                "Message schedules in force in the served stream (at most its max_msg_schedules)",
                schedules,
            ),
            (
                "sluice_store_index_messages",
                "Messages of the served stream whose index entries are in memory (embedded.index_memory bounds them)",
                in_memory,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}
