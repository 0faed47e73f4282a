//! The get step: fetches a version of a resource (the pinned one, else the
//! newest after a `check`), from its resource cache when one was kept, else
//! with the type's `in`; the files become the build's artifact of the
//! step's name.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::placement::Load;
use crate::resources::fetch::{self, Halt, Resource};
use crate::resources::ResourceConfig;
use crate::scheduler::StepRequest;
use crate::steps::{Step, StepContext, StepEnd};

/// A get step.
#[derive(Debug, Clone)]
pub struct GetStep {
    /// The step's name: the artifact it produces.
    pub name: String,
    /// The resource fetched.
    pub resource: String,
    /// Its type and source.
    pub config: ResourceConfig,
    /// A pinned version (the step's `version: {...}`, or the resource's).
    pub version: Option<Value>,
    /// `params` of `in`.
    pub params: Value,
    /// Tags a worker must have.
    pub tags: Vec<String>,
}

/// What a resource step needs of a worker: its base type, its tags.
pub fn resource_request(config: &ResourceConfig, tags: &[String], is_check: bool) -> StepRequest {
    StepRequest {
        platform: "linux".into(),
        tags: tags.to_vec(),
        is_check,
        resource_type: Some(config.type_.base().to_string()),
        need: Load {
            tasks: 0,
            containers: 1,
            volumes: 1,
        },
        ..StepRequest::default()
    }
}

/// Runs `body` (a resource step's work on `ctx`, whose stop signal and
/// worker watch are given) until it ends, the build stops or the worker is
/// lost; a stop destroys the script's container with the step.
pub async fn guarded<F>(
    mut stop: crate::steps::Stop,
    mut watch: crate::steps::WorkerWatch,
    body: F,
) -> Result<StepEnd, EngineError>
where
    F: std::future::Future<Output = Result<StepEnd, Halt>>,
{
    tokio::select! {
        end = body => match end {
            Ok(end) => Ok(end),
            Err(halt) => halt.into_end(),
        },
        _ = stop.requested() => Ok(StepEnd::Stopped),
        lost = watch.lost("the resource step ran") => Err(lost),
    }
}

/// Makes `artifact` the build's artifact `name` and tells it.
pub async fn produce(ctx: &StepContext, name: &str, artifact: &str) -> Result<(), EngineError> {
    ctx.named_artifacts().set(name, artifact);
    ctx.emit(&BuildEvent::Output {
        name: name.to_string(),
        artifact_id: artifact.to_string(),
        time: crate::db::now_ms(),
    })
    .await
}

#[async_trait]
impl Step for GetStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn worker_request(&self) -> StepRequest {
        let mut request = resource_request(&self.config, &self.tags, false);
        // `check` (for the newest version), then `in`.
        request.need.containers = 2;
        request
    }

    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        let (stop, watch) = (ctx.stop(), ctx.worker_watch());
        guarded(stop, watch, self.fetch(ctx)).await
    }
}

impl GetStep {
    /// Finds the version, fetches it and produces the artifact.
    async fn fetch(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        let r = Resource {
            name: &self.resource,
            config: &self.config,
            image: &image,
        };
        let version = fetch::version_to_fetch(ctx, &r, self.version.as_ref()).await?;
        let fetched = fetch::get(ctx, &r, &version, &self.params).await?;
        produce(ctx, &self.name, &fetched.cache.artifact_id).await?;
        Ok(StepEnd::Exited(0))
    }
}
