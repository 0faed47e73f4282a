//! The `Step` trait: what every kind of step (task, and later get, put,
//! check) implements, and how a step ends.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::EngineError;
use crate::plan::{Leaf, StepDef};
use crate::scheduler::StepRequest;

use super::{BuildScope, StepContext};

/// One kind of step (task, and later get, put, check).
#[async_trait]
pub trait Step: Send + Sync {
    /// The step's name, in events and in the rows of what it creates.
    fn name(&self) -> &str;

    /// Prepares the step before it is placed: what to place and run, or
    /// how it ended when it needs no worker. By default the step itself. A
    /// step defined with build-local vars (`((.:name))`) is filled from
    /// the build's vars here and translated into the concrete plan to run
    /// (see [`crate::steps::deferred`]); `load_var` reads its file here and
    /// ends (see [`crate::steps::load_var`]).
    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        let _ = scope;
        Ok(Prepared::Itself)
    }

    /// What the step needs of a worker. Placement sets the request's `team`
    /// and `avoid` (workers lost under earlier attempts).
    fn worker_request(&self) -> StepRequest;

    /// Runs the step on the worker in `ctx`. A stop (abort, timeout) ends it
    /// with [`StepEnd::Stopped`].
    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError>;

    /// Takes the step over after a restart of the web node, where it was.
    async fn reattach(&self, ctx: &mut StepContext, at: Reattach) -> Result<StepEnd, EngineError> {
        let _ = (ctx, at);
        Err(EngineError::Invalid(format!(
            "step {:?} cannot be taken over after a restart of the web node",
            self.name()
        )))
    }
}

/// What [`Step::prepare`] decided.
pub enum Prepared {
    /// Place and run the step itself.
    Itself,
    /// Run this plan in the step's place: its nodes are walked (and their
    /// steps prepared and placed) as any plan's.
    Plan(Plan),
    /// The step ran in full while preparing and needs no worker.
    Ended(StepEnd),
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Its process exited with this status (0: the step succeeded).
    Exited(i32),
    /// The build's stop signal (abort or timeout) ended it.
    Stopped,
}

/// Where a step taken over after a restart of the web node was.
#[derive(Debug, Clone)]
pub struct Reattach {
    /// The step's container.
    pub container: String,
    /// The build's volumes on the worker, as (role, handle) in the order
    /// they were created; roles are those given to
    /// [`StepContext::create_volume`].
    pub volumes: Vec<(String, String)>,
    /// Bytes of stdout and stderr already stored as log events, not to be
    /// repeated when the output is replayed.
    pub already_stored: [u64; 2],
}

/// A plan as the walker runs it: each leaf a runnable step.
pub type Plan = crate::plan::Plan<Arc<dyn Step>>;

impl Leaf for Arc<dyn Step> {
    fn name(&self) -> &str {
        Step::name(self.as_ref())
    }
}

/// The runnable step of a definition.
pub fn step_of(def: StepDef) -> Arc<dyn Step> {
    match def {
        StepDef::Task(s) => Arc::new(s),
        StepDef::Get(s) => Arc::new(s),
        StepDef::Put(s) => Arc::new(s),
        StepDef::Check(s) => Arc::new(s),
        StepDef::LoadVar(s) => Arc::new(s),
        StepDef::Deferred(s) => Arc::new(s),
    }
}

/// The runnable plan of a translated one: each definition its step.
pub fn runnable(plan: crate::plan::Plan<StepDef>) -> Plan {
    plan.map(&step_of)
}
