//! A process in a pod: one exec. Kubernetes' exec API has no environment,
//! working directory or signals, and an exec's output is gone once its
//! stream closes, so the command is wrapped: a shell enters the directory
//! and starts `env K=V... PATH ARGS...` in the background, its stdout,
//! stderr and (once it has exited) exit status kept in files beside its pid
//! under the pod's scratch directory, and follows those files to the exec's
//! own streams, exiting with the process's status. A web node that took
//! the build over reattaches with a new exec that follows the same files
//! from their start ([`KubeProcess::attach`]); the process never noticed
//! the first exec was gone. A signal is another exec running `kill` on the
//! pid, as the pod's containers share one pid namespace. A process with a
//! terminal (an intercepted shell) is not kept: its shell `exec`s it.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{OutputStream, Process, ProcessIo, ProcessOutput, ProcessSignal};
use gantry_wire::spec::{ProcessSpec, WindowSize};
use kube::api::{AttachParams, TerminalSize};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::watch;

use super::exec::{exit_code, sh, PodExec};
use super::pod::SCRATCH;

/// With a terminal: records the pid, enters the directory, then becomes
/// the command.
const WRAPPER_TTY: &str = "mkdir -p \"${1%/*}\" && echo $$ > \"$1\" || exit 127; \
if [ -n \"$2\" ]; then mkdir -p \"$2\" && cd \"$2\" || exit 127; fi; shift 2; exec \"$@\"";

/// Follows a kept process's output files (`$1.out`, `$1.err`) from the
/// start to the exec's stdout and stderr until its status file
/// (`$1.status`) is written, then exits with that status.
const FOLLOW: &str = "o=0; e=0; while :; do [ -f \"$1.status\" ] && d=1 || d=0; \
n=$(wc -c < \"$1.out\"); if [ \"$n\" -gt $o ]; then tail -c +$((o+1)) \"$1.out\" | head -c $((n-o)); o=$n; fi; \
n=$(wc -c < \"$1.err\"); if [ \"$n\" -gt $e ]; then tail -c +$((e+1)) \"$1.err\" | head -c $((n-e)) >&2; e=$n; fi; \
if [ $d = 1 ]; then exit \"$(cat \"$1.status\")\"; fi; sleep 0.1; done";

/// Without a terminal: enters the directory, starts the command in the
/// background with the exec's stdin, its output into files, records its
/// pid (`$1`) and, once it exits, its status; then follows the files
/// ([`FOLLOW`]). The runner ignores a hangup, so the process and its
/// status outlive the exec's stream.
const WRAPPER: &str = "mkdir -p \"${1%/*}\" || exit 127; \
if [ -n \"$2\" ]; then mkdir -p \"$2\" && cd \"$2\" || exit 127; fi; p=$1; shift 2; \
: > \"$p.out\"; : > \"$p.err\"; rm -f \"$p.status\"; exec 3<&0; \
( trap '' HUP; \"$@\" <&3 >> \"$p.out\" 2>> \"$p.err\" & echo $! > \"$p\"; wait $!; echo $? > \"$p.s\"; mv \"$p.s\" \"$p.status\" ) \
  > /dev/null 2>&1 & exec 3<&-; set -- \"$p\"; ";

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
    Ok(match spec.tty {
        Some(_) => sh(WRAPPER_TTY, &args),
        None => sh(&format!("{WRAPPER}{FOLLOW}"), &args),
    })
}

/// The command that follows process `id`'s kept output again, or exits
/// 127 saying `no process` when it never started (no pid file).
pub fn follow_command(id: &str) -> Vec<String> {
    let script = format!(
        "[ -f \"$1\" ] && [ -f \"$1.out\" ] || {{ echo 'no process' >&2; exit 127; }}; {FOLLOW}"
    );
    sh(&script, &[pid_file(id)])
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
        mut spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<KubeProcess, RuntimeError> {
        let cmd = command(&spec).map_err(|m| exec.error(m))?;
        // Its whole input given with its start goes in as the exec's stdin
        // (the exec lives with this node: one that dies closes it).
        let io = match spec.input.take() {
            Some(_) if io.stdin.is_some() || spec.tty.is_some() => {
                return Err(exec
                    .error("a process given its whole input takes no streamed stdin and no TTY"))
            }
            Some(input) => ProcessIo {
                stdin: Some(Box::pin(futures::stream::once(async move {
                    Ok(Bytes::from(input))
                }))),
                ..io
            },
            None => io,
        };
        let tty = spec.tty;
        let params = if tty.is_some() {
            AttachParams::interactive_tty()
        } else {
            AttachParams::default().stdin(io.stdin.is_some())
        };
        KubeProcess::open(exec, pod, spec.id, cmd, params, tty, io).await
    }

    /// Follows process `id` of `pod` again, from its start: its kept output
    /// flows into `io.output` (stdin is not given again). Not found when
    /// the process never started there.
    pub async fn attach(
        exec: PodExec,
        pod: &str,
        id: &str,
        io: ProcessIo,
    ) -> Result<KubeProcess, RuntimeError> {
        let started = sh("[ -f \"$1\" ] && [ -f \"$1.out\" ]", &[pid_file(id)]);
        if exec.code(pod, started).await? != 0 {
            return Err(RuntimeError::NotFound {
                worker: exec.worker.clone(),
                kind: "process",
                handle: format!("{id} in pod {pod}"),
            });
        }
        let io = ProcessIo { stdin: None, ..io };
        let params = AttachParams::default().stdin(false);
        KubeProcess::open(
            exec,
            pod,
            id.to_string(),
            follow_command(id),
            params,
            None,
            io,
        )
        .await
    }

    /// Opens the exec running `cmd`; its output flows into `io.output`.
    async fn open(
        exec: PodExec,
        pod: &str,
        id: String,
        cmd: Vec<String>,
        params: AttachParams,
        tty: Option<WindowSize>,
        io: ProcessIo,
    ) -> Result<KubeProcess, RuntimeError> {
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
            id,
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
            input: None,
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
