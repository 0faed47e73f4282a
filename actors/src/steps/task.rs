//! The task step: streams its inputs into volumes (in parallel), creates its
//! container (on an image volume when it names an image), runs the task's
//! process, relays its output and keeps its outputs as artifacts.

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
use crate::task_config::TaskConfig;

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
        for (role, handle) in &at.volumes {
            let Some(name) = role.strip_prefix("output:") else {
                continue;
            };
            if self.config.outputs.iter().any(|o| o.name == name) {
                if let Some(v) = worker.lookup_volume(handle).await? {
                    outputs.push((name.to_string(), v));
                }
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
    /// Creates the step's volumes (streaming the inputs in, in parallel), its
    /// container, and starts its process.
    async fn start(&self, ctx: &mut StepContext) -> Result<Started, EngineError> {
        let config = &self.config;
        let build_dir = format!("/tmp/build/{}", ctx.build());
        let mut mounts = Vec::new();
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
            let volume = ctx.create_volume(&format!("input:{}", input.name)).await?;
            mounts.push(mount(&volume, &build_dir, &input.path));
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
        for output in &config.outputs {
            let volume = ctx
                .create_volume(&format!("output:{}", output.name))
                .await?;
            mounts.push(mount(&volume, &build_dir, &output.path));
            outputs.push((output.name.clone(), volume));
        }
        for cache in &config.caches {
            let volume = ctx.create_volume(&format!("cache:{}", cache.path)).await?;
            mounts.push(mount(&volume, &build_dir, &cache.path));
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
            Some(d) if d.starts_with('/') => d.clone(),
            Some(d) => format!("{build_dir}/{d}"),
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

/// A volume mounted at `path` under the build's directory.
fn mount(volume: &Arc<dyn Volume>, build_dir: &str, path: &str) -> MountSpec {
    MountSpec {
        volume: volume.handle().to_string(),
        path: format!("{build_dir}/{path}"),
        readonly: false,
    }
}
