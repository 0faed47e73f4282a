//! The output log of a process: its stdout and stderr as frames appended to
//! `containers/<handle>/processes/<id>.log` in the order they were read, one
//! writer, and readers that replay the log from the start and then follow
//! it (a `watch` channel announces each new frame and the end, so no one
//! polls, and memory stays bounded by one chunk per reader).
//!
//! Frame format: one byte for the stream (1 = stdout, 2 = stderr), the data
//! length as a big-endian `u32`, then the data (at most [`MAX_CHUNK`] bytes).

use std::path::PathBuf;

use bytes::Bytes;
use gantry_wire::runtime::OutputStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use super::api::OutputLine;

/// The largest chunk of output stored in one frame.
pub const MAX_CHUNK: usize = 64 * 1024;

/// Bytes of a frame header: stream tag and length.
const HEADER: usize = 5;

/// What readers learn from the writer.
#[derive(Debug, Clone, Default)]
pub(super) struct Progress {
    /// Bytes of complete frames in the log.
    pub(super) len: u64,
    /// Set once the process has ended and every frame is written.
    pub(super) end: Option<ProcessEnd>,
}

/// The single writer of a log.
pub(super) struct LogWriter {
    /// The open log.
    file: tokio::fs::File,
    /// Bytes written so far.
    len: u64,
    /// Set after a write failed: output is then dropped (the pipe is still
    /// drained so that the process does not block).
    failed: bool,
}

impl LogWriter {
    /// The writer of a new, empty log.
    pub(super) fn new(file: tokio::fs::File) -> Self {
        LogWriter {
            file,
            len: 0,
            failed: false,
        }
    }

    /// The writer of a log already `len` bytes long, opened for appending
    /// (a kept process's, after its keeper has ended).
    pub(super) fn at(file: tokio::fs::File, len: u64) -> Self {
        LogWriter {
            file,
            len,
            failed: false,
        }
    }

    /// Appends one frame; returns the new length once it is in the file.
    pub(super) async fn append(
        &mut self,
        stream: OutputStream,
        data: &[u8],
        id: &str,
    ) -> Option<u64> {
        if self.failed {
            return None;
        }
        let frame = encode_frame(stream, data);
        let written = async {
            self.file.write_all(&frame).await?;
            self.file.flush().await
        }
        .await;
        match written {
            Ok(()) => {
                self.len += frame.len() as u64;
                Some(self.len)
            }
            Err(e) => {
                tracing::warn!(process = %id, error = %e, "writing the output log failed; dropping further output");
                self.failed = true;
                None
            }
        }
    }
}

/// One frame: stream tag, big-endian length, data.
pub(super) fn encode_frame(stream: OutputStream, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER + data.len());
    frame.push(match stream {
        OutputStream::Stdout => 1,
        OutputStream::Stderr => 2,
    });
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes());
    frame.extend_from_slice(data);
    frame
}

/// What a reader gets next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// A chunk of output.
    Output(OutputStream, Bytes),
    /// The process ended (the last event).
    End(ProcessEnd),
}

/// Replays a process's log from the start, then follows it until the end.
pub struct LogReader {
    /// The log file.
    path: PathBuf,
    /// Opened on first read.
    file: Option<BufReader<tokio::fs::File>>,
    /// Offset of the next frame.
    pos: u64,
    /// Where the writer is, and whether the process has ended.
    progress: watch::Receiver<Progress>,
    /// Set when the log ends in a partial frame (the agent died mid-write).
    truncated: bool,
    /// Set after the end was returned.
    done: bool,
}

impl LogReader {
    /// A reader of the log at `path` from its start, following `progress`.
    pub(super) fn new(path: PathBuf, progress: watch::Receiver<Progress>) -> Self {
        LogReader {
            path,
            file: None,
            pos: 0,
            progress,
            truncated: false,
            done: false,
        }
    }

    /// The next chunk of output or the end; `None` after the end.
    pub async fn next(&mut self) -> Option<std::io::Result<LogEvent>> {
        loop {
            if self.done {
                return None;
            }
            let snap = self.progress.borrow_and_update().clone();
            if self.pos < snap.len && !self.truncated {
                match self.read_frame().await {
                    Ok(Some(event)) => return Some(Ok(event)),
                    Ok(None) => {
                        self.truncated = true;
                        continue;
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            if let Some(end) = snap.end {
                self.done = true;
                return Some(Ok(LogEvent::End(end)));
            }
            if self.progress.changed().await.is_err() {
                self.done = true;
                return Some(Ok(LogEvent::End(ProcessEnd::Lost(
                    "the worker agent stopped following this process".into(),
                ))));
            }
        }
    }

    /// Reads the frame at `pos`; `None` if the file ends inside it.
    async fn read_frame(&mut self) -> std::io::Result<Option<LogEvent>> {
        if self.file.is_none() {
            let f = tokio::fs::File::open(&self.path).await?;
            self.file = Some(BufReader::with_capacity(MAX_CHUNK, f));
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(None);
        };
        let mut header = [0u8; HEADER];
        match file.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let stream = match header[0] {
            1 => OutputStream::Stdout,
            2 => OutputStream::Stderr,
            t => {
                return Err(std::io::Error::other(format!(
                    "corrupt output log {}: frame tag {t} at offset {}",
                    self.path.display(),
                    self.pos
                )))
            }
        };
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > MAX_CHUNK {
            return Err(std::io::Error::other(format!(
                "corrupt output log {}: frame of {len} bytes at offset {}",
                self.path.display(),
                self.pos
            )));
        }
        let mut data = vec![0u8; len];
        match file.read_exact(&mut data).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        self.pos += (HEADER + len) as u64;
        Ok(Some(LogEvent::Output(stream, Bytes::from(data))))
    }
}
/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited with this status (128 + signal number when a signal killed it).
    Exited(i32),
    /// Its exit status is unknown; the message says why.
    Lost(String),
    /// It could not be started (its program is missing or not executable,
    /// or the backend failed to start it); the message says why.
    NotStarted(String),
}

impl ProcessEnd {
    /// The NDJSON line (and `.exit` file contents) announcing the end.
    pub fn to_line(&self) -> OutputLine {
        match self {
            ProcessEnd::Exited(n) => OutputLine::Exit { exit_status: *n },
            ProcessEnd::Lost(e) => OutputLine::Error { error: e.clone() },
            ProcessEnd::NotStarted(why) => OutputLine::NotStarted {
                not_started: why.clone(),
            },
        }
    }

    /// Converts a child's exit status: the code, or 128 + the signal.
    pub fn from_status(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => ProcessEnd::Exited(code),
            (None, Some(sig)) => ProcessEnd::Exited(128 + sig),
            (None, None) => ProcessEnd::Lost(format!("unknown exit status {status:?}")),
        }
    }
}
