//! What the fan-out's tests share: a real embedded store in a temporary directory.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use sluice_protocol::headers::Headers;

use super::Encoder;
use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig};
use sluice_backend::{Backend, PublishRequest};

/// The default embedded stream in `dir`, unsynced (the tests never crash the process).
pub(super) async fn open_backend(dir: &Path) -> Arc<EmbeddedBackend> {
    let config = EmbeddedConfig {
        data_dir: dir.to_owned(),
        sync: "never".into(),
        ..EmbeddedConfig::default()
    };
    Arc::new(EmbeddedBackend::open(&config).await.unwrap().0)
}

/// Publishes a small message to `subject`; returns its sequence.
pub(super) async fn publish(backend: &dyn Backend, subject: &str) -> u64 {
    let request = PublishRequest {
        subject: subject.into(),
        headers: Headers::new(),
        payload: Bytes::from_static(b"1"),
    };
    backend.publish(request).await.unwrap().seq
}

/// The encoder of incarnation `incarnation`: no topic prefix, 1 MiB frames.
pub(super) fn encoder(incarnation: u64) -> Encoder {
    Encoder {
        incarnation,
        topic_prefix: String::new(),
        max_event_size: 1 << 20,
        event_type: "message".into(),
        view_prefix: None,
    }
}
