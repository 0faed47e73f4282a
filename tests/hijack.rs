//! End to end: `gantry hijack` into a running task's container (real binary,
//! SQLite): under runc, commands and their exit statuses, stdin, errors and
//! an interactive shell driven through a pseudo-terminal with a window
//! resize; and a container kept while a session is open after its task
//! ended, then removed when the session closes.
//!
//! Under runc the task is its container's PID 1, so when it exits the kernel
//! kills every other process of the container's pid namespace, hijacked
//! shells included: a session cannot outlive the task there (the first test
//! pins that down). The keep-while-intercepted rule is shown with the local
//! backend, where a session does outlive its task.

use crate::common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// The command that ends the task of build `id`: a hijacked process starts
/// in `/` (the container's root), the task in `/tmp/build/ID`.
fn finish_command(id: i64) -> String {
    format!("touch tmp/build/{id}/finish")
}

/// A child process killed (and reaped) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Output collected by a reader thread, with a condition to wait on.
type Collected = Arc<(Mutex<Vec<u8>>, Condvar)>;

/// Starts a thread that appends everything read from `r` to the result.
fn collect(mut r: impl Read + Send + 'static) -> Collected {
    let out: Collected = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let sink = out.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // A pty master answers EIO once the child side is closed: the end.
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
            sink.1.notify_all();
        }
    });
    out
}

/// The collected text so far (carriage returns dropped).
fn text(out: &Collected) -> String {
    String::from_utf8_lossy(&out.0.lock().unwrap()).replace('\r', "")
}

/// Waits until the collected text contains `needle`; false after `timeout`.
fn wait_text(out: &Collected, needle: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut buf = out.0.lock().unwrap();
    loop {
        if String::from_utf8_lossy(&buf)
            .replace('\r', "")
            .contains(needle)
        {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        buf = out.1.wait_timeout(buf, deadline - now).unwrap().0;
    }
}

/// A child whose stdin, stdout, stderr and controlling terminal is a
/// pseudo-terminal the test holds the master of.
struct OnPty {
    /// The master, for typing and resizing.
    master: std::fs::File,
    /// What the child wrote to its terminal.
    out: Collected,
    /// The child.
    child: Killed,
}

impl OnPty {
    /// Starts `cmd` on a new terminal of `columns` x `rows`.
    fn spawn(mut cmd: Command, columns: u16, rows: u16) -> OnPty {
        // SAFETY: plain libc calls on descriptors owned here.
        let (master, slave) = unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt failed");
            let master = OwnedFd::from_raw_fd(m);
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
            let s = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(s >= 0, "opening the pty slave failed");
            (master, OwnedFd::from_raw_fd(s))
        };
        let master = std::fs::File::from(master);
        let pty = OnPty {
            out: collect(master.try_clone().unwrap()),
            master,
            child: {
                set_size(&slave, columns, rows);
                cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
                    .stdout(Stdio::from(slave.try_clone().unwrap()))
                    .stderr(Stdio::from(slave.try_clone().unwrap()));
                // SAFETY: setsid and ioctl are async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let child = cmd.spawn().expect("gantry starts on the pty");
                drop(cmd);
                drop(slave);
                Killed(child)
            },
        };
        pty
    }

    /// Types `keys`.
    fn send(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    /// Resizes the terminal (the kernel sends SIGWINCH to the child).
    fn resize(&self, columns: u16, rows: u16) {
        set_size(&self.master, columns, rows);
    }

    /// Whether the terminal is back in canonical mode with echo.
    fn cooked(&self) -> bool {
        // SAFETY: tcgetattr writes a termios through a valid pointer.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut t) },
            0
        );
        t.c_lflag & libc::ICANON != 0 && t.c_lflag & libc::ECHO != 0
    }

    /// Waits for the child to exit; its exit code.
    fn wait(&mut self, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                return status.code().expect("exited, not killed");
            }
            assert!(
                Instant::now() < deadline,
                "the hijack session did not end; terminal:\n{}",
                text(&self.out)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sets a terminal's window size.
fn set_size(fd: &impl AsRawFd, columns: u16, rows: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize through a valid pointer.
    assert_eq!(
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
        0
    );
}

/// `gantry <what> --json` as JSON.
fn list(url: &str, what: &str) -> serde_json::Value {
    let out = client(url, &[what, "--json"]);
    assert!(out.status.success(), "{what} --json failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The containers rows of build `id`.
fn build_containers(url: &str, id: i64) -> Vec<serde_json::Value> {
    list(url, "containers")
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["build_id"] == id)
        .cloned()
        .collect()
}

/// The status of build `id`.
fn build_status(url: &str, id: i64) -> String {
    list(url, "builds")
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .map(|b| b["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// `gantry hijack` with piped stdin.
fn hijack(url: &str, args: &[&str], stdin: &str) -> std::process::Output {
    let mut cmd = gantry();
    cmd.arg("--url").arg(url).arg("hijack").args(args);
    output_with_stdin(cmd, stdin)
}

/// A quickstart with `backend`, running [`WAITING_TASK`] in the background: the
/// server, the `execute` child and its output, and the build id once the
/// task has said it is ready.
fn start_task(
    dir: &std::path::Path,
    db: &TestDb,
    backend: &str,
) -> (Server, Killed, Collected, i64) {
    let server = quickstart(dir, db, &["--backend", backend]);
    write(&dir.join("task.yml"), WAITING_TASK);
    let mut execute = gantry()
        .current_dir(dir)
        .args(["--url", &server.url, "execute", "-c", "task.yml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = collect(execute.stdout.take().unwrap());
    let execute = Killed(execute);
    assert!(
        wait_text(&out, "ready\n", Duration::from_secs(30)),
        "the task did not start; log:\n{}",
        server.log_text()
    );
    let id = list(&server.url, "builds")[0]["id"].as_i64().unwrap();
    assert_eq!(build_status(&server.url, id), "started");
    (server, execute, out, id)
}

/// Waits for the background `execute` to exit; whether it succeeded.
fn execute_succeeded(execute: &mut Killed) -> bool {
    wait_for("execute to exit", Duration::from_secs(30), || {
        execute.0.try_wait().unwrap()
    })
    .success()
}

/// Starts `gantry hijack -b ID -- sh` on a terminal of 80x24; waits for the prompt.
fn interactive_shell(url: &str, id: i64) -> OnPty {
    let mut cmd = gantry();
    cmd.args(["--url", url, "hijack", "-b", &id.to_string(), "--", "sh"]);
    let shell = OnPty::spawn(cmd, 80, 24);
    assert!(
        wait_text(&shell.out, "# ", Duration::from_secs(20)),
        "no prompt; terminal: {:?}",
        text(&shell.out)
    );
    shell
}

#[test]
fn hijack_runs_commands_and_an_interactive_shell_with_resizes_in_a_running_runc_task() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let (server, mut execute, execute_out, id) = start_task(dir.path(), &db, "runc");
    let url = server.url.clone();
    let b = id.to_string();

    // Commands: output, exit statuses, stdin, stderr, errors.
    let out = hijack(&url, &["-b", &b, "--", "echo", "hi"], "");
    assert_eq!(
        (
            String::from_utf8_lossy(&out.stdout).as_ref(),
            out.status.code()
        ),
        ("hi\n", Some(0)),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hijack(
        &url,
        &["-b", &b, "-s", "task", "--", "sh", "-c", "exit 7"],
        "",
    );
    assert_eq!(out.status.code(), Some(7));
    let out = hijack(
        &url,
        &["-b", &b, "--", "sh", "-c", "tr a-z A-Z; echo err >&2"],
        "piped in\n",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PIPED IN\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(0));
    // It is the task's container: the task's processes are visible.
    let out = hijack(
        &url,
        &["-b", &b, "--", "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"],
        "",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("sh -c"),
        "PID 1: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    // No command: bash if the image has it, else sh.
    let out = hijack(&url, &["-b", &b], "echo $0\n");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bash\n");
    let out = hijack(&url, &["-b", "999", "--", "true"], "");
    let err = one_error_line(&out);
    assert!(err.contains("build 999 not found"), "{err}");
    let out = hijack(&url, &["-b", &b, "-s", "nope", "--", "true"], "");
    let err = one_error_line(&out);
    assert!(err.contains("no container for step \"nope\""), "{err}");
    let out = hijack(&url, &["--", "true"], "");
    assert!(one_error_line(&out).contains("-b BUILD"));

    // An interactive shell on a terminal of the test's.
    let mut shell = interactive_shell(&url, id);
    assert!(!shell.cooked(), "the CLI puts its terminal in raw mode");
    shell.send("stty size\r");
    assert!(
        wait_text(&shell.out, "24 80\n", Duration::from_secs(20)),
        "terminal: {:?}",
        text(&shell.out)
    );
    // The window change travels as SIGWINCH -> CLI -> web -> agent -> runc.
    shell.resize(120, 40);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        shell.send("stty size\r");
        if wait_text(&shell.out, "40 120\n", Duration::from_secs(1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new window size never reached the shell; terminal: {:?}",
            text(&shell.out)
        );
    }
    shell.send("exit 3\r");
    assert_eq!(shell.wait(Duration::from_secs(20)), 3);
    assert!(shell.cooked(), "the CLI restores its terminal");

    // A session open when the task ends: under runc the task is PID 1, so
    // the kernel kills the shell with it (SIGKILL: 137); then the container goes.
    let mut shell = interactive_shell(&url, id);
    let out = hijack(&url, &["-b", &b, "--", "sh", "-c", &finish_command(id)], "");
    assert_eq!(out.status.code(), Some(0));
    assert!(wait_text(
        &execute_out,
        "finished\n",
        Duration::from_secs(20)
    ));
    assert_eq!(shell.wait(Duration::from_secs(20)), 137);
    assert!(execute_succeeded(&mut execute));
    assert_eq!(build_status(&url, id), "succeeded");
    wait_for(
        "the container to be destroyed",
        Duration::from_secs(20),
        || build_containers(&url, id).is_empty().then_some(()),
    );
    let out = hijack(&url, &["-b", &b, "--", "true"], "");
    assert!(one_error_line(&out).contains("no container"));
    eprintln!("runc hijack test took {:?}", started.elapsed());
}

#[test]
fn an_intercepted_container_outlives_its_task_until_the_session_closes() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let (server, mut execute, execute_out, id) = start_task(dir.path(), &db, "local");
    let url = server.url.clone();
    let b = id.to_string();

    let mut shell = interactive_shell(&url, id);
    shell.send(&format!("{}\r", finish_command(id)));
    assert!(
        wait_text(&execute_out, "finished\n", Duration::from_secs(20)),
        "the task did not end; terminal: {:?}",
        text(&shell.out)
    );
    // The build finishes at once; its container stays while the session is open.
    assert!(execute_succeeded(&mut execute));
    assert_eq!(build_status(&url, id), "succeeded");
    let rows = build_containers(&url, id);
    assert_eq!(
        rows.len(),
        1,
        "the intercepted container is kept: {rows:?}; log:\n{}",
        server.log_text()
    );
    assert_eq!(rows[0]["state"], "created");
    // It is really there: more sessions can enter it, by build or by handle.
    let handle = rows[0]["handle"].as_str().unwrap().to_string();
    let out = hijack(
        &url,
        &["--container", &handle, "--", "echo", "by handle"],
        "",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "by handle\n");
    shell.send("echo still here\r");
    assert!(wait_text(
        &shell.out,
        "still here\n",
        Duration::from_secs(20)
    ));
    assert_eq!(build_containers(&url, id).len(), 1);

    // Two sessions: the container stays until the last one has closed,
    // also when its client vanishes without a word (its process is stopped).
    let mut second = interactive_shell(&url, id);
    shell.send("exit 4\r");
    assert_eq!(shell.wait(Duration::from_secs(20)), 4);
    assert_eq!(
        build_containers(&url, id).len(),
        1,
        "one session is still open"
    );
    second.child.0.kill().unwrap();
    second.child.0.wait().unwrap();
    wait_for(
        "the container to be destroyed after the last session",
        Duration::from_secs(20),
        || build_containers(&url, id).is_empty().then_some(()),
    );
    let out = hijack(&url, &["-b", &b, "--", "true"], "");
    assert!(one_error_line(&out).contains("no container"));
    eprintln!("local hijack test took {:?}", started.elapsed());
}

/// Opens the server-sent events at `url` on a thread of its own, reading
/// until the stream ends: `Some(true)` once it ended cleanly (the server
/// finished it), `Some(false)` if it was cut; the text read is collected.
fn follow_events(url: String) -> (Collected, std::thread::JoinHandle<bool>) {
    let out: Collected = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let sink = out.clone();
    let reader = std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap();
        let mut resp = client.get(&url).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        let mut buf = [0u8; 65536];
        loop {
            match resp.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => {
                    sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
                    sink.1.notify_all();
                }
                Err(_) => return false,
            }
        }
    });
    (out, reader)
}

#[test]
fn stopping_a_web_node_ends_its_open_feeds_and_intercept_sessions_and_it_exits_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mut web = start_web(dir.path(), &db, "");
    let url = web.url.clone();
    let _worker = start_worker(dir.path(), &url, "w", worker_backend());
    wait_for("the worker", Duration::from_secs(60), || {
        (metric(&url, "gantry_workers{state=\"running\"}") == 1.0).then_some(())
    });
    let pipeline = dir.path().join("p.yml");
    write(
        &pipeline,
        "jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n      \
         run: {path: sh, args: [-c, 'true']}\n",
    );
    common::pipelines::ok(&client(
        &url,
        &["set-pipeline", "-p", "p", "-c", pipeline.to_str().unwrap()],
    ));

    // A running task, and a process intercepted in its container.
    write(&dir.path().join("task.yml"), WAITING_TASK);
    let mut execute = gantry()
        .current_dir(dir.path())
        .args(["--url", &url, "execute", "-c", "task.yml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let execute_out = collect(execute.stdout.take().unwrap());
    let _execute = Killed(execute);
    assert!(
        wait_text(&execute_out, "ready\n", Duration::from_secs(60)),
        "the task did not start; log:\n{}",
        web.log_text()
    );
    let id = list(&url, "builds")[0]["id"].as_i64().unwrap();
    let mut hijack = gantry()
        .args(["--url", &url, "hijack", "-b", &id.to_string(), "--"])
        .args(["sh", "-c", "echo intercepted; sleep 120"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hijack_out = collect(hijack.stdout.take().unwrap());
    let hijack_err = collect(hijack.stderr.take().unwrap());
    let mut hijack = Killed(hijack);
    assert!(
        wait_text(&hijack_out, "intercepted\n", Duration::from_secs(30)),
        "the intercepted process did not start: {}",
        text(&hijack_err)
    );

    // The dashboard's feed and a pipeline page's (a publisher of its own).
    let (dashboard, dashboard_reader) = follow_events(format!("{url}/api/v1/dashboard/events"));
    let (page, page_reader) = follow_events(format!("{url}/api/v1/teams/main/pipelines/p/feed"));
    for (what, feed) in [("dashboard", &dashboard), ("page", &page)] {
        assert!(
            wait_text(feed, "data: ", Duration::from_secs(20)),
            "the {what} feed's first frame"
        );
    }

    // SIGTERM: actix-web's graceful stop would wait 30 s on open
    // connections; the node's own tasks end first, so it exits well before.
    let asked = Instant::now();
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(web.child.id() as i32, libc::SIGTERM);
    }
    let status = wait_child(&mut web.child, Duration::from_secs(25));
    let took = asked.elapsed();
    let log = web.log_text();
    assert!(status.success(), "{status:?}; log:\n{log}");
    assert!(
        took < Duration::from_secs(20),
        "took {took:?} to stop; log:\n{log}"
    );
    assert!(dashboard_reader.join().unwrap(), "the dashboard feed ended");
    assert!(page_reader.join().unwrap(), "the page feed ended");
    let report = log
        .lines()
        .find(|l| l.contains("web node's tasks: "))
        .unwrap_or_else(|| panic!("no report of the web node's tasks; log:\n{log}"));
    // The page's publisher and the intercept session, at least.
    let drained: usize = report
        .split("web node's tasks: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{report}"));
    assert!(drained >= 2 && report.contains(", 0 left"), "{report}");
    // The intercepted client was told why, and its client exits.
    let code = wait_for("gantry hijack to exit", Duration::from_secs(20), || {
        hijack.0.try_wait().unwrap()
    });
    assert!(!code.success());
    assert!(
        text(&hijack_err).contains("the web node is stopping"),
        "stderr: {}",
        text(&hijack_err)
    );
}
