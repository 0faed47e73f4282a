//! Processes: their output log on disk, their exit status, their signals.
//!
//! A process's stdout and stderr are appended, in the order they were read,
//! as frames to `containers/<handle>/processes/<id>.log`; its exit status goes
//! to `<id>.exit` when it ends. Readers replay the log from the start and then
//! follow it: a `watch` channel announces each new frame and the exit, so no
//! one polls, any number of readers can follow at once, and memory stays
//! bounded by one chunk per reader. Because everything is on disk, a restarted
//! agent still serves the output and exit status of finished processes
//! (and follows those its keepers kept running, see below).
//!
//! The log's frame format and its readers are in `output_log.rs`.
//!
//! Keepers: when the agent has a keeper program (`WorkerConfig::keeper`),
//! a process without a TTY runs under a keeper of its own
//! ([`ProcessCommand`], `keeper.rs`), which writes the log and the raw end
//! (`<id>.end`) itself, so the process and its output outlive the agent;
//! the agent follows the log and the keeper's end (`kept.rs`), judges the
//! end as its backend does and writes `<id>.exit`. A restarted agent adopts
//! a process whose keeper still runs ([`ProcessRecord::recover`],
//! [`ProcessRecord::resume`]). TTY processes run directly and end with the
//! agent, as every process does without a keeper.
//!
//! Input: every child starts with a stdin pipe (or, with a TTY, the pty
//! master) kept in its record. The container registry closes the pipe at once
//! unless the caller said it will send input; [`ProcessRecord::feed_stdin`]
//! then writes a stream into it (one writer at a time) and closes it at the
//! stream's end. A TTY process's output is one stream (stdout), read from the
//! pty master until no process holds the terminal; its window size changes
//! with [`ProcessRecord::set_tty`]. The pipe and the master are let go when
//! the process ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gantry_wire::runtime::{OutputStream, ProcessSignal};
use gantry_wire::spec::WindowSize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{watch, Mutex};

use super::error::AgentError;
use super::output_log::{LogReader, LogWriter, Progress, MAX_CHUNK};
use super::pty::Pty;

/// After a TTY process has exited, how long its terminal may stay silent
/// before output stops being read (a background child may hold the terminal
/// open for ever; runc's own copy has finished by the time runc exits).
const PTY_DRAIN: std::time::Duration = std::time::Duration::from_millis(200);

pub use super::child::{ChildOutput, SignalTarget, Spawned, StdinSink};
pub use super::output_log::ProcessEnd;

/// The command a backend builds for a process: run directly, or under a
/// keeper (see `keeper.rs`) when the agent has one and the process has no
/// TTY. It derefs to the [`tokio::process::Command`], to which the backend
/// adds arguments, environment, working directory and `pre_exec` as for a
/// direct start: the keeper passes all of them on to the process.
pub struct ProcessCommand {
    /// The command (the keeper's when kept).
    cmd: tokio::process::Command,
    /// When kept: the process's directory and id.
    kept: Option<(PathBuf, String)>,
}

impl ProcessCommand {
    /// `program`, run directly.
    pub fn direct(program: impl AsRef<std::ffi::OsStr>) -> Self {
        ProcessCommand {
            cmd: tokio::process::Command::new(program),
            kept: None,
        }
    }

    /// `program` run under `keeper` as process `id`, whose files are in `dir`.
    pub fn kept(keeper: &Path, dir: &Path, id: &str, program: impl AsRef<std::ffi::OsStr>) -> Self {
        ProcessCommand {
            cmd: super::kept::keeper_command(keeper, dir, id, program.as_ref()),
            kept: Some((dir.to_path_buf(), id.to_string())),
        }
    }

    /// The command itself (a TTY process's, which is never kept).
    pub fn into_inner(self) -> tokio::process::Command {
        self.cmd
    }
}

impl std::ops::Deref for ProcessCommand {
    type Target = tokio::process::Command;
    fn deref(&self) -> &Self::Target {
        &self.cmd
    }
}

impl std::ops::DerefMut for ProcessCommand {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cmd
    }
}

/// Announces `spawned`'s end only after `judge` has looked at it (and
/// maybe changed it): a backend telling a process that could not be
/// started from one that exited.
pub fn judge_end<F, Fut>(mut spawned: Spawned, judge: F) -> Spawned
where
    F: FnOnce(ProcessEnd) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ProcessEnd> + Send,
{
    let mut inner = spawned.exit.clone();
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let end = match inner.wait_for(Option::is_some).await {
            Ok(end) => end.clone(),
            Err(_) => None,
        };
        let end = end.unwrap_or_else(|| ProcessEnd::Lost("the process's waiter went away".into()));
        let _ = tx.send(Some(judge(end).await));
    });
    spawned.exit = rx;
    spawned
}

/// Starts a task that waits for `child` and announces its end.
fn watch_exit(mut child: tokio::process::Child) -> watch::Receiver<Option<ProcessEnd>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let end = match child.wait().await {
            Ok(status) => ProcessEnd::from_status(status),
            Err(e) => ProcessEnd::Lost(format!("waiting for the process failed: {e}")),
        };
        let _ = tx.send(Some(end));
    });
    rx
}

/// Spawns `cmd` in its own process group with stdin, stdout and stderr
/// piped, plus a task that waits for it and announces its end; under its
/// keeper when `cmd` is kept (the keeper starts it so, and writes its
/// output and end). Returns the child and its pid.
pub async fn spawn_child(
    cmd: &mut ProcessCommand,
    what: &str,
) -> Result<(Spawned, u32), AgentError> {
    if let Some((dir, id)) = cmd.kept.clone() {
        return super::kept::spawn_kept(&mut cmd.cmd, &dir, &id, what).await;
    }
    let cmd = &mut cmd.cmd;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let mut child = cmd
        .spawn()
        .map_err(|e| AgentError::Backend(format!("cannot start {what}: {e}")))?;
    let pid = child.id().unwrap_or(0);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(AgentError::Backend(format!("{what}: stdio pipes missing")));
    };
    let spawned = Spawned {
        output: ChildOutput::Pipes { stdout, stderr },
        stdin: Some(StdinSink::Pipe(stdin)),
        exit: watch_exit(child),
        signal: SignalTarget::ProcessGroup(pid as i32),
        epilogue: None,
    };
    Ok((spawned, pid))
}

/// Spawns `cmd` on a new pseudo-terminal of `size` (its stdin, stdout,
/// stderr and controlling terminal, in a session of its own), plus a task
/// that waits for it. Returns the child and its pid (also its session's and
/// process group's id). `cmd` is consumed so that the agent's copies of the
/// terminal's slave side are closed once the child has it.
pub fn spawn_tty_child(
    mut cmd: tokio::process::Command,
    what: &str,
    size: WindowSize,
) -> Result<(Spawned, u32), AgentError> {
    let (pty, slave) =
        Pty::open(size).map_err(|e| AgentError::io(format!("opening a terminal for {what}"), e))?;
    Pty::attach_to(&mut cmd, &slave)
        .map_err(|e| AgentError::io(format!("opening a terminal for {what}"), e))?;
    cmd.kill_on_drop(false);
    let child = cmd
        .spawn()
        .map_err(|e| AgentError::Backend(format!("cannot start {what}: {e}")))?;
    drop(cmd);
    drop(slave);
    let pid = child.id().unwrap_or(0);
    let pty = Arc::new(pty);
    let spawned = Spawned {
        output: ChildOutput::Pty(pty.clone()),
        stdin: Some(StdinSink::Pty(pty)),
        exit: watch_exit(child),
        signal: SignalTarget::ProcessGroup(pid as i32),
        epilogue: None,
    };
    Ok((spawned, pid))
}

/// What start-up finds of a process on disk ([`ProcessRecord::recover`]).
pub enum Recovered {
    /// It has ended, or its end is lost: served from disk.
    Ended(ProcessRecord),
    /// Its keeper kept it running (or recorded its end): handed to its
    /// backend's `adopt`, then to [`ProcessRecord::resume`].
    Kept(super::kept::Found),
}

/// One process of a container: its log, its end, how to signal it.
pub struct ProcessRecord {
    /// The id from its spec.
    pub id: String,
    /// `<id>.log`.
    log_path: PathBuf,
    /// Announces new frames and the end to every reader.
    progress: watch::Sender<Progress>,
    /// How to signal it; `None` for a process found on disk at start-up.
    signal: Option<SignalTarget>,
    /// Its input while it runs, until closed or taken by a writer.
    stdin: std::sync::Mutex<Option<StdinSink>>,
    /// Its terminal while it runs, when it has one.
    pty: std::sync::Mutex<Option<Arc<Pty>>>,
    /// Whether it was started with a terminal.
    tty: bool,
}

/// Locks a std mutex, ignoring poisoning (plain hand-over of a value).
fn lock<X>(m: &std::sync::Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Path of a process's log in `dir`.
fn log_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.log"))
}

/// Path of a process's exit file in `dir`.
fn exit_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.exit"))
}

impl ProcessRecord {
    /// Creates the log of a new process in `dir`; fails if `id` was used.
    pub async fn create_log(dir: &Path, id: &str) -> Result<tokio::fs::File, AgentError> {
        let path = log_path(dir, id);
        tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => AgentError::Conflict(format!(
                    "process id {id} was already used in this container"
                )),
                _ => AgentError::io(format!("creating {}", path.display()), e),
            })
    }

    /// Starts recording a spawned process into `log` (from [`Self::create_log`]);
    /// a task copies its output until it exits, then stores the exit status.
    pub fn start(dir: &Path, id: &str, log: tokio::fs::File, mut child: Spawned) -> Arc<Self> {
        let (progress, _) = watch::channel(Progress::default());
        let pty = match &child.output {
            ChildOutput::Pty(pty) => Some(pty.clone()),
            ChildOutput::Pipes { .. } | ChildOutput::Kept => None,
        };
        let record = Arc::new(ProcessRecord {
            id: id.to_string(),
            log_path: log_path(dir, id),
            progress,
            signal: Some(child.signal.clone()),
            stdin: std::sync::Mutex::new(child.stdin.take()),
            tty: pty.is_some(),
            pty: std::sync::Mutex::new(pty),
        });
        let exit_file = exit_path(dir, id);
        tokio::spawn(record.clone().supervise(Some(log), child, exit_file));
        record
    }

    /// Takes back a kept process found at start-up ([`Recovered::Kept`],
    /// after its backend wrapped its end in its judges): follows its log
    /// from the start and records its end as [`Self::start`] does.
    pub fn resume(dir: &Path, id: &str, child: Spawned) -> Arc<Self> {
        let (progress, _) = watch::channel(Progress::default());
        let record = Arc::new(ProcessRecord {
            id: id.to_string(),
            log_path: log_path(dir, id),
            progress,
            signal: Some(child.signal.clone()),
            stdin: std::sync::Mutex::new(None),
            tty: false,
            pty: std::sync::Mutex::new(None),
        });
        let exit_file = exit_path(dir, id);
        tokio::spawn(record.clone().supervise(None, child, exit_file));
        record
    }

    /// Copies output into the log until the process ends, then records the end.
    /// `log` is the new log's handle (`None` for a resumed kept process).
    async fn supervise(
        self: Arc<Self>,
        log: Option<tokio::fs::File>,
        child: Spawned,
        exit_file: PathBuf,
    ) {
        let writer = match (child.output, log) {
            (ChildOutput::Pipes { stdout, stderr }, Some(log)) => {
                let writer = Mutex::new(LogWriter::new(log));
                tokio::join!(
                    self.pump(stdout, OutputStream::Stdout, &writer),
                    self.pump(stderr, OutputStream::Stderr, &writer),
                );
                Some(writer)
            }
            (ChildOutput::Pty(pty), Some(log)) => {
                let writer = Mutex::new(LogWriter::new(log));
                self.pump_pty(&pty, child.exit.clone(), &writer).await;
                Some(writer)
            }
            // The keeper writes the log: follow it, and append after it.
            _ => {
                let len =
                    super::kept::follow(&self.log_path, &self.progress, child.exit.clone()).await;
                let appending = tokio::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.log_path)
                    .await;
                match appending {
                    Ok(file) => Some(Mutex::new(LogWriter::at(file, len))),
                    Err(e) => {
                        tracing::warn!(process = %self.id, error = %e, "cannot open the output log");
                        None
                    }
                }
            }
        };
        let mut exit = child.exit;
        let end = match exit.wait_for(Option::is_some).await {
            Ok(end) => end
                .clone()
                .unwrap_or_else(|| ProcessEnd::Lost("no exit status".into())),
            Err(_) => ProcessEnd::Lost("the process's waiter went away".into()),
        };
        let note = child.epilogue.and_then(|mut rx| rx.try_recv().ok());
        if let (Some(note), Some(writer)) = (note, &writer) {
            let mut w = writer.lock().await;
            if let Some(len) = w
                .append(OutputStream::Stderr, note.as_bytes(), &self.id)
                .await
            {
                self.progress.send_modify(|p| p.len = len);
            }
        }
        if let Err(e) = write_exit(&exit_file, &end).await {
            tracing::warn!(process = %self.id, error = %e, "cannot store an exit status");
        }
        drop(lock(&self.stdin).take());
        drop(lock(&self.pty).take());
        self.progress.send_modify(|p| p.end = Some(end));
    }

    /// Appends what the process writes to its terminal to the log as stdout,
    /// until no process holds the terminal, or, once the process has exited,
    /// the terminal stays silent for [`PTY_DRAIN`].
    async fn pump_pty(
        &self,
        pty: &Pty,
        mut exit: watch::Receiver<Option<ProcessEnd>>,
        writer: &Mutex<LogWriter>,
    ) {
        let mut buf = vec![0u8; MAX_CHUNK];
        let mut exited = false;
        loop {
            let read = if exited {
                match tokio::time::timeout(PTY_DRAIN, pty.read(&mut buf)).await {
                    Ok(read) => read,
                    Err(_) => return,
                }
            } else {
                tokio::select! {
                    read = pty.read(&mut buf) => read,
                    _ = exit.wait_for(Option::is_some) => {
                        exited = true;
                        continue;
                    }
                }
            };
            let n = match read {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(process = %self.id, error = %e, "reading the terminal failed");
                    return;
                }
            };
            let mut w = writer.lock().await;
            if let Some(len) = w.append(OutputStream::Stdout, &buf[..n], &self.id).await {
                self.progress.send_modify(|p| p.len = len);
            }
        }
    }

    /// Closes a stdin pipe nobody will write to (the process reads
    /// end-of-file); a terminal stays open.
    pub fn close_stdin(&self) {
        let mut stdin = lock(&self.stdin);
        if matches!(*stdin, Some(StdinSink::Pipe(_))) {
            *stdin = None;
        }
    }

    /// Whether it was started with a terminal.
    pub fn has_tty(&self) -> bool {
        self.tty
    }

    /// Changes its terminal's window size; a process that has ended is left alone.
    pub fn set_tty(&self, size: WindowSize) -> Result<(), AgentError> {
        if self.end().is_some() {
            return Ok(());
        }
        if !self.tty {
            return Err(AgentError::BadRequest(format!(
                "process {} has no TTY; start it with \"tty\" to resize its window",
                self.id
            )));
        }
        if size.columns == 0 || size.rows == 0 {
            return Err(AgentError::BadRequest(format!(
                "window size {}x{}: columns and rows must be at least 1",
                size.columns, size.rows
            )));
        }
        let pty = lock(&self.pty).clone();
        match pty {
            Some(pty) => pty.resize(size).map_err(|e| {
                AgentError::io(format!("resizing the terminal of process {}", self.id), e)
            }),
            None => Ok(()),
        }
    }

    /// Writes `input` to the process's stdin until the stream ends (then a
    /// pipe is closed: the process reads end-of-file), the process ends, or
    /// writing fails because it stopped reading. One writer at a time for a
    /// pipe; any number for a terminal.
    pub async fn feed_stdin(
        &self,
        input: impl Stream<Item = std::io::Result<Bytes>>,
    ) -> Result<(), AgentError> {
        let sink = {
            let mut stdin = lock(&self.stdin);
            match stdin.as_ref() {
                Some(StdinSink::Pty(pty)) => Some(StdinSink::Pty(pty.clone())),
                Some(StdinSink::Pipe(_)) => stdin.take(),
                None => None,
            }
        };
        let Some(mut sink) = sink else {
            if self.end().is_some() {
                return Ok(());
            }
            return Err(AgentError::Conflict(format!(
                "the stdin of process {} is closed or already being written: \
                 start the process with ?stdin=true and send its input once",
                self.id
            )));
        };
        let mut input = std::pin::pin!(input);
        let ended = self.wait();
        let mut ended = std::pin::pin!(ended);
        loop {
            let chunk = tokio::select! {
                chunk = input.next() => chunk,
                _ = &mut ended => return Ok(()),
            };
            let data = match chunk {
                None => return Ok(()),
                Some(Ok(data)) => data,
                Some(Err(e)) => {
                    return Err(AgentError::BadRequest(format!(
                        "reading the input of process {}: {e}",
                        self.id
                    )))
                }
            };
            let written = tokio::select! {
                written = sink.write_all(&data) => written,
                _ = &mut ended => return Ok(()),
            };
            if let Err(e) = written {
                // It exited or closed its stdin: what is left goes nowhere.
                tracing::debug!(process = %self.id, error = %e, "stdin closed by the process");
                return Ok(());
            }
        }
    }

    /// Appends everything read from `pipe` to the log as `stream` frames.
    async fn pump(
        &self,
        mut pipe: impl AsyncRead + Unpin,
        stream: OutputStream,
        writer: &Mutex<LogWriter>,
    ) {
        let mut buf = vec![0u8; MAX_CHUNK];
        loop {
            let n = match pipe.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(process = %self.id, error = %e, "reading process output failed");
                    return;
                }
            };
            let mut w = writer.lock().await;
            if let Some(len) = w.append(stream, &buf[..n], &self.id).await {
                self.progress.send_modify(|p| p.len = len);
            }
        }
    }

    /// What start-up finds of process `id` in `dir`: one without an exit
    /// file whose keeper still runs (or recorded its end) is
    /// [`Recovered::Kept`]; any other is loaded ([`Self::load`]).
    pub async fn recover(dir: &Path, id: &str) -> Recovered {
        if tokio::fs::metadata(exit_path(dir, id)).await.is_err() {
            if let Some(found) = super::kept::find(dir, id).await {
                return Recovered::Kept(found);
            }
        }
        Recovered::Ended(Self::load(dir, id).await)
    }

    /// Loads a process found on disk at start-up. One without an exit file
    /// (and without a keeper, see [`Self::recover`]) was running when the
    /// agent stopped: it is recorded as lost.
    pub async fn load(dir: &Path, id: &str) -> Self {
        let log = log_path(dir, id);
        let len = tokio::fs::metadata(&log)
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        let exit_file = exit_path(dir, id);
        let end = match tokio::fs::read(&exit_file).await {
            Ok(bytes) => super::kept::parse_end(&bytes, &exit_file),
            Err(_) => {
                let end = ProcessEnd::Lost(
                    "the process was running when the worker agent stopped; its exit status is lost"
                        .into(),
                );
                if let Err(e) = write_exit(&exit_file, &end).await {
                    tracing::warn!(process = %id, error = %e, "cannot store a lost exit status");
                }
                end
            }
        };
        let (progress, _) = watch::channel(Progress {
            len,
            end: Some(end),
        });
        ProcessRecord {
            id: id.to_string(),
            log_path: log,
            progress,
            signal: None,
            stdin: std::sync::Mutex::new(None),
            pty: std::sync::Mutex::new(None),
            tty: false,
        }
    }

    /// How it ended, or `None` while it runs.
    pub fn end(&self) -> Option<ProcessEnd> {
        self.progress.borrow().end.clone()
    }

    /// Waits until it has ended and its output is all in the log.
    pub async fn wait(&self) -> ProcessEnd {
        let mut rx = self.progress.subscribe();
        let end = match rx.wait_for(|p| p.end.is_some()).await {
            Ok(p) => p.end.clone(),
            Err(_) => None,
        };
        end.unwrap_or_else(|| ProcessEnd::Lost("the process record went away".into()))
    }

    /// A reader that replays the log from the start and follows it.
    pub fn reader(&self) -> LogReader {
        LogReader::new(self.log_path.clone(), self.progress.subscribe())
    }

    /// Delivers a signal; a process that has ended is left alone. A runc
    /// process is signalled through its pid file (read with `tokio::fs`).
    pub async fn signal(&self, signal: ProcessSignal) -> Result<(), AgentError> {
        if self.end().is_some() {
            return Ok(());
        }
        let Some(target) = &self.signal else {
            return Ok(());
        };
        let sig = match signal {
            ProcessSignal::Terminate => libc::SIGTERM,
            ProcessSignal::Kill => libc::SIGKILL,
            ProcessSignal::Interrupt => libc::SIGINT,
        };
        let pid = match target {
            SignalTarget::ProcessGroup(pgid) => -*pgid,
            SignalTarget::PidFile { path, fallback } => tokio::fs::read_to_string(path)
                .await
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .unwrap_or(*fallback),
        };
        if pid == 0 || pid == -1 {
            return Err(AgentError::Backend(format!(
                "process {} has no pid to signal",
                self.id
            )));
        }
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(pid, sig) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(AgentError::io(format!("signalling process {}", self.id), e));
            }
        }
        Ok(())
    }
}

/// Stores how a process ended (write to a temporary file, then rename).
async fn write_exit(path: &Path, end: &ProcessEnd) -> std::io::Result<()> {
    let body = serde_json::to_vec(&end.to_line()).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("exit.tmp");
    tokio::fs::write(&tmp, body).await?;
    tokio::fs::rename(&tmp, path).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_log::{encode_frame, LogEvent};

    /// Starts `sh -c script` as a recorded child.
    async fn sh(script: &str) -> Spawned {
        let mut cmd = ProcessCommand::direct("sh");
        cmd.arg("-c").arg(script);
        spawn_child(&mut cmd, "sh").await.unwrap().0
    }

    async fn collect(mut r: LogReader) -> Vec<LogEvent> {
        let mut out = Vec::new();
        while let Some(ev) = r.next().await {
            out.push(ev.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn output_is_framed_in_order_and_replayed_to_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        let child = sh("printf one; printf two >&2; sleep 0.05; printf three").await;
        let log = ProcessRecord::create_log(dir.path(), "p1").await.unwrap();
        let rec = ProcessRecord::start(dir.path(), "p1", log, child);
        let live = tokio::spawn(collect(rec.reader()));
        assert_eq!(rec.wait().await, ProcessEnd::Exited(0));
        let after = collect(rec.reader()).await;
        let live = live.await.unwrap();
        assert_eq!(live, after);
        let text: Vec<(OutputStream, String)> = after
            .iter()
            .filter_map(|e| match e {
                LogEvent::Output(s, d) => Some((*s, String::from_utf8_lossy(d).into_owned())),
                LogEvent::End(_) => None,
            })
            .collect();
        let stdout: String = text
            .iter()
            .filter(|(s, _)| *s == OutputStream::Stdout)
            .map(|(_, d)| d.as_str())
            .collect();
        assert_eq!(stdout, "onethree");
        assert!(text.contains(&(OutputStream::Stderr, "two".into())));
        assert_eq!(after.last(), Some(&LogEvent::End(ProcessEnd::Exited(0))));

        // A restarted agent serves the same log and exit status.
        let loaded = ProcessRecord::load(dir.path(), "p1").await;
        assert_eq!(collect(loaded.reader()).await, after);
        assert!(ProcessRecord::create_log(dir.path(), "p1").await.is_err());
    }

    #[tokio::test]
    async fn a_process_without_an_exit_file_is_lost_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut frames = encode_frame(OutputStream::Stdout, b"partial");
        frames.extend_from_slice(&encode_frame(OutputStream::Stderr, b"cut off")[..6]);
        std::fs::write(dir.path().join("p.log"), frames).unwrap();
        let rec = ProcessRecord::load(dir.path(), "p").await;
        let events = collect(rec.reader()).await;
        assert_eq!(
            events[0],
            LogEvent::Output(OutputStream::Stdout, Bytes::from("partial"))
        );
        assert!(matches!(events[1], LogEvent::End(ProcessEnd::Lost(_))));
        assert_eq!(events.len(), 2);
        assert!(dir.path().join("p.exit").exists());
    }

    /// The stdout text of a finished record.
    async fn stdout_text(rec: &ProcessRecord) -> String {
        collect(rec.reader())
            .await
            .iter()
            .filter_map(|e| match e {
                LogEvent::Output(OutputStream::Stdout, d) => {
                    Some(String::from_utf8_lossy(d).replace('\r', ""))
                }
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn stdin_is_fed_by_one_writer_and_closed_at_the_end_of_its_stream() {
        let dir = tempfile::tempdir().unwrap();
        let log = ProcessRecord::create_log(dir.path(), "cat").await.unwrap();
        let rec = ProcessRecord::start(dir.path(), "cat", log, sh("cat; echo end").await);
        let input = futures::stream::iter([
            Ok(Bytes::from_static(b"one\n")),
            Ok(Bytes::from_static(b"two\n")),
        ]);
        rec.feed_stdin(input).await.unwrap();
        // The pipe was taken and closed: a second writer is refused.
        let again = rec.feed_stdin(futures::stream::empty()).await;
        assert!(matches!(again, Err(AgentError::Conflict(_))), "{again:?}");
        assert_eq!(rec.wait().await, ProcessEnd::Exited(0));
        assert_eq!(stdout_text(&rec).await, "one\ntwo\nend\n");
        assert!(matches!(
            rec.set_tty(WindowSize {
                columns: 1,
                rows: 1
            }),
            Ok(())
        ));

        // Closed before anyone writes: the process reads end-of-file.
        let log = ProcessRecord::create_log(dir.path(), "eof").await.unwrap();
        let rec = ProcessRecord::start(dir.path(), "eof", log, sh("cat; echo eof").await);
        rec.close_stdin();
        assert_eq!(rec.wait().await, ProcessEnd::Exited(0));
        assert_eq!(stdout_text(&rec).await, "eof\n");
        let ended = rec.feed_stdin(futures::stream::empty()).await;
        assert!(
            ended.is_ok(),
            "feeding an ended process is a no-op: {ended:?}"
        );
    }

    #[tokio::test]
    async fn a_tty_process_is_resized_and_fed_through_its_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg("stty size; read line; stty size; echo \"got $line\"; exit 5");
        let size = WindowSize {
            columns: 80,
            rows: 24,
        };
        let (child, _) = spawn_tty_child(cmd, "sh", size).unwrap();
        let log = ProcessRecord::create_log(dir.path(), "t").await.unwrap();
        let rec = ProcessRecord::start(dir.path(), "t", log, child);
        assert!(rec.has_tty());
        // Wait for the first size, then resize and send the line.
        let mut reader = rec.reader();
        let mut seen = String::new();
        while !seen.contains("24 80") {
            match reader.next().await {
                Some(Ok(LogEvent::Output(OutputStream::Stdout, d))) => {
                    seen.push_str(&String::from_utf8_lossy(&d))
                }
                other => panic!("unexpected {other:?} after {seen:?}"),
            }
        }
        assert!(rec
            .set_tty(WindowSize {
                columns: 0,
                rows: 3
            })
            .is_err());
        rec.set_tty(WindowSize {
            columns: 100,
            rows: 30,
        })
        .unwrap();
        let line = futures::stream::iter([Ok(Bytes::from_static(b"hi\n"))]);
        rec.feed_stdin(line).await.unwrap();
        assert_eq!(rec.wait().await, ProcessEnd::Exited(5));
        let text = stdout_text(&rec).await;
        assert!(text.contains("30 100\ngot hi\n"), "{text:?}");
    }

    #[test]
    fn exit_statuses_of_signalled_processes_are_128_plus_the_signal() {
        use std::os::unix::process::ExitStatusExt;
        let killed = std::process::ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(ProcessEnd::from_status(killed), ProcessEnd::Exited(137));
        let three = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(ProcessEnd::from_status(three), ProcessEnd::Exited(3));
    }
}
