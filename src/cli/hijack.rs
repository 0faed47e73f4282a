//! `gantry hijack`: a shell or a command in a build step's container (or any
//! container by handle), over the web node's intercept websocket (protocol in
//! `web::api_hijack`).
//!
//! When stdin is a terminal the local terminal is put in raw mode (restored
//! on every way out), the remote process gets a terminal of the same size,
//! and window changes (`SIGWINCH`) are sent on. Otherwise the process gets no
//! terminal, stdin is streamed until end-of-file, and Ctrl-C is sent on as
//! an interrupt. The CLI exits with the remote command's exit status.
//!
//! With no command, `bash` runs when the container has it and `sh`
//! otherwise: the command sent is `sh -c 'command -v bash ... && exec bash ||
//! exec sh'`, so the choice is made inside the container in one session.

use std::io::Write;

use anyhow::{anyhow, bail, Context as _};
use futures::{SinkExt, StreamExt};
use gantry_wire::spec::WindowSize;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::cli::client::ApiClient;

/// The shell started when no command is given: bash if present, else sh.
const DEFAULT_SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi";

/// What to enter and what to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HijackArgs {
    /// Build whose step container to enter.
    pub build: Option<i64>,
    /// Step of that build.
    pub step: Option<String>,
    /// Container handle to enter instead.
    pub container: Option<String>,
    /// Command and arguments; empty for an interactive shell.
    pub command: Vec<String>,
}

/// The intercept URL (`ws://.../hijack`) for `args` on the server `client` talks to.
fn hijack_url(client: &ApiClient, args: &HijackArgs) -> anyhow::Result<String> {
    let path = match (&args.build, &args.container) {
        (Some(_), Some(_)) => bail!("give either -b/--build or --container, not both"),
        (None, None) => {
            bail!("say which container to enter: -b BUILD [-s STEP] or --container HANDLE")
        }
        (None, Some(_)) if args.step.is_some() => {
            bail!("-s/--step goes with -b/--build, not with --container")
        }
        (Some(b), None) => {
            let step = args.step.as_deref().unwrap_or("task");
            format!(
                "/api/v1/builds/{b}/hijack?step={}",
                gantry_wire::url::segment(step)
            )
        }
        (None, Some(h)) => format!("/api/v1/containers/{}/hijack", gantry_wire::url::segment(h)),
    };
    let url = client.url(&path);
    if let Some(rest) = url.strip_prefix("http://") {
        Ok(format!("ws://{rest}"))
    } else if let Some(rest) = url.strip_prefix("https://") {
        Ok(format!("wss://{rest}"))
    } else {
        bail!("the server URL {url} must start with http:// or https://")
    }
}

/// The first frame: the process to run.
fn request(command: &[String], tty: Option<WindowSize>) -> serde_json::Value {
    let (path, args) = match command.split_first() {
        Some((path, args)) => (path.clone(), args.to_vec()),
        None => (
            "sh".to_string(),
            vec!["-c".to_string(), DEFAULT_SHELL.to_string()],
        ),
    };
    let mut req = serde_json::json!({ "path": path, "args": args });
    if let Some(size) = tty {
        req["tty"] = serde_json::json!({ "columns": size.columns, "rows": size.rows });
        if let Ok(term) = std::env::var("TERM") {
            if !term.is_empty() {
                req["env"] = serde_json::json!([format!("TERM={term}")]);
            }
        }
    }
    req
}

/// The window size of the terminal on `fd`, if it is one.
fn window_size(fd: i32) -> Option<WindowSize> {
    // SAFETY: TIOCGWINSZ writes a winsize to the pointer, which is valid.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0 && ws.ws_row > 0).then_some(WindowSize {
        columns: ws.ws_col,
        rows: ws.ws_row,
    })
}

/// The local terminal in raw mode; restored when dropped.
struct RawMode {
    /// The settings before.
    saved: libc::termios,
}

impl RawMode {
    /// Puts the terminal on stdin in raw mode.
    fn enable() -> anyhow::Result<RawMode> {
        // SAFETY: tcgetattr/tcsetattr read and write a termios through valid pointers.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return Err(std::io::Error::last_os_error())
                    .context("reading the terminal's settings");
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
                return Err(std::io::Error::last_os_error())
                    .context("putting the terminal in raw mode");
            }
            Ok(RawMode { saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enable`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

/// Reads stdin on a thread of its own (a blocked read must not keep the
/// CLI from exiting) and sends it in chunks; the channel closes at EOF.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            }
        }
    });
    rx
}

/// Turns a refused handshake into the server's one-line error.
fn handshake_error(client: &ApiClient, e: tokio_tungstenite::tungstenite::Error) -> anyhow::Error {
    use tokio_tungstenite::tungstenite::Error;
    match e {
        Error::Http(resp) => {
            let status = resp.status();
            let body = resp.body().as_deref().unwrap_or_default();
            let msg = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
            anyhow!("server answered {}: {msg}", status.as_u16())
        }
        Error::Io(io) => anyhow!(
            "cannot reach the Gantry server at {} (is it running? set --url or GANTRY_URL): {io}",
            client.url("")
        ),
        other => anyhow!("opening the intercept session failed: {other}"),
    }
}

/// What the server's final text frame said.
fn final_frame(text: &str) -> anyhow::Result<i32> {
    let v: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("unreadable message from the server: {text:?}"))?;
    if let Some(n) = v.get("exit_status").and_then(|n| n.as_i64()) {
        return Ok(n as i32);
    }
    match v.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(anyhow!("{e}")),
        None => Err(anyhow!("unexpected message from the server: {text}")),
    }
}

/// `gantry hijack`: runs the session; returns the remote exit status.
pub async fn hijack(client: &ApiClient, args: HijackArgs) -> anyhow::Result<i32> {
    let url = hijack_url(client, &args)?;
    // SAFETY: isatty has no preconditions.
    let interactive = unsafe { libc::isatty(0) } == 1;
    let tty = if interactive {
        Some(window_size(0).unwrap_or(WindowSize {
            columns: 80,
            rows: 24,
        }))
    } else {
        None
    };
    let mut upgrade =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
            url.as_str(),
        )
        .map_err(|e| handshake_error(client, e))?;
    if let Some(token) = client.token() {
        let value = format!("Bearer {token}").parse().map_err(|_| {
            anyhow::anyhow!("the token holds characters that cannot be sent in a header")
        })?;
        upgrade.headers_mut().insert("authorization", value);
    }
    let (ws, _) = tokio_tungstenite::connect_async(upgrade)
        .await
        .map_err(|e| handshake_error(client, e))?;
    let (mut tx, mut rx) = ws.split();
    tx.send(Message::Text(request(&args.command, tty).to_string()))
        .await
        .context("sending the command to the server")?;

    use tokio::signal::unix::{signal, SignalKind};
    let mut winch = signal(SignalKind::window_change()).context("watching window changes")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("watching Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("watching SIGHUP")?;
    let _raw = if interactive {
        Some(RawMode::enable()?)
    } else {
        None
    };
    let mut stdin = stdin_reader();
    let mut stdin_open = true;
    let mut interrupts = 0u32;
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        tokio::select! {
            message = rx.next() => match message {
                Some(Ok(Message::Binary(data))) => {
                    let Some((tag, bytes)) = data.split_first() else { continue };
                    let written = if *tag == 2 {
                        stderr.write_all(bytes).and_then(|()| stderr.flush())
                    } else {
                        stdout.write_all(bytes).and_then(|()| stdout.flush())
                    };
                    match written {
                        // The reader went away (`| head`): the session ends
                        // quietly, the terminal restored on the way out.
                        Err(e) if crate::cli::output::is_closed_pipe(&e) => return Ok(0),
                        written => written.context("writing the command's output")?,
                    }
                }
                Some(Ok(Message::Text(text))) => return final_frame(&text),
                Some(Ok(Message::Close(_))) | None => {
                    bail!("the server closed the session before the command's exit status arrived")
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("the intercept session broke: {e}"),
            },
            chunk = stdin.recv(), if stdin_open => {
                let sent = match chunk {
                    Some(data) => tx.send(Message::Binary(data)).await,
                    None => {
                        stdin_open = false;
                        tx.send(Message::Text(r#"{"eof":true}"#.into())).await
                    }
                };
                sent.context("sending input to the server")?;
            }
            _ = winch.recv() => {
                if let (true, Some(size)) = (interactive, window_size(0)) {
                    let resize = serde_json::json!({
                        "resize": { "columns": size.columns, "rows": size.rows }
                    });
                    tx.send(Message::Text(resize.to_string()))
                        .await
                        .context("sending the window size to the server")?;
                }
            }
            _ = interrupt.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    let _ = tx.send(Message::Close(None)).await;
                    bail!("interrupted twice; the remote command is being stopped");
                }
                tx.send(Message::Text(r#"{"signal":"interrupt"}"#.into()))
                    .await
                    .context("sending Ctrl-C to the server")?;
            }
            _ = terminate.recv() => {
                let _ = tx.send(Message::Close(None)).await;
                bail!("stopped by SIGTERM; the remote command is being stopped");
            }
            _ = hangup.recv() => {
                let _ = tx.send(Message::Close(None)).await;
                bail!("stopped by SIGHUP; the remote command is being stopped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(build: Option<i64>, step: Option<&str>, container: Option<&str>) -> HijackArgs {
        HijackArgs {
            build,
            step: step.map(Into::into),
            container: container.map(Into::into),
            command: vec![],
        }
    }

    #[test]
    fn urls_name_the_build_step_or_container_and_bad_combinations_are_refused() {
        let client = ApiClient::new("http://127.0.0.1:8080/");
        assert_eq!(
            hijack_url(&client, &args(Some(3), None, None)).unwrap(),
            "ws://127.0.0.1:8080/api/v1/builds/3/hijack?step=task"
        );
        assert_eq!(
            hijack_url(&client, &args(Some(3), Some("my step"), None)).unwrap(),
            "ws://127.0.0.1:8080/api/v1/builds/3/hijack?step=my%20step"
        );
        assert_eq!(
            hijack_url(&client, &args(None, None, Some("abc-1"))).unwrap(),
            "ws://127.0.0.1:8080/api/v1/containers/abc-1/hijack"
        );
        assert!(hijack_url(&client, &args(None, None, None)).is_err());
        assert!(hijack_url(&client, &args(Some(1), None, Some("c"))).is_err());
        assert!(hijack_url(&client, &args(None, Some("task"), Some("c"))).is_err());
        let tls = ApiClient::new("https://ci.example");
        assert!(hijack_url(&tls, &args(Some(1), None, None))
            .unwrap()
            .starts_with("wss://ci.example/"));
    }

    #[test]
    fn the_default_command_prefers_bash_and_falls_back_to_sh() {
        let req = request(&[], None);
        assert_eq!(req["path"], "sh");
        assert_eq!(req["args"][1], DEFAULT_SHELL);
        assert!(req.get("tty").is_none());
        let req = request(
            &["echo".into(), "hi".into()],
            Some(WindowSize {
                columns: 80,
                rows: 24,
            }),
        );
        assert_eq!(req["path"], "echo");
        assert_eq!(req["args"], serde_json::json!(["hi"]));
        assert_eq!(req["tty"], serde_json::json!({"columns": 80, "rows": 24}));
    }

    #[test]
    fn final_frames_give_the_exit_status_or_the_error() {
        assert_eq!(final_frame(r#"{"exit_status":7}"#).unwrap(), 7);
        assert_eq!(
            final_frame(r#"{"error":"container gone"}"#)
                .unwrap_err()
                .to_string(),
            "container gone"
        );
        assert!(final_frame("nonsense").is_err());
    }
}
