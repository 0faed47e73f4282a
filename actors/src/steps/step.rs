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

    /// The step's kind (`task`, `get` ...), as the `plan` event tells it;
    /// none when not known before it runs.
    fn kind_name(&self) -> Option<&'static str> {
        None
    }

    /// What a task step runs (its path, then its arguments), as the
    /// `plan` event tells it.
    fn argv(&self) -> Vec<String> {
        Vec::new()
    }

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

    /// Names of the build's artifacts the step will read (an earlier step's
    /// outputs, found by name when it runs): placement adds their ids to
    /// [`StepRequest::inputs`], so such a step uses the `with_inputs` chain
    /// and volume locality sees where they are. By default none.
    fn named_inputs(&self) -> Vec<String> {
        Vec::new()
    }

    /// Runs the step on the worker in `ctx`. A stop (abort, timeout) ends it
    /// with [`StepEnd::Stopped`].
    async fn run(&self, ctx: &mut StepContext) -> Result<StepEnd, EngineError>;

    /// What a web node that takes the build over does with the step when
    /// it began before and its container stands: reattach to its process
    /// by default (a step that cannot says otherwise).
    fn on_takeover(&self) -> OnTakeover {
        OnTakeover::Reattach
    }

    /// Restores what the step left in its build, when it ended before a
    /// web node took the build over and is walked again quietly: nothing
    /// runs and no event is stored. A step that sets build-local vars sets
    /// them again (read again from their file); a step that became a plan
    /// when it ran answers that plan, to be walked again the same way. By
    /// default nothing.
    async fn restore(&self, scope: &BuildScope) -> Result<Option<Plan>, EngineError> {
        let _ = scope;
        Ok(None)
    }

    /// Takes the step over after a restart of the web node, where it was.
    async fn reattach(&self, ctx: &mut StepContext, at: Reattach) -> Result<StepEnd, EngineError> {
        let _ = (ctx, at);
        Err(EngineError::Invalid(format!(
            "step {:?} cannot be taken over after a restart of the web node",
            self.name()
        )))
    }
}

/// What a web node taking a build over does with a step that began before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTakeover {
    /// Reattach to its process ([`Step::reattach`]), whose output the
    /// worker kept.
    Reattach,
    /// Run it again from its start: running it twice changes nothing (a
    /// `get` fetches the same version again).
    Rerun,
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

/// The error of a check that ran past its `check_timeout`, as Concourse
/// words it (`atc/exec`'s `TimeoutLogMessage`).
pub(crate) const TIMEOUT_EXCEEDED: &str = "timeout exceeded";

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    /// Its process exited with this status (0: the step succeeded).
    Exited(i32),
    /// The build's stop signal (abort or timeout) ended it.
    Stopped,
    /// Its own time limit ran out (a check's `check_timeout`): it failed
    /// with Concourse's `timeout exceeded`, told in an error event.
    TimedOut,
}

/// Where a step taken over after a restart of the web node was.
#[derive(Debug, Clone)]
pub struct Reattach {
    /// The step's volumes on the worker, as (role, handle), each role once:
    /// the newest volume of the role (a step run afresh after an earlier
    /// takeover recorded its volumes again under the same roles); roles
    /// are those given to [`StepContext::create_volume`].
    pub volumes: Vec<(String, String)>,
    /// Bytes of stdout and stderr already stored as log events, not to be
    /// repeated when the output is replayed.
    pub already_stored: [u64; 2],
    /// Every container the step had created, oldest first; the last is
    /// its process's ([`Reattach::container`]).
    pub containers: Vec<String>,
    /// What the step told of resources before it was taken over: each
    /// `resource` event's action (`get`, `put`, `image`) and version.
    pub told: Vec<(String, serde_json::Value)>,
}

impl Reattach {
    /// The container of the step's process: the last it created.
    pub fn container(&self) -> &str {
        self.containers.last().map_or("", String::as_str)
    }
}

/// A plan as the walker runs it: each leaf a runnable step.
pub(crate) type Plan = crate::plan::Plan<Arc<dyn Step>>;

impl Leaf for Arc<dyn Step> {
    fn name(&self) -> &str {
        Step::name(self.as_ref())
    }

    fn step_kind(&self) -> Option<&'static str> {
        self.kind_name()
    }

    fn argv(&self) -> Vec<String> {
        Step::argv(self.as_ref())
    }
}

/// The runnable step of a definition.
pub(super) fn step_of(def: StepDef) -> Arc<dyn Step> {
    match def {
        StepDef::Task(s) => Arc::new(s),
        StepDef::Get(s) => Arc::new(s),
        StepDef::Put(s) => Arc::new(s),
        StepDef::Check(s) => Arc::new(s),
        StepDef::LoadVar(s) => Arc::new(s),
        StepDef::SetPipeline(s) => Arc::new(s),
        StepDef::Deferred(s) => Arc::new(s),
    }
}

/// The runnable plan of a translated one: each definition its step.
pub(crate) fn runnable(plan: crate::plan::Plan<StepDef>) -> Plan {
    plan.map(&step_of)
}
