//! What the dashboard's overview lists of the stored pipelines: each
//! pipeline without its config, and the status of its jobs' newest builds,
//! each read in one statement for every pipeline the viewer may see.

use gantry_wire::state::BuildStatus;

use super::Engine;
use crate::error::EngineError;
use crate::views::PipelineView;

impl Engine {
    /// Orders the pipelines of `team` as `names` (Concourse's
    /// `order-pipelines`): those named come first, in this order; the
    /// others follow, by name. A name of no pipeline of `team` refuses
    /// the whole.
    pub async fn order_pipelines(&self, team: &str, names: &[String]) -> Result<(), EngineError> {
        self.db.pipelines().order(team, names).await
    }

    /// The pipelines of `team` (none: of every team), by team and in their
    /// order, without their configs, in one statement: what the dashboard's
    /// fleet feed lists.
    pub async fn pipeline_summaries(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<PipelineView>, EngineError> {
        Ok(self
            .db
            .pipelines()
            .summaries(team)
            .await?
            .into_iter()
            .map(
                |(team, name, paused, archived, config_version, vars, public, id)| PipelineView {
                    id,
                    name,
                    team_name: team.clone(),
                    team,
                    paused: paused != 0,
                    archived: archived != 0,
                    public: public != 0,
                    instance_vars: vars.and_then(|v| serde_json::from_str(&v).ok()),
                    config_version,
                    config: None,
                },
            )
            .collect())
    }

    /// The status of the newest build of each job of the pipelines of
    /// `team` (none: of every team), by (team, pipeline): none for a job
    /// with no build.
    pub async fn newest_job_statuses(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<((String, String), Option<BuildStatus>)>, EngineError> {
        Ok(self
            .db
            .pipelines()
            .newest_job_statuses(team)
            .await?
            .into_iter()
            .map(|(team, pipeline, status)| {
                (
                    (team, pipeline),
                    status.as_deref().and_then(BuildStatus::parse),
                )
            })
            .collect())
    }
}
