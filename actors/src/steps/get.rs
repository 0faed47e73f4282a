//! The get step: fetches a version of a resource (the pinned one, else the
//! newest after a `check`), from its resource cache when one was kept, else
//! with the type's `in`; the files become the build's artifact of the
//! step's name.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::EngineError;
use crate::resources::ResourceConfig;
use crate::scheduler::StepRequest;
use crate::steps::resource_fetch::{self as fetch, Halt, Resource};
use crate::steps::resource_step::{guarded, produce, resource_request};
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
