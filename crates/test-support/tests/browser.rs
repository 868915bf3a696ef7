//! The Chromium driver against a small local axum server.

use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use sluice_test_support::{Browser, eventually};

const PAGE: &str = r#"<!doctype html>
<title>driver test</title>
<script>
  window.loaded = 'yes';
  console.log('hello from the page');
  setTimeout(() => { window.later = { n: 42 }; }, 50);
</script>"#;

async fn serve() -> String {
    let app = Router::new().route("/", get(|| async { Html(PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

#[tokio::test]
async fn opens_page_evaluates_and_waits() {
    let url = serve().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = browser.new_page().await.unwrap();
    page.open(&url).await.unwrap();
    assert_eq!(page.eval("window.loaded").await.unwrap(), "yes");
    assert_eq!(page.eval("document.title").await.unwrap(), "driver test");
    assert_eq!(page.eval("Promise.resolve(1 + 2)").await.unwrap(), 3);
    let later = page
        .wait_for("window.later", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(later["n"], 42);
    assert!(
        page.console()
            .iter()
            .any(|line| line == "console.log: hello from the page")
    );
}

#[tokio::test]
async fn exceptions_and_timeouts_are_errors() {
    let url = serve().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = browser.new_page().await.unwrap();
    page.open(&url).await.unwrap();
    let err = page.eval("undefinedFunction()").await.unwrap_err();
    assert!(err.to_string().contains("undefinedFunction"), "{err}");
    let err = page
        .wait_for("window.never", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("hello from the page"),
        "shows the console: {err}"
    );
}

#[tokio::test]
async fn unreachable_url_is_an_error() {
    let browser = Browser::launch().await.expect("chromium starts");
    let page = browser.new_page().await.unwrap();
    // Port 9 (discard) is refused on loopback.
    let err = page.open("http://127.0.0.1:9/").await.unwrap_err();
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}

#[tokio::test]
async fn dropping_the_browser_kills_all_its_processes() {
    let browser = Browser::launch().await.expect("chromium starts");
    let page = browser.new_page().await.unwrap();
    assert_eq!(page.eval("1").await.unwrap(), 1);
    let group = browser.pid().expect("running");
    drop(page);
    drop(browser);
    // The whole group was sent SIGKILL; its orphans (not ours to wait for) may take a moment
    // to finish exiting on a busy machine, so their exit is polled for, with a deadline.
    eventually("every process of the browser's group to exit", || {
        survivors(group).is_empty()
    })
    .await;
}

/// The processes of process group `group` that are still alive (`/proc/<pid>/stat` lines).
fn survivors(group: u32) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.ok()?.path().join("stat")).ok()?;
            // After the command (which may contain spaces): state, parent, process group.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let pgrp: u32 = fields.nth(1)?.parse().ok()?;
            // A zombie is dead; reaping orphans is the job of this machine's init, not ours.
            (pgrp == group && state != "Z").then_some(stat)
        })
        .collect()
}
