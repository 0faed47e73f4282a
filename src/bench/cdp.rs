//! A headless Chromium driven over the DevTools protocol: JSON-RPC over a
//! websocket to one page target, blocking calls (on a runtime of its own:
//! call them from a thread that is not a runtime's) for the browser tests
//! and `gantry bench ui`. A protocol failure panics: it ends the test, or
//! the benchmark's browser thread, which reports it as an error.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long one protocol call may take: a deadline, not a wait (a call
/// answers as soon as the browser does; on a loaded CI machine a
/// navigation once took over 30 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A running headless Chromium with its pages (tabs) open; calls go to
/// the current one.
pub struct Browser {
    child: Child,
    rt: tokio::runtime::Runtime,
    /// The DevTools HTTP endpoint (`host:port`).
    host: String,
    pages: Vec<Socket>,
    current: usize,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` (a laptop-sized window, a fresh profile under
    /// `dir`) and opens a blank page.
    pub fn launch(chromium: &Path, dir: &Path) -> Browser {
        let profile = tempfile::tempdir_in(dir).expect("profile dir");
        let mut child = Command::new(chromium)
            // Its own temporary files go with the profile, not in the
            // caller's directory.
            .env("TMPDIR", profile.path())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--window-size=1440,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads chromium's stderr to the end (so it never blocks on a full
        // pipe), passing on the DevTools address.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let browser_ws = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("chromium did not print its DevTools address");
            }
        };
        // ws://127.0.0.1:PORT/devtools/browser/ID -> the HTTP endpoint.
        let host = browser_ws
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .expect("host:port")
            .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut browser = Browser {
            child,
            rt,
            host,
            pages: vec![],
            current: 0,
            next_id: 0,
            _profile: profile,
        };
        browser.open_tab();
        browser
    }

    /// Opens a new blank tab and makes it the current one; answers its
    /// index (for [`Browser::use_tab`]).
    pub fn open_tab(&mut self) -> usize {
        let host = &self.host;
        let target: Value = self
            .rt
            .block_on(async {
                reqwest::Client::new()
                    .put(format!("http://{host}/json/new?about:blank"))
                    .send()
                    .await?
                    .json()
                    .await
            })
            .expect("a new page target, as JSON");
        let page_ws = target["webSocketDebuggerUrl"]
            .as_str()
            .expect("the page's websocket")
            .to_string();
        let (page, _) = self
            .rt
            .block_on(tokio_tungstenite::connect_async(page_ws.as_str()))
            .expect("the page's websocket connects");
        self.pages.push(page);
        self.current = self.pages.len() - 1;
        self.current
    }

    /// Makes tab `index` the one calls go to.
    pub fn use_tab(&mut self, index: usize) {
        assert!(index < self.pages.len(), "no tab {index}");
        self.current = index;
    }

    /// Calls a protocol method on the page; answers its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        match self.try_call(method, params) {
            Ok(result) => result,
            Err(err) => panic!("{method} failed: {err}"),
        }
    }

    /// Calls a protocol method on the page; answers its result or its error.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({ "id": id, "method": method, "params": params }).to_string();
        let page = &mut self.pages[self.current];
        let answer = self.rt.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, async {
                page.send(Message::Text(request)).await.expect("send");
                loop {
                    let msg = page
                        .next()
                        .await
                        .expect("the page's websocket stays open")
                        .expect("a message");
                    let Message::Text(text) = msg else { continue };
                    let v: Value = serde_json::from_str(&text).expect("JSON");
                    // Events (no id) and other answers are not ours.
                    if v["id"] == id {
                        return v;
                    }
                }
            })
            .await
        });
        let answer = answer.unwrap_or_else(|_| panic!("{method} took over {CALL_TIMEOUT:?}"));
        match answer.get("error") {
            Some(err) => Err(err.clone()),
            None => Ok(answer["result"].clone()),
        }
    }

    /// Evaluates a JavaScript expression in the page; answers its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates a JavaScript expression in the page, as a string; `None`
    /// while the page is changing (its context gone) or on an exception,
    /// for polling across navigations.
    pub fn try_text(&mut self, expression: &str) -> Option<String> {
        let r = self
            .try_call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true }),
            )
            .ok()?;
        if r.get("exceptionDetails").is_some() {
            return None;
        }
        Some(match &r["result"]["value"] {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        })
    }

    /// The browser's process id (its renderers are its descendants).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Opens `url` in the page and waits until it has loaded.
    pub fn navigate(&mut self, url: &str) {
        let r = self.call("Page.navigate", json!({ "url": url }));
        assert!(r.get("errorText").is_none(), "navigating to {url}: {r}");
        let deadline = std::time::Instant::now() + CALL_TIMEOUT;
        loop {
            // While the page changes, its context may be gone: ask again.
            let here = self
                .try_call(
                    "Runtime.evaluate",
                    json!({ "expression": "location.href + ' ' + document.readyState", "returnByValue": true }),
                )
                .map(|r| r["result"]["value"].clone())
                .unwrap_or_default();
            if here
                .as_str()
                .is_some_and(|s| s.ends_with(" complete") && s.trim_end_matches(" complete") == url)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{url} did not load: {here}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Saves a PNG screenshot of the page's viewport to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).expect("writing the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
