//! The served stream's known losses as metrics, read from the store on each scrape:
//! `sluice_store_lost_messages` (damaged messages found so far), `sluice_store_lost_bytes`
//! (damaged bytes recovery stepped over or cut) and `sluice_store_unconfirmed_positions`
//! (positions after a crash that may have been handed out).

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use sluice_store::{LostState, Store};

/// Reads the served stream's [`LostState`] when scraped.
#[derive(Debug)]
pub struct LossCollector {
    /// The backend's store (`None` once shut down).
    pub store: Arc<Mutex<Option<Store>>>,
    /// The served stream.
    pub stream: String,
}

impl LossCollector {
    fn lost(&self) -> LostState {
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner()).clone();
        store
            .and_then(|store| store.stream(&self.stream))
            .map(|handle| handle.info(None).state.lost)
            .unwrap_or_default()
    }
}

impl Collector for LossCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let lost = self.lost();
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
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}
