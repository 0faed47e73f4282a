//! The check step: the whole of a check build (`gantry check`). Runs the
//! resource type's `check` from the newest stored version and stores the
//! versions it reports. Placed with the `checks` strategy chain.

use std::future::Future;
use std::pin::Pin;

use crate::plan::CheckStep;
use crate::resources::ResourceType;
use crate::steps::resource_fetch::{self as fetch, Halt, Resource};
use crate::steps::resource_step::resource_step;
use crate::steps::{StepContext, StepEnd};

// Checking again stores no version twice.
resource_step!(CheckStep, check, "check", is_check: true, containers: 1,
    on_takeover: |_: &CheckStep| crate::steps::OnTakeover::Rerun);

impl CheckStep {
    async fn check(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
        if self.types_first {
            check_types(ctx, &self.config.type_).await?;
        }
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        let r = Resource {
            name: &self.name,
            config: &self.config,
            image: &image,
            check_timeout: self.check_timeout,
        };
        fetch::check(ctx, &r, self.scope.as_deref()).await?;
        Ok(StepEnd::Exited(0))
    }
}

/// Checks the image of custom type `t` and of every custom type below
/// it, deepest first, each into the history its periodic checks keep
/// (else the build's team's one-off history), where fetching its image
/// looks next. A base type has nothing to check; an image pinned to a
/// version is not checked.
fn check_types<'a>(
    ctx: &'a mut StepContext,
    t: &'a ResourceType,
) -> Pin<Box<dyn Future<Output = Result<(), Halt>> + Send + 'a>> {
    Box::pin(async move {
        let ResourceType::Custom {
            name,
            image,
            version: None,
            ..
        } = t
        else {
            return Ok(());
        };
        check_types(ctx, &image.type_).await?;
        let scope = ctx
            .db()
            .pipelines()
            .resource_type_scope(ctx.team(), &image.key())
            .await?;
        let parent = fetch::type_image(ctx, &image.type_).await?;
        // A resource type's image check takes the node's default timeout
        // (Concourse's resource types have no `check_timeout`).
        let r = Resource {
            name,
            config: image,
            image: &parent,
            check_timeout: None,
        };
        fetch::check(ctx, &r, scope.as_deref()).await?;
        Ok(())
    })
}
