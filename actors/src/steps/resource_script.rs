//! Running one resource script (`/opt/resource/check`, `in` or `out`) in a
//! container of the step's worker: the request goes in on stdin, stderr
//! becomes log events of the step, stdout is the answer.

use serde_json::Value;

use crate::error::EngineError;
use crate::steps::process::{self, follow_capturing, ProcessEnd};
use crate::steps::StepContext;
use gantry_wire::spec::{MountSpec, ResourceLimits, RootfsSpec};

/// The root filesystem a resource type's scripts run in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TypeImage {
    /// A base type: the worker's default image with the type's scripts
    /// mounted at `/opt/resource`.
    Base(String),
    /// A custom type: the image its parent type fetched, and whether the
    /// type's containers are privileged.
    Fetched {
        /// The image.
        image: FetchedImage,
        /// `privileged: true` on the type.
        privileged: bool,
    },
}

/// An image a resource fetched (for a custom type, or a task's
/// `image_resource`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FetchedImage {
    /// The image artifact (a root filesystem tar or an OCI layout tar);
    /// none: the worker's default image (`mock` with `mirror_self`).
    pub artifact: Option<String>,
    /// `env` of the image's `metadata.json` (`KEY=VALUE`).
    pub env: Vec<String>,
    /// `user` of the image's `metadata.json`.
    pub user: Option<String>,
    /// For the worker's default image: the base type whose `in` mirrored
    /// itself (`mock` with `mirror_self`); a custom type on such an image
    /// runs that base type's scripts, as the mirrored image holds them.
    pub mirror_of: Option<String>,
    /// For an image the workers pull themselves (`registry-image`,
    /// `docker-image`): what a worker without it pulls.
    pub pull: Option<gantry_wire::native::PullImage>,
}

impl FetchedImage {
    /// The root filesystem of a container on the step's worker running in
    /// this image (imported there first if it is not yet).
    pub(crate) async fn rootfs(&self, ctx: &StepContext) -> Result<RootfsSpec, EngineError> {
        use crate::steps::image::Fill;
        let fill = match &self.pull {
            Some(pull) => Fill::Pull(pull),
            None => Fill::Import,
        };
        Ok(match &self.artifact {
            Some(artifact) => RootfsSpec::Volume {
                handle: ctx.image_volume_by(artifact, fill).await?.0,
            },
            None => RootfsSpec::Default,
        })
    }
}

/// One run of a script.
pub(crate) struct Script<'a> {
    /// `check`, `in` or `out`.
    pub name: &'static str,
    /// The directory argument of `in` and `out`.
    pub dir: Option<&'a str>,
    /// The JSON request written on stdin.
    pub request: Value,
    /// Volumes mounted into the script's container.
    pub mounts: Vec<MountSpec>,
    /// Variables beside the build's (`BUILD_ID`, ...), e.g. a put's
    /// `BUILD_CREATED_BY`.
    pub env: Vec<String>,
}

/// How a script ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ScriptEnd {
    /// It exited 0 and answered this JSON.
    Answered(Value),
    /// It exited with this non-zero status (its stderr is in the log).
    Failed(i32),
    /// The build's stop signal ended it.
    Stopped,
}

/// Runs `script` of a type whose image is `image` in a new container of the
/// step's worker (recorded, and destroyed with the step).
pub(crate) async fn run_script(
    ctx: &mut StepContext,
    image: &TypeImage,
    script: Script<'_>,
) -> Result<ScriptEnd, EngineError> {
    if let TypeImage::Base(name) = image {
        if gantry_wire::native::is_native(name) {
            return run_native(ctx, name, script).await;
        }
    }
    let (rootfs, resource_type, mut env, user, privileged) = match image {
        TypeImage::Base(name) => (RootfsSpec::Default, Some(name.clone()), vec![], None, false),
        TypeImage::Fetched {
            image: fetched,
            privileged,
        } => (
            fetched.rootfs(ctx).await?,
            fetched.mirror_of.clone(),
            fetched.env.clone(),
            fetched.user.clone(),
            *privileged,
        ),
    };
    env.extend(build_env(ctx));
    env.extend(script.env);
    let request = script.request.to_string();
    let path = format!("/opt/resource/{}", script.name);
    let (process, output) = process::start(
        ctx,
        process::Container {
            rootfs,
            mounts: script.mounts,
            env,
            limits: ResourceLimits::default(),
            hermetic: false,
            resource_type,
            privileged,
        },
        process::Command {
            id: script.name.to_string(),
            path: path.clone(),
            args: script.dir.map(|d| vec![d.to_string()]).unwrap_or_default(),
            dir: script.dir.map(str::to_string),
            user,
            input: Some(request),
        },
    )
    .await?;
    let (end, stdout) = follow_capturing(ctx, process.as_ref(), output, 0).await?;
    script_end(&path, end, &stdout)
}

/// Runs `script` of a type the step's worker runs natively (no container:
/// the worker runs it in its own process, `gantry_wire::native`). Its log
/// lines and its failure become stderr of the step; a failure is exit 1, as
/// a script's would be. The build's stop signal ends the wait.
async fn run_native(
    ctx: &StepContext,
    name: &str,
    script: Script<'_>,
) -> Result<ScriptEnd, EngineError> {
    let run = gantry_wire::native::NativeRun {
        script: script.name.to_string(),
        request: script.request,
        dir: script.dir.map(str::to_string),
        mounts: script.mounts,
    };
    let mut stop = ctx.stop();
    let worker = ctx.worker().clone();
    let answer = tokio::select! {
        answer = worker.run_native(name, &run) => answer?,
        () = stop.requested() => return Ok(ScriptEnd::Stopped),
    };
    let mut text: String = answer.log.iter().map(|l| format!("{l}\n")).collect();
    if let Some(failure) = &answer.failure {
        text.push_str(&format!("{name} {}: {failure}\n", script.name));
    }
    process::log(ctx, gantry_wire::runtime::OutputStream::Stderr, text).await?;
    match (answer.answer, answer.failure) {
        (Some(v), None) => Ok(ScriptEnd::Answered(v)),
        _ => Ok(ScriptEnd::Failed(1)),
    }
}

/// What following a script again found.
#[derive(Debug)]
pub(crate) enum Reattached {
    /// The script's process, followed to its end.
    Ended(ScriptEnd),
    /// Every container of the step stands and none holds the process: it
    /// never started (the worker keeps every process it started on disk,
    /// its output and exit status, until the container goes).
    NeverStarted,
}

/// Follows script `name` of the step again after its build was taken over:
/// the process in the newest of `containers` (the step's, oldest first)
/// that has one of that id, its kept output replayed (the first
/// `stored_stderr` bytes of stderr are in the log already) and its answer
/// read back. A container gone from the worker is an error: whether the
/// script ran in it cannot be known.
pub(crate) async fn reattach_script(
    ctx: &StepContext,
    containers: &[String],
    name: &str,
    stored_stderr: u64,
) -> Result<Reattached, EngineError> {
    let worker = ctx.worker().clone();
    for handle in containers.iter().rev() {
        let Some(container) = worker.lookup_container(handle).await? else {
            return Err(EngineError::Invalid(format!(
                "container {handle} of step {:?} is gone from worker {}, so whether its {name} ran is not known; it is not run again",
                ctx.step(),
                worker.name()
            )));
        };
        let (tx, output) = tokio::sync::mpsc::channel(256);
        let io = gantry_wire::runtime::ProcessIo {
            stdin: None,
            output: tx,
        };
        let process = match container.attach(name, io).await {
            Ok(p) => p,
            Err(gantry_wire::error::RuntimeError::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let (end, stdout) = follow_capturing(ctx, process.as_ref(), output, stored_stderr).await?;
        let path = format!("/opt/resource/{name}");
        return script_end(&path, end, &stdout).map(Reattached::Ended);
    }
    Ok(Reattached::NeverStarted)
}

/// How script `path` ended, from its end and its stdout.
fn script_end(path: &str, end: ProcessEnd, stdout: &[u8]) -> Result<ScriptEnd, EngineError> {
    match end {
        ProcessEnd::Stopped => Ok(ScriptEnd::Stopped),
        ProcessEnd::Exited(0) => serde_json::from_slice(stdout)
            .map(ScriptEnd::Answered)
            .map_err(|e| {
                EngineError::Invalid(format!(
                    "{path} did not answer JSON on stdout ({e}): {:?}",
                    String::from_utf8_lossy(&stdout[..stdout.len().min(200)])
                ))
            }),
        ProcessEnd::Exited(status) => Ok(ScriptEnd::Failed(status)),
    }
}

/// The build's metadata as Concourse gives it to resource scripts.
fn build_env(ctx: &StepContext) -> Vec<String> {
    let mut env = vec![
        format!("BUILD_ID={}", ctx.build()),
        format!("BUILD_NAME={}", ctx.build()),
        format!("BUILD_TEAM_NAME={}", ctx.team()),
    ];
    if let Some(job) = ctx.job() {
        let (name, instance_vars) = job.pipeline_name_and_vars();
        env.push(format!("BUILD_PIPELINE_NAME={name}"));
        if let Some(vars) = instance_vars {
            env.push(format!("BUILD_PIPELINE_INSTANCE_VARS={vars}"));
        }
        env.push(format!("BUILD_JOB_NAME={}", job.job));
    }
    env
}

/// A version: a JSON object of strings.
pub(crate) fn version_of(v: &Value, what: &str) -> Result<Value, EngineError> {
    match v {
        Value::Object(m) if m.values().all(Value::is_string) => Ok(v.clone()),
        _ => Err(EngineError::Invalid(format!(
            "{what}: a version must be an object of strings, not {v}"
        ))),
    }
}

/// The versions of `check`'s answer, oldest first.
pub(crate) fn check_answer(answer: &Value) -> Result<Vec<Value>, EngineError> {
    let Value::Array(list) = answer else {
        return Err(EngineError::Invalid(format!(
            "check answered {answer}, not a list of versions"
        )));
    };
    list.iter().map(|v| version_of(v, "check")).collect()
}

/// The version and metadata of `in`'s or `out`'s answer.
pub(crate) fn fetch_answer(script: &str, answer: &Value) -> Result<(Value, Value), EngineError> {
    let version = answer.get("version").ok_or_else(|| {
        EngineError::Invalid(format!("{script} answered {answer}, with no version"))
    })?;
    let version = version_of(version, script)?;
    let metadata = match answer.get("metadata") {
        None | Some(Value::Null) => Value::Array(vec![]),
        Some(m @ Value::Array(_)) => m.clone(),
        Some(m) => {
            return Err(EngineError::Invalid(format!(
                "{script} answered metadata {m}, not a list"
            )))
        }
    };
    Ok((version, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_checked() {
        assert_eq!(
            check_answer(&json!([{"ref": "a"}, {"ref": "b"}]))
                .unwrap()
                .len(),
            2
        );
        assert!(check_answer(&json!({"ref": "a"})).is_err());
        assert!(check_answer(&json!([{"ref": 1}])).is_err());
        let (v, m) = fetch_answer("in", &json!({"version": {"ref": "a"}})).unwrap();
        assert_eq!((v, m), (json!({"ref": "a"}), json!([])));
        assert!(fetch_answer("in", &json!({"metadata": []}))
            .unwrap_err()
            .to_string()
            .contains("no version"));
        assert!(fetch_answer("out", &json!({"version": {"a": "b"}, "metadata": {}})).is_err());
    }
}
