//! Making the builds of stored pipelines' jobs: those scheduling triggers
//! (many per transaction), and those started by hand (`trigger-job`).
//!
//! A build started by hand checks its inputs first (those with no
//! `passed` and no pin, `triggers/checks.rs`, as Concourse does) and
//! resolves them once those checks finished. A build waiting for those
//! checks, whose inputs cannot be satisfied yet, or whose job or pipeline
//! is paused, is not refused: it is created pending, waiting, and says
//! why (in the build,
//! and as a `waiting_for_inputs` event, again whenever the reason
//! changes). Each scheduling round tries its inputs again; once they
//! resolve, the build gets its plan, turns and inputs in one transaction
//! (only while it still waits: an abort in between wins) and starts on
//! the node leading the round. A waiting build runs nowhere, so no node
//! takes it over; an abort ends it where it waits.
//! A waiting rerun (`reruns.rs`) checks and resolves nothing: once
//! unheld it is filled with the versions its original was given.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::pipelines::{archived_error, loaded, stored_vars, DESTROYED};
use super::Engine;
use crate::db::{JobAt, NewJobBuild, PipelineRow, ResourceRow, WaitingBuild};
use crate::error::EngineError;
use crate::events::EventSink;
use crate::pipeline::Pipeline;
use crate::plan::{JobPlan, JobRef};
use crate::triggers::{
    check_state, job_inputs, resolve, to_check, waiting_for, CheckState, JobInput, Resolution,
};
use crate::views::Build;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

/// A build asked of a job of a stored pipeline: the versions chosen
/// (step → version JSON) for its inputs.
pub(super) struct BuildRequest<'a> {
    /// The job's pipeline, as stored.
    pub row: &'a PipelineRow,
    /// That pipeline, loaded with its vars.
    pub pipeline: &'a Arc<Pipeline>,
    /// The job.
    pub job: &'a str,
    /// Its inputs.
    pub inputs: &'a [JobInput],
    /// The versions chosen for them.
    pub chosen: &'a BTreeMap<String, String>,
}

/// A build of a stored pipeline's job, created, not started yet.
pub(super) struct CreatedBuild {
    /// Its id.
    pub id: i64,
    /// Its number within its job.
    pub number: i64,
    run: Runnable,
}

/// What a job build runs: its team, plan and job.
pub(super) struct Runnable {
    team: String,
    plan: crate::builds::Plan,
    job_ref: JobRef,
    /// Its stored plan, when the credential manager fills vars of it.
    credentials: Option<crate::credentials::NeedsCredentials>,
}

/// What a job's inputs resolve to, for the builds waiting on it in one
/// round: the versions, or why they cannot be satisfied.
type Resolved = Result<BTreeMap<String, String>, String>;

/// The reasons of unsatisfied inputs, as one line.
fn reasons(why: &BTreeMap<String, String>) -> String {
    why.iter()
        .map(|(input, why)| format!("input {input:?}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Engine {
    /// Starts a build of job `job` of pipeline `pipeline` of `team` by
    /// hand, with the newest versions that satisfy its inputs (as a
    /// trigger would choose them) once the inputs it checks first
    /// (`triggers/checks.rs`) were checked. While those checks run, when
    /// its inputs cannot be satisfied yet, or while the job or its
    /// pipeline is paused, the build is created pending and waits, saying
    /// why, until it can start. A job with `disable_manual_trigger` is
    /// refused. `by` (who asked) is recorded before the build can run.
    pub async fn trigger_job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        by: &str,
    ) -> Result<Build, EngineError> {
        let row = self.pipeline_row(team, pipeline).await?;
        if row.archived {
            return Err(archived_error(&row));
        }
        let loaded = loaded(&row).await?;
        let j = loaded.job(job).map_err(|e| EngineError::NotFound {
            kind: "job",
            name: format!("{pipeline}/{job}: {e}"),
        })?;
        if j.disable_manual_trigger {
            return Err(EngineError::Invalid(format!(
                "job {job:?} has disable_manual_trigger set: it may not be started by hand"
            )));
        }
        let state = self.job_state(&row, &loaded, job).await?;
        // Why it waits, when not for the checks of its inputs.
        let other = match &state.held {
            Some(why) => Some(why.clone()),
            // Its inputs are checked first: it waits for those checks.
            None if !to_check(&state.inputs).is_empty() => None,
            None => match self.resolve_inputs(&row, job, &state.inputs).await? {
                Ok(chosen) => {
                    let request = BuildRequest {
                        row: &row,
                        pipeline: &loaded,
                        job,
                        inputs: &state.inputs,
                        chosen: &chosen,
                    };
                    let created = self.create_pipeline_builds(&[request]).await?;
                    let id = created[0].id;
                    self.db.builds().record_person(id, by, false).await?;
                    self.start_created(created);
                    return self.build(id).await;
                }
                Err(why) => Some(why),
            },
        };
        let first = match &other {
            Some(why) => why.clone(),
            None => waiting_for(&names_to_check(&state.inputs)),
        };
        let (id, _) = self
            .db
            .builds()
            .create_waiting_build((team, row.id, pipeline), job, &first)
            .await?;
        self.db.builds().record_person(id, by, false).await?;
        let mut why = first.clone();
        if other.is_none() {
            // Checked from now: checks that finish after its creation.
            let created_at = self
                .db
                .builds()
                .get_build(id)
                .await?
                .map_or(0, |b| b.created_at);
            if let Some(now) = self.checks_pending(&row, &state, created_at).await? {
                if now != first && self.db.builds().set_waiting(id, &now).await? {
                    why = now;
                }
            }
        }
        self.tell_waiting(id, &why).await?;
        self.build(id).await
    }

    /// Job `job`'s inputs, its pipeline's stored resources, and why it is
    /// held (its job or pipeline paused), if it is.
    pub(super) async fn job_state(
        &self,
        row: &PipelineRow,
        pipeline: &Pipeline,
        job: &str,
    ) -> Result<JobState, EngineError> {
        let j = pipeline.job(job).map_err(|e| EngineError::NotFound {
            kind: "job",
            name: format!("{}/{job}: {e}", row.name),
        })?;
        let resources = self.db.pipelines().pipeline_resources(row.id).await?;
        let inputs = job_inputs(pipeline, j, &resources).map_err(EngineError::Invalid)?;
        // A paused pipeline or job holds its builds (as Concourse does):
        // they wait, saying so, and start once both are unpaused.
        let held = if row.paused {
            Some(format!("pipeline {:?} is paused", row.name))
        } else if self
            .db
            .pipelines()
            .pipeline_jobs(row.id)
            .await?
            .iter()
            .any(|r| r.name == job && r.paused)
        {
            Some(format!("job {job:?} is paused"))
        } else {
            None
        };
        Ok(JobState {
            inputs,
            resources,
            held,
        })
    }

    /// What the `inputs` of job `job` resolve to now.
    async fn resolve_inputs(
        &self,
        row: &PipelineRow,
        job: &str,
        inputs: &[JobInput],
    ) -> Result<Resolved, EngineError> {
        let at = JobAt {
            team: &row.team,
            pipeline: &row.name,
            job,
        };
        Ok(match resolve(&self.db, at, row.id, inputs).await? {
            Resolution::Resolved(chosen) => Ok(chosen),
            Resolution::Unsatisfied(why) => Err(reasons(&why.into_iter().collect())),
        })
    }

    /// Why a build triggered by hand at `created_at` still waits for the
    /// checks of its inputs (none once each finished since): a config
    /// whose last check finished before is checked now, one whose check
    /// runs is waited for (so a config is checked once, however many
    /// inputs or builds wait for it).
    async fn checks_pending(
        &self,
        row: &PipelineRow,
        state: &JobState,
        created_at: i64,
    ) -> Result<Option<String>, EngineError> {
        let mut pending = Vec::new();
        let mut failed = Vec::new();
        for input in to_check(&state.inputs) {
            let last = match self
                .db
                .pipelines()
                .last_check(&input.scope, &input.config)
                .await?
            {
                Some(id) => self.db.builds().get_build(id).await?,
                None => None,
            };
            match check_state(created_at, last.as_ref()) {
                CheckState::Done => continue,
                CheckState::Running => {}
                CheckState::Needed => {
                    let Some(r) = state.resources.iter().find(|r| r.name == input.resource) else {
                        continue;
                    };
                    // One that cannot start is tried again next round.
                    if let Err(e) = self.start_check(row, r, false).await {
                        tracing::warn!(pipeline = %row.name, resource = %r.name, "a check of a manual build's input could not start: {e}");
                        failed.push(format!("the check of {:?} could not start: {e}", r.name));
                    }
                }
            }
            pending.push(input.resource.clone());
        }
        if pending.is_empty() {
            return Ok(None);
        }
        let mut why = waiting_for(&pending);
        if !failed.is_empty() {
            why = format!("{why} ({})", failed.join("; "));
        }
        Ok(Some(why))
    }

    /// Tells build `id`'s followers why it waits (an event after those
    /// stored).
    pub(super) async fn tell_waiting(&self, id: i64, why: &str) -> Result<(), EngineError> {
        self.emit_outside(
            id,
            &BuildEvent::WaitingForInputs {
                message: why.to_string(),
                time: crate::db::now_ms(),
            },
        )
        .await
    }

    /// Emits `event` for build `id`, which no build actor runs (it waits).
    async fn emit_outside(&self, id: i64, event: &BuildEvent) -> Result<(), EngineError> {
        let next = self.db.builds().last_event_seq(id).await? + 1;
        let mut sink = EventSink::resume(id, next, self.db.clone(), self.hub.clone());
        sink.emit(event).await
    }

    /// Ends waiting build `id` aborted, if it still waits (then true).
    pub(super) async fn abort_waiting(&self, id: i64) -> Result<bool, EngineError> {
        self.abort_waiting_because(id, None).await
    }

    /// Ends waiting build `id` aborted, if it still waits (then true),
    /// saying `why` first when given.
    pub(super) async fn abort_waiting_because(
        &self,
        id: i64,
        why: Option<&str>,
    ) -> Result<bool, EngineError> {
        if !self.db.builds().abort_waiting_build(id).await? {
            return Ok(false);
        }
        if let Some(why) = why {
            let error = BuildEvent::Error {
                message: why.to_string(),
                time: crate::db::now_ms(),
            };
            self.emit_outside(id, &error).await?;
        }
        self.emit_outside(id, &crate::events::status_event(BuildStatus::Aborted, None))
            .await?;
        Ok(true)
    }

    /// Tries the inputs of every build waiting for them (a job's once per
    /// call): each whose inputs resolve gets its plan and starts here; one
    /// whose reason changed says so. One build that cannot be looked at
    /// holds no other back.
    pub(super) async fn start_waiting_builds(&self) -> Result<(), EngineError> {
        let waiting = self.db.builds().waiting_builds().await?;
        let mut jobs: HashMap<(String, String, String), Option<Job>> = HashMap::new();
        for w in waiting {
            let key = (w.team.clone(), w.pipeline.clone(), w.job.clone());
            if !jobs.contains_key(&key) {
                let job = match self.waiting_job(&w).await {
                    Ok(job) => Some(job),
                    // Its pipeline is gone: said as its destruction says it
                    // (this pass may see the pipeline gone before
                    // `destroy_pipeline` ends the build itself).
                    Err(EngineError::NotFound {
                        kind: "pipeline", ..
                    }) => {
                        self.end_waiting(&w, DESTROYED).await?;
                        continue;
                    }
                    // Its job is gone: it would wait for ever.
                    Err(e @ EngineError::NotFound { .. }) => {
                        self.end_waiting(&w, &format!("no longer startable: {e}"))
                            .await?;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(build = w.id, "a build waiting for its inputs: {e}");
                        None
                    }
                };
                jobs.insert(key.clone(), job);
            }
            let Some(job) = jobs.get_mut(&key).and_then(Option::as_mut) else {
                continue;
            };
            if let Err(e) = self.start_waiting(&w, job).await {
                tracing::warn!(build = w.id, "a build waiting for its inputs: {e}");
            }
        }
        Ok(())
    }

    /// Ends waiting build `w` aborted (if it still waits), saying `why`
    /// in its log.
    async fn end_waiting(&self, w: &WaitingBuild, why: &str) -> Result<(), EngineError> {
        self.abort_waiting_because(w.id, Some(why)).await.map(drop)
    }

    /// The job waiting build `w` is of (its inputs resolved when a build
    /// of it is ready to).
    async fn waiting_job(&self, w: &WaitingBuild) -> Result<Job, EngineError> {
        let row = self.pipeline_row(&w.team, &w.pipeline).await?;
        let pipeline = loaded(&row).await?;
        let state = self.job_state(&row, &pipeline, &w.job).await?;
        Ok(Job {
            row,
            pipeline,
            state,
            resolved: None,
        })
    }

    /// Starts waiting build `w` of `job` when it is not held, the checks
    /// of its inputs finished and its inputs resolved (resolved once per
    /// job and round, after the first of its builds found its checks
    /// done: so with every version those checks found); else tells why
    /// it still waits when that changed.
    async fn start_waiting(&self, w: &WaitingBuild, job: &mut Job) -> Result<(), EngineError> {
        if let (None, Some(of)) = (&job.state.held, w.rerun_of) {
            // A rerun checks nothing: its inputs are its original's.
            let chosen = self.rerun_inputs(of).await?;
            if let Some(why) = inputs_changed(&job.state.inputs, &chosen) {
                return self
                    .end_waiting(w, &format!("no longer startable: {why}"))
                    .await;
            }
            return self.fill_waiting(w, job, &chosen).await;
        }
        let pending = match (&job.state.held, w.inputs_checked) {
            (None, false) => {
                let pending = self
                    .checks_pending(&job.row, &job.state, w.created_at)
                    .await?;
                if pending.is_none() {
                    // Once done, done (as Concourse's `ResourcesChecked`):
                    // a later check does not hold it again.
                    self.db.builds().set_inputs_checked(w.id).await?;
                }
                pending
            }
            _ => None,
        };
        let resolved = match &job.state.held {
            Some(why) => Err(why.clone()),
            None => match pending {
                Some(why) => Err(why),
                None => match &job.resolved {
                    Some(r) => r.clone(),
                    None => {
                        let r = self
                            .resolve_inputs(&job.row, &w.job, &job.state.inputs)
                            .await?;
                        job.resolved = Some(r.clone());
                        r
                    }
                },
            },
        };
        let chosen = match &resolved {
            Ok(chosen) => chosen,
            Err(why) if *why == w.waiting => return Ok(()),
            Err(why) => {
                if self.db.builds().set_waiting(w.id, why).await? {
                    self.tell_waiting(w.id, why).await?;
                }
                return Ok(());
            }
        };
        self.fill_waiting(w, job, chosen).await
    }

    /// Fills waiting build `w` of `job` with the versions `chosen` for its
    /// inputs and starts it here (unless it no longer waits).
    async fn fill_waiting(
        &self,
        w: &WaitingBuild,
        job: &Job,
        chosen: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        let request = BuildRequest {
            row: &job.row,
            pipeline: &job.pipeline,
            job: &w.job,
            inputs: &job.state.inputs,
            chosen,
        };
        let (new, run) = prepare(&request)?;
        if !self
            .db
            .builds()
            .fill_waiting_build(w.id, &new, &self.config.node_name)
            .await?
        {
            return Ok(());
        }
        tracing::info!(build = w.id, job = %w.job, "a build waiting for its inputs starts");
        let last = self.db.builds().last_event_seq(w.id).await?;
        self.start_runnable(w.id, run, last);
        Ok(())
    }

    /// Creates the builds `requests` asks of jobs of stored pipelines, in
    /// one transaction, each numbered within its job and its inputs
    /// recorded; they start with [`Engine::start_created`].
    pub(super) async fn create_pipeline_builds(
        &self,
        requests: &[BuildRequest<'_>],
    ) -> Result<Vec<CreatedBuild>, EngineError> {
        let mut new = Vec::with_capacity(requests.len());
        let mut runs = Vec::with_capacity(requests.len());
        for r in requests {
            let (build, run) = prepare(r)?;
            new.push(build);
            runs.push(run);
        }
        let created = self
            .db
            .builds()
            .create_job_builds(&new, &self.config.node_name)
            .await?;
        Ok(created
            .into_iter()
            .zip(runs)
            .map(|((id, number), run)| CreatedBuild { id, number, run })
            .collect())
    }

    /// Starts builds created by [`Engine::create_pipeline_builds`].
    pub(super) fn start_created(&self, created: Vec<CreatedBuild>) {
        for c in created {
            self.start_runnable(c.id, c.run, 0);
        }
    }

    /// Starts build `id`, whose events so far end at `last_event`.
    pub(super) fn start_runnable(&self, id: i64, run: Runnable, last_event: i64) {
        let build = crate::builds::Build::of_plan(
            id,
            run.team,
            run.plan,
            None,
            self.build_deps(),
            self.builds.clone(),
        )
        .after_events(last_event)
        .with_credentials(run.credentials);
        self.start_build(id, build.for_job(Some(run.job_ref)));
    }
}

/// A job whose builds wait, as one round sees it.
struct Job {
    row: PipelineRow,
    pipeline: Arc<Pipeline>,
    state: JobState,
    /// What its inputs resolve to, once a build of it was ready to.
    resolved: Option<Resolved>,
}

/// A job's inputs as stored, and whether it is held.
pub(super) struct JobState {
    pub(super) inputs: Vec<JobInput>,
    /// Its pipeline's stored resources (what checks start from).
    resources: Vec<ResourceRow>,
    /// Why its builds are held (its job or pipeline paused), if they are.
    pub(super) held: Option<String>,
}

/// The resources of the `inputs` a build triggered by hand checks first.
fn names_to_check(inputs: &[JobInput]) -> Vec<String> {
    to_check(inputs)
        .into_iter()
        .map(|i| i.resource.clone())
        .collect()
}

/// The row to write for build request `r`, and what the build runs: its
/// plan with every input pinned to the version chosen.
pub(super) fn prepare(r: &BuildRequest<'_>) -> Result<(NewJobBuild, Runnable), EngineError> {
    let row = r.row;
    let mut pinned = BTreeMap::new();
    let mut recorded = Vec::new();
    for (name, version) in r.chosen {
        let bad = |e: serde_json::Error| {
            EngineError::Invalid(format!(
                "input {name:?}: version {version} is not a map of strings: {e}"
            ))
        };
        let v: BTreeMap<String, String> = serde_json::from_str(version).map_err(bad)?;
        let resource = r
            .inputs
            .iter()
            .find(|i| &i.name == name)
            .map(|i| i.resource.clone())
            .unwrap_or_default();
        recorded.push((
            name.clone(),
            resource,
            serde_json::from_str(version).map_err(bad)?,
        ));
        pinned.insert(name.clone(), v);
    }
    let stored = JobPlan {
        pipeline: row.config.clone(),
        pipeline_name: row.name.clone(),
        job: r.job.to_string(),
        vars: stored_vars(row)?,
        inputs: pinned,
    };
    let job_ref = stored.job_ref()?;
    let (plan, turns) = stored.plan_and_turns_of(r.pipeline)?;
    let build = NewJobBuild {
        team: row.team.clone(),
        pipeline_id: row.id,
        pipeline: row.name.clone(),
        job: r.job.to_string(),
        plan: serde_json::to_value(&stored).expect("plans serialise"),
        // Turns are kept per team and pipeline.
        turns: turns
            .into_iter()
            .map(|(key, n)| (format!("{}/{}/{key}", row.team, job_ref.pipeline), n))
            .collect(),
        inputs: recorded,
    };
    let run = Runnable {
        team: row.team.clone(),
        plan: crate::steps::runnable(plan),
        job_ref,
        credentials: r
            .pipeline
            .as_set
            .needs_credentials()
            .then(|| crate::credentials::NeedsCredentials::Job(stored.clone())),
    };
    Ok((build, run))
}

/// Why versions `chosen` (input → version) no longer fit a job taking
/// `inputs`: its input names changed since they were chosen.
pub(super) fn inputs_changed(
    inputs: &[JobInput],
    chosen: &BTreeMap<String, String>,
) -> Option<String> {
    let now: BTreeSet<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    let then: BTreeSet<&str> = chosen.keys().map(String::as_str).collect();
    (now != then).then(|| {
        format!("the job's inputs changed since (it was given {then:?}, the job now takes {now:?})")
    })
}
