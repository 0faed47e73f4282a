//! A child process as a backend started it, before the agent records it
//! ([`crate::processes::ProcessRecord::start`]) or its keeper follows it
//! (`kept.rs`): where its output comes from, where its input goes, how to
//! signal it.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::output_log::ProcessEnd;
use super::pty::Pty;

/// How to deliver a signal to a running process.
#[derive(Debug, Clone)]
pub enum SignalTarget {
    /// The process leads its own process group: signal the whole group.
    ProcessGroup(i32),
    /// The process's host pid will be written to this file (by runc); until
    /// then signal `fallback` (runc itself, which forwards signals).
    PidFile {
        /// File holding the pid.
        path: PathBuf,
        /// Pid to signal until the file exists.
        fallback: i32,
    },
}

/// Where a started child's output comes from.
pub enum ChildOutput {
    /// Separate pipes for stdout and stderr.
    Pipes {
        /// Its standard output.
        stdout: tokio::process::ChildStdout,
        /// Its standard error.
        stderr: tokio::process::ChildStderr,
    },
    /// Its terminal: one stream, recorded as stdout.
    Pty(Arc<Pty>),
    /// Its keeper writes the log itself; the agent follows the file.
    Kept,
}

/// Where a process's input is written.
pub enum StdinSink {
    /// The write end of its stdin pipe; dropping it is end-of-file.
    Pipe(tokio::process::ChildStdin),
    /// Its terminal's master (shared with the output reader).
    Pty(Arc<Pty>),
}

impl StdinSink {
    /// Writes all of `data`.
    pub(crate) async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            StdinSink::Pipe(pipe) => {
                pipe.write_all(data).await?;
                pipe.flush().await
            }
            StdinSink::Pty(pty) => pty.write_all(data).await,
        }
    }
}

/// A started child, handed from a backend to [`ProcessRecord::start`].
pub struct Spawned {
    /// Its output.
    pub output: ChildOutput,
    /// Its input, until the registry closes it or a writer takes it.
    pub stdin: Option<StdinSink>,
    /// Becomes `Some` when it has exited.
    pub exit: watch::Receiver<Option<ProcessEnd>>,
    /// How to signal it.
    pub signal: SignalTarget,
    /// A last word from the backend about how the process ended (why it was
    /// killed), sent before `exit` is; stored as its last stderr output.
    pub epilogue: Option<tokio::sync::oneshot::Receiver<String>>,
}
