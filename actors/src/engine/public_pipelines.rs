//! Public pipelines (Concourse's `expose-pipeline` and `hide-pipeline`):
//! an exposed pipeline is read by anyone, signed in or not. What such a
//! reader sees of it is the web node's to cut (`src/web/api/public_read.rs`);
//! the engine stores the flag and answers what is public.

use super::Engine;
use crate::error::EngineError;
use crate::views::Publicity;

impl Engine {
    /// Exposes (`public`) or hides pipeline `name` of `team`. The flag is
    /// the pipeline's, not its config's: setting the pipeline again keeps
    /// it, as in Concourse.
    pub async fn expose_pipeline(
        &self,
        team: &str,
        name: &str,
        public: bool,
    ) -> Result<(), EngineError> {
        let row = self.pipeline_row(team, name).await?;
        self.db
            .pipelines()
            .set_pipeline_public(row.id, public)
            .await
    }

    /// What pipeline `pipeline` of `team` shows a reader outside the team,
    /// with whether its job `job` and resource `resource` (when asked) are
    /// public; none when there is no such pipeline.
    pub async fn publicity(
        &self,
        team: &str,
        pipeline: &str,
        job: Option<&str>,
        resource: Option<&str>,
    ) -> Result<Option<Publicity>, EngineError> {
        // An instance is named however its vars are ordered or quoted.
        let canonical = crate::plan::PipelineRef::parse(pipeline).map(|r| r.to_string());
        self.db
            .pipelines()
            .publicity(
                team,
                canonical.as_deref().unwrap_or(pipeline),
                job,
                resource,
            )
            .await
    }
}
