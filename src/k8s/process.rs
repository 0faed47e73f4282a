//! A process in a pod: one exec. Kubernetes' exec API has no environment,
//! working directory or signals, so the command is wrapped: a shell records
//! its pid under the pod's scratch directory, enters the directory and
//! `exec`s `env K=V... PATH ARGS...` (the pid stays the process's); a signal
//! is a second exec running `kill` on that pid, as the pod's containers
//! share one pid namespace.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use gantry_actors::runtime::OutputStream;
use gantry_actors::runtime::Process;
use gantry_actors::runtime::ProcessIo;
use gantry_actors::runtime::ProcessOutput;
use gantry_actors::runtime::ProcessSignal;
use gantry_actors::spec::ProcessSpec;
use gantry_actors::spec::WindowSize;
use gantry_actors::RuntimeError;
use kube::api::{AttachParams, TerminalSize};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::watch;

use super::exec::{exit_code, sh, PodExec};
use super::pod::SCRATCH;

/// Records the pid, enters the directory, then becomes the command.
const WRAPPER: &str = "mkdir -p \"${1%/*}\" && echo $$ > \"$1\" || exit 127; \
if [ -n \"$2\" ]; then mkdir -p \"$2\" && cd \"$2\" || exit 127; fi; shift 2; exec \"$@\"";

/// Signals the process (`$1`: the signal, `$2`: its pid file). Before any
/// other signal, the pids of the processes it started are kept beside the
/// pid file (read from `/proc/PID/task/*/children`, children first); `KILL`
/// goes to all of them and to any it started since, as a runc container's
/// processes all die with it. A shell ended by `TERM` alone would leave its
/// children (now the pod's init's) holding the exec's output open until
/// they end.
const SIGNAL: &str = "tree() { for t in /proc/$1/task/*/children; do \
for c in $(cat \"$t\" 2>/dev/null); do tree \"$c\"; done; done; echo \"$1\"; }; \
pid=$(cat \"$2\") || exit 1; \
if [ \"$1\" = KILL ]; then kill -s KILL $(tree \"$pid\") $(cat \"$2.tree\" 2>/dev/null) 2>/dev/null; exit 0; fi; \
tree \"$pid\" > \"$2.tree\"; kill -s \"$1\" \"$pid\"";

/// A process running through an exec.
pub struct KubeProcess {
    id: String,
    pod: String,
    exec: PodExec,
    /// The exit status once known (or why none will be).
    status: watch::Receiver<Option<Result<i32, String>>>,
    /// Resizes its terminal (with a TTY only).
    resize: Mutex<Option<futures::channel::mpsc::Sender<TerminalSize>>>,
}

/// The command that runs `spec` in a pod.
pub fn command(spec: &ProcessSpec) -> Result<Vec<String>, String> {
    if let Some(user) = &spec.user {
        if user != "root" && user != "0" {
            return Err(format!(
                "user {user:?}: a kubernetes worker runs processes as the image's user; a user per process cannot be set through exec"
            ));
        }
    }
    let mut args = vec![pid_file(&spec.id), spec.dir.clone().unwrap_or_default()];
    args.push("env".into());
    args.extend(spec.env.iter().cloned());
    args.push(spec.path.clone());
    args.extend(spec.args.iter().cloned());
    Ok(sh(WRAPPER, &args))
}

/// Where the process's pid is kept in the pod.
fn pid_file(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{SCRATCH}/p/{clean}")
}

impl KubeProcess {
    /// Starts `spec` in `pod`; its output flows into `io.output`.
    pub async fn start(
        exec: PodExec,
        pod: &str,
        spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<KubeProcess, RuntimeError> {
        let cmd = command(&spec).map_err(|m| exec.error(m))?;
        let tty = spec.tty;
        let params = if tty.is_some() {
            AttachParams::interactive_tty()
        } else {
            AttachParams::default().stdin(io.stdin.is_some())
        };
        let mut attached = exec.open(pod, cmd, params).await?;
        let resize = attached.terminal_size();
        if let (Some(size), Some(mut tx)) = (tty, resize.clone()) {
            let _ = tx.send(terminal(size)).await;
        }
        let status_fut = attached.take_status();
        let stdin_w = attached.stdin();
        let stdout = attached.stdout();
        let stderr = attached.stderr();
        let (status_tx, status) = watch::channel(None);
        let output = io.output;
        if let (Some(mut body), Some(mut w)) = (io.stdin, stdin_w) {
            tokio::spawn(async move {
                while let Some(Ok(chunk)) = body.next().await {
                    if w.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                let _ = w.shutdown().await;
            });
        }
        tokio::spawn(async move {
            let _keep = attached;
            let out = pump(stdout, OutputStream::Stdout, output.clone());
            let err = pump(stderr, OutputStream::Stderr, output);
            tokio::join!(out, err);
            let status = match status_fut {
                Some(s) => s.await,
                None => None,
            };
            let _ = status_tx.send(Some(exit_code(status)));
        });
        Ok(KubeProcess {
            id: spec.id,
            pod: pod.to_string(),
            exec,
            status,
            resize: Mutex::new(resize),
        })
    }
}

/// Copies one output stream into the process's output channel.
async fn pump(
    reader: Option<impl AsyncRead + Unpin>,
    stream: OutputStream,
    output: tokio::sync::mpsc::Sender<ProcessOutput>,
) {
    let Some(reader) = reader else {
        return;
    };
    let mut chunks = tokio_util::io::ReaderStream::with_capacity(reader, 64 * 1024);
    while let Some(Ok(data)) = chunks.next().await {
        let data: Bytes = data;
        // A closed receiver does not stop the process: keep draining.
        let _ = output.send(ProcessOutput { stream, data }).await;
    }
}

fn terminal(size: WindowSize) -> TerminalSize {
    TerminalSize {
        width: size.columns,
        height: size.rows,
    }
}

#[async_trait]
impl Process for KubeProcess {
    fn id(&self) -> &str {
        &self.id
    }

    async fn wait(&self) -> Result<i32, RuntimeError> {
        let mut rx = self.status.clone();
        let done = rx
            .wait_for(|s| s.is_some())
            .await
            .map_err(|_| self.exec.error("the exec ended without a status"))?
            .clone();
        match done {
            Some(Ok(code)) => Ok(code),
            Some(Err(e)) => Err(self
                .exec
                .error(format!("process {} in pod {}: {e}", self.id, self.pod))),
            None => unreachable!("waited for a status"),
        }
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), RuntimeError> {
        if self.status.borrow().is_some() {
            return Ok(());
        }
        let name = match signal {
            ProcessSignal::Terminate => "TERM",
            ProcessSignal::Kill => "KILL",
            ProcessSignal::Interrupt => "INT",
        };
        let cmd = sh(SIGNAL, &[name.to_string(), pid_file(&self.id)]);
        match self.exec.run(&self.pod, cmd, None).await {
            Ok(_) => Ok(()),
            // It ended between the check and the kill.
            Err(_) if self.status.borrow().is_some() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn set_tty(&self, size: WindowSize) -> Result<(), RuntimeError> {
        let tx = self
            .resize
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(mut tx) = tx else {
            return Err(self
                .exec
                .error(format!("process {} has no terminal", self.id)));
        };
        tx.send(terminal(size))
            .await
            .map_err(|_| self.exec.error(format!("process {} has ended", self.id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_wrapped_with_its_pid_file_dir_and_env() {
        let spec = ProcessSpec {
            id: "task/1".into(),
            path: "make".into(),
            args: vec!["test".into(), "a b".into()],
            dir: Some("/tmp/build/x".into()),
            env: vec!["A=1".into()],
            user: None,
            tty: None,
        };
        let cmd = command(&spec).unwrap();
        assert_eq!(&cmd[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            &cmd[3..],
            [
                "sh",
                "/tmp/.gantry/p/task_1",
                "/tmp/build/x",
                "env",
                "A=1",
                "make",
                "test",
                "a b"
            ]
        );
        let mut other = spec.clone();
        other.user = Some("nobody".into());
        assert!(command(&other).unwrap_err().contains("nobody"));
    }
}
