//! `GET /`: a small self-contained page (no external assets) that subscribes with
//! `EventSource` to the topics in its own query string (`/?topic=a&topic=b`, default `>`),
//! lists what it receives, and keeps every event in `window.sluiceEvents` as
//! `{type, id, data}` (with `window.sluiceStatus` counting opens and errors).

use axum::response::Html;

pub async fn index() -> Html<&'static str> {
    Html(include_str!("page.html"))
}
