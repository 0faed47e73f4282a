//! Following a step's process to its end: its output becomes log events
//! (a UTF-8 character split across chunks is kept whole), the build's stop
//! signal becomes SIGTERM and, after a grace period, SIGKILL, and the worker
//! stalling or vanishing ends the step.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::error::EngineError;
use crate::events::Utf8Carry;
use crate::redact::HeldLines;
use crate::steps::StepContext;
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::{OutputStream, Process, ProcessIo, ProcessOutput, ProcessSignal};
use gantry_wire::spec::{ContainerSpec, MountSpec, ProcessSpec, ResourceLimits, RootfsSpec};

/// How long a process has between SIGTERM and SIGKILL when its build stops.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// How a followed process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcessEnd {
    /// It exited on its own with this status.
    Exited(i32),
    /// It was stopped (SIGTERM, then SIGKILL) because the build stopped.
    Stopped,
}

/// A step's container: what [`start`] makes it of (its handle is given
/// when it is created).
pub(crate) struct Container {
    /// Its root filesystem.
    pub rootfs: RootfsSpec,
    /// Its mounts.
    pub mounts: Vec<MountSpec>,
    /// Its environment.
    pub env: Vec<String>,
    /// Its limits.
    pub limits: ResourceLimits,
    /// No network.
    pub hermetic: bool,
    /// The base resource type whose image it runs on, if any.
    pub resource_type: Option<String>,
    /// Privileged (placed only on a worker allowing it).
    pub privileged: bool,
}

/// The one process of a step's container.
pub(crate) struct Command {
    /// Its id in the container (to attach to it again).
    pub id: String,
    /// The program.
    pub path: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub dir: Option<String>,
    /// The user it runs as; none: the image's.
    pub user: Option<String>,
    /// Its whole standard input, given with its start; none: empty.
    pub input: Option<String>,
}

/// Creates the step's container (recorded, and destroyed with the step) and
/// starts `command` in it: the process and its output, to [`follow`].
pub(crate) async fn start(
    ctx: &mut StepContext,
    container: Container,
    command: Command,
) -> Result<(Box<dyn Process>, mpsc::Receiver<ProcessOutput>), EngineError> {
    let span = tracing::info_span!(
        "container",
        otel.name = "container start",
        worker = ctx.worker().name(),
        process.path = %command.path,
    );
    start_in(ctx, container, command).instrument(span).await
}

/// [`start`], in its span.
async fn start_in(
    ctx: &mut StepContext,
    container: Container,
    command: Command,
) -> Result<(Box<dyn Process>, mpsc::Receiver<ProcessOutput>), EngineError> {
    let created = ctx
        .create_container(|handle| ContainerSpec {
            handle,
            rootfs: container.rootfs,
            mounts: container.mounts,
            env: container.env,
            limits: container.limits,
            hermetic: container.hermetic,
            properties: BTreeMap::new(),
            resource_type: container.resource_type,
            privileged: container.privileged,
        })
        .await?;
    let (tx, output) = mpsc::channel(256);
    let process = created
        .run(
            ProcessSpec {
                id: command.id,
                path: command.path,
                args: command.args,
                dir: command.dir,
                env: vec![],
                user: command.user,
                tty: None,
                input: command.input,
            },
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await?;
    Ok((process, output))
}

/// Follows a started process until it has exited and its output has been
/// stored as log events of the step, skipping the first `skip` bytes of
/// stdout and stderr (already stored before a restart of the web node).
pub(crate) async fn follow(
    ctx: &StepContext,
    process: &dyn Process,
    output: mpsc::Receiver<ProcessOutput>,
    skip: [u64; 2],
) -> Result<ProcessEnd, EngineError> {
    follow_into(ctx, process, output, skip, None).await
}

/// Most bytes of stdout [`follow_capturing`] keeps (a resource's JSON answer).
pub(crate) const CAPTURE_LIMIT: usize = 4 << 20;

/// Follows a started process as [`follow`] does, but keeps its stdout
/// (up to [`CAPTURE_LIMIT`] bytes; more is an error) instead of logging it:
/// a resource script answers on stdout and logs on stderr (whose first
/// `skip_stderr` bytes are stored already, when it is followed again).
pub(crate) async fn follow_capturing(
    ctx: &StepContext,
    process: &dyn Process,
    output: mpsc::Receiver<ProcessOutput>,
    skip_stderr: u64,
) -> Result<(ProcessEnd, Vec<u8>), EngineError> {
    let mut stdout = Vec::new();
    let end = follow_into(ctx, process, output, [0, skip_stderr], Some(&mut stdout)).await?;
    Ok((end, stdout))
}

/// [`follow`], with stdout kept in `capture` when given, in the process's
/// span (until it has exited; its exit status recorded).
async fn follow_into(
    ctx: &StepContext,
    process: &dyn Process,
    output: mpsc::Receiver<ProcessOutput>,
    skip: [u64; 2],
    capture: Option<&mut Vec<u8>>,
) -> Result<ProcessEnd, EngineError> {
    let span = tracing::info_span!(
        "process",
        worker = ctx.worker().name(),
        process.id = process.id(),
        process.exit_status = tracing::field::Empty,
        process.stopped = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
    );
    let end = follow_in(ctx, process, output, skip, capture)
        .instrument(span.clone())
        .await;
    match &end {
        Ok(ProcessEnd::Exited(status)) => span.record("process.exit_status", status),
        Ok(ProcessEnd::Stopped) => span.record("process.stopped", true),
        Err(e) => span
            .record("otel.status_code", "ERROR")
            .record("otel.status_message", tracing::field::display(e)),
    };
    end
}

/// [`follow_into`] in its span.
async fn follow_in(
    ctx: &StepContext,
    process: &dyn Process,
    mut output: mpsc::Receiver<ProcessOutput>,
    mut skip: [u64; 2],
    mut capture: Option<&mut Vec<u8>>,
) -> Result<ProcessEnd, EngineError> {
    let mut carry_out = Utf8Carry::default();
    let mut carry_err = Utf8Carry::default();
    // Output is redacted as it goes; a secret written across two chunks
    // is held until it is whole.
    let redactor = ctx.scope.locals.redactor();
    let mut held = [HeldLines::default(), HeldLines::default()];
    let mut watch = ctx.worker_watch();
    let mut stop = ctx.stop();
    let mut stopping = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        tokio::select! {
            chunk = output.recv() => {
                let Some(chunk) = chunk else { break };
                if let (OutputStream::Stdout, Some(kept)) = (chunk.stream, capture.as_deref_mut()) {
                    if kept.len() + chunk.data.len() > CAPTURE_LIMIT {
                        let _ = process.signal(ProcessSignal::Kill).await;
                        return Err(EngineError::Invalid(format!(
                            "the process wrote more than {CAPTURE_LIMIT} bytes on stdout"
                        )));
                    }
                    kept.extend_from_slice(&chunk.data);
                    continue;
                }
                let (carry, skipped, held) = match chunk.stream {
                    OutputStream::Stdout => (&mut carry_out, &mut skip[0], &mut held[0]),
                    OutputStream::Stderr => (&mut carry_err, &mut skip[1], &mut held[1]),
                };
                // Output replayed after a restart: drop what was stored already.
                let already = (*skipped).min(chunk.data.len() as u64) as usize;
                *skipped -= already as u64;
                let data = held.push(carry.push(&chunk.data[already..]), &redactor);
                log(ctx, chunk.stream, data).await?;
            }
            lost = watch.becomes_lost("the step ran") => return Err(lost),
            _ = stop.requested(), if !stopping => {
                stopping = true;
                let _ = process.signal(ProcessSignal::Terminate).await;
                kill_at = Some(Instant::now() + STOP_GRACE);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                kill_at = None;
                let _ = process.signal(ProcessSignal::Kill).await;
            }
        }
    }
    let [mut held_out, mut held_err] = held;
    let out = held_out.push(carry_out.finish(), &redactor) + &held_out.finish(&redactor);
    log(ctx, OutputStream::Stdout, out).await?;
    let err = held_err.push(carry_err.finish(), &redactor) + &held_err.finish(&redactor);
    log(ctx, OutputStream::Stderr, err).await?;
    let status = process.wait().await?;
    Ok(if stopping {
        ProcessEnd::Stopped
    } else {
        ProcessEnd::Exited(status)
    })
}

/// Stores a log event of the step, unless `data` is empty.
pub(crate) async fn log(
    ctx: &StepContext,
    stream: OutputStream,
    data: String,
) -> Result<(), EngineError> {
    if data.is_empty() {
        return Ok(());
    }
    ctx.emit(&BuildEvent::Log {
        step: ctx.step().to_string(),
        stream: stream.as_str().into(),
        data,
        time: crate::db::now_ms(),
    })
    .await
}
