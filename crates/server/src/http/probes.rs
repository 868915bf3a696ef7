//! Probes and metrics. Readiness asks the backend with a one-second bound; every 503 is
//! counted once in `sluice_readiness_failures_total{cause}`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::hub::Hub;
use sluice_backend::Health;
use sluice_core::metrics::{Exposition, Metrics, Snapshot};

const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /livez`: the process is up.
pub async fn livez() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

async fn check(hub: &Hub) -> Result<(), (&'static str, String)> {
    if hub.is_shutting_down() {
        return Err(("shutting_down", "the hub is shutting down".to_owned()));
    }
    match tokio::time::timeout(HEALTH_TIMEOUT, hub.backend.health()).await {
        Ok(Health::Ready) => Ok(()),
        Ok(Health::Unavailable { cause, detail }) => Err((cause, detail)),
        Err(_) => Err(("timeout", "the backend did not answer within 1s".to_owned())),
    }
}

fn unavailable(
    hub: &Hub,
    cause: &'static str,
    detail: &str,
    mut body: serde_json::Value,
) -> Response {
    Metrics::count(&hub.metrics.readiness_failures, "cause", cause);
    tracing::warn!(cause, detail, "not ready");
    body["status"] = json!("unavailable");
    body["cause"] = json!(cause);
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// `GET /readyz`: 200 when the backend can serve, else 503 with the cause.
pub async fn readyz(State(hub): State<Arc<Hub>>) -> Response {
    match check(&hub).await {
        Ok(()) => Json(json!({ "status": "ok" })).into_response(),
        Err((cause, detail)) => unavailable(&hub, cause, &detail, json!({})),
    }
}

/// `GET /healthz`: readiness plus details.
pub async fn healthz(State(hub): State<Arc<Hub>>) -> Response {
    let details = json!({
        "backend": hub.backend.kind(),
        "connections": hub.metrics.active_connections.get(),
        "feeds": hub.feed_count(),
    });
    match check(&hub).await {
        Ok(()) => {
            let mut body = details;
            body["status"] = json!("ok");
            Json(body).into_response()
        }
        Err((cause, detail)) => {
            let mut body = details;
            body["detail"] = json!(detail);
            unavailable(&hub, cause, &detail, body)
        }
    }
}

/// What the per-stream gauges and the feeds' lag show for this scrape: the backend's answer
/// within one second, else nothing (counted as a backend error and logged).
async fn read_streams(hub: &Hub) -> Snapshot {
    let error = match tokio::time::timeout(HEALTH_TIMEOUT, hub.statistics.stream_stats()).await {
        Ok(Ok(streams)) => {
            let feed_lag = streams
                .iter()
                .find(|stream| stream.served)
                .map(|served| hub.feed_lag(served.last_seq));
            return Snapshot { streams, feed_lag };
        }
        Ok(Err(err)) => {
            Metrics::count(&hub.metrics.backend_errors, "kind", err.kind());
            err.to_string()
        }
        Err(_) => {
            Metrics::count(&hub.metrics.backend_errors, "kind", "unavailable");
            "the backend did not answer within 1s".to_owned()
        }
    };
    tracing::warn!(detail = error, "stream gauges left out of this scrape");
    Snapshot::default()
}

/// `GET /metrics`: OpenMetrics or Prometheus text, as `Accept` prefers ([`Exposition`]).
pub async fn metrics(State(hub): State<Arc<Hub>>, headers: HeaderMap) -> Response {
    let accept: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    let format = Exposition::negotiate(Some(&accept.join(",")));
    hub.metrics.streams.replace(read_streams(&hub).await);
    let mut response = hub.metrics.encode_as(format).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}
