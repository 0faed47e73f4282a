//! The definitions of a plan's steps: what each step is to do, as data,
//! made by translation (`translate.rs`, `resources.rs`) and by the one-off
//! and check plans. How each kind runs is in the steps module
//! (`steps/task.rs`, `steps/get.rs` ...), which implements its `Step` trait
//! for these types; keeping the data here lets translation sit below both
//! the steps and the walker.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::pipeline::Step as PipelineStep;
use crate::resources::config::ImageSource;
use crate::resources::ResourceConfig;
use crate::task_config::TaskConfig;

use super::at::step_name;
use super::{At, Leaf};

/// One step of a plan, by kind. Variants differ in size, as the steps
/// do; a definition is made once per step of a build and turned into its
/// runnable step at once, so none is boxed.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum StepDef {
    /// A `task`.
    Task(TaskStep),
    /// A `get`.
    Get(GetStep),
    /// A `put` (and its implicit get).
    Put(PutStep),
    /// The check of a check build.
    Check(CheckStep),
    /// A `load_var`.
    LoadVar(LoadVarStep),
    /// A `set_pipeline`.
    SetPipeline(SetPipelineStep),
    /// A step translated when it runs.
    Deferred(DeferredStep),
}

impl Leaf for StepDef {
    fn name(&self) -> &str {
        match self {
            StepDef::Task(s) => &s.name,
            StepDef::Get(s) => &s.name,
            StepDef::Put(s) => &s.name,
            StepDef::Check(s) => &s.name,
            StepDef::LoadVar(s) => &s.name,
            StepDef::SetPipeline(s) => &s.name,
            StepDef::Deferred(s) => &s.name,
        }
    }

    fn step_kind(&self) -> Option<&'static str> {
        match self {
            StepDef::Task(_) => Some("task"),
            StepDef::Get(_) => Some("get"),
            StepDef::Put(_) => Some("put"),
            StepDef::Check(_) => Some("check"),
            StepDef::LoadVar(_) => Some("load_var"),
            StepDef::SetPipeline(_) => Some("set_pipeline"),
            StepDef::Deferred(_) => None,
        }
    }

    fn argv(&self) -> Vec<String> {
        match self {
            StepDef::Task(s) => task_argv(&s.config),
            _ => Vec::new(),
        }
    }
}

/// What a task runs: its `run.path`, then its `run.args`.
pub(crate) fn task_argv(config: &TaskConfig) -> Vec<String> {
    std::iter::once(config.run.path.clone())
        .chain(config.run.args.iter().cloned())
        .collect()
}

/// A task step.
#[derive(Debug, Clone)]
pub struct TaskStep {
    /// The step's name.
    pub name: String,
    /// The task's configuration.
    pub config: TaskConfig,
    /// Artifact id for each input name.
    pub inputs: BTreeMap<String, String>,
    /// Tags a worker must have.
    pub tags: Vec<String>,
    /// Artifact id of an image (rootfs tar or OCI layout) to run the task in.
    pub image: Option<String>,
    /// `input_mapping`: for a task input not in `inputs`, the name of the
    /// build artifact (an earlier step's output) it is; by default its own.
    pub input_mapping: BTreeMap<String, String>,
    /// `output_mapping`: the name each output is kept under in the build's
    /// artifacts (and its `output` event); by default its own.
    pub output_mapping: BTreeMap<String, String>,
    /// `image:` of the step: the build artifact (a `get` of an image
    /// resource) whose image the task runs in, instead of its config's.
    pub image_artifact: Option<String>,
    /// The config's `image_resource` resolved against the pipeline's
    /// resource types; none: resolved at run time as a base type.
    pub image_resource: Option<ImageSource>,
    /// `privileged: true`: its container is privileged, so it runs only on
    /// a worker started with `--allow-privileged`.
    pub privileged: bool,
}

/// A get step.
#[derive(Debug, Clone)]
pub struct GetStep {
    /// The step's name: the artifact it produces.
    pub name: String,
    /// The resource fetched.
    pub resource: String,
    /// Its type and source.
    pub config: ResourceConfig,
    /// A pinned version (the step's `version: {...}`, or the resource's).
    pub version: Option<Value>,
    /// `params` of `in`.
    pub params: Value,
    /// Tags a worker must have.
    pub tags: Vec<String>,
    /// The resource's `check_timeout`, for the check a get without a
    /// version runs first (none: the node's default).
    pub check_timeout: Option<std::time::Duration>,
}

/// Which of the build's artifacts a put sees (`inputs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutInputs {
    /// Every artifact of the build (the default).
    All,
    /// The artifacts whose names start a path in the params.
    Detect,
    /// These, each required.
    Listed(Vec<String>),
}

/// A put step.
#[derive(Debug, Clone)]
pub struct PutStep {
    /// The step's name: the artifact of the implicit get.
    pub name: String,
    /// The resource pushed to.
    pub resource: String,
    /// Its type and source.
    pub config: ResourceConfig,
    /// `params` of `out`.
    pub params: Value,
    /// Which artifacts `out` sees.
    pub inputs: PutInputs,
    /// `params` of the implicit get.
    pub get_params: Value,
    /// Skip the implicit get.
    pub no_get: bool,
    /// Tags a worker must have.
    pub tags: Vec<String>,
    /// The resource's `expose_build_created_by`: `out` is told who made
    /// the build by hand (`BUILD_CREATED_BY`), as Concourse tells it.
    pub expose_created_by: bool,
}

/// A check step.
#[derive(Debug, Clone)]
pub struct CheckStep {
    /// The step's name (the resource's).
    pub name: String,
    /// Its type and source.
    pub config: ResourceConfig,
    /// Tags a worker must have (the resource's).
    pub tags: Vec<String>,
    /// Where the versions found are kept (none: the build's team's one-off
    /// history; see `crate::resources::scope`).
    pub scope: Option<String>,
    /// Check the custom types `config`'s type is built on first, deepest
    /// first, each into its own history (`check-resource-type` without
    /// `--shallow`, as Concourse's check plan skipping their intervals
    /// recursively); else their newest stored versions are used.
    pub types_first: bool,
    /// The resource's `check_timeout`; none: the node's default (a
    /// resource type's image check always takes the default: Concourse's
    /// resource types have no `check_timeout`).
    pub check_timeout: Option<std::time::Duration>,
}

/// How a `load_var` file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, parsed.
    Json,
    /// YAML, parsed.
    Yaml,
    /// Text, whitespace trimmed at both ends.
    Trim,
    /// Text, as it is.
    Raw,
}

impl Format {
    /// A `format:` as written (`json`, `yaml`, `yml`, `trim`, `raw`).
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "json" => Format::Json,
            "yaml" | "yml" => Format::Yaml,
            "trim" => Format::Trim,
            "raw" => Format::Raw,
            _ => return None,
        })
    }

    /// The format of a file without `format:`, by its extension as
    /// Concourse decides it: `.json`, `.yml` and `.yaml` are parsed, any
    /// other file is trimmed text.
    pub fn of_file(path: &str) -> Format {
        let name = path.rsplit('/').next().unwrap_or(path);
        match name.rsplit_once('.') {
            Some((_, "json")) => Format::Json,
            Some((_, "yml" | "yaml")) => Format::Yaml,
            _ => Format::Trim,
        }
    }

    /// The format's name, for messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Trim => "trim",
            Format::Raw => "raw",
        }
    }

    /// The var's value from the file's contents; a file that does not parse
    /// (or is not UTF-8 text) is an error naming the format.
    pub fn value(&self, data: &[u8]) -> Result<serde_yaml::Value, String> {
        let text = || std::str::from_utf8(data).map_err(|e| format!("not UTF-8 text ({e})"));
        match self {
            Format::Json => serde_json::from_slice::<serde_yaml::Value>(data)
                .map_err(|e| format!("not valid json: {e}")),
            Format::Yaml => crate::bounded_yaml::parse_bounded_yaml(text()?, "yaml file")
                .map_err(|e| e.to_string()),
            Format::Trim => Ok(serde_yaml::Value::String(text()?.trim().to_string())),
            Format::Raw => Ok(serde_yaml::Value::String(text()?.to_string())),
        }
    }
}

/// A `load_var` step.
#[derive(Debug, Clone)]
pub struct LoadVarStep {
    /// The step's name (the var's, with an `across` combination's suffix).
    pub name: String,
    /// The var it sets.
    pub var: String,
    /// `ARTIFACT/PATH` of the file.
    pub file: String,
    /// `format:`; by the file's extension when not given.
    pub format: Option<Format>,
    /// `reveal: true`: the value is not redacted.
    pub reveal: bool,
}

/// A `set_pipeline` step: stores a pipeline of the build's team from a
/// file of the build's artifacts.
#[derive(Debug, Clone)]
pub struct SetPipelineStep {
    /// The step's name (`self` or the pipeline's, with an `across` suffix).
    pub name: String,
    /// The pipeline set: `self` (the build's own) or a name.
    pub pipeline: String,
    /// `ARTIFACT/PATH` of the pipeline file.
    pub file: String,
    /// `vars`, over those of `var_files`.
    pub vars: crate::pipeline::Params,
    /// `var_files`: `ARTIFACT/PATH` YAML files of vars, later ones over
    /// earlier ones.
    pub var_files: Vec<String>,
    /// `team`, when it names one (`""` is the build's own, as none): only
    /// the build's own team is set, checked when the pipeline is set and
    /// again when the step runs.
    pub team: Option<String>,
    /// `instance_vars`: the instance of the pipeline set (none: the
    /// pipeline itself).
    pub instance_vars: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A step translated when it runs: a step whose own definition holds
/// build-local vars, or a `task` with `file:` (its config is read then).
#[derive(Debug, Clone)]
pub struct DeferredStep {
    /// The name it shows while it waits to be prepared.
    pub name: String,
    /// The pipeline's definition.
    pub step: PipelineStep,
    /// Where it was translated.
    pub at: At,
}

impl DeferredStep {
    /// Defers `step`, found at `at`.
    pub fn new(step: PipelineStep, at: At) -> DeferredStep {
        let name = match first_name(&step) {
            Some(name) if step_name(&step.kind).is_some() => at.name(name),
            Some(name) => at.name(&format!("{}:{name}", step.kind.key())),
            None => at.name(step.kind.key()),
        };
        DeferredStep { name, step, at }
    }
}

/// The name of the step, or of the first named step inside it.
fn first_name(step: &PipelineStep) -> Option<&str> {
    let mut found = None;
    step.visit(&mut |s| {
        if found.is_none() {
            found = step_name(&s.kind);
        }
    });
    found
}
