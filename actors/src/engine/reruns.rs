//! Reruns (`rerun-build`, Concourse's `RerunBuild`): a new build of a
//! stored pipeline's job given exactly the versions another build of the
//! job was given, run with the job's current config. It is named `N.M`
//! (the M-th rerun of build N; a rerun of a rerun reruns the original).
//! It checks and resolves nothing, so no version is new to the job
//! through it and triggering is unchanged; a paused job or pipeline
//! holds it pending like a build triggered by hand, until unpaused.

use std::collections::BTreeMap;

use super::job_builds::{inputs_changed, prepare, BuildRequest};
use super::pipelines::{archived_error, loaded};
use super::Engine;
use crate::db::{Direction, NewRerun};
use crate::error::EngineError;
use crate::views::Build;

/// Parses a job build's name: `N`, or `N.M` for a rerun.
fn parse_name(name: &str) -> Option<(i64, Option<i64>)> {
    let positive = |s: &str| s.parse::<i64>().ok().filter(|n| *n > 0);
    match name.split_once('.') {
        None => Some((positive(name)?, None)),
        Some((n, m)) => Some((positive(n)?, Some(positive(m)?))),
    }
}

impl Engine {
    /// Build `name` (`N` or `N.M`) of job `job` of pipeline `pipeline` of
    /// `team` (Concourse's `GetJobBuild`, what `fly watch -j P/J -b N`
    /// reads).
    pub async fn job_build_named(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        name: &str,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        let not_found = || EngineError::NotFound {
            kind: "build",
            name: format!("{name:?} of job {pipeline}/{job}"),
        };
        let (number, rerun) = parse_name(name).ok_or_else(not_found)?;
        self.db
            .builds()
            .job_build_named((team, &row.name, job), number, rerun)
            .await?
            .ok_or_else(not_found)
    }

    /// Reruns build `name` (`N` or `N.M`) of job `job` of pipeline
    /// `pipeline` of `team` with the versions it was given. Refused: an
    /// unknown build (not found), an archived pipeline, a build given no
    /// inputs yet (one still waiting, or aborted while it waited), and a
    /// job whose inputs changed since (conflicts). `by` (who asked) is
    /// recorded before the rerun can run.
    pub async fn rerun_build(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        name: &str,
        by: &str,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if row.archived {
            return Err(archived_error(&row));
        }
        let named = self.job_build_named(team, pipeline, job, name).await?;
        // Found by its name, so the name parses: `N`, the number reruns share.
        let (number, _) = parse_name(name).unwrap_or_default();
        // A rerun of a rerun reruns the original (the same inputs).
        let original = match named.rerun_of.as_ref().map(|r| r.id) {
            Some(of) => {
                self.db
                    .builds()
                    .get_build(of)
                    .await?
                    .ok_or_else(|| EngineError::NotFound {
                        kind: "build",
                        name: format!("{of}, the build {name} of job {pipeline}/{job} reruns"),
                    })?
            }
            None => named,
        };
        if original.plan.is_null() {
            return Err(EngineError::Conflict(format!(
                "build {name} of job {pipeline}/{job} has no inputs to rerun: it was never given any (it waited for them)"
            )));
        }
        let chosen = self.rerun_inputs(original.id).await?;
        let pipeline_loaded = loaded(&row).await?;
        let state = self.job_state(&row, &pipeline_loaded, job).await?;
        if let Some(why) = inputs_changed(&state.inputs, &chosen) {
            return Err(EngineError::Conflict(format!(
                "build {name} of job {pipeline}/{job} cannot be rerun: {why}"
            )));
        }
        let at = (&original, row.id, number);
        let id = match &state.held {
            Some(why) => {
                let (id, _) = self
                    .db
                    .builds()
                    .create_rerun(at, NewRerun::Waiting(why), &self.config.node_name)
                    .await?;
                self.db.builds().record_person(id, by, false).await?;
                self.tell_waiting(id, why).await?;
                id
            }
            None => {
                let request = BuildRequest {
                    row: &row,
                    pipeline: &pipeline_loaded,
                    job,
                    inputs: &state.inputs,
                    chosen: &chosen,
                };
                let (new, run) = prepare(&request)?;
                let (id, _) = self
                    .db
                    .builds()
                    .create_rerun(at, NewRerun::Ready(&new), &self.config.node_name)
                    .await?;
                self.db.builds().record_person(id, by, false).await?;
                self.start_runnable(id, run, 0);
                id
            }
        };
        self.build(id).await
    }

    /// The versions build `id` was given (input → version JSON).
    pub(super) async fn rerun_inputs(
        &self,
        id: i64,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        Ok(self
            .db
            .versions()
            .build_versions(id)
            .await?
            .into_iter()
            .filter(|(direction, ..)| direction == Direction::In.as_str())
            .map(|(_, name, _, version)| (name, version))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_name;

    /// `N` and `N.M` parse; anything else names no build.
    #[test]
    fn build_names_parse() {
        assert_eq!(parse_name("3"), Some((3, None)));
        assert_eq!(parse_name("3.2"), Some((3, Some(2))));
        for bad in ["", "0", "-1", "x", "1.", ".1", "1.0", "1.2.3", "1.x"] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
