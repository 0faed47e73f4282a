//! Containers on an agent and the processes run in them: a process's
//! output followed from `/output` (NDJSON) by a background task into the
//! caller's channel, its stdin streamed as one chunked `PUT`, its end
//! recorded for [`Process::wait`].

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use gantry_wire::agent_api::{OutputLine, ProcessCreated, SignalRequest};
use gantry_wire::error::{error_chain, RuntimeError};
use gantry_wire::runtime::{
    ByteStream, Container, Process, ProcessIo, ProcessOutput, ProcessSignal,
};
use gantry_wire::spec::{ProcessSpec, WindowSize};
use reqwest::{Method, Response};
use tokio::sync::{mpsc, watch};

use crate::Endpoint;

/// The longest NDJSON line accepted from `/output` (a 64 KiB chunk is about
/// 88 KiB once base64-encoded).
const MAX_LINE: usize = 1 << 20;

/// A container on an agent.
pub struct AgentContainer {
    /// How to reach its worker.
    pub(crate) ep: Arc<Endpoint>,
    /// Its handle.
    pub(crate) handle: String,
}

impl AgentContainer {
    /// Streams `stdin` to process `id` in the background, as one chunked
    /// `PUT .../stdin` that ends with it (or with the process).
    fn feed_stdin(&self, id: &str, stdin: ByteStream) {
        let rb = self
            .ep
            .request(
                Method::PUT,
                &["containers", &self.handle, "processes", id, "stdin"],
            )
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(reqwest::Body::wrap_stream(stdin));
        let ep = self.ep.clone();
        let (container, id) = (self.handle.clone(), id.to_string());
        tokio::spawn(async move {
            if let Err(e) = ep.send(rb, "process", &id).await {
                tracing::warn!(worker = %ep.name, %container, process = %id, error = %e,
                    "streaming stdin to a process failed");
            }
        });
    }

    /// Opens `/output` of process `id` and starts following it into `io`
    /// (and feeding it `io.stdin`).
    async fn follow(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        let rb = self.ep.request(
            Method::GET,
            &["containers", &self.handle, "processes", id, "output"],
        );
        let resp = self.ep.send(rb, "process", id).await?;
        if let Some(stdin) = io.stdin {
            self.feed_stdin(id, stdin);
        }
        let (end_tx, end_rx) = watch::channel(None);
        let what = format!("process {id} in container {}", self.handle);
        tokio::spawn(read_output(resp, io.output, end_tx, what));
        Ok(Box::new(AgentProcess {
            ep: self.ep.clone(),
            container: self.handle.clone(),
            id: id.to_string(),
            end: end_rx,
        }))
    }
}

#[async_trait]
impl Container for AgentContainer {
    fn handle(&self) -> &str {
        &self.handle
    }

    async fn run(
        &self,
        spec: ProcessSpec,
        io: ProcessIo,
    ) -> Result<Box<dyn Process>, RuntimeError> {
        let mut rb = self
            .ep
            .request(Method::POST, &["containers", &self.handle, "processes"])
            .json(&spec);
        if io.stdin.is_some() {
            rb = rb.query(&[("stdin", "true")]);
        }
        let resp = self.ep.send(rb, "container", &self.handle).await?;
        let created: ProcessCreated = self.ep.json(resp).await?;
        self.follow(&created.id, io).await
    }

    async fn attach(&self, id: &str, io: ProcessIo) -> Result<Box<dyn Process>, RuntimeError> {
        self.follow(id, io).await
    }
}

/// How a followed process ended, as seen by the client.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// It exited with this status.
    Exit(i32),
    /// The agent reported no exit status.
    Failed(String),
    /// The process could not be started; why.
    NotStarted(String),
    /// The output connection broke before the exit status arrived.
    Lost(String),
}

/// Reads the NDJSON output of a process into `output` until its end.
async fn read_output(
    resp: Response,
    output: mpsc::Sender<ProcessOutput>,
    end: watch::Sender<Option<End>>,
    what: String,
) {
    let mut output = Some(output);
    let mut body = resp.bytes_stream();
    let mut buf = BytesMut::new();
    let mut scanned = 0;
    let finish = |e: End| {
        let _ = end.send(Some(e));
    };
    loop {
        let chunk = match body.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => {
                return finish(End::Lost(format!(
                    "the output stream of {what} broke: {}",
                    error_chain(&e)
                )))
            }
            None => {
                return finish(End::Lost(format!(
                    "the output stream of {what} ended before its exit status"
                )))
            }
        };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf[scanned..].iter().position(|b| *b == b'\n') {
            let line = buf.split_to(scanned + pos + 1);
            scanned = 0;
            let line = &line[..line.len() - 1];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<OutputLine>(line) {
                Ok(OutputLine::Output { stream, data }) => {
                    let data =
                        match base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) {
                            Ok(d) => Bytes::from(d),
                            Err(e) => {
                                return finish(End::Failed(format!(
                                    "bad output chunk from {what}: {e}"
                                )))
                            }
                        };
                    if let Some(tx) = &output {
                        if tx.send(ProcessOutput { stream, data }).await.is_err() {
                            // Nobody listens any more; keep reading for the exit status.
                            output = None;
                        }
                    }
                }
                Ok(OutputLine::Exit { exit_status }) => return finish(End::Exit(exit_status)),
                Ok(OutputLine::Error { error }) => return finish(End::Failed(error)),
                Ok(OutputLine::NotStarted { not_started }) => {
                    return finish(End::NotStarted(not_started))
                }
                Err(e) => {
                    return finish(End::Failed(format!(
                        "unreadable output line from {what}: {e}"
                    )))
                }
            }
        }
        scanned = buf.len();
        if buf.len() > MAX_LINE {
            return finish(End::Failed(format!(
                "an output line of {what} exceeds {MAX_LINE} bytes"
            )));
        }
    }
}

/// A process on an agent, followed by a background task.
pub struct AgentProcess {
    /// How to reach its worker.
    ep: Arc<Endpoint>,
    /// Handle of its container.
    container: String,
    /// Its id.
    id: String,
    /// Set by the output task when the process has ended.
    end: watch::Receiver<Option<End>>,
}

#[async_trait]
impl Process for AgentProcess {
    fn id(&self) -> &str {
        &self.id
    }

    async fn wait(&self) -> Result<i32, RuntimeError> {
        let mut end = self.end.clone();
        let outcome = match end.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None,
        };
        match outcome {
            Some(End::Exit(n)) => Ok(n),
            Some(End::Failed(message)) => Err(RuntimeError::Worker {
                worker: self.ep.name.clone(),
                status: 0,
                message,
            }),
            Some(End::NotStarted(reason)) => Err(RuntimeError::NotStarted {
                worker: self.ep.name.clone(),
                reason,
            }),
            Some(End::Lost(reason)) => Err(self.ep.unreachable(reason)),
            None => Err(self.ep.unreachable(format!(
                "following process {} in container {} stopped",
                self.id, self.container
            ))),
        }
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(
                Method::POST,
                &[
                    "containers",
                    &self.container,
                    "processes",
                    &self.id,
                    "signal",
                ],
            )
            .json(&SignalRequest { signal });
        self.ep.send(rb, "process", &self.id).await.map(drop)
    }

    async fn set_tty(&self, size: WindowSize) -> Result<(), RuntimeError> {
        let rb = self
            .ep
            .request(
                Method::PUT,
                &["containers", &self.container, "processes", &self.id, "tty"],
            )
            .json(&size);
        self.ep.send(rb, "process", &self.id).await.map(drop)
    }
}
