//! Commands in a pod through the exec API (websocket, channel protocol v5:
//! stdin can be closed, so `tar -x` sees the end of its input).

use bytes::Bytes;
use futures::StreamExt;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::ByteStream;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, AttachedProcess};
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, SimplexStream};

use super::pod::CONTAINER;

/// Most bytes of stderr kept for an error message.
const STDERR_KEPT: usize = 4096;

/// The exit code a finished exec reports on its status channel: 0 on
/// success, the `ExitCode` cause of a `NonZeroExitCode` failure; an error
/// names any other failure (the command could not start).
pub fn exit_code(status: Option<Status>) -> Result<i32, String> {
    let Some(status) = status else {
        return Err("the exec stream ended without an exit status".into());
    };
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode") {
        let code = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.trim().parse().ok());
        if let Some(code) = code {
            return Ok(code);
        }
    }
    Err(status
        .message
        .unwrap_or_else(|| format!("exec failed: {:?}", status.reason)))
}

/// A pod's exec API, with the worker's name for errors.
#[derive(Clone)]
pub struct PodExec {
    /// Pods of the worker's namespace.
    pub api: Api<Pod>,
    /// The worker's name.
    pub worker: String,
}

impl PodExec {
    /// An error of this worker.
    pub fn error(&self, message: impl Into<String>) -> RuntimeError {
        RuntimeError::Worker {
            worker: self.worker.clone(),
            status: 0,
            message: message.into(),
        }
    }

    /// Opens an exec of `command` in `pod`.
    pub async fn open(
        &self,
        pod: &str,
        command: Vec<String>,
        params: AttachParams,
    ) -> Result<AttachedProcess, RuntimeError> {
        self.api
            .exec(pod, command.clone(), &params.container(CONTAINER))
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 404 => RuntimeError::NotFound {
                    worker: self.worker.clone(),
                    kind: "container",
                    handle: pod.to_string(),
                },
                e => self.error(format!("exec in pod {pod}: {}", chain(&e))),
            })
    }

    /// Runs `command` in `pod` to its end, with `stdin` (closed at its end);
    /// answers its exit code, stdout and stderr.
    async fn complete(
        &self,
        pod: &str,
        command: Vec<String>,
        stdin: Option<ByteStream>,
    ) -> Result<(i32, Vec<u8>, Vec<u8>), RuntimeError> {
        let what = command.join(" ");
        let mut p = self
            .open(pod, command, AttachParams::default().stdin(stdin.is_some()))
            .await?;
        let status = p.take_status();
        let writer = p.stdin();
        let feed = async {
            if let (Some(mut body), Some(mut w)) = (stdin, writer) {
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| format!("reading the input: {e}"))?;
                    w.write_all(&chunk)
                        .await
                        .map_err(|e| format!("writing to the pod: {e}"))?;
                }
                // Dropping the writer would not close stdin: only shutdown does.
                w.shutdown()
                    .await
                    .map_err(|e| format!("closing stdin: {e}"))?;
            }
            Ok::<(), String>(())
        };
        let (fed, out, err) = tokio::join!(feed, read_all(p.stdout()), read_all(p.stderr()));
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        fed.map_err(|e| self.error(format!("{what} in pod {pod}: {e}")))?;
        let code =
            exit_code(status).map_err(|e| self.error(format!("{what} in pod {pod}: {e}")))?;
        Ok((code, out, err))
    }

    /// Runs `command` in `pod` to its end, with `stdin`; answers its stdout.
    /// A non-zero exit is an error with its stderr.
    pub async fn run(
        &self,
        pod: &str,
        command: Vec<String>,
        stdin: Option<ByteStream>,
    ) -> Result<Vec<u8>, RuntimeError> {
        let what = command.join(" ");
        match self.complete(pod, command, stdin).await? {
            (0, out, _) => Ok(out),
            (code, _, err) => {
                Err(self.error(format!("{what} in pod {pod} exited {code}: {}", tail(&err))))
            }
        }
    }

    /// Runs `command` in `pod` (no input, output ignored) and answers its
    /// exit code.
    pub async fn code(&self, pod: &str, command: Vec<String>) -> Result<i32, RuntimeError> {
        Ok(self.complete(pod, command, None).await?.0)
    }

    /// Runs `command` in `pod` and streams its stdout; a non-zero exit ends
    /// the stream with an error naming it.
    pub async fn stdout_stream(
        &self,
        pod: &str,
        command: Vec<String>,
    ) -> Result<ByteStream, RuntimeError> {
        let what = command.join(" ");
        let mut p = self.open(pod, command, AttachParams::default()).await?;
        let status = p.take_status();
        let out = p
            .stdout()
            .ok_or_else(|| self.error("exec without stdout"))?;
        let errors = tokio::spawn(read_all(p.stderr()));
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
        let pod = pod.to_string();
        tokio::spawn(async move {
            let _keep = p;
            let mut chunks = tokio_util::io::ReaderStream::with_capacity(out, 64 * 1024);
            while let Some(chunk) = chunks.next().await {
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
            let err = errors.await.unwrap_or_default();
            let status = match status {
                Some(s) => s.await,
                None => None,
            };
            let failed = match exit_code(status) {
                Ok(0) => None,
                Ok(code) => Some(format!("{what} in pod {pod} exited {code}: {}", tail(&err))),
                Err(e) => Some(format!("{what} in pod {pod}: {e}")),
            };
            if let Some(message) = failed {
                let _ = tx.send(Err(std::io::Error::other(message))).await;
            }
        });
        Ok(gantry_wire::runtime::channel_stream(rx))
    }
}

/// `sh -c SCRIPT sh ARGS...`: arguments passed as positional parameters, never parsed.
pub fn sh(script: &str, args: &[String]) -> Vec<String> {
    let mut v = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "sh".to_string(),
    ];
    v.extend(args.iter().cloned());
    v
}

/// Everything an exec's output stream gives, until it ends.
async fn read_all(reader: Option<ReadHalf<SimplexStream>>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut r) = reader {
        let _ = r.read_to_end(&mut buf).await;
    }
    buf
}

/// The end of a command's stderr, as text.
fn tail(err: &[u8]) -> String {
    let start = err.len().saturating_sub(STDERR_KEPT);
    String::from_utf8_lossy(&err[start..]).trim().to_string()
}

/// An error with its causes.
pub fn chain(e: &dyn std::error::Error) -> String {
    gantry_wire::error::error_chain(e)
}

/// `tar -x` of stdin into `dir` (created first).
pub(super) fn tar_in_command(dir: &str) -> Vec<String> {
    sh(
        "mkdir -p \"$1\" && exec tar -xf - -C \"$1\"",
        &[dir.to_string()],
    )
}

/// `tar -c` of `path` to stdout: a directory's contents, or one file under its name.
pub(super) fn tar_out_command(path: &str) -> Vec<String> {
    sh(
        "if [ -d \"$1\" ]; then cd \"$1\" && exec tar -cf - .; else cd \"$(dirname \"$1\")\" && exec tar -cf - \"$(basename \"$1\")\"; fi",
        &[path.to_string()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    #[test]
    fn exit_codes_are_read_from_the_status_channel() {
        let ok = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(ok)), Ok(0));
        let failed = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("3".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(failed)), Ok(3));
        let broken = Status {
            status: Some("Failure".into()),
            message: Some("executable file not found".into()),
            ..Default::default()
        };
        assert_eq!(
            exit_code(Some(broken)).unwrap_err(),
            "executable file not found"
        );
        assert!(exit_code(None).is_err());
    }
}
