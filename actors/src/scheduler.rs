//! The Scheduler actor: the pool of workers a step can be placed on. It
//! filters workers by hard constraints, picks one, and owns the live counts
//! (active tasks per worker) that it changes atomically as it places and
//! releases, so that limits are never judged on counts a heartbeat old.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use rand::seq::SliceRandom;

use crate::error::EngineError;
use crate::runtime::Worker;
use crate::worker_info::{WorkerRegistration, WorkerState};

/// What the Scheduler knows of one worker.
#[derive(Clone)]
pub struct Candidate {
    /// The worker's registration (platform, tags, team, limits).
    pub registration: WorkerRegistration,
    /// Its state; only `running` workers take work.
    pub state: WorkerState,
    /// The client to reach it.
    pub client: Arc<dyn Worker>,
}

/// The Registry tells the Scheduler a worker's registration, state or client changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerUpdated(pub Candidate);

/// The Registry tells the Scheduler a worker is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerRemoved(pub String);

/// Constraints of a step.
#[derive(Debug, Clone, Default)]
pub struct Constraints {
    /// Team running the step.
    pub team: String,
    /// Platform the step needs.
    pub platform: String,
    /// Tags the worker must have (all of them).
    pub tags: Vec<String>,
}

/// Asks for a worker for a step; the placement holds capacity until released.
#[derive(Message)]
#[rtype(result = "Result<Placement, EngineError>")]
pub struct SelectWorker(pub Constraints);

/// Releases the capacity a placement held.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleasePlacement {
    /// Worker the step ran on.
    pub worker: String,
}

/// Current active task counts by worker.
#[derive(Message)]
#[rtype(result = "HashMap<String, u32>")]
pub struct ActiveCounts;

/// A step placed on a worker.
#[derive(Clone)]
pub struct Placement {
    /// Worker name.
    pub worker: String,
    /// Client of that worker.
    pub client: Arc<dyn Worker>,
}

/// The pool of workers.
#[derive(Default)]
pub struct Scheduler {
    /// Every known worker by name.
    workers: HashMap<String, Candidate>,
    /// Task steps placed and not yet released, by worker.
    active_tasks: HashMap<String, u32>,
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Handler<WorkerUpdated> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: WorkerUpdated, _: &mut Context<Self>) {
        self.workers.insert(msg.0.registration.name.clone(), msg.0);
    }
}

impl Handler<WorkerRemoved> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: WorkerRemoved, _: &mut Context<Self>) {
        self.workers.remove(&msg.0);
    }
}

impl Handler<SelectWorker> for Scheduler {
    type Result = Result<Placement, EngineError>;
    fn handle(&mut self, msg: SelectWorker, _: &mut Context<Self>) -> Self::Result {
        let all: Vec<&Candidate> = self.workers.values().collect();
        let mut picked = filter(&msg.0, &all)?;
        picked.shuffle(&mut rand::thread_rng());
        let active = &self.active_tasks;
        let best = picked
            .into_iter()
            .min_by_key(|c| active.get(&c.registration.name).copied().unwrap_or(0))
            .expect("filter returns at least one worker");
        let placement = Placement {
            worker: best.registration.name.clone(),
            client: best.client.clone(),
        };
        *self
            .active_tasks
            .entry(placement.worker.clone())
            .or_default() += 1;
        Ok(placement)
    }
}

impl Handler<ReleasePlacement> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: ReleasePlacement, _: &mut Context<Self>) {
        if let Some(n) = self.active_tasks.get_mut(&msg.worker) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Handler<ActiveCounts> for Scheduler {
    type Result = MessageResult<ActiveCounts>;
    fn handle(&mut self, _: ActiveCounts, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.active_tasks.clone())
    }
}

/// Applies the hard filters; when none passes, the error names every
/// constraint and how many workers each excluded.
pub fn filter<'a>(
    c: &Constraints,
    all: &[&'a Candidate],
) -> Result<Vec<&'a Candidate>, EngineError> {
    let mut not_running = 0;
    let mut wrong_platform = 0;
    let mut missing_tags = 0;
    let mut tagged_only = 0;
    let mut other_team = 0;
    let mut passing = Vec::new();
    for w in all {
        let r = &w.registration;
        if w.state != WorkerState::Running {
            not_running += 1;
        } else if r.platform != c.platform {
            wrong_platform += 1;
        } else if !c.tags.iter().all(|t| r.tags.contains(t)) {
            missing_tags += 1;
        } else if c.tags.is_empty() && !r.tags.is_empty() {
            tagged_only += 1;
        } else if r.team.as_deref().is_some_and(|t| t != c.team) {
            other_team += 1;
        } else {
            passing.push(*w);
        }
    }
    // A team with compatible workers of its own does not use the general pool.
    if passing.iter().any(|w| w.registration.team.is_some()) {
        passing.retain(|w| w.registration.team.is_some());
    }
    if !passing.is_empty() {
        return Ok(passing);
    }
    let mut wanted = vec![format!("platform {:?}", c.platform)];
    if !c.tags.is_empty() {
        wanted.push(format!("tags {:?}", c.tags));
    }
    wanted.push(format!("team {:?}", c.team));
    let mut why = vec![];
    for (n, reason) in [
        (not_running, "not running".to_string()),
        (wrong_platform, format!("platform is not {:?}", c.platform)),
        (missing_tags, format!("missing one of tags {:?}", c.tags)),
        (tagged_only, "tagged, and the step has no tags".to_string()),
        (
            other_team,
            format!("belong to a team other than {:?}", c.team),
        ),
    ] {
        if n > 0 {
            why.push(format!("{n} {reason}"));
        }
    }
    let why = if all.is_empty() {
        "no workers are registered".to_string()
    } else {
        format!("{} workers: {}", all.len(), why.join(", "))
    };
    Err(EngineError::NoWorkers(format!(
        "no workers satisfying: {}: {why}",
        wanted.join(", ")
    )))
}
