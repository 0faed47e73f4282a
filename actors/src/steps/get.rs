//! The get step: fetches a version of a resource (the pinned one, else the
//! newest after a `check`), from its resource cache when one was kept, else
//! with the type's `in`; the files become the build's artifact of the
//! step's name.

use crate::db::Direction;
use crate::plan::GetStep;
use crate::steps::resource_fetch::{self as fetch, Halt, Resource};
use crate::steps::resource_step::{produce, resource_step};
use crate::steps::{StepContext, StepEnd};

// A get's script is not reattached: fetching the version again is safe.
resource_step!(GetStep, fetch, "get", is_check: false, containers: 2,
    on_takeover: |_: &GetStep| crate::steps::OnTakeover::Rerun);

impl GetStep {
    /// Finds the version, fetches it and produces the artifact.
    async fn fetch(&self, ctx: &mut StepContext) -> Result<StepEnd, Halt> {
        let image = fetch::type_image(ctx, &self.config.type_).await?;
        let r = Resource {
            name: &self.resource,
            config: &self.config,
            image: &image,
            check_timeout: self.check_timeout,
        };
        let version = fetch::version_to_fetch(ctx, &r, self.version.as_ref()).await?;
        let fetched = fetch::get(ctx, &r, &version, &self.params).await?;
        // What `passed` of later jobs reads, and the version's metadata in
        // the pipeline's history of the resource (its versions page).
        if ctx.job().is_some() {
            let key = self.config.key();
            let told = fetched.metadata.as_array().is_some_and(|m| !m.is_empty());
            let scope = if told {
                ctx.db()
                    .versions()
                    .output_scope(ctx.build(), &self.resource, &key)
                    .await?
            } else {
                None
            };
            if let Some(scope) = scope {
                ctx.db()
                    .versions()
                    .save_version_metadata(&scope, &key, &fetched.version, &fetched.metadata)
                    .await?;
            }
            ctx.db()
                .versions()
                .record_build_version(
                    ctx.build(),
                    Direction::In,
                    &self.name,
                    &self.resource,
                    &fetched.version,
                )
                .await?;
        }
        produce(ctx, &self.name, &fetched.artifact_id).await?;
        Ok(StepEnd::Exited(0))
    }
}
