//! The task step: streams its inputs into volumes (in parallel), creates its
//! container (on an image volume when it names an image), runs the task's
//! process, relays its output and keeps its outputs as artifacts.
//!
//! Paths follow Concourse: relative ones are under the build directory,
//! absolute ones are used as they are; an output at an input's path is that
//! input's volume (the task changes the input in place); a cache is an empty
//! volume for the build (a one-off build keeps no caches, as with `fly
//! execute`). A config the runtime cannot run yet (`image_resource` without
//! a given image) is refused before any volume or container is created.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::artifact_store::ArtifactKind;
use crate::artifacts::ArtifactOwner;
use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::placement::Load;
use crate::runtime::{Process, ProcessIo, ProcessOutput, Volume};
use crate::scheduler::StepRequest;
use crate::spec::{ContainerSpec, MountSpec, ProcessSpec, ResourceLimits, RootfsSpec};
use crate::steps::process::{follow, ProcessEnd};
use crate::steps::{Reattach, Step, StepContext, StepEnd};
use crate::task_config::{container_path, TaskConfig};

/// Id of the task's process in its container (to attach to it again).
const PROCESS_ID: &str = "task";

/// A task step.
#[derive(Debug, Clone)]
pub struct TaskStep {
    /// The step's name.
    pub name: String,
    /// The task's configuration.
    pub config: TaskConfig,
    /// Artifact id for each input name.
    pub inputs: BTreeMap<String, String>,
    /// Tags a worker must have.
    pub tags: Vec<String>,
    /// Artifact id of an image (rootfs tar or OCI layout) to run the task in.
    pub image: Option<String>,
}

/// A task whose process has started.
struct Started {
    /// The running process.
    process: Box<dyn Process>,
    /// Its output, in order.
    output: mpsc::Receiver<ProcessOutput>,
    /// Output volumes by output name, streamed back after the process.
    outputs: Vec<(String, Arc<dyn Volume>)>,
}

#[async_trait]
impl Step for TaskStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn worker_request(&self) -> StepRequest {
        let config = &self.config;
        StepRequest {
            platform: config.platform.clone(),
            tags: self.tags.clone(),
            inputs: self
                .inputs
                .values()
                .chain(self.image.iter())
                .cloned()
                .collect(),
            is_check: false,
            resource_type: None,
            need: Load {
                tasks: 1,
                containers: 1,
                volumes: (self.inputs.len() + config.outputs.len() + config.caches.len()) as u32,
            },
            ..StepRequest::default()
        }
    }

    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        // Setting up (volumes, inputs, image, container, process start) ends
        // early on an abort, a timeout or the worker stalling.
        let mut stop = ctx.stop();
        let mut watch = ctx.worker_watch();
        let started = tokio::select! {
            started = self.start(ctx) => started?,
            _ = stop.requested() => return Ok(StepEnd::Stopped),
            lost = watch.lost("the step was set up") => return Err(lost),
        };
        self.finish(ctx, started, [0, 0]).await
    }

    async fn reattach(&self, ctx: &mut StepContext, at: Reattach) -> Result<StepEnd, EngineError> {
        let worker = ctx.worker().clone();
        let container = worker
            .lookup_container(&at.container)
            .await?
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "the step's container {} is gone from worker {}",
                    at.container,
                    worker.name()
                ))
            })?;
        let (tx, output) = mpsc::channel(256);
        let process = container
            .attach(
                PROCESS_ID,
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await?;
        let mut outputs = Vec::new();
        for (name, role) in self.output_roles(&format!("/tmp/build/{}", ctx.build())) {
            let Some((_, handle)) = at.volumes.iter().find(|(r, _)| *r == role) else {
                continue;
            };
            if let Some(v) = worker.lookup_volume(handle).await? {
                outputs.push((name, v));
            }
        }
        let started = Started {
            process,
            output,
            outputs,
        };
        self.finish(ctx, started, at.already_stored).await
    }
}

impl TaskStep {
    /// Each output's name and the role of the volume it is: the volume of
    /// an input (or an earlier output) mounted at the same path, as in
    /// Concourse, else its own `output:NAME`.
    fn output_roles(&self, build_dir: &str) -> Vec<(String, String)> {
        let mut at_path: BTreeMap<String, String> = self
            .config
            .inputs
            .iter()
            .filter(|i| self.inputs.contains_key(&i.name))
            .map(|i| {
                (
                    container_path(build_dir, &i.path),
                    format!("input:{}", i.name),
                )
            })
            .collect();
        self.config
            .outputs
            .iter()
            .map(|o| {
                let role = at_path
                    .entry(container_path(build_dir, &o.path))
                    .or_insert_with(|| format!("output:{}", o.name))
                    .clone();
                (o.name.clone(), role)
            })
            .collect()
    }

    /// Creates the step's volumes (streaming the inputs in, in parallel), its
    /// container, and starts its process.
    async fn start(&self, ctx: &mut StepContext) -> Result<Started, EngineError> {
        let config = &self.config;
        if let Some(why) = config.unsupported(self.image.is_some()) {
            return Err(EngineError::Invalid(why));
        }
        let build_dir = format!("/tmp/build/{}", ctx.build());
        let mut mounts = Vec::new();
        // Volumes by role, for outputs that share an input's volume.
        let mut by_role: BTreeMap<String, Arc<dyn Volume>> = BTreeMap::new();
        let mut inputs = Vec::new();
        for input in &config.inputs {
            let Some(artifact) = self.inputs.get(&input.name) else {
                if input.optional {
                    continue;
                }
                return Err(EngineError::Invalid(format!(
                    "input {:?} was not given",
                    input.name
                )));
            };
            let role = format!("input:{}", input.name);
            let volume = ctx.create_volume(&role).await?;
            mounts.push(mount(&volume, &container_path(&build_dir, &input.path)));
            by_role.insert(role, volume.clone());
            inputs.push((input.name.clone(), artifact.clone(), volume));
        }
        // Inputs stream in parallel.
        let encoding = ctx.encoding();
        futures::future::try_join_all(inputs.iter().map(|(name, artifact, volume)| {
            let store = ctx.artifacts().clone();
            async move {
                let body = store.open(None, artifact, encoding).await?;
                volume.stream_in(".", encoding, body).await.map_err(|e| {
                    EngineError::Invalid(format!("streaming input {name:?} to the worker: {e}"))
                })
            }
        }))
        .await?;
        let mut outputs = Vec::new();
        for (output, (name, role)) in config.outputs.iter().zip(self.output_roles(&build_dir)) {
            let volume = match by_role.get(&role) {
                Some(shared) => shared.clone(),
                None => {
                    let volume = ctx.create_volume(&role).await?;
                    mounts.push(mount(&volume, &container_path(&build_dir, &output.path)));
                    by_role.insert(role, volume.clone());
                    volume
                }
            };
            outputs.push((name, volume));
        }
        // A one-off build's caches start empty and go with the build, as
        // `fly execute`'s do in Concourse.
        for cache in &config.caches {
            let volume = ctx.create_volume(&format!("cache:{}", cache.path)).await?;
            mounts.push(mount(&volume, &container_path(&build_dir, &cache.path)));
        }
        let rootfs = match &self.image {
            Some(artifact) => RootfsSpec::Volume {
                handle: ctx.image_volume(artifact).await?,
            },
            None => {
                RootfsSpec::from_uri(config.rootfs_uri.as_deref()).map_err(EngineError::Invalid)?
            }
        };
        let container = ctx
            .create_container(|handle| ContainerSpec {
                handle,
                rootfs,
                mounts,
                env: config
                    .params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
                limits: ResourceLimits {
                    memory: config.container_limits.memory,
                    cpu: config.container_limits.cpu,
                    pids: config.container_limits.pids,
                },
                hermetic: config.hermetic,
                properties: BTreeMap::new(),
            })
            .await?;
        let dir = match &config.run.dir {
            Some(d) => container_path(&build_dir, d),
            None => build_dir.clone(),
        };
        let (tx, output) = mpsc::channel(256);
        let process = container
            .run(
                ProcessSpec {
                    id: PROCESS_ID.into(),
                    path: config.run.path.clone(),
                    args: config.run.args.clone(),
                    dir: Some(dir),
                    env: vec![],
                    user: config.run.user.clone(),
                    tty: None,
                },
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await?;
        Ok(Started {
            process,
            output,
            outputs,
        })
    }

    /// Follows the started process to its end, then keeps the outputs as
    /// artifacts (not when the build was stopped).
    async fn finish(
        &self,
        ctx: &mut StepContext,
        started: Started,
        skip: [u64; 2],
    ) -> Result<StepEnd, EngineError> {
        let Started {
            process,
            output,
            outputs,
        } = started;
        let status = match follow(ctx, process.as_ref(), output, skip).await? {
            ProcessEnd::Stopped => return Ok(StepEnd::Stopped),
            ProcessEnd::Exited(status) => status,
        };
        let encoding = ctx.encoding();
        for (name, volume) in outputs {
            let body = volume.stream_out(".", encoding).await?;
            let owner = ArtifactOwner {
                team: ctx.team(),
                name: Some(&name),
                build: Some(ctx.build()),
            };
            let kept = ctx
                .artifacts()
                .keep(body, encoding, ArtifactKind::Files, owner)
                .await
                .map_err(|e| EngineError::Invalid(format!("keeping output {name:?}: {e}")))?;
            ctx.emit(&BuildEvent::Output {
                name,
                artifact_id: kept.id,
                time: crate::db::now_ms(),
            })
            .await?;
        }
        Ok(StepEnd::Exited(status))
    }
}

/// A volume mounted at the absolute path `path`.
fn mount(volume: &Arc<dyn Volume>, path: &str) -> MountSpec {
    MountSpec {
        volume: volume.handle().to_string(),
        path: path.to_string(),
        readonly: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(yaml: &str, given: &[&str]) -> TaskStep {
        TaskStep {
            name: "task".into(),
            config: TaskConfig::from_yaml(yaml).unwrap(),
            inputs: given
                .iter()
                .map(|n| (n.to_string(), format!("artifact-{n}")))
                .collect(),
            tags: vec![],
            image: None,
        }
    }

    #[test]
    fn an_output_at_an_inputs_path_is_that_inputs_volume() {
        let s = step(
            "platform: linux\ninputs: [{name: main}, {name: dev, path: /abs/dev}, {name: opt, optional: true}]\noutputs: [{name: main}, {name: out, path: /abs/dev/}, {name: opt}, {name: again, path: ./opt}]\nrun: {path: ls}\n",
            &["main", "dev"],
        );
        assert_eq!(
            s.output_roles("/tmp/build/7"),
            [
                ("main".to_string(), "input:main".to_string()),
                ("out".into(), "input:dev".into()),
                // An optional input not given leaves its path to the output.
                ("opt".into(), "output:opt".into()),
                ("again".into(), "output:opt".into()),
            ]
        );
    }
}
