//! Headless Chromium driven over the DevTools protocol: open pages, evaluate JavaScript, wait for
//! conditions with deadlines. The browser (and all its helper processes) is killed on drop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::child::ManagedChild;

/// How long Chromium may take to open its DevTools endpoint.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Page::open`] waits for the page to load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How often [`Page::wait_for`] evaluates its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How many console lines a page keeps for error messages.
const KEPT_CONSOLE_LINES: usize = 200;

/// The flags every test browser runs with.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-port=0",
];

/// Where to find Chromium: `SLUICE_CHROMIUM`, else `/usr/bin/chromium` (Debian's `chromium`
/// package, installed by `scripts/test`), else `chromium` on `PATH`.
fn chromium_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_CHROMIUM") {
        return PathBuf::from(path);
    }
    let debian = PathBuf::from("/usr/bin/chromium");
    if debian.is_file() {
        return debian;
    }
    PathBuf::from("chromium")
}

/// A headless Chromium with a fresh profile.
pub struct Browser {
    cdp: Arc<Cdp>,
    process: ManagedChild,
    // Declared after `process` so the browser is gone before its profile is removed.
    _profile: TempDir,
}

impl Browser {
    /// Launches Chromium: `SLUICE_CHROMIUM`, else `/usr/bin/chromium`, else `chromium` on `PATH`.
    ///
    /// # Errors
    /// When Chromium cannot start or its DevTools endpoint does not answer; the error names the
    /// binary and shows its last lines of output.
    pub async fn launch() -> anyhow::Result<Self> {
        Self::launch_with(chromium_binary()).await
    }

    /// Launches the given Chromium binary.
    ///
    /// # Errors
    /// As [`Browser::launch`].
    pub async fn launch_with(binary: impl Into<PathBuf>) -> anyhow::Result<Self> {
        Self::spawn(binary.into(), &[]).await
    }

    /// Launches Chromium as [`Browser::launch`] does, with `flags` added to the usual ones (for instance
    /// `--ignore-certificate-errors` for a hub with a test certificate).
    ///
    /// # Errors
    /// As [`Browser::launch`].
    pub async fn launch_with_flags(flags: &[&str]) -> anyhow::Result<Self> {
        Self::spawn(chromium_binary(), flags).await
    }

    async fn spawn(binary: PathBuf, flags: &[&str]) -> anyhow::Result<Self> {
        let profile = tempfile::Builder::new()
            .prefix("sluice-chromium-")
            .tempdir()
            .context("creating a Chromium profile directory")?;
        let mut args: Vec<std::ffi::OsString> = FLAGS.iter().chain(flags).map(Into::into).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()).into());
        args.push("about:blank".into());
        let mut process = ManagedChild::spawn(&binary, args, |_| {})
            .with_context(|| format!("starting {}", binary.display()))?;
        let endpoint = process
            .wait_for_line(LAUNCH_TIMEOUT, |line| {
                let url = line.strip_prefix("DevTools listening on ")?;
                Some(url.trim().to_owned())
            })
            .await;
        let endpoint = match endpoint {
            Ok(url) => url,
            Err(err) => return Err(process.start_error("127.0.0.1:<devtools>", err).into()),
        };
        let cdp = Cdp::connect(&endpoint)
            .await
            .map_err(|err| process.start_error(&endpoint, format!("DevTools: {err:#}")))?;
        Ok(Self {
            cdp: Arc::new(cdp),
            process,
            _profile: profile,
        })
    }

    /// Opens a new tab on `about:blank`.
    ///
    /// # Errors
    /// When the browser does not create or attach the tab.
    pub async fn new_page(&self) -> anyhow::Result<Page> {
        let target = self
            .cdp
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await?;
        let target_id = target["targetId"]
            .as_str()
            .context("Target.createTarget: no targetId")?;
        let attached = self
            .cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        let session = attached["sessionId"]
            .as_str()
            .context("Target.attachToTarget: no sessionId")?
            .to_owned();
        let page = Page {
            cdp: Arc::clone(&self.cdp),
            session,
        };
        page.call("Runtime.enable", json!({})).await?;
        Ok(page)
    }

    /// The browser's process id (also its process group id), while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// The last `count` lines Chromium printed.
    pub fn log_tail(&self, count: usize) -> String {
        self.process.log_tail(count)
    }
}

/// One tab of a [`Browser`].
pub struct Page {
    cdp: Arc<Cdp>,
    session: String,
}

impl Page {
    /// Navigates to `url` and waits until the document has loaded.
    ///
    /// # Errors
    /// When navigation fails (the error text from Chromium is included) or the page does not
    /// load within 30 s.
    pub async fn open(&self, url: &str) -> anyhow::Result<()> {
        let navigated = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(error) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
            bail!("opening {url}: {error}");
        }
        let loaded = format!(
            "document.readyState === 'complete' && location.href === {}",
            json!(url)
        );
        self.wait_for(&loaded, LOAD_TIMEOUT)
            .await
            .with_context(|| format!("opening {url}"))?;
        Ok(())
    }

    /// Evaluates a JavaScript expression in the page (awaiting it if it is a promise) and
    /// returns its value as JSON (`null` for `undefined`).
    ///
    /// # Errors
    /// When the script throws (the exception text is included) or the value cannot be returned.
    pub async fn eval(&self, expression: &str) -> anyhow::Result<Value> {
        let reply = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(exception) = reply.get("exceptionDetails") {
            let text = exception["exception"]["description"]
                .as_str()
                .or_else(|| exception["text"].as_str())
                .unwrap_or("unknown exception");
            bail!("evaluating {expression:?} threw: {text}");
        }
        Ok(reply["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Evaluates `condition` until it returns a truthy value, and returns that value.
    ///
    /// # Errors
    /// When `timeout` passes first (the error shows the last value and the page's console), or
    /// the condition throws.
    pub async fn wait_for(&self, condition: &str, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let value = self.eval(condition).await?;
            if is_truthy(&value) {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{condition:?} still {value} after {timeout:?}\n--- page console ---\n{}",
                    self.console().join("\n")
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A PNG of the page as a `width` × `height` viewport (one device pixel per CSS pixel)
    /// shows it.
    ///
    /// # Errors
    /// When Chromium does not resize the viewport or capture it.
    pub async fn screenshot(&self, width: u32, height: u32) -> anyhow::Result<Vec<u8>> {
        self.set_viewport(width, height).await?;
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await?;
        let data = shot["data"]
            .as_str()
            .context("Page.captureScreenshot: no data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("Page.captureScreenshot: the data is not base64")
    }

    /// Lays the page out for a screen of `width` × `height` CSS pixels (as a desktop window,
    /// not a phone's emulation).
    ///
    /// # Errors
    /// When Chromium does not resize the viewport.
    pub async fn set_viewport(&self, width: u32, height: u32) -> anyhow::Result<()> {
        let metrics =
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        self.call("Emulation.setDeviceMetricsOverride", metrics)
            .await?;
        Ok(())
    }

    /// Takes the page off the network (`true`: each request it starts fails at once, as without
    /// a connection) or puts it back on (`false`), with DevTools' network emulation. What it
    /// does to a response already streaming is Chromium's business; tests that need one ended
    /// end it themselves.
    ///
    /// # Errors
    /// When Chromium refuses the emulation.
    pub async fn set_offline(&self, offline: bool) -> anyhow::Result<()> {
        self.call("Network.enable", json!({})).await?;
        let conditions = json!({
            "offline": offline,
            "latency": 0,
            "downloadThroughput": -1,
            "uploadThroughput": -1,
        });
        self.call("Network.emulateNetworkConditions", conditions)
            .await?;
        Ok(())
    }

    /// The cookies the browser holds for the page's URL, as DevTools describes them
    /// (`name`, `value`, `secure`, `sameSite`, …).
    ///
    /// # Errors
    /// When Chromium does not answer.
    pub async fn cookies(&self) -> anyhow::Result<Vec<Value>> {
        let answer = self.call("Network.getCookies", json!({})).await?;
        Ok(answer["cookies"].as_array().cloned().unwrap_or_default())
    }

    /// Console messages and uncaught exceptions of the page so far (most recent last).
    pub fn console(&self) -> Vec<String> {
        self.cdp.console(&self.session)
    }

    async fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.cdp.call(Some(&self.session), method, params).await
    }
}

fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0 && !n.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

type Replies = Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>;

/// A DevTools protocol connection: commands go out through a writer task, replies and events
/// come back through a reader task.
struct Cdp {
    next_id: AtomicU64,
    outgoing: mpsc::UnboundedSender<Message>,
    replies: Arc<Replies>,
    console: Arc<Mutex<HashMap<String, Vec<String>>>>,
    tasks: [JoinHandle<()>; 2],
}

impl Cdp {
    async fn connect(endpoint: &str) -> anyhow::Result<Self> {
        let (socket, _) = tokio_tungstenite::connect_async(endpoint)
            .await
            .with_context(|| format!("connecting to {endpoint}"))?;
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut queue) = mpsc::unbounded_channel::<Message>();
        let writer = tokio::spawn(async move {
            while let Some(message) = queue.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
        });
        let replies: Arc<Replies> = Arc::default();
        let console: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let reader = {
            let replies = Arc::clone(&replies);
            let console = Arc::clone(&console);
            tokio::spawn(async move {
                while let Some(Ok(message)) = stream.next().await {
                    if let Message::Text(text) = message
                        && let Ok(message) = serde_json::from_str::<Value>(text.as_str())
                    {
                        dispatch(message, &replies, &console);
                    }
                }
                // The browser is gone: fail every command still waiting.
                lock(&replies).clear();
            })
        };
        Ok(Self {
            next_id: AtomicU64::new(1),
            outgoing,
            replies,
            console,
            tasks: [writer, reader],
        })
    }

    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        lock(&self.replies).insert(id, reply_tx);
        self.outgoing
            .send(Message::text(command.to_string()))
            .map_err(|_| anyhow!("{method}: the DevTools connection is closed"))?;
        let reply = tokio::time::timeout(COMMAND_TIMEOUT, reply_rx)
            .await
            .map_err(|_| anyhow!("{method}: no reply within {COMMAND_TIMEOUT:?}"))?
            .map_err(|_| anyhow!("{method}: the DevTools connection closed"))?;
        reply.map_err(|err| anyhow!("{method}: {err}"))
    }

    fn console(&self, session: &str) -> Vec<String> {
        lock(&self.console)
            .get(session)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Routes one message from the browser: a reply to its waiting command, or a console event.
fn dispatch(message: Value, replies: &Replies, console: &Mutex<HashMap<String, Vec<String>>>) {
    if let Some(id) = message["id"].as_u64() {
        if let Some(reply) = lock(replies).remove(&id) {
            let result = match message.get("error") {
                Some(error) => Err(error.to_string()),
                None => Ok(message["result"].clone()),
            };
            let _ = reply.send(result);
        }
        return;
    }
    let line = match message["method"].as_str() {
        Some("Runtime.consoleAPICalled") => {
            let params = &message["params"];
            let args: Vec<String> = params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|arg| match &arg["value"] {
                    Value::String(text) => text.clone(),
                    Value::Null => arg["description"].as_str().unwrap_or("").to_owned(),
                    other => other.to_string(),
                })
                .collect();
            format!(
                "console.{}: {}",
                params["type"].as_str().unwrap_or("log"),
                args.join(" ")
            )
        }
        Some("Runtime.exceptionThrown") => {
            let details = &message["params"]["exceptionDetails"];
            let text = details["exception"]["description"]
                .as_str()
                .or_else(|| details["text"].as_str())
                .unwrap_or("");
            format!("uncaught: {text}")
        }
        _ => return,
    };
    let session = message["sessionId"].as_str().unwrap_or("").to_owned();
    let mut console = lock(console);
    let lines = console.entry(session).or_default();
    lines.push(line);
    if lines.len() > KEPT_CONSOLE_LINES {
        lines.remove(0);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
