//! The keeper: a small process of its own between the agent and each
//! process it runs (as Garden's `dadoo` or containerd's shim), so that a
//! process outlives the agent that started it.
//!
//! The agent starts `KEEPER keep DIR ID -- PROGRAM ARGS...` with the very
//! command its backend built for the process (environment, working
//! directory, `pre_exec`, the stdin pipe); `KEEPER` is the `gantry` binary,
//! whose `main` hands the `keep` subcommand to [`main`] before anything else
//! is set up. The keeper:
//!
//! 1. leaves the agent's session (`setsid`) and ignores `SIGHUP` and
//!    `SIGPIPE`, so neither a signal to the agent's group nor the agent's
//!    death reaches it;
//! 2. starts `PROGRAM` as its child, in a process group of its own, with
//!    the keeper's environment, working directory, descriptors and stdin
//!    (so the backend's `env_clear` and bwrap's status descriptor still
//!    hold) and new pipes for stdout and stderr;
//! 3. records who it is in `DIR/ID.keeper` ([`KeeperRecord`]: its pid and
//!    start time, which guard against pid reuse, and the child's pid) and
//!    tells the agent the child's pid in one line on its stdout
//!    (`pid N`), or why the child could not be started (`error ...`, then
//!    it exits); it then points its stdin and stdout at `/dev/null`;
//! 4. appends what the child writes to `DIR/ID.log` as frames (the format of
//!    `output_log.rs`, written by its [`LogWriter`]);
//! 5. once the child has exited and both pipes are drained, writes its raw
//!    end to `DIR/ID.end` (the `.exit` file's format) and exits.
//!
//! The agent follows the log and, when the keeper has ended, judges the end
//! as its backend does and writes `ID.exit` (see `kept.rs`).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use gantry_wire::runtime::OutputStream;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::sync::Mutex;

use crate::output_log::{LogWriter, ProcessEnd, MAX_CHUNK};

/// The subcommand of the `gantry` binary that runs a keeper (hidden: only
/// the agent starts it).
pub const SUBCOMMAND: &str = "keep";

/// Who keeps a process: written by its keeper to `<id>.keeper`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperRecord {
    /// The keeper's pid.
    pub keeper_pid: i32,
    /// The keeper's start time (clock ticks after boot, field 22 of
    /// `/proc/PID/stat`): a process with the same pid and another start
    /// time is not the keeper.
    pub keeper_start: u64,
    /// The kept child's pid (also its process group's id).
    pub child_pid: i32,
}

/// `DIR/ID.SUFFIX`.
pub fn process_file(dir: &Path, id: &str, suffix: &str) -> PathBuf {
    dir.join(format!("{id}.{suffix}"))
}

/// The start time of process `pid` (clock ticks after boot), from
/// `/proc/PID/stat`; `None` when it does not exist.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 of a `/proc/PID/stat` line (the command name, field 2, may hold
/// spaces and parentheses: fields are counted after its last `)`).
fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Writes `body` to `path` through a temporary file and a rename.
pub fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

/// What the keeper was told to do.
#[derive(Debug)]
struct Options {
    /// The container's `processes` directory.
    dir: PathBuf,
    /// The process's id.
    id: String,
    /// The program and its arguments.
    command: Vec<OsString>,
}

/// Parses `keep DIR ID -- PROGRAM ARGS...` (the binary's name first).
fn parse(args: Vec<OsString>) -> Result<Options, String> {
    let usage = "usage: gantry keep DIR ID -- PROGRAM [ARGS...] (started by the worker agent)";
    let mut it = args.into_iter().skip(1);
    if it.next().as_deref() != Some(SUBCOMMAND.as_ref()) {
        return Err(usage.into());
    }
    let (Some(dir), Some(id), Some(dashes)) = (it.next(), it.next(), it.next()) else {
        return Err(usage.into());
    };
    let command: Vec<OsString> = it.collect();
    if dashes != "--" || command.is_empty() {
        return Err(usage.into());
    }
    let id = id.into_string().map_err(|_| usage.to_string())?;
    Ok(Options {
        dir: PathBuf::from(dir),
        id,
        command,
    })
}

/// The keeper's `main`: runs it with the process's arguments; returns the
/// exit code. Called by the `gantry` binary before it sets anything up.
pub fn main() -> i32 {
    let opts = match parse(std::env::args_os().collect()) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // SAFETY: setsid and signal have no memory-safety preconditions; this
    // runs before any thread is started.
    unsafe {
        libc::setsid();
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report(&format!("error the process's keeper cannot start: {e}"));
            return 1;
        }
    };
    runtime.block_on(keep(opts, |line| {
        report(line);
        let_go_of_stdio();
    }))
}

/// Writes one line to the agent (stdout); a gone agent is ignored.
fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Starts the child, records it, copies its output into the log and records
/// its end. `tell` carries the one line for the agent (and lets go of the
/// keeper's stdin and stdout). Returns the exit code.
async fn keep(opts: Options, tell: impl FnOnce(&str)) -> i32 {
    let log_path = process_file(&opts.dir, &opts.id, "log");
    let log = match tokio::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .await
    {
        Ok(f) => f,
        Err(e) => {
            tell(&format!("error opening {}: {e}", log_path.display()));
            return 1;
        }
    };
    let mut cmd = tokio::process::Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    // SAFETY: signal is async-signal-safe; the child gets SIGHUP back.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            tell(&format!("error {e}"));
            return 1;
        }
    };
    let child_pid = child.id().unwrap_or(0) as i32;
    let me = std::process::id() as i32;
    let record = KeeperRecord {
        keeper_pid: me,
        keeper_start: start_time(me).unwrap_or(0),
        child_pid,
    };
    let record_path = process_file(&opts.dir, &opts.id, "keeper");
    // Without it a restarted agent cannot find the process (it is then
    // lost, as without a keeper); the running agent follows it all the same.
    let _ = serde_json::to_vec(&record)
        .map_err(std::io::Error::other)
        .and_then(|body| write_atomically(&record_path, &body));
    tell(&format!("pid {child_pid}"));
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill().await;
        let _ = write_end(
            &opts.dir,
            &opts.id,
            &ProcessEnd::Lost("the process's output pipes are missing".into()),
        );
        return 1;
    };
    let writer = Mutex::new(LogWriter::new(log));
    tokio::join!(
        pump(stdout, OutputStream::Stdout, &writer, &opts.id),
        pump(stderr, OutputStream::Stderr, &writer, &opts.id),
    );
    let end = match child.wait().await {
        Ok(status) => ProcessEnd::from_status(status),
        Err(e) => ProcessEnd::Lost(format!("waiting for the process failed: {e}")),
    };
    match write_end(&opts.dir, &opts.id, &end) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Points stdin and stdout at `/dev/null`: the child has the stdin pipe
/// (the keeper holding its read end would keep a writer blocked after the
/// child ended), and the agent has had its one line.
fn let_go_of_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let null = std::os::fd::AsRawFd::as_raw_fd(&null);
        // SAFETY: dup2 onto descriptors 0 and 1, which this process owns.
        unsafe {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
        }
    }
}

/// Writes a process's raw end to `DIR/ID.end`.
pub fn write_end(dir: &Path, id: &str, end: &ProcessEnd) -> std::io::Result<()> {
    let body = serde_json::to_vec(&end.to_line()).map_err(std::io::Error::other)?;
    write_atomically(&process_file(dir, id, "end"), &body)
}

/// Appends everything read from `pipe` to the log as `stream` frames.
async fn pump(
    mut pipe: impl AsyncRead + Unpin,
    stream: OutputStream,
    writer: &Mutex<LogWriter>,
    id: &str,
) {
    let mut buf = vec![0u8; MAX_CHUNK];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        writer.lock().await.append(stream, &buf[..n], id).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_log::encode_frame;

    fn opts(dir: &Path, id: &str, script: &str) -> Options {
        Options {
            dir: dir.to_path_buf(),
            id: id.into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
        }
    }

    #[test]
    fn the_command_line_is_dir_id_dashes_and_the_command() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let o = parse(args(&["gantry", "keep", "/d", "p1", "--", "sh", "-c", "x"])).unwrap();
        assert_eq!((o.dir, o.id.as_str()), (PathBuf::from("/d"), "p1"));
        assert_eq!(o.command, args(&["sh", "-c", "x"]));
        assert!(parse(args(&["gantry", "keep", "/d", "p1", "--"])).is_err());
        assert!(parse(args(&["gantry", "keep", "/d", "p1", "sh"])).is_err());
        assert!(parse(args(&["gantry", "worker"])).is_err());
    }

    #[test]
    fn start_times_are_read_after_the_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 987654 100 200";
        assert_eq!(parse_start_time(stat), Some(987654));
        let mine = start_time(std::process::id() as i32).unwrap();
        assert!(mine > 0);
        assert_eq!(start_time(i32::MAX), None);
    }

    #[tokio::test]
    async fn frames_go_to_the_log_and_the_raw_end_to_the_end_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.log"), b"").unwrap();
        let mut told = String::new();
        let code = keep(
            opts(dir.path(), "p", "printf out; printf err >&2; exit 3"),
            |l| told = l.to_string(),
        )
        .await;
        assert_eq!(code, 0);
        let record: KeeperRecord =
            serde_json::from_slice(&std::fs::read(dir.path().join("p.keeper")).unwrap()).unwrap();
        assert_eq!(told, format!("pid {}", record.child_pid));
        assert_eq!(record.keeper_pid, std::process::id() as i32);
        assert_eq!(record.keeper_start, start_time(record.keeper_pid).unwrap());
        let log = std::fs::read(dir.path().join("p.log")).unwrap();
        let out = encode_frame(OutputStream::Stdout, b"out");
        let err = encode_frame(OutputStream::Stderr, b"err");
        assert_eq!(log.len(), out.len() + err.len());
        assert!(log.starts_with(&out) || log.starts_with(&err), "{log:?}");
        let end = std::fs::read_to_string(dir.path().join("p.end")).unwrap();
        assert_eq!(
            end,
            serde_json::to_string(&ProcessEnd::Exited(3).to_line()).unwrap()
        );
    }

    #[tokio::test]
    async fn a_child_that_cannot_start_is_reported_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.log"), b"").unwrap();
        let mut o = opts(dir.path(), "p", "");
        o.command = vec!["/no/such/program".into()];
        let mut told = String::new();
        assert_eq!(keep(o, |l| told = l.to_string()).await, 1);
        assert!(
            told.starts_with("error ") && told.contains("No such file"),
            "{told}"
        );
        assert!(!dir.path().join("p.end").exists());
    }
}
