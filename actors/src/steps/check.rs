//! The check step: the whole of a check build (`gantry check`). Runs the
//! resource type's `check` from the newest stored version and stores the
//! versions it reports. Placed with the `checks` strategy chain.

use async_trait::async_trait;

use crate::error::EngineError;
use crate::resources::ResourceConfig;
use crate::scheduler::StepRequest;
use crate::steps::resource_fetch::{self as fetch, Halt, Resource};
use crate::steps::resource_step::{guarded, resource_request};
use crate::steps::{Step, StepContext, StepEnd};

/// A check step.
#[derive(Debug, Clone)]
pub struct CheckStep {
    /// The step's name (the resource's).
    pub name: String,
    /// Its type and source.
    pub config: ResourceConfig,
    /// Tags a worker must have (the resource's).
    pub tags: Vec<String>,
}

#[async_trait]
impl Step for CheckStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn worker_request(&self) -> StepRequest {
        resource_request(&self.config, &self.tags, true)
    }

    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        let (stop, watch) = (ctx.stop(), ctx.worker_watch());
        guarded(stop, watch, self.check(ctx)).await
    }
}

impl CheckStep {
    async fn check(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        let r = Resource {
            name: &self.name,
            config: &self.config,
            image: &image,
        };
        fetch::check(ctx, &r).await?;
        Ok(StepEnd::Exited(0))
    }
}
