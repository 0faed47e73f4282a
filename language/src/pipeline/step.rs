//! The typed step tree of a Concourse plan: one [`StepKind`] per step, with
//! the modifiers every kind takes.
//!
//! Concourse reads a step as nested wrappers; a walker translating a [`Step`]
//! should nest them the same way, from the outside in:
//! `ensure` ( `on_error` ( `on_abort` ( `on_failure` ( `on_success` (
//! `across` ( `attempts` ( `timeout` ( the step's kind )))))))).
//! So each attempt has its own timeout, `across` runs the retried step once
//! per combination of values, and the hooks see the outcome of the whole.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::read::Params;

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// What the step does.
    pub kind: StepKind,
    /// `timeout`: the step (each attempt of it) is aborted after this long.
    pub timeout: Option<Timeout>,
    /// `attempts`: run up to this many times until it succeeds (at least 1).
    pub attempts: Option<u32>,
    /// `tags`: the step runs on a worker with all of these tags (for kinds
    /// that take tags: task, get, put, run, do, in_parallel).
    pub tags: Vec<String>,
    /// `across`: run the step once for each combination of these vars' values.
    pub across: Option<Across>,
    /// `on_success`, `on_failure`, `on_abort`, `on_error`, `ensure`.
    pub hooks: Hooks,
}

/// The hooks of a step or a job, each a step of its own.
pub type Hooks = crate::hooks::Hooks<Step>;

/// A `timeout` as written (it may hold a var) and, once known, its length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeout {
    /// The Go duration text (`1h30m`).
    pub text: String,
    /// Its length; none while a var in it is unfilled.
    pub duration: Option<Duration>,
}

/// `across`: the vars whose values a step runs over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Across {
    /// The vars, outermost first; the step runs once per combination.
    pub vars: Vec<AcrossVar>,
    /// Stop starting combinations after the first failure.
    pub fail_fast: bool,
}

/// One var of `across`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcrossVar {
    /// The build-local var name, read as `((.:NAME))` in the step.
    pub var: String,
    /// The values: a list, or a var filled at run time (`((.:loaded))`).
    pub values: Value,
    /// How many values run at once (default 1).
    pub max_in_flight: Option<MaxInFlight>,
}

/// `max_in_flight` of an `across` var.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MaxInFlight {
    /// `all`: every value at once.
    All,
    /// At most this many at once (at least 1).
    Limit(u32),
}

/// What a step does: exactly one of Concourse's step kinds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StepKind {
    /// `task`: run a task config in a container.
    Task(TaskStep),
    /// `get`: fetch a version of a resource.
    Get(GetStep),
    /// `put`: push to a resource (then get the version it made).
    Put(PutStep),
    /// `in_parallel`: run steps at the same time.
    InParallel(InParallel),
    /// `do`: run steps one after the other.
    Do(Vec<Step>),
    /// `try`: run a step; its failure does not fail the build.
    Try(Box<Step>),
    /// `load_var`: read a file of an artifact into a build-local var.
    LoadVar(LoadVarStep),
    /// `set_pipeline`: configure a pipeline (accepted, not run by Gantry).
    SetPipeline(SetPipelineStep),
    /// `run`: a prototype's message (experimental in Concourse; accepted,
    /// not run by Gantry).
    Run(RunStep),
}

impl StepKind {
    /// The key naming the kind (`task`, `get`, ...).
    pub fn key(&self) -> &'static str {
        match self {
            StepKind::Task(_) => "task",
            StepKind::Get(_) => "get",
            StepKind::Put(_) => "put",
            StepKind::InParallel(_) => "in_parallel",
            StepKind::Do(_) => "do",
            StepKind::Try(_) => "try",
            StepKind::LoadVar(_) => "load_var",
            StepKind::SetPipeline(_) => "set_pipeline",
            StepKind::Run(_) => "run",
        }
    }
}

/// A `task` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStep {
    /// The step's name.
    pub name: String,
    /// `file: ARTIFACT/path/task.yml`, read from an artifact at run time.
    pub file: Option<String>,
    /// `config`: the inline task.yml (checked in full by `task_config` when
    /// the step runs; here its keys, `platform` and `run.path`).
    pub config: Option<Value>,
    /// `image`: an artifact of the build to use as the container image.
    pub image: Option<String>,
    /// `privileged`: run with full capabilities.
    pub privileged: bool,
    /// `hermetic`: no outbound network.
    pub hermetic: bool,
    /// `params`: override the config's params (environment variables).
    pub params: Params,
    /// `vars`: fill `((vars))` of a `file:` task config.
    pub vars: Params,
    /// `input_mapping`: task input name to build artifact name.
    pub input_mapping: BTreeMap<String, String>,
    /// `output_mapping`: task output name to build artifact name.
    pub output_mapping: BTreeMap<String, String>,
    /// `container_limits`: override the config's limits.
    pub container_limits: Option<Limits>,
}

/// `container_limits` of a step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// CPU shares.
    pub cpu: Option<u64>,
    /// Memory in bytes (`1GB` and `512MiB` are read as binary units).
    pub memory: Option<u64>,
}

/// A `get` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetStep {
    /// The artifact name (`get: NAME`).
    pub name: String,
    /// The resource fetched: `resource:`, or the name.
    pub resource: String,
    /// `version`: which version (default: latest).
    pub version: Option<VersionSpec>,
    /// `params` given to the resource's `in`.
    pub params: Params,
    /// `passed`: jobs the version must have passed (scheduling; recorded).
    pub passed: Vec<String>,
    /// `trigger`: new versions start the job (scheduling; recorded).
    pub trigger: bool,
}

/// `version` of a get step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VersionSpec {
    /// `latest`.
    Latest,
    /// `every`.
    Every,
    /// A pinned version: its fields.
    Pinned(BTreeMap<String, String>),
}

/// A `put` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PutStep {
    /// The step's name (`put: NAME`), also the artifact of the implicit get.
    pub name: String,
    /// The resource pushed to: `resource:`, or the name.
    pub resource: String,
    /// `params` given to the resource's `out`.
    pub params: Params,
    /// `inputs`: which artifacts the put sees (default: all).
    pub inputs: Option<PutInputs>,
    /// `get_params` of the implicit get.
    pub get_params: Params,
    /// `no_get`: skip the implicit get.
    pub no_get: bool,
}

/// `inputs` of a put step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PutInputs {
    /// `all`: every artifact of the build.
    All,
    /// `detect`: the artifacts named in `params`.
    Detect,
    /// These artifacts.
    Listed(Vec<String>),
}

/// An `in_parallel` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InParallel {
    /// The steps.
    pub steps: Vec<Step>,
    /// `limit`: at most this many at once (default: all).
    pub limit: Option<u32>,
    /// `fail_fast`: abort the others after the first failure.
    pub fail_fast: bool,
}

/// A `load_var` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadVarStep {
    /// The var set, read as `((.:NAME))`.
    pub name: String,
    /// `ARTIFACT/path` of the file.
    pub file: String,
    /// `json`, `yaml`, `yml`, `trim` or `raw` (default: by the file's extension).
    pub format: Option<String>,
    /// `reveal`: show the value in the build log.
    pub reveal: bool,
}

/// A `set_pipeline` step (validated; Gantry does not configure pipelines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetPipelineStep {
    /// The pipeline's name (`self` for the current one).
    pub name: String,
    /// `ARTIFACT/path` of the pipeline file.
    pub file: String,
    /// `team`.
    pub team: Option<String>,
    /// `vars`.
    pub vars: Params,
    /// `var_files`.
    pub var_files: Vec<String>,
    /// `instance_vars`.
    pub instance_vars: Params,
}

/// A `run` step (prototypes; validated, not run by Gantry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStep {
    /// The message sent to the prototype.
    pub message: String,
    /// `type`: the prototype.
    pub prototype: String,
    /// `params`.
    pub params: Params,
    /// `privileged`.
    pub privileged: bool,
    /// `container_limits`.
    pub container_limits: Option<Limits>,
}

impl Step {
    /// Calls `f` on this step and every step inside it (hooks included),
    /// parents first.
    pub fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Step)) {
        f(self);
        match &self.kind {
            StepKind::Do(steps) => steps.iter().for_each(|s| s.visit(f)),
            StepKind::InParallel(p) => p.steps.iter().for_each(|s| s.visit(f)),
            StepKind::Try(s) => s.visit(f),
            _ => {}
        }
        for (_, hook) in self.hooks.iter() {
            hook.visit(f);
        }
    }
}
