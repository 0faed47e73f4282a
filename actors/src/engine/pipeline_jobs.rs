//! The periodic work of stored pipelines, led by one web node at a time
//! (the `pipelines` role, `background::campaign`):
//! - `pipeline-checks` (Concourse's "lidar") starts a check build for each
//!   resource config that is due, one per config however many pipelines
//!   and teams name it, at most `max_checks_per_interval` per interval
//!   across the fleet. Each is claimed by moving its next check time with
//!   a compare-and-set (`Db::claim_check`), so even two nodes that both
//!   believe they lead while the lead changes hands cannot start it twice;
//!   the next time takes up to a tenth of the interval of jitter, so checks
//!   set at once spread out; a check still running is not doubled.
//! - `pipeline-triggers` schedules every job of every unpaused pipeline:
//!   it resolves the inputs of each unpaused job with a `trigger: true`
//!   input, and creates a build when a trigger input resolves to a version
//!   the job's newest build did not use (for `version: every`, one build
//!   per version in turn). What it decided is kept on the job (`why`).
//!
//! Why a leader rather than row locks for scheduling: a round reads the
//! job's newest build and then creates the next; two nodes interleaving
//! those steps would both create it. One leader makes the round a single
//! writer, and the lead is already how the Collector runs once.

use std::time::Duration;

use actix::Actor;
use rand::Rng;

use super::pipelines::loaded;
use super::Engine;
use crate::background::{campaign, Job, JobError, Outcome, Periodic, Schedule};
use crate::db::{now_ms, JobAt, PipelineRow};
use crate::error::EngineError;
use crate::triggers::{job_inputs, resolve, Decision, Resolution};

/// Builds one job gets in one round at most (`version: every` makes one
/// per version).
const MAX_BUILDS_PER_ROUND: usize = 20;

/// Starts both jobs, led by the `pipelines` role. Must be called inside
/// the actix System.
pub fn start(engine: &Engine) {
    let every = engine.config.pipelines.interval;
    let leader = campaign(
        &engine.db,
        "pipelines",
        every.max(Duration::from_secs(1)),
        &engine.jobs,
    );
    Periodic::new(
        Checks {
            engine: engine.clone(),
        },
        Schedule::every(every),
        &engine.jobs,
    )
    .led_by(leader.clone())
    .start();
    Periodic::new(
        Triggers {
            engine: engine.clone(),
        },
        Schedule::every(every),
        &engine.jobs,
    )
    .led_by(leader)
    .start();
}

/// `pipeline-checks`.
struct Checks {
    engine: Engine,
}

impl Job for Checks {
    fn name(&self) -> String {
        "pipeline-checks".into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let engine = &self.engine;
        let db = &engine.db;
        let limit = engine.config.pipelines.max_checks_per_interval.max(1) as i64;
        let now = now_ms();
        let due = db.due_checks(now, limit).await?;
        for d in &due {
            let jitter = rand::thread_rng().gen_range(0..=d.check_every_ms / 10);
            let next = now + d.check_every_ms + jitter;
            // A check still running is not doubled: it is looked at again
            // at its next time.
            if let Some((Some(build), _, _)) = db.last_check(&d.scope, &d.config).await? {
                if db
                    .get_build(build)
                    .await?
                    .is_some_and(|b| !b.status.is_finished())
                {
                    db.claim_check(d, next).await?;
                    continue;
                }
            }
            if !db.claim_check(d, next).await? {
                continue;
            }
            let Some(row) = db.pipeline_by_id(d.pipeline_id).await? else {
                continue;
            };
            let resources = db.pipeline_resources(row.id).await?;
            let Some(r) = resources.iter().find(|r| r.name == d.resource) else {
                continue;
            };
            if let Err(e) = engine.start_check(&row, r).await {
                tracing::warn!(pipeline = %row.name, resource = %r.name, "a check could not start: {e}");
            }
        }
        // More may be due: they wait for the next interval (the rate).
        Ok(Outcome::Idle)
    }
}

/// `pipeline-triggers`.
struct Triggers {
    engine: Engine,
}

impl Job for Triggers {
    fn name(&self) -> String {
        "pipeline-triggers".into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        for row in self.engine.db.unpaused_pipelines().await? {
            if let Err(e) = schedule_pipeline(&self.engine, &row).await {
                tracing::warn!(team = %row.team, pipeline = %row.name, "scheduling: {e}");
            }
        }
        Ok(Outcome::Idle)
    }
}

impl Engine {
    /// Bench helper (`gantry bench scheduling`): one scheduling round of
    /// every unpaused pipeline, as `pipeline-triggers` runs it.
    #[cfg(any(test, feature = "testing"))]
    pub async fn bench_schedule_round(&self) -> Result<(), EngineError> {
        for row in self.db.unpaused_pipelines().await? {
            schedule_pipeline(self, &row).await?;
        }
        Ok(())
    }
}

/// One scheduling round of pipeline `row`.
async fn schedule_pipeline(engine: &Engine, row: &PipelineRow) -> Result<(), EngineError> {
    let db = &engine.db;
    let pipeline = loaded(row)?;
    let resources = db.pipeline_resources(row.id).await?;
    for job in db.pipeline_jobs(row.id).await? {
        if job.paused {
            continue;
        }
        let Ok(def) = pipeline.job(&job.name) else {
            continue;
        };
        let inputs = job_inputs(&pipeline, def, &resources).map_err(EngineError::Invalid)?;
        if !inputs.iter().any(|i| i.trigger) {
            continue;
        }
        let at = JobAt {
            team: &row.team,
            pipeline: &row.name,
            job: &job.name,
        };
        let mut stored = job
            .decision
            .as_deref()
            .and_then(|d| serde_json::from_str::<Decision>(d).ok());
        for _ in 0..MAX_BUILDS_PER_ROUND {
            let mut decision = Decision {
                at: now_ms(),
                inputs: Default::default(),
                unsatisfied: Default::default(),
                outcome: String::new(),
            };
            let mut again = false;
            match resolve(db, at, row.id, &inputs).await? {
                Resolution::Unsatisfied(why) => {
                    decision.unsatisfied = why.into_iter().collect();
                    decision.outcome = "not triggered: its inputs cannot be satisfied".into();
                }
                Resolution::Resolved(chosen) => {
                    decision.inputs = chosen
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or_default()))
                        .collect();
                    let last = db.last_job_build(at).await?;
                    let fresh = inputs.iter().filter(|i| i.trigger).find(|i| match &last {
                        None => true,
                        Some((_, used)) => {
                            used.iter().find(|(n, _)| n == &i.name).map(|(_, v)| v)
                                != chosen.get(&i.name)
                        }
                    });
                    match (fresh, &last) {
                        (Some(input), _) => {
                            let id = engine
                                .start_pipeline_build(row, &job.name, &inputs, &chosen)
                                .await?;
                            decision.outcome = format!(
                                "triggered build {id} by a new version of input {:?}",
                                input.name
                            );
                            again = true;
                        }
                        (None, Some((id, _))) => {
                            decision.outcome = format!(
                                "not triggered: no trigger input has a version build {id} did not use"
                            );
                        }
                        (None, None) => decision.outcome = "not triggered".into(),
                    }
                }
            }
            let same = stored.as_ref().is_some_and(|s| {
                (&s.inputs, &s.unsatisfied, &s.outcome)
                    == (&decision.inputs, &decision.unsatisfied, &decision.outcome)
            });
            if !same {
                engine.record_decision(row, &job.name, &decision).await?;
                stored = Some(decision);
            }
            if !again {
                break;
            }
        }
    }
    Ok(())
}
