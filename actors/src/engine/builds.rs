//! Builds through the engine: create, abort, read, list, follow.

use super::Engine;
use crate::builds::Build;
use crate::db::BuildQuery;
use crate::error::EngineError;
use crate::event_follow;
use crate::events::StoredEvent;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::pipeline::Vars;
use crate::plan::{CheckPlan, JobPlan, OneOffPlan};
use crate::steps::runnable;
use crate::views::Build as BuildView;

impl Engine {
    /// Aborts a running build: its step is stopped (SIGTERM, then SIGKILL
    /// after a grace period) or its wait for a worker ends.
    pub async fn abort_build(&self, id: i64) -> Result<(), EngineError> {
        if let Some(build) = self.builds.get(&id).map(|b| b.clone()) {
            build.send(crate::builds::AbortBuild).await?;
            return Ok(());
        }
        match self.db.builds().get_build(id).await? {
            None => Err(EngineError::NotFound {
                kind: "build",
                name: id.to_string(),
            }),
            Some(b) if b.status.is_finished() => Err(EngineError::Invalid(format!(
                "build {id} has already finished ({})",
                b.status.as_str()
            ))),
            // Waiting for its inputs: it runs nowhere, and ends here.
            Some(b) if b.waiting.is_some() && self.abort_waiting(id).await? => Ok(()),
            // Run by another web node: it aborts the build at its next
            // heartbeat.
            Some(_) if self.db.is_shared() => self.db.nodes().request_abort(id).await,
            Some(_) => Err(EngineError::Invalid(format!(
                "build {id} is not running on this web node"
            ))),
        }
    }

    /// Checks a one-off build's inputs against the team's artifacts, creates it
    /// and starts it. Nothing is created when the request is invalid.
    pub async fn create_one_off_build(
        &self,
        team: &str,
        plan: OneOffPlan,
        by: &str,
    ) -> Result<i64, EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.into(),
            });
        }
        for input in &plan.config.inputs {
            match plan.inputs.get(&input.name) {
                None if !input.optional => {
                    return Err(EngineError::Invalid(format!(
                        "task input {:?} was not given an artifact",
                        input.name
                    )))
                }
                None => {}
                Some(id)
                    if self
                        .db
                        .artifact_index()
                        .get_artifact(team, id)
                        .await?
                        .is_none() =>
                {
                    return Err(EngineError::Invalid(format!(
                        "input {:?}: artifact {id} not found in team {team:?}",
                        input.name
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some(id) = &plan.image {
            if self
                .db
                .artifact_index()
                .get_artifact(team, id)
                .await?
                .is_none()
            {
                return Err(EngineError::Invalid(format!(
                    "image: artifact {id} not found in team {team:?}"
                )));
            }
        }
        if let Some(extra) = plan
            .inputs
            .keys()
            .find(|k| !plan.config.inputs.iter().any(|i| &i.name == *k))
        {
            return Err(EngineError::Invalid(format!(
                "the task has no input named {extra:?}"
            )));
        }
        let json = serde_json::to_value(&plan).expect("plans serialise");
        let id = self
            .db
            .builds()
            .create_build(team, &json, &self.config.node_name)
            .await?;
        // Who made it is recorded before it runs: a step may read it
        // (`BUILD_CREATED_BY`).
        self.db.builds().record_person(id, by, false).await?;
        let deps = self.build_deps();
        self.start_build(
            id,
            Build::new(id, team.to_string(), plan, deps, self.builds.clone()),
        );
        Ok(id)
    }

    /// Creates a build of job `job` of a pipeline (its YAML text, its
    /// `((vars))` filled from `vars`) and starts it. The whole pipeline is
    /// checked; an unfilled var, an unknown job, or a step or field Gantry
    /// does not run yet is an [`EngineError::Invalid`] naming it, and
    /// nothing is created. The pipeline, job and vars are stored as the
    /// build's plan.
    pub async fn create_job_build(
        &self,
        team: &str,
        pipeline_name: &str,
        pipeline_yaml: &str,
        job: &str,
        vars: Vars,
        by: &str,
    ) -> Result<i64, EngineError> {
        let stored = JobPlan {
            pipeline_name: pipeline_name.to_string(),
            pipeline: pipeline_yaml.to_string(),
            job: job.to_string(),
            vars,
            inputs: Default::default(),
        };
        let job_ref = stored.job_ref()?;
        let plan_of = stored.clone();
        let (plan, turns) = off_thread("reading the pipeline", PIPELINE_BUDGET, move |_| {
            plan_of.plan_and_turns()
        })
        .await?;
        // Turns are kept per team and pipeline.
        let turns: Vec<(String, u32)> = turns
            .into_iter()
            .map(|(key, n)| (format!("{team}/{}/{key}", job_ref.pipeline), n))
            .collect();
        // A var the credential manager lacks is refused before anything
        // is created (the build resolves them again as it starts).
        let credentials = crate::credentials::NeedsCredentials::of_job(&stored);
        if let Some(c) = &credentials {
            c.resolve(&self.credentials, team).await?;
        }
        self.start_stored(
            team,
            &stored,
            runnable(plan),
            (Some(job_ref), credentials),
            &turns,
            Some(by),
        )
        .await
    }

    /// Stores `stored` as the plan of a new build of `team` (which must
    /// exist), with the `turns` it waits for before its plan starts, and
    /// starts that build running `plan`, recording first who made it (`by`)
    /// when a person did.
    pub(super) async fn start_stored(
        &self,
        team: &str,
        stored: &impl serde::Serialize,
        plan: crate::builds::Plan,
        (job, credentials): (
            Option<crate::plan::JobRef>,
            Option<crate::credentials::NeedsCredentials>,
        ),
        turns: &[(String, u32)],
        by: Option<&str>,
    ) -> Result<i64, EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.into(),
            });
        }
        let json = serde_json::to_value(stored).expect("plans serialise");
        let id = self
            .db
            .builds()
            .create_build_taking_turns(team, &json, &self.config.node_name, turns)
            .await?;
        if let Some(j) = &job {
            self.db.gc().set_build_job(id, &j.pipeline, &j.job).await?;
        }
        if let Some(by) = by {
            self.db.builds().record_person(id, by, false).await?;
        }
        let deps = self.build_deps();
        let build = Build::of_plan(id, team.to_string(), plan, None, deps, self.builds.clone())
            .with_credentials(credentials);
        self.start_build(id, build.for_job(job));
        Ok(id)
    }

    /// Creates a check build of resource `resource` of a pipeline (its
    /// `((vars))` filled from `vars`) and starts it: the resource type's
    /// `check` runs on a worker placed with the `checks` strategy chain and
    /// the versions it finds are stored. Problems are an
    /// [`EngineError::Invalid`] naming them, and nothing is created.
    pub async fn create_check_build(
        &self,
        team: &str,
        pipeline_yaml: &str,
        resource: &str,
        vars: Vars,
        by: &str,
    ) -> Result<i64, EngineError> {
        let stored = CheckPlan {
            pipeline: pipeline_yaml.to_string(),
            check: resource.to_string(),
            vars,
            scope: None,
            resource_type: false,
            pipeline_name: None,
            types_first: false,
        };
        let plan_of = stored.clone();
        let plan = off_thread("reading the pipeline", PIPELINE_BUDGET, move |_| {
            plan_of.plan()
        })
        .await?;
        let credentials = crate::credentials::NeedsCredentials::of_check(&stored);
        self.start_stored(
            team,
            &stored,
            runnable(plan),
            (None, credentials),
            &[],
            Some(by),
        )
        .await
    }

    /// A build by id.
    pub async fn build(&self, id: i64) -> Result<BuildView, EngineError> {
        self.db
            .builds()
            .get_build(id)
            .await?
            .ok_or_else(|| EngineError::NotFound {
                kind: "build",
                name: id.to_string(),
            })
    }

    /// One page of builds, newest first (see [`BuildQuery`]).
    pub async fn list_builds_page(
        &self,
        query: &BuildQuery,
    ) -> Result<Vec<BuildView>, EngineError> {
        self.db.builds().list_builds_page(query).await
    }

    /// The fleet's queue: steps waiting for a worker (every compatible one
    /// at its limits), by what they need, of `team` when given (any web
    /// node's builds: each writes its waiting steps to the database).
    pub async fn queue(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<crate::views::QueueKind>, EngineError> {
        let now = crate::db::now_ms();
        Ok(self
            .db
            .builds()
            .waiting_kinds(team)
            .await?
            .into_iter()
            .map(|k| crate::views::QueueKind {
                team: k.team,
                platform: k.platform,
                tags: k.tags,
                resource_type: k.resource_type,
                privileged: k.privileged,
                waiting: k.count,
                oldest_seconds: (now - k.oldest).max(0) as f64 / 1000.0,
            })
            .collect())
    }

    /// How many builds there are in each status.
    pub async fn count_builds_by_status(&self) -> Result<Vec<(String, i64)>, EngineError> {
        self.db.builds().count_builds_by_status().await
    }

    /// The sequence number of build `id`'s last stored event (0: none, or
    /// its log left the database).
    pub async fn last_build_event_seq(&self, id: i64) -> Result<i64, EngineError> {
        self.db.builds().last_event_seq(id).await
    }

    /// Follows a build's events after its event `after` (0: all of them;
    /// see [`event_follow::follow`]).
    pub fn follow_build_events(
        &self,
        id: i64,
        after: i64,
    ) -> tokio::sync::mpsc::Receiver<Result<StoredEvent, EngineError>> {
        event_follow::follow(
            self.db.clone(),
            self.hub.clone(),
            self.artifacts.store(),
            id,
            after,
            self.jobs.tasks(),
        )
    }

    /// Bench helper (`gantry bench follow`): a build of team `team` owned
    /// by this node, and the sink its events are stored and published
    /// through, as a running build's are.
    pub async fn bench_event_sink(
        &self,
        team: &str,
    ) -> Result<(i64, crate::events::EventSink), EngineError> {
        let id = self
            .db
            .builds()
            .create_build(team, &serde_json::json!({}), &self.config.node_name)
            .await?;
        let sink = crate::events::EventSink::new(id, self.db.clone(), self.hub.clone());
        Ok((id, sink))
    }

    /// Bench helper (`gantry bench logs`): ends build `id` as succeeded and
    /// moves its log to the artifact store now, as the Collector's
    /// `move-logs` does; answers the events, their bytes in the database,
    /// and the object's bytes.
    pub async fn bench_move_log(&self, id: i64) -> Result<(u64, u64, u64), EngineError> {
        self.db
            .builds()
            .finish_build(
                id,
                gantry_wire::state::BuildStatus::Succeeded,
                Some(0),
                None,
            )
            .await?;
        let moved = crate::log_store::archive(&self.db, self.artifacts.store().as_ref(), id)
            .await?
            .ok_or_else(|| EngineError::Invalid(format!("build {id}'s log was not moved")))?;
        Ok((moved.events, moved.bytes, moved.stored))
    }

    /// Bench helper: the bytes of logs in the database (the events' JSON)
    /// and in the store.
    pub async fn bench_log_bytes(&self) -> Result<(i64, i64), EngineError> {
        self.db.builds().log_bytes().await
    }
}
