//! `SseClient` and the HTTP helpers against a small local axum server.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use sluice_test_support::{Frame, SseClient, http};

fn event_stream(body: Body) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/event-stream")], body)
}

/// A body sent in the given pieces, then ended.
fn pieces(pieces: &'static [&'static str]) -> Body {
    Body::from_stream(futures::stream::iter(
        pieces.iter().map(|piece| Ok::<_, Infallible>(*piece)),
    ))
}

async fn serve() -> String {
    let app = Router::new()
        .route(
            "/stream",
            get(|| async {
                event_stream(pieces(&[
                    "retry: 2000\r\n\r\n: heartbeat\n\n",
                    "id: 1\nevent: connected\ndata: {\"topics\":[\"a\"]}\n\nid: 2\r",
                    "\ndata: line one\ndata: line two\n\n",
                ]))
            }),
        )
        .route(
            "/partial",
            get(|| async { event_stream(pieces(&["data: cut"])) }),
        )
        .route(
            "/silent",
            get(|| async {
                event_stream(Body::from_stream(futures::stream::pending::<
                    Result<&str, Infallible>,
                >()))
            }),
        )
        .route(
            "/refuse",
            get(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, "1")],
                    "busy",
                )
            }),
        )
        .route(
            "/headers",
            get(|headers: HeaderMap| async move {
                let seen = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned()
                };
                axum::Json(serde_json::json!({
                    "accept": seen("accept"),
                    "last_event_id": seen("last-event-id"),
                }))
            }),
        )
        .route(
            "/echo",
            post(|body: axum::Json<serde_json::Value>| async move { (StatusCode::CREATED, body) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn reads_frames_strictly_in_order() {
    let base = serve().await;
    let mut client = SseClient::connect(&format!("{base}/stream")).await.unwrap();
    assert_eq!(client.status(), StatusCode::OK);
    assert_eq!(client.header("content-type"), Some("text/event-stream"));
    assert_eq!(client.next_frame().await.unwrap(), Frame::retry(2000));
    assert_eq!(
        client.next_frame().await.unwrap(),
        Frame::comment("heartbeat")
    );
    let connected = client.next_frame().await.unwrap();
    assert_eq!(
        connected,
        Frame::data("{\"topics\":[\"a\"]}")
            .with_id("1")
            .with_event("connected")
    );
    assert_eq!(
        client.next_frame().await.unwrap(),
        Frame::data("line one\nline two").with_id("2")
    );
    assert_eq!(client.last_event_id(), "2");
    assert!(client.frames_until_end().await.unwrap().is_empty());
}

#[tokio::test]
async fn next_event_skips_comments_and_retry() {
    let base = serve().await;
    let mut client = SseClient::connect(&format!("{base}/stream")).await.unwrap();
    assert_eq!(
        client.next_event().await.unwrap().event.as_deref(),
        Some("connected")
    );
}

#[tokio::test]
async fn stream_ending_inside_a_frame_is_an_error() {
    let base = serve().await;
    let mut client = SseClient::connect(&format!("{base}/partial"))
        .await
        .unwrap();
    let err = client.next_frame().await.unwrap_err();
    assert!(err.to_string().contains("ended inside a frame"), "{err}");
}

#[tokio::test]
async fn waiting_for_a_frame_has_a_deadline() {
    let base = serve().await;
    let mut client = SseClient::connect(&format!("{base}/silent")).await.unwrap();
    client.set_timeout(Duration::from_millis(200));
    let err = client.next_frame().await.unwrap_err();
    assert!(err.to_string().contains("no SSE frame within"), "{err}");
}

#[tokio::test]
async fn refusals_are_visible_and_not_read_as_streams() {
    let base = serve().await;
    let mut client = SseClient::connect(&format!("{base}/refuse")).await.unwrap();
    assert_eq!(client.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(client.header("retry-after"), Some("1"));
    let err = client.next_frame().await.unwrap_err();
    assert!(err.to_string().contains("not an event stream"), "{err}");
}

#[tokio::test]
async fn sends_event_source_and_extra_headers() {
    let base = serve().await;
    let url = format!("{base}/headers");
    let mut client = SseClient::connect_with_headers(&url, &[("last-event-id", "7")])
        .await
        .unwrap();
    assert_eq!(client.status(), StatusCode::OK);
    // Not an event stream: the JSON body is read through the HTTP helper instead.
    assert!(client.next_frame().await.is_err());
    let response = http::send(
        http::request(axum::http::Method::GET, &url, &[("last-event-id", "9")])
            .unwrap()
            .body(Default::default())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.json().unwrap()["last_event_id"], "9");
}

#[tokio::test]
async fn json_get_and_post() {
    let base = serve().await;
    let response = http::get(&format!("{base}/headers")).await.unwrap();
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.json().unwrap()["accept"], "");
    let body = serde_json::json!({"topic": "a", "payload": {"n": 1}});
    let response = http::post_json(&format!("{base}/echo"), &body)
        .await
        .unwrap();
    assert_eq!(response.status, StatusCode::CREATED);
    assert_eq!(response.json().unwrap(), body);
    let refused = http::get(&format!("{base}/refuse")).await.unwrap();
    assert_eq!(refused.text(), "busy");
    assert!(refused.json().unwrap_err().to_string().contains("busy"));
}
