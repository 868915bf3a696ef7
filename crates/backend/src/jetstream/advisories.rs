//! JetStream's advisories about the served stream (created, deleted, updated, leader elected):
//! each one makes the backend forget what it knows of the stream (see [`super::known`]).

use std::sync::Arc;

use futures::StreamExt;

use super::known::KnownStream;

/// Stops the watch when dropped, so it does not keep the connection open.
pub(super) struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the advisories of `stream` for as long as the returned [`Watch`] lives. Where the
/// account may not subscribe to them, the server refuses (logged as a NATS server error) and
/// the other rules of [`super::known`] still apply.
pub(super) async fn watch(
    client: &async_nats::Client,
    stream: &str,
    known: Arc<KnownStream>,
) -> Watch {
    let subject = format!("$JS.EVENT.ADVISORY.STREAM.*.{stream}");
    let subscription = client.subscribe(subject).await;
    Watch(tokio::spawn(async move {
        let mut advisories = match subscription {
            Ok(advisories) => advisories,
            Err(err) => {
                tracing::info!(%err, "not watching the stream's advisories");
                return;
            }
        };
        while let Some(advisory) = advisories.next().await {
            tracing::debug!(subject = %advisory.subject, "stream advisory; reading the stream again on the next publish");
            known.forget();
        }
    }))
}
