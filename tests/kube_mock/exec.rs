//! `pods/exec` over a websocket (channel protocol v5): the fake kubelet
//! runs the command with bubblewrap and relays its streams.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

use actix_web::http::header::{HeaderValue, SEC_WEBSOCKET_PROTOCOL};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{add_group, exec_target, record_exec, record_resize, status, Data, ExecRecord};

/// What the client sent that the process must get.
enum Input {
    Stdin(Bytes),
    CloseStdin,
    Resize(u16, u16),
}

/// What the process produced.
enum Output {
    Chunk(u8, Bytes),
}

/// The bubblewrap command running `command` in the pod's container.
fn sandbox(dir: &Path, container: &Value, command: &[String]) -> std::process::Command {
    let mut c = std::process::Command::new("bwrap");
    c.args(["--dev-bind", "/", "/", "--bind"])
        .arg(dir.join("tmp"))
        .arg("/tmp");
    let mut mounts: Vec<(String, String, bool)> = container["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap_or("").to_string(),
                m["name"].as_str().unwrap_or("").to_string(),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    mounts.sort();
    for (at, name, ro) in mounts {
        c.arg(if ro { "--ro-bind" } else { "--bind" })
            .arg(dir.join("volumes").join(name))
            .arg(at);
    }
    if let Some(wd) = container["workingDir"].as_str() {
        c.args(["--chdir", wd]);
    }
    for e in container["env"].as_array().cloned().unwrap_or_default() {
        c.args([
            "--setenv",
            e["name"].as_str().unwrap_or(""),
            e["value"].as_str().unwrap_or(""),
        ]);
    }
    c.arg("--").args(command);
    c
}

/// `GET/POST .../pods/{name}/exec`.
pub(super) async fn exec(
    data: Data,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    body: web::Payload,
) -> actix_web::Result<HttpResponse> {
    let (ns, name) = path.into_inner();
    let query = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .unwrap_or_default();
    let flag = |k: &str| query.iter().any(|(key, v)| key == k && v == "true");
    let command: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let container_name = query
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.clone());
    let state = data.0.clone();
    let (dir, container) = match exec_target(&state, &ns, &name, container_name.as_deref()) {
        Ok(t) => t,
        Err(answer) => return Ok(*answer),
    };
    if command.is_empty() {
        return Ok(status(
            400,
            "BadRequest",
            "you must specify at least 1 command",
        ));
    }
    let (stdin, stdout, stderr, tty) = (flag("stdin"), flag("stdout"), flag("stderr"), flag("tty"));
    let index = record_exec(
        &state,
        ExecRecord {
            namespace: ns.clone(),
            pod: name.clone(),
            container: container["name"].as_str().unwrap_or("").to_string(),
            command: command.clone(),
            stdin,
            stdout,
            stderr,
            tty,
            resizes: Vec::new(),
        },
    );
    let (mut res, session, mut messages) = actix_ws::handle(&req, body)?;
    res.headers_mut().insert(
        SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static("v5.channel.k8s.io"),
    );
    let (in_tx, in_rx) = mpsc::unbounded_channel::<Input>();
    let (out_tx, mut out_rx) = mpsc::channel::<Output>(16);
    let (status_tx, status_rx) = tokio::sync::oneshot::channel::<Value>();
    let cmd = sandbox(&dir, &container, &command);
    let started = if tty {
        start_tty(cmd, in_rx, out_tx, status_tx)
    } else {
        start_pipes(cmd, stdin, in_rx, out_tx, status_tx)
    };
    match started {
        Ok(group) => add_group(&state, &ns, &name, group),
        Err(e) => {
            let mut s = session;
            let failure = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": format!("failed to start {:?}: {e}", command)});
            actix_web::rt::spawn(async move {
                let mut frame = vec![3u8];
                frame.extend(serde_json::to_vec(&failure).unwrap());
                let _ = s.binary(frame).await;
                let _ = s.close(None).await;
            });
            return Ok(res);
        }
    }
    // Client -> process.
    let mut pong = session.clone();
    let resizes = state.clone();
    actix_web::rt::spawn(async move {
        while let Some(Ok(msg)) = messages.next().await {
            match msg {
                actix_ws::Message::Binary(b) if !b.is_empty() => match b[0] {
                    0 if b.len() > 1 => {
                        let _ = in_tx.send(Input::Stdin(b.slice(1..)));
                    }
                    255 if b.get(1) == Some(&0) => {
                        let _ = in_tx.send(Input::CloseStdin);
                    }
                    4 => {
                        if let Ok(v) = serde_json::from_slice::<Value>(&b[1..]) {
                            let w = v["Width"].as_u64().unwrap_or(80) as u16;
                            let h = v["Height"].as_u64().unwrap_or(24) as u16;
                            let _ = in_tx.send(Input::Resize(w, h));
                            record_resize(&resizes, index, (w, h));
                        }
                    }
                    _ => {}
                },
                actix_ws::Message::Ping(p) => {
                    let _ = pong.pong(&p).await;
                }
                actix_ws::Message::Close(_) => break,
                _ => {}
            }
        }
        // The client went away: its stdin ends; the process goes on.
        let _ = in_tx.send(Input::CloseStdin);
    });
    // Process -> client, then the status.
    let mut s = session;
    actix_web::rt::spawn(async move {
        let mut open = true;
        while let Some(Output::Chunk(ch, data)) = out_rx.recv().await {
            if open {
                let mut frame = Vec::with_capacity(data.len() + 1);
                frame.push(ch);
                frame.extend_from_slice(&data);
                open = s.binary(frame).await.is_ok();
            }
        }
        if let Ok(st) = status_rx.await {
            if open {
                let mut frame = vec![3u8];
                frame.extend(serde_json::to_vec(&st).unwrap());
                let _ = s.binary(frame).await;
            }
        }
        let _ = s.close(None).await;
    });
    Ok(res)
}

/// The `Status` of an exit.
fn exit_status(st: std::process::ExitStatus) -> Value {
    let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
    if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    }
}

/// Runs `cmd` on pipes; answers its process group.
fn start_pipes(
    cmd: std::process::Command,
    stdin: bool,
    mut input: mpsc::UnboundedReceiver<Input>,
    out: mpsc::Sender<Output>,
    status_tx: tokio::sync::oneshot::Sender<Value>,
) -> std::io::Result<i32> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let group = child.id().unwrap_or(0) as i32;
    let mut child_in = child.stdin.take();
    actix_web::rt::spawn(async move {
        while let Some(i) = input.recv().await {
            match i {
                Input::Stdin(b) => {
                    if let Some(w) = child_in.as_mut() {
                        if w.write_all(&b).await.is_err() {
                            child_in = None;
                        }
                    }
                }
                Input::CloseStdin => child_in = None,
                Input::Resize(..) => {}
            }
        }
    });
    let relay = |mut r: Box<dyn tokio::io::AsyncRead + Unpin>,
                 ch: u8,
                 out: mpsc::Sender<Output>| async move {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = out
                        .send(Output::Chunk(ch, Bytes::copy_from_slice(&buf[..n])))
                        .await;
                }
            }
        }
    };
    let o = relay(Box::new(child.stdout.take().unwrap()), 1, out.clone());
    let e = relay(Box::new(child.stderr.take().unwrap()), 2, out);
    actix_web::rt::spawn(async move {
        let (_, _, st) = tokio::join!(o, e, child.wait());
        if let Ok(st) = st {
            let _ = status_tx.send(exit_status(st));
        }
    });
    Ok(group)
}

/// Runs `cmd` on a new pseudo-terminal; answers its process group.
fn start_tty(
    mut cmd: std::process::Command,
    mut input: mpsc::UnboundedReceiver<Input>,
    out: mpsc::Sender<Output>,
    status_tx: tokio::sync::oneshot::Sender<Value>,
) -> std::io::Result<i32> {
    use std::os::unix::process::CommandExt;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors it opened.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(cmd);
    let group = child.id() as i32;
    let master_fd = master.as_raw_fd();
    let mut reader = std::fs::File::from(master.try_clone()?);
    let mut writer = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out
                        .blocking_send(Output::Chunk(1, Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let st = child.wait();
        if let Ok(st) = st {
            let _ = status_tx.send(exit_status(st));
        }
    });
    std::thread::spawn(move || {
        while let Some(i) = input.blocking_recv() {
            match i {
                Input::Stdin(b) => {
                    let _ = writer.write_all(&b);
                }
                Input::CloseStdin => {}
                Input::Resize(w, h) => {
                    let ws = libc::winsize {
                        ws_row: h,
                        ws_col: w,
                        ws_xpixel: 0,
                        ws_ypixel: 0,
                    };
                    // SAFETY: the master descriptor is open (held by `writer`).
                    unsafe { libc::ioctl(master_fd, libc::TIOCSWINSZ, &ws) };
                }
            }
        }
    });
    Ok(group)
}
