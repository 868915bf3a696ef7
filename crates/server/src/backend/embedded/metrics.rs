//! The embedded store's own metric: `sluice_store_write_errors_total{file}`, read from the
//! store's streams at each scrape.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use sluice_store::{Store, WriteHealth};

/// Failed writes of every stream of the store, by file: `blocks` (message batches, each
/// answered with an error and undone) and `snapshots` (index.db and the sidecars, retried).
#[derive(Debug)]
pub struct StoreWriteErrors {
    store: Arc<Mutex<Option<Store>>>,
}

impl StoreWriteErrors {
    /// Reads the store in `store` (nothing once it was taken at shutdown).
    pub fn new(store: Arc<Mutex<Option<Store>>>) -> Self {
        Self { store }
    }

    /// The failed writes of every stream: `(blocks, snapshots)`.
    fn totals(&self) -> (u64, u64) {
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(store) = store else {
            return (0, 0);
        };
        store
            .list()
            .iter()
            .filter_map(|name| store.stream(name))
            .map(|stream| stream.write_health())
            .fold((0, 0), |(blocks, snapshots), h: WriteHealth| {
                (blocks + h.write_errors, snapshots + h.snapshot_errors)
            })
    }
}

impl Collector for StoreWriteErrors {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (blocks, snapshots) = self.totals();
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
        Ok(())
    }
}
