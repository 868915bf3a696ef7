//! `POST /.well-known/mercure`: a form (`topic`…, `data`, `private`, `id`, `type`, `retry`) →
//! `200 text/plain` with the update's id.
//!
//! Order: a body declared too large is refused first (413), then the token (401: none, or not
//! valid), then the body is read within `limits.max_publish_body` and
//! `limits.body_read_timeout`, decoded (400 naming the field), authorized against the token's
//! publish selectors (403), stored as one message of the served stream (`Scheme::encode`). A
//! repeated custom id within the stream's duplicate window is not stored again: the answer is
//! the same id. Counted in `sluice_publishes_total` by result and in
//! `sluice_publish_refusals_total` by reason (`mercure_…`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::{Update, form};
use sluice_protocol::headers::Headers;

use super::super::body::{self, BodyBudget, BodyLimits};
use super::Mercure;
use crate::auth::{AuthError, cookie_origin_allowed};
use crate::hub::Hub;
use sluice_backend::{ApiError, PublishRequest};
use sluice_core::event_id::EventId;
use sluice_core::metrics::Metrics;

/// `POST /.well-known/mercure`.
pub async fn publish(
    State(hub): State<Arc<Hub>>,
    Extension(budget): Extension<Arc<BodyBudget>>,
    request: Request,
) -> Response {
    let Some(mercure) = hub.mercure.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let config = &hub.config.mercure;
    let (parts, body) = request.into_parts();
    let limits = BodyLimits {
        max: hub.config.limits.max_publish_body,
        timeout: hub.config.limits.body_read_timeout,
    };
    if let Err(err) = body::check_declared(&parts.headers, limits.max) {
        return refused(
            &hub,
            "rejected",
            err.reason(),
            err.status(),
            &err.to_string(),
        );
    }
    let grants =
        mercure
            .publisher
            .grants(&parts.headers, None, &config.cookie_name, config.base_url());
    let grants = match grants {
        // As Mercure's hub: a cookie rides along with any site's form POST, so a publish it
        // authorises must come from an origin of `publish_origins` (or the hub's own).
        Ok(Some(verified))
            if verified.from_cookie
                && !cookie_origin_allowed(&parts.headers, &config.publish_origins) =>
        {
            return unauthorized(&hub, &AuthError::CrossSiteCookie);
        }
        Ok(Some(verified)) => verified.grants,
        Ok(None) => return unauthorized(&hub, &AuthError::MissingToken),
        Err(err) => return unauthorized(&hub, &err),
    };
    let body = match body::read(&parts.headers, body, limits, &budget).await {
        Ok(body) => body,
        Err(err) => {
            let mut response = refused(
                &hub,
                "rejected",
                err.reason(),
                err.status(),
                &err.to_string(),
            );
            // The rest of the body is never read.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    let update = match form::decode(&body.bytes) {
        Ok(update) => update,
        Err(err) => {
            let status = StatusCode::BAD_REQUEST;
            return refused(
                &hub,
                "rejected",
                "mercure_invalid_form",
                status,
                &err.to_string(),
            );
        }
    };
    if !grants.can_publish(&update.topic_refs()) {
        let detail = "the token does not grant publishing on every topic of this update";
        let status = StatusCode::FORBIDDEN;
        return refused(
            &hub,
            "unauthorized",
            "mercure_forbidden_topic",
            status,
            detail,
        );
    }
    store(&hub, mercure, update).await
}

/// Stores `update` in the served stream and answers with its id: the custom one, or the
/// hub-made `#<seq>-<incarnation>`.
async fn store(hub: &Hub, mercure: &Mercure, update: Update) -> Response {
    let stored = mercure.scheme.encode(&update);
    let mut headers = Headers::new();
    for (name, value) in stored.headers {
        headers.append(name, value);
    }
    let request = PublishRequest {
        subject: stored.subject,
        headers,
        payload: Bytes::from(stored.payload),
    };
    let ack = match hub.backend.publish(request).await {
        Ok(ack) => ack,
        Err(err) => {
            sluice_core::fanout::record(&hub.metrics, &err, "Mercure publish failed");
            let err = ApiError::from(err);
            let status =
                StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let result = if status.is_server_error() {
                "failed"
            } else {
                "rejected"
            };
            return refused(
                hub,
                result,
                "mercure_stream_refused",
                status,
                &err.description,
            );
        }
    };
    if let Some(stream) = &ack.stream {
        // Stored through another stream's sources: its position here is not known yet.
        let detail = format!("the update was stored in stream {stream:?}, not in the served one");
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        return refused(hub, "failed", "mercure_other_stream", status, &detail);
    }
    let result = if ack.duplicate { "duplicate" } else { "stored" };
    Metrics::count(&hub.metrics.publishes, "result", result);
    let id = update.id.unwrap_or_else(|| {
        hub_id(EventId {
            seq: ack.seq,
            incarnation: Some(ack.incarnation),
        })
    });
    tracing::debug!(
        seq = ack.seq,
        duplicate = ack.duplicate,
        "Mercure update stored"
    );
    let mut response = id.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A publish the token did not let in (401, with the challenge).
fn unauthorized(hub: &Hub, err: &AuthError) -> Response {
    Metrics::count(&hub.metrics.publishes, "result", "unauthorized");
    Metrics::count(&hub.metrics.publish_refusals, "reason", err.reason());
    tracing::info!(result = "unauthorized", reason = err.reason(), status = err.status().as_u16(), detail = %err, "Mercure publish refused");
    err.clone().into_response()
}

/// A publish refused with `status`: counted under `result` and `reason`, logged, answered
/// with `detail` as plain text.
fn refused(
    hub: &Hub,
    result: &'static str,
    reason: &'static str,
    status: StatusCode,
    detail: &str,
) -> Response {
    Metrics::count(&hub.metrics.publishes, "result", result);
    super::refuse(
        &hub.metrics.publish_refusals,
        "Mercure publish",
        reason,
        status,
        detail,
    )
}
