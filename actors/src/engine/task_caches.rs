//! Task caches and garbage collection through the engine: clearing a job's
//! task caches at once (`gantry clear-task-cache`), and what the
//! Collector's rules have done.

use super::Engine;
use crate::error::EngineError;
use crate::gc::collector::{Rule, RuleStats};

impl Engine {
    /// Forgets the task caches of job `job` of pipeline `pipeline` of
    /// `team` (of step `step` only, when given) on every worker; their
    /// volumes become `destroying` (the workers' sweepers destroy them).
    /// Answers how many caches were cleared; a team that does not exist is
    /// [`EngineError::NotFound`].
    pub async fn clear_task_cache(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        step: Option<&str>,
    ) -> Result<u64, EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.into(),
            });
        }
        // An instance is named however its vars are ordered or quoted.
        let canonical = crate::plan::PipelineRef::parse(pipeline).map(|r| r.to_string());
        let pipeline = canonical.as_deref().unwrap_or(pipeline);
        crate::gc::rules_artifacts::clear_task_caches(&self.db, team, pipeline, job, step).await
    }

    /// What each of the Collector's rules has done since this web node started.
    pub fn collector_stats(&self) -> Vec<(Rule, RuleStats)> {
        self.collector.snapshot()
    }
}
