//! The task step: streams its inputs into volumes (in parallel), creates its
//! container (on an image volume when it names an image), runs the task's
//! process, relays its output and keeps its outputs as artifacts.
//!
//! Paths follow Concourse: relative ones are under the build directory,
//! absolute ones are used as they are; an output at an input's path is that
//! input's volume (the task changes the input in place); a cache of a job
//! build is the job's cache on the worker (`task_cache.rs`), a one-off
//! build's an empty volume for the build (as with `fly execute`). A config
//! the runtime cannot run yet (`image_resource` without a given image) is
//! refused before any volume or container is created.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::artifacts::ArtifactOwner;
use crate::error::EngineError;
use crate::placement::Load;
use crate::plan::TaskStep;
use crate::resources::config::ImageSource;
use crate::scheduler::StepRequest;
use crate::steps::process::{self, follow, ProcessEnd};
use crate::steps::resource_fetch::{fetch_image, image_of_artifact, Halt};
use crate::steps::resource_script::FetchedImage;
use crate::steps::{Reattach, Step, StepContext, StepEnd};
use crate::task_config::{container_path, TaskConfig};
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::{Process, ProcessIo, ProcessOutput, Volume};
use gantry_wire::spec::{MountSpec, ResourceLimits, RootfsSpec};
use gantry_wire::state::ArtifactKind;

/// Id of the task's process in its container (to attach to it again).
const PROCESS_ID: &str = "task";

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

    fn kind_name(&self) -> Option<&'static str> {
        Some("task")
    }

    fn argv(&self) -> Vec<String> {
        crate::plan::task_argv(&self.config)
    }

    fn worker_request(&self) -> StepRequest {
        let config = &self.config;
        let image_source = self.image_source();
        let mut tags = self.tags.clone();
        if let Some(ir) = &config.image_resource {
            tags.extend(ir.tags.iter().filter(|t| !self.tags.contains(t)).cloned());
        }
        StepRequest {
            platform: config.platform.clone(),
            tags,
            inputs: self
                .inputs
                .values()
                .chain(self.image.iter())
                .cloned()
                .collect(),
            is_check: false,
            image: image_source.is_some(),
            // Its own container, or the `in` fetching its image with a
            // privileged type, on the same worker.
            privileged: self.privileged
                || image_source
                    .as_ref()
                    .is_some_and(|i| i.config.type_.needs_privileged()),
            resource_type: image_source.map(|i| i.config.type_.base().to_string()),
            need: Load {
                tasks: 1,
                containers: 1,
                volumes: (self.expected_inputs() + config.outputs.len() + config.caches.len())
                    as u32,
            },
            ..StepRequest::default()
        }
    }

    /// The inputs not given with the step, under their mapped names.
    fn named_inputs(&self) -> Vec<String> {
        self.config
            .inputs
            .iter()
            .filter(|i| !self.inputs.contains_key(&i.name))
            .map(|i| self.input_mapping.get(&i.name).unwrap_or(&i.name).clone())
            .collect()
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
            .lookup_container(at.container())
            .await?
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "the step's container {} is gone from worker {}",
                    at.container(),
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
        let present: Vec<&str> = at
            .volumes
            .iter()
            .filter_map(|(role, _)| role.strip_prefix("input:"))
            .collect();
        // Every output must be there again: one missing would end the
        // step with an output fewer and no word of it.
        for (name, role) in self.output_roles(&format!("/tmp/build/{}", ctx.build()), &present) {
            let Some((_, handle)) = at.volumes.iter().find(|(r, _)| *r == role) else {
                return Err(EngineError::Invalid(format!(
                    "output {name:?}: its volume ({role}) was not recorded with the step, so the step cannot be taken over"
                )));
            };
            match worker.lookup_volume(handle).await? {
                Some(v) => outputs.push((name, v)),
                None => {
                    return Err(EngineError::Invalid(format!(
                        "output {name:?}: its volume {handle} is gone from worker {}",
                        worker.name()
                    )))
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
    /// Each output's name and the role of the volume it is: the volume of
    /// an input (or an earlier output) mounted at the same path, as in
    /// Concourse, else its own `output:NAME`.
    fn output_roles(&self, build_dir: &str, present: &[&str]) -> Vec<(String, String)> {
        let mut at_path: BTreeMap<String, String> = self
            .config
            .inputs
            .iter()
            .filter(|i| present.contains(&i.name.as_str()))
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

    /// Where the task's image comes from when its config has an
    /// `image_resource` and no image artifact was given.
    fn image_source(&self) -> Option<ImageSource> {
        if self.image.is_some() || self.image_artifact.is_some() {
            return None;
        }
        if let Some(resolved) = &self.image_resource {
            return Some(resolved.clone());
        }
        let ir = self.config.image_resource.as_ref()?;
        ImageSource::of(ir, None).ok()
    }

    /// Fetches the task's `image_resource` on the step's worker (from the
    /// resource cache when it was fetched before).
    async fn fetch_image(
        &self,
        ctx: &mut StepContext,
        source: &ImageSource,
    ) -> Result<FetchedImage, EngineError> {
        let fetched = fetch_image(
            ctx,
            &source.name,
            &source.config,
            &source.params,
            source.version.as_ref(),
        )
        .await;
        fetched.map_err(|halt| match halt {
            Halt::Error(e) => e,
            Halt::End(end) => EngineError::Invalid(format!(
                "fetching the image {:?} with resource type {:?} did not succeed ({end:?})",
                source.name,
                source.config.type_.name()
            )),
        })
    }

    /// How many input volumes the step is expected to create: the inputs
    /// given, and the required ones (found among the build's artifacts).
    fn expected_inputs(&self) -> usize {
        self.config
            .inputs
            .iter()
            .filter(|i| !i.optional || self.inputs.contains_key(&i.name))
            .count()
    }

    /// The artifact id of each input the step has: given with the step, or
    /// an earlier step's output found by name (through `input_mapping`) in
    /// the build's artifacts. A required input with neither is an error
    /// naming it.
    fn resolve_inputs(&self, ctx: &StepContext) -> Result<BTreeMap<String, String>, EngineError> {
        let mut resolved = BTreeMap::new();
        for input in &self.config.inputs {
            let name = &input.name;
            if let Some(id) = self.inputs.get(name) {
                resolved.insert(name.clone(), id.clone());
                continue;
            }
            let artifact = self.input_mapping.get(name).unwrap_or(name);
            match ctx.named_artifacts().get(artifact) {
                Some(id) => {
                    resolved.insert(name.clone(), id);
                }
                None if input.optional => {}
                None if artifact != name => {
                    return Err(EngineError::Invalid(format!(
                        "input {name:?} (mapped to {artifact:?}) was not given: no earlier step of the build produced an artifact {artifact:?}"
                    )))
                }
                None => {
                    return Err(EngineError::Invalid(format!(
                        "input {name:?} was not given: no earlier step of the build produced an artifact {name:?}"
                    )))
                }
            }
        }
        Ok(resolved)
    }

    /// Creates the step's volumes (streaming the inputs in, in parallel), its
    /// container, and starts its process.
    async fn start(&self, ctx: &mut StepContext) -> Result<Started, EngineError> {
        let config = &self.config;
        // The image first: an input streamed for nothing is a waste.
        // A worker that pulls images itself is given the reference instead
        // of a fetched image.
        let source = self.image_source();
        let pulled = match &source {
            Some(source) if self.image_artifact.is_none() && pulled_by(ctx, source) => Some(
                source
                    .pull_reference()
                    .map_err(|e| EngineError::Invalid(format!("image_resource: {e}")))?,
            ),
            _ => None,
        };
        let fetched = match (&self.image_artifact, source) {
            (Some(name), _) => {
                let artifact = ctx.named_artifacts().get(name).ok_or_else(|| {
                    EngineError::Invalid(format!(
                        "image {name:?} was not given: no earlier step of the build produced an artifact {name:?}"
                    ))
                })?;
                Some(image_of_artifact(ctx, name, &artifact).await?)
            }
            (None, Some(source)) if pulled.is_none() => Some(self.fetch_image(ctx, &source).await?),
            (None, _) => None,
        };
        let build_dir = format!("/tmp/build/{}", ctx.build());
        let mut mounts = Vec::new();
        // Volumes by role, for outputs that share an input's volume.
        let mut by_role: BTreeMap<String, Arc<dyn Volume>> = BTreeMap::new();
        let resolved = self.resolve_inputs(ctx)?;
        // Inputs stream in parallel, each into a volume of its own.
        let wanted: Vec<_> = config
            .inputs
            .iter()
            .filter_map(|i| resolved.get(&i.name).map(|a| (i, a.clone())))
            .collect();
        let volumes = ctx.input_volumes(wanted.iter().map(|(input, artifact)| {
            (
                format!("input:{}", input.name),
                input.name.clone(),
                artifact.clone(),
            )
        }));
        for ((input, _), (role, volume)) in wanted.iter().zip(volumes.await?) {
            mounts.push(mount(&volume, &container_path(&build_dir, &input.path)));
            by_role.insert(role, volume);
        }
        let mut outputs = Vec::new();
        let present: Vec<&str> = resolved.keys().map(String::as_str).collect();
        for (output, (name, role)) in config
            .outputs
            .iter()
            .zip(self.output_roles(&build_dir, &present))
        {
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
        // A job build's caches are kept per (job, step, path, worker)
        // (`task_cache.rs`); a one-off build's start empty and go with the
        // build, as `fly execute`'s do in Concourse.
        let job = ctx.job().cloned();
        for cache in &config.caches {
            let volume = match &job {
                Some(job) => ctx.task_cache_volume(job, cache).await?,
                None => ctx.create_volume(&format!("cache:{}", cache.path)).await?,
            };
            mounts.push(mount(&volume, &container_path(&build_dir, &cache.path)));
        }
        let rootfs = match (&self.image, &fetched, pulled) {
            (Some(artifact), _, _) => RootfsSpec::Volume {
                handle: ctx.image_volume(artifact).await?,
            },
            (None, Some(image), _) => image.rootfs(ctx).await?,
            (None, None, Some(reference)) => RootfsSpec::Image { reference },
            (None, None, None) => {
                RootfsSpec::from_uri(config.rootfs_uri.as_deref()).map_err(EngineError::Invalid)?
            }
        };
        // The image's environment comes first; the task's params win.
        let mut env: Vec<String> = fetched.iter().flat_map(|i| i.env.clone()).collect();
        env.extend(config.params.iter().map(|(k, v)| format!("{k}={v}")));
        let user = config
            .run
            .user
            .clone()
            .or_else(|| fetched.as_ref().and_then(|i| i.user.clone()));
        let dir = match &config.run.dir {
            Some(d) => container_path(&build_dir, d),
            None => build_dir.clone(),
        };
        let (process, output) = process::start(
            ctx,
            process::Container {
                rootfs,
                mounts,
                env,
                limits: ResourceLimits {
                    memory: config.container_limits.memory,
                    cpu: config.container_limits.cpu,
                    pids: config.container_limits.pids,
                },
                hermetic: config.hermetic,
                resource_type: None,
                privileged: self.privileged,
            },
            process::Command {
                id: PROCESS_ID.into(),
                path: config.run.path.clone(),
                args: config.run.args.clone(),
                dir: Some(dir),
                user,
                input: None,
            },
        )
        .await
        .map_err(|e| e.not_started_as(|| run_path(config)))?;
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
        let followed = follow(ctx, process.as_ref(), output, skip).await;
        let status = match followed.map_err(|e| e.not_started_as(|| run_path(&self.config)))? {
            ProcessEnd::Stopped => return Ok(StepEnd::Stopped),
            ProcessEnd::Exited(status) => status,
        };
        let encoding = ctx.encoding();
        // A job build's outputs stay on this worker (later steps get them
        // from here); a one-off build's go to the web node's store, where
        // the CLI downloads them once the build has ended.
        let on_worker = ctx.job().is_some();
        // Two outputs at one path share a volume, and so an artifact.
        let mut kept_volumes: BTreeMap<String, String> = BTreeMap::new();
        for (output, volume) in outputs {
            let name = self.output_mapping.get(&output).unwrap_or(&output).clone();
            let id = match kept_volumes.get(volume.handle()) {
                Some(id) => id.clone(),
                None if on_worker => ctx.keep_on_worker(&name, &volume).await?,
                None => {
                    let body = volume.stream_out(".", encoding).await?;
                    let owner = ArtifactOwner {
                        team: ctx.team(),
                        name: Some(&name),
                        build: Some(ctx.build()),
                    };
                    ctx.artifacts()
                        .keep(body, encoding, ArtifactKind::Files, owner)
                        .await
                        .map_err(|e| {
                            EngineError::Invalid(format!("keeping output {output:?}: {e}"))
                        })?
                        .id
                }
            };
            kept_volumes.insert(volume.handle().to_string(), id.clone());
            ctx.named_artifacts().set(&name, &id);
            ctx.emit(&BuildEvent::Output {
                name,
                artifact_id: id,
                time: crate::db::now_ms(),
            })
            .await?;
        }
        Ok(StepEnd::Exited(status))
    }
}

/// What a task runs, as a step that could not start it names it.
fn run_path(config: &TaskConfig) -> String {
    format!("run.path {:?}", config.run.path)
}

/// Whether the step's worker pulls `source`'s image itself: a base type
/// the worker pulls (a type of the pipeline's is fetched as ever).
fn pulled_by(ctx: &StepContext, source: &ImageSource) -> bool {
    matches!(
        &source.config.type_,
        crate::resources::config::ResourceType::Base { name } if ctx.worker().pulls_images(name)
    )
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
    use crate::task_config::TaskConfig;

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
            input_mapping: Default::default(),
            output_mapping: Default::default(),
            image_resource: None,
            image_artifact: None,
            privileged: false,
        }
    }

    #[test]
    fn an_output_at_an_inputs_path_is_that_inputs_volume() {
        let s = step(
            "platform: linux\ninputs: [{name: main}, {name: dev, path: /abs/dev}, {name: opt, optional: true}]\noutputs: [{name: main}, {name: out, path: /abs/dev/}, {name: opt}, {name: again, path: ./opt}]\nrun: {path: ls}\n",
            &["main", "dev"],
        );
        assert_eq!(
            s.output_roles("/tmp/build/7", &["main", "dev"]),
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
