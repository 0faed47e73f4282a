//! Following a build's events to its end, for `execute`, `run` and
//! `watch`: its output goes to stdout and stderr as it is written, Ctrl-C
//! aborts it, and how it ended becomes the command's exit code.

use std::collections::BTreeMap;
use std::io::Write as _;

use anyhow::{anyhow, bail, Context as _};
use futures::StreamExt;
use gantry_wire::events::BuildEvent;
use gantry_wire::events::EventLine;
use gantry_wire::events::NodeOutcome;
use gantry_wire::state::BuildStatus;

use crate::cli::client::ApiClient;

/// Whether the steps' starts and ends are told on stderr (a build of
/// several steps) or not (a one-off task, whose output is all there is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepLines {
    /// Only the output, waits and errors.
    Quiet,
    /// Also `step NAME: started` and how each step ended.
    Told,
}

/// How a followed build ended.
pub struct Ended {
    /// Final status.
    pub status: BuildStatus,
    /// The task's exit status, when it ran.
    pub exit_status: Option<i32>,
    /// Output artifacts by output name.
    pub produced: BTreeMap<String, String>,
    /// The last error event's message.
    pub last_error: Option<String>,
    /// The versions `check` found (oldest first), in a check build.
    pub checked: Vec<serde_json::Value>,
}

impl Ended {
    /// `gantry run`'s exit code: 0 succeeded, 1 failed, 2 errored (the
    /// reason on stderr), 3 aborted.
    pub fn run_exit_code(self, build_id: i64) -> i32 {
        match self.status {
            BuildStatus::Succeeded => 0,
            BuildStatus::Failed => 1,
            BuildStatus::Aborted => {
                eprintln!("build {build_id} was aborted");
                3
            }
            _ => {
                eprintln!(
                    "build {build_id} errored: {}",
                    self.last_error.as_deref().unwrap_or("no reason given")
                );
                2
            }
        }
    }

    /// The CLI's exit code: the task's exit status, or an error naming why
    /// the build did not run to the end.
    pub fn exit_code(self, build_id: i64) -> anyhow::Result<i32> {
        let Ended {
            status,
            exit_status,
            last_error,
            ..
        } = self;
        match status {
            BuildStatus::Succeeded => Ok(0),
            BuildStatus::Failed => Ok(exit_status.unwrap_or(1)),
            BuildStatus::Aborted => bail!("build {build_id} was aborted"),
            _ => bail!(
                "build {build_id} errored: {}",
                last_error.unwrap_or_else(|| "no reason given".into())
            ),
        }
    }
}

/// `gantry watch --raw` / `--tail N`: the build's log as plain text
/// (`GET /api/v1/builds/{id}/log`), from its last `tail` lines, to stdout
/// until the build ends; the exit code is then its task's exit status, or
/// an error naming why it did not run to the end.
pub async fn print_log(
    client: &ApiClient,
    build_id: i64,
    tail: Option<usize>,
) -> anyhow::Result<i32> {
    let mut path = format!("/api/v1/builds/{build_id}/log");
    if let Some(n) = tail {
        path.push_str(&format!("?tail={n}"));
    }
    let resp = client
        .http()
        .get(client.url(&path))
        .send()
        .await
        .map_err(|e| client.unreachable(e))?;
    let mut stream = client.check(resp).await?.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.with_context(|| format!("reading build {build_id}'s log"))?;
        // A reader gone (`| head`) ends the command quietly.
        crate::cli::output::write_bytes(&chunk);
    }
    let view: serde_json::Value = client.get(&format!("/api/v1/builds/{build_id}")).await?;
    let status = view["status"]
        .as_str()
        .and_then(BuildStatus::parse)
        .ok_or_else(|| anyhow!("build {build_id} has no status: {view}"))?;
    Ended {
        status,
        exit_status: view["exit_status"].as_i64().map(|s| s as i32),
        produced: BTreeMap::new(),
        last_error: view["error"].as_str().map(String::from),
        checked: Vec::new(),
    }
    .exit_code(build_id)
}

/// Follows a build's events to its end: its output goes to stdout and
/// stderr as it is written; Ctrl-C aborts the build (a second one leaves).
pub async fn follow(client: &ApiClient, build_id: i64, lines: StepLines) -> anyhow::Result<Ended> {
    let resp = client
        .http()
        .get(client.url(&format!("/api/v1/builds/{build_id}/events")))
        // Gantry's own lines, not Concourse's server-sent events.
        .header(reqwest::header::ACCEPT, "application/x-ndjson")
        .send()
        .await
        .map_err(|e| client.unreachable(e))?;
    let mut stream = client.check(resp).await?.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = Seen {
        build_id,
        lines,
        produced: BTreeMap::new(),
        last_error: None,
        checked: Vec::new(),
    };
    let mut end: Option<(BuildStatus, Option<i32>)> = None;
    let mut interrupts = 0;
    'events: loop {
        // Ctrl-C aborts the build (and we keep following it to its end); a
        // second one leaves at once.
        let next = tokio::select! {
            next = stream.next() => next,
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 {
                    bail!("interrupted; build {build_id} may still be stopping");
                }
                eprintln!("aborting build {build_id}");
                client
                    .put::<serde_json::Value>(&format!("/api/v1/builds/{build_id}/abort"))
                    .await?;
                continue;
            }
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| anyhow!("lost the build's event stream: {e}"))?;
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let ev: EventLine = serde_json::from_slice(&line)
                .with_context(|| "reading a build event".to_string())?;
            if let Some(ended) = seen.tell(ev.event) {
                end = Some(ended);
                break 'events;
            }
        }
    }
    let Some((status, exit_status)) = end else {
        bail!("the event stream of build {build_id} ended before the build did");
    };
    Ok(Ended {
        status,
        exit_status,
        produced: seen.produced,
        last_error: seen.last_error,
        checked: seen.checked,
    })
}

/// What a followed build's events have told so far, beside its output.
struct Seen {
    /// The build followed, named in what is printed.
    build_id: i64,
    /// Whether step lines are printed.
    lines: StepLines,
    /// Output artifacts by output name.
    produced: BTreeMap<String, String>,
    /// The last error event's message.
    last_error: Option<String>,
    /// The versions `check` found (oldest first).
    checked: Vec<serde_json::Value>,
}

impl Seen {
    /// Prints what `event` says and keeps what it tells; the build's end
    /// (its status and exit status) when it is the final status.
    fn tell(&mut self, event: BuildEvent) -> Option<(BuildStatus, Option<i32>)> {
        match event {
            BuildEvent::Log { stream, data, .. } => {
                if stream == "stdout" {
                    crate::cli::output::write_bytes(data.as_bytes());
                } else {
                    let mut e = std::io::stderr().lock();
                    let _ = e.write_all(data.as_bytes());
                    let _ = e.flush();
                }
            }
            BuildEvent::Waiting { message, .. } => eprintln!("waiting for a worker: {message}"),
            BuildEvent::WaitingForInputs { message, .. } => {
                eprintln!("waiting: {message}")
            }
            BuildEvent::SelectedWorker { worker, .. } => {
                eprintln!("running on worker {worker}")
            }
            BuildEvent::Output {
                name, artifact_id, ..
            } => {
                self.produced.insert(name, artifact_id);
            }
            BuildEvent::Status {
                status: BuildStatus::Started,
                trace_id: Some(trace),
                ..
            } => eprintln!("build {}: trace {trace}", self.build_id),
            BuildEvent::NodeStarted {
                step: Some(step),
                origin,
                ..
            } if self.lines == StepLines::Told => match origin.attempts.last() {
                Some(n) => eprintln!("step {step}: started (attempt {n})"),
                None => eprintln!("step {step}: started"),
            },
            BuildEvent::NodeFinished {
                step: Some(step),
                outcome,
                exit_status,
                message,
                ..
            } if self.lines == StepLines::Told => {
                let how = match outcome {
                    NodeOutcome::Succeeded => "succeeded".to_string(),
                    NodeOutcome::Failed => match exit_status {
                        Some(code) => format!("failed (exit status {code})"),
                        None => "failed".to_string(),
                    },
                    other => format!("{other:?}").to_lowercase(),
                };
                match message {
                    Some(m) => eprintln!("step {step}: {how}: {m}"),
                    None => eprintln!("step {step}: {how}"),
                }
            }
            BuildEvent::Streaming {
                step, what, bytes, ..
            } if self.lines == StepLines::Told => {
                eprintln!("step {step}: streamed {what} ({bytes} bytes)")
            }
            BuildEvent::Transfer {
                step,
                name,
                artifact,
                from,
                to,
                path,
                encoding,
                bytes,
                seconds,
                ..
            } if self.lines == StepLines::Told => {
                let from = if from == "web" {
                    "the web node".to_string()
                } else {
                    format!("worker {from}")
                };
                eprintln!(
                "step {step}: streamed {name} (artifact {artifact}) from {from} to worker {to} ({path}, {encoding}, {bytes} bytes in {seconds:.2} s)"
            )
            }
            BuildEvent::Resource {
                step,
                resource,
                action,
                version,
                cached,
                worker,
                ..
            } => {
                let on = worker
                    .map(|w| format!(" on worker {w}"))
                    .unwrap_or_default();
                match action.as_str() {
                "check" => {
                    let found = version.as_array().cloned().unwrap_or_default();
                    eprintln!("step {step}: check of {resource} found {} version(s){on}", found.len());
                    self.checked.extend(found);
                }
                _ if cached => eprintln!("step {step}: {action} {resource} {version}: from the resource cache (no in ran)"),
                _ => eprintln!("step {step}: {action} {resource} {version}{on}"),
            }
            }
            BuildEvent::Error { message, .. } => self.last_error = Some(message),
            BuildEvent::Status {
                status,
                exit_status,
                ..
            } if status.is_finished() => return Some((status, exit_status)),
            _ => {}
        }
        None
    }
}
