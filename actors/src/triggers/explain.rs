//! "Why not?": for each input of a job, its resource's newest versions and
//! what each is to the job — the version chosen, or why it was not (pinned
//! elsewhere, disabled, not yet through a `passed` job, through builds
//! the other inputs' versions were not in, older than the one chosen).
//! Computed when asked (`gantry why`, the job's page), not by every round.

use std::collections::BTreeMap;

use super::inputs::JobInput;
use crate::db::{Db, JobAt};
use crate::error::EngineError;
use crate::views::Candidate;

/// Versions shown per input.
pub(super) const SHOWN: i64 = 5;

/// The newest versions of each input of job `at` (of pipeline
/// `pipeline_id`) with their verdicts, given the versions `chosen` by the
/// last resolution (step → version JSON; empty when none satisfied).
pub(crate) async fn explain(
    db: &Db,
    at: JobAt<'_>,
    pipeline_id: i64,
    inputs: &[JobInput],
    chosen: &BTreeMap<String, serde_json::Value>,
) -> Result<BTreeMap<String, Vec<Candidate>>, EngineError> {
    let mut out = BTreeMap::new();
    for input in inputs {
        let page = db
            .versions()
            .all_versions_page(&input.scope, &input.config, None, SHOWN)
            .await?;
        let chosen_text = chosen.get(&input.name).map(|v| v.to_string());
        let mut list = Vec::new();
        for v in page {
            let verdict = if chosen_text.as_deref() == Some(v.version.as_str()) {
                "chosen".to_string()
            } else if let Some(pin) = &input.pin {
                format!("the input is pinned to {}", pin.version())
            } else if db
                .versions()
                .version_disabled(pipeline_id, &input.resource, &v.version)
                .await?
            {
                "disabled".to_string()
            } else {
                let mut why = None;
                for upstream in &input.passed {
                    let up = JobAt {
                        job: upstream,
                        ..at
                    };
                    if db
                        .versions()
                        .passed_builds(up, &input.resource, &v.version)
                        .await?
                        .is_empty()
                    {
                        why = Some(format!("not yet through a succeeded build of {upstream:?}"));
                        break;
                    }
                }
                why.unwrap_or_else(|| {
                    if chosen_text.is_none() {
                        "the other inputs have no version to go with it".to_string()
                    } else if input.every {
                        "version: every takes each in turn, and this is not the next".to_string()
                    } else if input.passed.is_empty() {
                        "older than the version chosen".to_string()
                    } else {
                        "the version chosen came from a newer build of the passed jobs (a build's puts before its gets), or this one went through other builds of them than the other inputs' versions".to_string()
                    }
                })
            };
            list.push(Candidate {
                version: serde_json::from_str(&v.version).unwrap_or_default(),
                verdict,
            });
        }
        out.insert(input.name.clone(), list);
    }
    Ok(out)
}
