//! The periodic work of stored pipelines, led by one web node at a time
//! (the `pipelines` role, `background::campaign`):
//! - `pipeline-checks` (Concourse's "lidar") starts a check build for each
//!   resource config that is due (a resource's, or a resource type's
//!   image: builds then use the versions these checks found), one per config however many pipelines
//!   and teams name it, at most `max_checks_per_interval` per interval
//!   across the fleet. Each is claimed by moving its next check time with
//!   a compare-and-set (`Pipelines::claim_check`), so even two nodes that both
//!   believe they lead while the lead changes hands cannot start it twice;
//!   the next time takes up to a tenth of the interval of jitter, so checks
//!   set at once spread out; a check still running is not doubled.
//! - `pipeline-triggers` schedules every job of every unpaused pipeline:
//!   it resolves the inputs of each unpaused job with a `trigger: true`
//!   input, and creates a build when a trigger input resolves to a version
//!   no build of the job was given as that input (Concourse's first
//!   occurrence; for `version: every`, one build per version in turn). What it decided is kept on the job (`why`).
//!
//! Why a leader rather than row locks for scheduling: a round reads the
//! job's newest build and then creates the next; two nodes interleaving
//! those steps would both create it. One leader makes the round a single
//! writer, and the lead is already how the Collector runs once.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use rand::Rng;

use std::collections::{BTreeMap, HashMap, HashSet};

use super::job_builds::BuildRequest;
use super::pipelines::loaded;
use super::Engine;
use crate::background::campaign;
use crate::db::{now_ms, JobAt, PipelineHead, PipelineRow, VersionsAt};
use crate::error::EngineError;
use crate::pipeline::Pipeline;
use crate::triggers::{job_inputs, resolve, Decision, JobInput, Resolution};
use gantry_jobs::{Job, JobError, Outcome, Periodic, Schedule};

/// Builds one job gets in one round at most (`version: every` makes one
/// per version, a pass each).
const MAX_BUILDS_PER_ROUND: usize = 20;

/// Builds created per transaction.
const BATCH: usize = 500;

/// Jobs resolved at once in a pass.
const DECIDE_AT_ONCE: usize = 4;

/// Starts both jobs, led by the `pipelines` role; answers the lead, which
/// other fleet-wide jobs follow too (one campaign, one held connection).
/// Must be called inside the actix System.
pub(super) fn start(engine: &Engine) -> tokio::sync::watch::Receiver<bool> {
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
        Triggers::new(engine.clone()),
        Schedule::every(every),
        &engine.jobs,
    )
    .led_by(leader.clone())
    .start();
    leader
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
        let due = db.pipelines().due_checks(now, limit).await?;
        for d in &due {
            let jitter = rand::thread_rng().gen_range(0..=d.check_every_ms / 10);
            let next = now + d.check_every_ms + jitter;
            // A check still running is not doubled: it is looked at again
            // at its next time.
            if let Some(build) = db.pipelines().last_check(&d.scope, &d.config).await? {
                if db
                    .builds()
                    .get_build(build)
                    .await?
                    .is_some_and(|b| !b.status.is_finished())
                {
                    db.pipelines().claim_check(d, next).await?;
                    continue;
                }
            }
            if !db.pipelines().claim_check(d, next).await? {
                continue;
            }
            let Some(row) = db.pipelines().pipeline_by_id(d.pipeline_id).await? else {
                continue;
            };
            let named = match d.of_type {
                true => db.pipelines().pipeline_resource_types(row.id).await?,
                false => db.pipelines().pipeline_resources(row.id).await?,
            };
            let Some(r) = named.iter().find(|r| r.name == d.resource) else {
                continue;
            };
            if let Err(e) = engine.start_check(&row, r, d.of_type).await {
                tracing::warn!(pipeline = %row.name, resource = %r.name, of_type = d.of_type, "a check could not start: {e}");
            }
        }
        // More may be due: they wait for the next interval (the rate).
        Ok(Outcome::Idle)
    }
}

/// `pipeline-triggers`, and what it remembers between rounds.
struct Triggers {
    engine: Engine,
    /// Each unpaused pipeline as last loaded, by id.
    pipelines: HashMap<i64, Loaded>,
    /// Each job's fingerprint when it was last decided, by (pipeline,
    /// job): a job whose fingerprint is the same again is not resolved.
    seen: HashMap<(i64, String), Fingerprint>,
}

/// A pipeline as a round schedules it: loaded once per change.
struct Loaded {
    head: PipelineHead,
    row: PipelineRow,
    pipeline: Arc<Pipeline>,
    /// Its unpaused jobs with a `trigger: true` input.
    jobs: Vec<LoadedJob>,
}

/// A job a round may trigger.
struct LoadedJob {
    name: String,
    inputs: Vec<JobInput>,
    /// The decision last stored.
    decision: Option<Decision>,
}

/// What a job's decision depends on: its pipeline (config, pauses, pins,
/// disabled versions), the newest version of each input's resource, and
/// the newest succeeded build of each job its inputs must have passed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    head: PipelineHead,
    newest: Vec<Option<i64>>,
    upstream: Vec<Option<i64>>,
}

/// What one job's resolution decided in a pass.
struct Decided {
    id: i64,
    job: usize,
    decision: Decision,
    chosen: Option<BTreeMap<String, String>>,
}

impl Job for Triggers {
    fn name(&self) -> String {
        "pipeline-triggers".into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        self.round().await?;
        Ok(Outcome::Idle)
    }
}

impl Triggers {
    fn new(engine: Engine) -> Self {
        Triggers {
            engine,
            pipelines: HashMap::new(),
            seen: HashMap::new(),
        }
    }

    /// One round: the jobs whose fingerprint changed are resolved, in
    /// passes; a job that got a build for a `version: every` input is
    /// resolved again in the next pass, up to [`MAX_BUILDS_PER_ROUND`].
    async fn round(&mut self) -> Result<(), EngineError> {
        // Builds started by hand that wait for their inputs go first: one
        // that starts now is the job's newest build its triggers compare
        // with, so a version does not start it and a triggered build both.
        self.engine.start_waiting_builds().await?;
        // Child pipelines their parent job no longer sets are archived
        // (Concourse archives them when the job's build succeeds).
        self.engine.archive_abandoned_pipelines().await?;
        self.engine.destroy_expired_archived().await?;
        self.refresh().await?;
        let fingerprints = self.fingerprints().await?;
        let mut work: Vec<(i64, usize)> = Vec::new();
        for (id, l) in &self.pipelines {
            for (i, job) in l.jobs.iter().enumerate() {
                let key = (*id, job.name.clone());
                if self.seen.get(&key) != fingerprints.get(&key) {
                    work.push((*id, i));
                }
            }
        }
        work.sort_unstable();
        for pass in 0..MAX_BUILDS_PER_ROUND {
            if work.is_empty() {
                break;
            }
            let last = pass + 1 == MAX_BUILDS_PER_ROUND;
            work = self.pass(&work, &fingerprints, last).await?;
        }
        Ok(())
    }

    /// Loads the pipelines that changed and forgets those gone or paused.
    async fn refresh(&mut self) -> Result<(), EngineError> {
        let db = &self.engine.db;
        let heads = db.builds().pipeline_heads().await?;
        let live: HashSet<i64> = heads.iter().map(|h| h.id).collect();
        self.pipelines.retain(|id, _| live.contains(id));
        self.seen.retain(|(id, _), _| live.contains(id));
        for head in heads {
            if self.pipelines.get(&head.id).is_some_and(|l| l.head == head) {
                continue;
            }
            let Some(row) = db.pipelines().pipeline_by_id(head.id).await? else {
                continue;
            };
            let pipeline = match loaded(&row).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(team = %row.team, pipeline = %row.name, "scheduling: {e}");
                    self.pipelines.remove(&head.id);
                    continue;
                }
            };
            let resources = db.pipelines().pipeline_resources(row.id).await?;
            let mut jobs = Vec::new();
            for job in db.pipelines().pipeline_jobs(row.id).await? {
                let Ok(def) = pipeline.job(&job.name) else {
                    continue;
                };
                // One job that cannot be scheduled holds no other back.
                let inputs = match job_inputs(&pipeline, def, &resources) {
                    Ok(inputs) => inputs,
                    Err(e) => {
                        tracing::warn!(team = %row.team, pipeline = %row.name, job = %job.name, "scheduling: {e}");
                        continue;
                    }
                };
                if job.paused || !inputs.iter().any(|i| i.trigger) {
                    continue;
                }
                jobs.push(LoadedJob {
                    decision: job
                        .decision
                        .as_deref()
                        .and_then(|d| serde_json::from_str(d).ok()),
                    name: job.name,
                    inputs,
                });
            }
            self.pipelines.insert(
                head.id,
                Loaded {
                    head,
                    row,
                    pipeline,
                    jobs,
                },
            );
        }
        Ok(())
    }

    /// The fingerprint of every loaded job, read with one query per
    /// resource config and one per upstream job.
    async fn fingerprints(&self) -> Result<HashMap<(i64, String), Fingerprint>, EngineError> {
        let db = &self.engine.db;
        let orders = db.builds().newest_orders().await?;
        let mut newest: HashMap<(&str, &str), Option<i64>> = orders
            .iter()
            .map(|(scope, config, n)| ((scope.as_str(), config.as_str()), *n))
            .collect();
        let mut upstream: HashMap<(&str, &str, &str), Option<i64>> = HashMap::new();
        let mut out = HashMap::new();
        for l in self.pipelines.values() {
            for job in &l.jobs {
                let mut fp = Fingerprint {
                    head: l.head.clone(),
                    newest: Vec::new(),
                    upstream: Vec::new(),
                };
                for input in &job.inputs {
                    let key = (input.scope.as_str(), input.config.as_str());
                    let n = match newest.get(&key) {
                        Some(n) => *n,
                        None => {
                            let at = VersionsAt {
                                scope: key.0,
                                config: key.1,
                            };
                            let n = db.builds().newest_order(at).await?;
                            newest.insert(key, n);
                            n
                        }
                    };
                    fp.newest.push(n);
                    for up in &input.passed {
                        let key = (l.row.team.as_str(), l.row.name.as_str(), up.as_str());
                        let n = match upstream.get(&key) {
                            Some(n) => *n,
                            None => {
                                let at = JobAt {
                                    team: key.0,
                                    pipeline: key.1,
                                    job: key.2,
                                };
                                let n = db.builds().newest_succeeded(at).await?;
                                upstream.insert(key, n);
                                n
                            }
                        };
                        fp.upstream.push(n);
                    }
                }
                out.insert((l.row.id, job.name.clone()), fp);
            }
        }
        Ok(out)
    }

    /// Resolves the jobs of `work`, creates the builds they trigger (in
    /// batches of [`BATCH`]), stores what changed of their decisions and
    /// their fingerprints; answers the jobs to resolve again (a build for
    /// a `version: every` input, unless `last`).
    async fn pass(
        &mut self,
        work: &[(i64, usize)],
        fingerprints: &HashMap<(i64, String), Fingerprint>,
        last: bool,
    ) -> Result<Vec<(i64, usize)>, EngineError> {
        // Resolved a few at once: reads, on the pool's connections.
        let decided: Vec<Decided> =
            futures::stream::iter(work.iter().map(|&(id, i)| self.decide(id, i)))
                .buffered(DECIDE_AT_ONCE)
                .try_collect()
                .await?;
        // The builds, a batch per transaction.
        let wanted: Vec<usize> = (0..decided.len())
            .filter(|&d| decided[d].chosen.is_some())
            .collect();
        let mut created: HashMap<usize, (i64, i64)> = HashMap::new();
        let mut to_start = Vec::new();
        for chunk in wanted.chunks(BATCH) {
            let requests: Vec<BuildRequest<'_>> = chunk
                .iter()
                .map(|&d| {
                    let l = &self.pipelines[&decided[d].id];
                    let job = &l.jobs[decided[d].job];
                    BuildRequest {
                        row: &l.row,
                        pipeline: &l.pipeline,
                        job: &job.name,
                        inputs: &job.inputs,
                        chosen: decided[d].chosen.as_ref().expect("wanted"),
                    }
                })
                .collect();
            let builds = self.engine.create_pipeline_builds(&requests).await?;
            created.extend(
                chunk
                    .iter()
                    .copied()
                    .zip(builds.iter().map(|b| (b.id, b.number))),
            );
            to_start.extend(builds);
        }
        // Started once all are created: the first ones' writes do not hold
        // the others' transactions back.
        self.engine.start_created(to_start);
        let mut again = Vec::new();
        let mut changed: Vec<(i64, String, String)> = Vec::new();
        for (d, mut one) in decided.into_iter().enumerate() {
            if let Some((build, number)) = created.get(&d) {
                one.decision.outcome = format!(
                    "triggered build {build} (#{number}) {}",
                    one.decision.outcome
                );
            }
            let l = self.pipelines.get_mut(&one.id).expect("loaded");
            let job = &mut l.jobs[one.job];
            let same = job.decision.as_ref().is_some_and(|s| {
                (&s.inputs, &s.unsatisfied, &s.outcome)
                    == (
                        &one.decision.inputs,
                        &one.decision.unsatisfied,
                        &one.decision.outcome,
                    )
            });
            if !same {
                let text = serde_json::to_string(&one.decision).expect("decisions serialize");
                changed.push((one.id, job.name.clone(), text));
                job.decision = Some(one.decision);
            }
            let key = (one.id, job.name.clone());
            let more = created.contains_key(&d) && job.inputs.iter().any(|i| i.every);
            if more {
                // Resolved again in the next pass (or, after the last, in
                // the next round: its fingerprint is not kept).
                if !last {
                    again.push((one.id, one.job));
                }
            } else if let Some(fp) = fingerprints.get(&key) {
                self.seen.insert(key, fp.clone());
            }
        }
        // The decisions that changed, in one transaction.
        let rows: Vec<(i64, &str, String)> = changed
            .iter()
            .map(|(id, job, text)| (*id, job.as_str(), text.clone()))
            .collect();
        self.engine.db.pipelines().set_job_decisions(&rows).await?;
        Ok(again)
    }

    /// Resolves job `i` of pipeline `id` and decides whether it triggers:
    /// a trigger input resolves to a version no build of the job was given
    /// as that input.
    async fn decide(&self, id: i64, i: usize) -> Result<Decided, EngineError> {
        let db = &self.engine.db;
        let l = &self.pipelines[&id];
        let job = &l.jobs[i];
        let at = JobAt {
            team: &l.row.team,
            pipeline: &l.row.name,
            job: &job.name,
        };
        let mut decision = Decision {
            at: now_ms(),
            inputs: Default::default(),
            unsatisfied: Default::default(),
            outcome: String::new(),
        };
        let mut chosen = None;
        match resolve(db, at, id, &job.inputs).await? {
            Resolution::Unsatisfied(why) => {
                decision.unsatisfied = why.into_iter().collect();
                decision.outcome = "not triggered: its inputs cannot be satisfied".into();
            }
            Resolution::Resolved(versions) => {
                decision.inputs = versions
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or_default()))
                    .collect();
                let newest = db.versions().last_job_build(at).await?;
                // A trigger fires on a version's first occurrence for the
                // job, as in Concourse: one no build of the job was given
                // as that input (a pin or a disabled version steering the
                // job back to a version it ran does not start it again).
                let mut fresh = None;
                let mut ran = None;
                for input in job.inputs.iter().filter(|i| i.trigger) {
                    let Some(version) = versions.get(&input.name) else {
                        continue;
                    };
                    let by_newest = newest.as_ref().is_some_and(|(_, used)| {
                        used.iter().any(|(n, v)| n == &input.name && v == version)
                    });
                    if by_newest {
                        continue;
                    }
                    match db
                        .versions()
                        .job_build_given(at, &input.name, &input.resource, version)
                        .await?
                    {
                        None => {
                            fresh = Some(input);
                            break;
                        }
                        Some(build) => {
                            ran.get_or_insert((input.name.as_str(), build));
                        }
                    }
                }
                match (fresh, ran, &newest) {
                    (Some(input), _, _) => {
                        decision.outcome = format!("by a new version of input {:?}", input.name);
                        chosen = Some(versions);
                    }
                    (None, Some((input, build)), _) => {
                        decision.outcome = format!(
                            "not triggered: build {build} already ran input {input:?}'s version \
                             (a version triggers a job once; trigger it by hand to run it again)"
                        );
                    }
                    (None, None, Some((build, _))) => {
                        decision.outcome = format!(
                            "not triggered: no trigger input has a version build {build} did not use"
                        );
                    }
                    (None, None, None) => decision.outcome = "not triggered".into(),
                }
            }
        }
        Ok(Decided {
            id,
            job: i,
            decision,
            chosen,
        })
    }
}

impl Engine {
    /// Bench helper (`gantry bench scheduling`): one scheduling round of
    /// every unpaused pipeline as `pipeline-triggers` runs it, forgetting
    /// what earlier rounds remembered when `fresh` (then every job is
    /// resolved), else remembering it across calls.
    pub async fn bench_schedule_round(&self, fresh: bool) -> Result<(), EngineError> {
        static KEPT: tokio::sync::Mutex<Option<Triggers>> = tokio::sync::Mutex::const_new(None);
        let mut kept = KEPT.lock().await;
        if fresh || kept.is_none() {
            *kept = Some(Triggers::new(self.clone()));
        }
        kept.as_mut().expect("set").round().await
    }
}
