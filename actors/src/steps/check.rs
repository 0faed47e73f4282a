//! The check step: the whole of a check build (`gantry check`). Runs the
//! resource type's `check` from the newest stored version and stores the
//! versions it reports. Placed with the `checks` strategy chain.

use crate::plan::CheckStep;
use crate::steps::resource_fetch::{self as fetch, Halt, Resource};
use crate::steps::resource_step::resource_step;
use crate::steps::{StepContext, StepEnd};

// Checking again stores no version twice.
resource_step!(CheckStep, check, is_check: true, containers: 1,
    on_takeover: |_: &CheckStep| crate::steps::OnTakeover::Rerun);

impl CheckStep {
    async fn check(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
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
