//! Taking builds over: those this web node was running when it stopped (at
//! start), and those of another node that stopped beating (several nodes on
//! one PostgreSQL database). Each node beats in `web_nodes`; a node late by
//! the node timeout is claimed by one other node, which becomes the owner of
//! its unfinished builds in the same transaction and takes them over as a
//! restarted node does: each build's plan resumes where its stored events
//! say it was (`build/journal.rs`): steps that ended are not run again, a
//! step whose container stands is reattached, steps that had not started
//! run, and a build whose plan had not begun runs from its start.

use std::time::Duration;

use super::Engine;
use crate::builds::{Build, Plan};
use crate::db::now_ms;
use crate::error::EngineError;
use crate::events::EventSink;
use crate::plan::{JobPlan, OneOffPlan};
use crate::steps::runnable;
use gantry_jobs::{Job, JobError, Outcome, Periodic, Schedule};
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;

/// How web nodes watch each other.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// How often a node beats (and looks for late nodes).
    pub heartbeat: Duration,
    /// A node not seen for this long is dead: its builds are taken over.
    pub timeout: Duration,
    /// A digest of the settings every node sharing the database should
    /// share (the web node computes it from its configuration): a node
    /// joining with another digest than a live node's warns.
    pub settings: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            heartbeat: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
            settings: String::new(),
        }
    }
}

/// A web node of the database, as the API shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebNodeView {
    /// Its `node_name`.
    pub name: String,
    /// When it started (unix ms).
    pub started_at: i64,
    /// Its last heartbeat (unix ms, the database's clock).
    pub last_seen: i64,
    /// Whether it beat within the node timeout (a late node is taken over).
    pub alive: bool,
    /// Whether it is the node that answered.
    pub this_node: bool,
    /// A digest of the settings it runs with, which every node sharing the
    /// database should share (placement chains, limits, garbage
    /// collection, streaming; not secrets).
    pub settings: Option<String>,
}

/// Name of the node heartbeat's row in the jobs table.
pub(super) const NODE_HEARTBEAT_JOB: &str = "web-node-heartbeat";

/// Name of the job that hears of nodes leaving on purpose.
pub(super) const DEPARTURES_JOB: &str = "web-node-departures";

impl Engine {
    /// Joins the web nodes of the database: refuses to start when a live
    /// node has this node's name; then takes over this node's own unfinished
    /// builds, releases ledger rows no build took again, and starts the node
    /// heartbeat (which also takes over nodes that stop beating).
    pub(super) async fn join_web_nodes(&self) -> Result<(), EngineError> {
        let me = &self.config.node_name;
        let name_lock = self.hold_node_name().await?;
        let started = now_ms();
        let timeout_ms = self.config.nodes.timeout.as_millis() as i64;
        let settings = &self.config.nodes.settings;
        self.db
            .nodes()
            .join_web_nodes(me, timeout_ms, settings)
            .await?;
        self.warn_of_other_settings().await?;
        // Sessions of this node's previous run ended with it.
        self.db.handles().forget_intercept_sessions(me).await?;
        // Its steps waiting for a worker wait again where their builds resume.
        self.db.builds().purge_waiting_steps(me).await?;
        let own = if self.db.is_shared() {
            self.db.builds().unfinished_builds(me).await?
        } else {
            // The only node of its database: whatever a previous run left,
            // under whichever name, is its own.
            self.db.builds().adopt_unfinished_builds(me).await?
        };
        self.take_over_builds(own).await?;
        self.placer.purge(me, started).await?;
        if self.db.is_shared() {
            let job = NodeWatch {
                engine: self.clone(),
                _name_lock: name_lock,
                aborted: Default::default(),
            };
            Periodic::new(
                job,
                Schedule::every(self.config.nodes.heartbeat),
                &self.jobs,
            )
            .start();
            self.listen_for_departures();
        }
        Ok(())
    }

    /// Warns of each live node running with other settings than this one.
    async fn warn_of_other_settings(&self) -> Result<(), EngineError> {
        let mine = &self.config.nodes.settings;
        for node in self.web_nodes().await? {
            match node.settings {
                Some(theirs) if node.alive && !node.this_node && theirs != *mine => {
                    tracing::warn!(
                        node = %node.name,
                        "web node {} runs with other settings (digest {theirs}) than this node ({mine}): \
                         placement, limits and the garbage Collector may differ by node; give every node \
                         the same [web] settings",
                        node.name
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The web nodes sharing the database.
    pub async fn web_nodes(&self) -> Result<Vec<WebNodeView>, EngineError> {
        let now = self.db.nodes().db_now_ms().await?;
        let timeout = self.config.nodes.timeout.as_millis() as i64;
        // On SQLite the one node does not beat (nothing would take its
        // builds over): it is alive while it answers.
        let only_node = !self.db.is_shared();
        Ok(self
            .db
            .nodes()
            .list_web_nodes()
            .await?
            .into_iter()
            .map(|n| WebNodeView {
                alive: (only_node && n.name == self.config.node_name) || !n.late(now, timeout),
                this_node: n.name == self.config.node_name,
                name: n.name,
                started_at: n.started_at,
                last_seen: n.last_seen,
                settings: n.settings,
            })
            .collect())
    }

    /// Holds this node's name among the live nodes (PostgreSQL: a session
    /// advisory lock). Refuses to start when another node holding it still
    /// beats; a holder that stopped beating (its machine died, and the
    /// database has not noticed its connection is gone) is passed over.
    async fn hold_node_name(&self) -> Result<tokio::sync::watch::Receiver<bool>, EngineError> {
        let me = &self.config.node_name;
        let lock = crate::background::campaign(
            &self.db,
            &format!("web-node/{me}"),
            Duration::from_secs(1),
            &self.jobs,
        );
        let mut won = lock.clone();
        let wait = self.config.nodes.timeout;
        if matches!(
            tokio::time::timeout(wait, won.wait_for(|w| *w)).await,
            Ok(Ok(_))
        ) {
            return Ok(lock);
        }
        let now = self.db.nodes().db_now_ms().await?;
        let timeout = self.config.nodes.timeout.as_millis() as i64;
        let beating = self
            .db
            .nodes()
            .list_web_nodes()
            .await?
            .into_iter()
            .any(|n| n.name == *me && !n.late(now, timeout));
        if beating {
            return Err(EngineError::Invalid(format!(
                "a web node named {me:?} is already running on this database: give each web node its own node_name"
            )));
        }
        tracing::warn!(node = %me, "a node of this name holds its lock but stopped beating: starting anyway");
        Ok(lock)
    }

    /// Claims every node late by the timeout (or gone on purpose), each
    /// with its unfinished builds, and takes them over. Another node
    /// claiming at the same moment claims none of the same (the claim is
    /// one transaction per node).
    async fn claim_dead_nodes(&self) -> Result<(), EngineError> {
        let me = &self.config.node_name;
        let timeout = self.config.nodes.timeout.as_millis() as i64;
        for (dead, builds) in self.db.nodes().claim_dead_web_nodes(me, timeout).await? {
            self.take_over_node(&dead, builds).await?;
        }
        Ok(())
    }

    /// Listens for nodes leaving on purpose (a SIGTERM): each departure is
    /// claimed at once, as a heartbeat would claim it a little later.
    fn listen_for_departures(&self) {
        let engine = self.clone();
        let url = self.db.url().to_string();
        let channel = crate::db::DEPARTURES_CHANNEL;
        crate::background::listen(&self.jobs, DEPARTURES_JOB, &url, channel, move |heard| {
            if let crate::background::Heard::Notice(_) = heard {
                let owner = engine.clone();
                let engine = engine.clone();
                owner.jobs.tasks().spawn_local(async move {
                    if let Err(e) = engine.claim_dead_nodes().await {
                        tracing::warn!("taking over a node that left: {e}");
                    }
                });
            }
            true
        });
    }

    /// Takes over the builds of dead node `dead` (already handed to this
    /// node in the database).
    async fn take_over_node(&self, dead: &str, builds: Vec<i64>) -> Result<(), EngineError> {
        tracing::warn!(
            node = dead,
            builds = builds.len(),
            "web node stopped beating: taking its builds over"
        );
        // Its intercept sessions ended with it, and its uploads in progress.
        self.db.handles().forget_intercept_sessions(dead).await?;
        if let Err(e) = self.artifacts.forget_node(dead).await {
            tracing::warn!(node = dead, error = %e, "removing a dead web node's unfinished uploads");
        }
        let taken = self.take_over_builds(builds).await;
        // Its placements no build took again (steps that had not started).
        self.placer.purge(dead, i64::MAX).await?;
        taken
    }

    /// Takes over `builds`, owned by this node and not running here.
    pub(super) async fn take_over_builds(&self, builds: Vec<i64>) -> Result<(), EngineError> {
        // One build that cannot be taken over does not hold back the others.
        let mut first_error = None;
        for id in builds {
            if let Err(e) = self.take_over_build(id).await {
                tracing::error!(build = id, "taking a build over: {e}");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Takes over build `id`, owned by this node and not running here.
    async fn take_over_build(&self, id: i64) -> Result<(), EngineError> {
        if self.builds.contains_key(&id) {
            return Ok(());
        }
        let Some(build) = self.db.builds().get_build(id).await? else {
            return Ok(());
        };
        let events = self.db.builds().build_events_after(id, 0).await?;
        let plan = match stored_plan(&build.plan) {
            Ok(plan) => plan,
            Err(why) => {
                let reason = format!("a web node cannot take the build over: {why}");
                return self.error_taken_over(id, &events, reason).await;
            }
        };
        tracing::info!(build = id, "taking a build over where its plan was");
        // An abort asked while no node ran it stops it at once.
        let aborted = self.db.nodes().take_abort_request(id).await?;
        let deps = self.build_deps();
        let taken = Build::taken_over(id, build.team, plan, deps, self.builds.clone(), &events)
            .for_job(stored_job(&build.plan))
            .with_credentials(crate::credentials::NeedsCredentials::of_stored(&build.plan))
            .aborted_before_start(aborted);
        self.start_build(id, taken);
        Ok(())
    }

    /// Records build `id` errored for `reason`, its events following the
    /// stored `events`.
    async fn error_taken_over(
        &self,
        id: i64,
        events: &[(i64, String)],
        reason: String,
    ) -> Result<(), EngineError> {
        tracing::warn!(build = id, "{reason}");
        let next_event = events.last().map_or(0, |e| e.0) + 1;
        self.db
            .builds()
            .finish_build(id, BuildStatus::Errored, None, Some(&reason))
            .await?;
        let mut sink = EventSink::resume(id, next_event, self.db.clone(), self.hub.clone());
        sink.emit(&BuildEvent::Error {
            message: reason,
            time: now_ms(),
        })
        .await?;
        sink.emit(&crate::events::status_event(BuildStatus::Errored, None))
            .await?;
        Ok(())
    }
}

/// The node heartbeat: beats, and takes over nodes that stopped beating.
struct NodeWatch {
    /// The engine whose node beats.
    engine: Engine,
    /// This node's hold on its name, released when the job stops.
    _name_lock: tokio::sync::watch::Receiver<bool>,
    /// Abort requests already delivered: build and when it was asked.
    aborted: std::collections::HashMap<i64, i64>,
}

impl Job for NodeWatch {
    fn name(&self) -> String {
        NODE_HEARTBEAT_JOB.into()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let e = &self.engine;
        let me = &e.config.node_name;
        if !e.db.nodes().beat_web_node(me).await? {
            // Another node found this one dead and took its builds over:
            // going on would run them twice.
            tracing::error!(node = %me, "this web node missed its heartbeats and another node took its builds over; it must stop");
            e.fenced.send_replace(true);
            return Ok(Outcome::Done);
        }
        // Each request once (a second abort also stops the hooks that run
        // after the first); a build no longer asked about is forgotten.
        let asked = e.db.nodes().abort_requests(me).await?;
        self.aborted
            .retain(|id, _| asked.iter().any(|(a, _)| a == id));
        for (id, at) in asked {
            if self.aborted.get(&id) == Some(&at) {
                continue;
            }
            if let Some(build) = e.builds.get(&id).map(|b| b.clone()) {
                tracing::info!(
                    build = id,
                    "aborting a build, as asked through another web node"
                );
                build.do_send(crate::builds::AbortBuild);
                self.aborted.insert(id, at);
            }
        }
        e.claim_dead_nodes().await?;
        Ok(Outcome::Idle)
    }
}

/// The plan stored with a build (a one-off build's or a job build's) and
/// the build's own timeout, or why it cannot be read.
pub(super) fn stored_plan(
    json: &serde_json::Value,
) -> Result<(Plan, Option<std::time::Duration>), String> {
    if let Ok(plan) = serde_json::from_value::<OneOffPlan>(json.clone()) {
        let timeout = plan.timeout_secs.map(std::time::Duration::from_secs);
        return Ok((runnable(plan.into()), timeout));
    }
    let job = serde_json::from_value::<JobPlan>(json.clone())
        .map_err(|e| format!("its stored plan is neither a one-off nor a job plan: {e}"))?;
    let plan = job.plan().map_err(|e| e.to_string())?;
    Ok((runnable(plan), None))
}

/// The pipeline and job of a stored job build's plan (none for a one-off
/// build, or a name that is no longer valid).
pub(super) fn stored_job(json: &serde_json::Value) -> Option<crate::plan::JobRef> {
    serde_json::from_value::<JobPlan>(json.clone())
        .ok()?
        .job_ref()
        .ok()
}
