//! The versions the scheduler chose for a job's next build, as Concourse's
//! `ListJobInputs` answers them (`atc.BuildInput`): what
//! `GET .../jobs/J/inputs` shows.

use std::collections::BTreeMap;

use serde_json::Value;

use super::pipelines::loaded;
use super::Engine;
use crate::error::EngineError;
use crate::triggers::job_inputs;
use crate::views::NextInput;

impl Engine {
    /// The inputs of job `job` of pipeline `pipeline` of `team` with the
    /// versions its last scheduling round chose, or `None` when that round
    /// chose none yet (or could not satisfy every input: Concourse then
    /// answers not found too).
    pub async fn job_next_inputs(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<Option<Vec<NextInput>>, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let loaded = loaded(&row).await?;
        let def = loaded.job(job).map_err(|e| EngineError::NotFound {
            kind: "job",
            name: format!("{pipeline}/{job}: {e}"),
        })?;
        let decision = self
            .db
            .pipelines()
            .pipeline_jobs(row.id)
            .await?
            .into_iter()
            .find(|j| j.name == job)
            .and_then(|j| j.decision);
        let chosen: BTreeMap<String, Value> = decision
            .as_deref()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .and_then(|d| d.get("inputs").cloned())
            .and_then(|i| serde_json::from_value(i).ok())
            .unwrap_or_default();
        let resources = self.db.pipelines().pipeline_resources(row.id).await?;
        let inputs = job_inputs(&loaded, def, &resources).map_err(EngineError::Invalid)?;
        let mut out = Vec::new();
        for input in inputs {
            let Some(version) = chosen.get(&input.name) else {
                return Ok(None);
            };
            let Some(resource) = loaded.resource(&input.resource) else {
                return Ok(None);
            };
            out.push(NextInput {
                name: input.name,
                resource: input.resource,
                type_: resource.type_.clone(),
                source: serde_json::to_value(&resource.source).unwrap_or(Value::Null),
                // Stored as the version's JSON text, or as the object.
                version: match version {
                    Value::String(text) => serde_json::from_str(text).unwrap_or(version.clone()),
                    other => other.clone(),
                },
            });
        }
        Ok(Some(out))
    }
}
