//! `GET /`: a small self-contained page (no external assets) that subscribes with
//! `EventSource` to the topics in its own query string (`/?topic=a&topic=b`, default `>`),
//! lists what it receives, and keeps every event in `window.sluiceEvents` as
//! `{type, id, data}` (with `window.sluiceStatus` counting opens and errors).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Html;

use crate::hub::Hub;

/// Where page.html names the event type of message frames.
const EVENT_TYPE_SLOT: &str = "__SLUICE_EVENT_TYPE__";

/// The page, listening for `sse.event_type` (validated to letters, digits, `.`, `_` and `-`,
/// so it is safe inside the page's script string).
pub async fn index(State(hub): State<Arc<Hub>>) -> Html<String> {
    Html(include_str!("page.html").replace(EVENT_TYPE_SLOT, &hub.config.sse.event_type))
}
