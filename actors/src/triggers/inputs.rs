//! A job's inputs: its `get` steps, each with the resource it fetches,
//! where that resource's versions are kept, and the constraints on the
//! version (`version`, pins, `passed`, `trigger`).

use crate::db::ResourceRow;
use crate::pipeline::{self, Pipeline, StepKind, VersionSpec};
use crate::resources::config::params_json;

/// Where a version pin of an input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pin {
    /// The step's `version: {...}`.
    Step(String),
    /// The resource pinned by hand (`pin-resource`).
    Api(String),
    /// The resource's `version:` in the pipeline.
    Config(String),
}

impl Pin {
    /// The version pinned (JSON text).
    pub(crate) fn version(&self) -> &str {
        match self {
            Pin::Step(v) | Pin::Api(v) | Pin::Config(v) => v,
        }
    }
}

/// One input of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobInput {
    /// The get step's name (the artifact's).
    pub name: String,
    /// The resource fetched.
    pub resource: String,
    /// `passed`: jobs the version must have gone through.
    pub passed: Vec<String>,
    /// `trigger`: a new version starts the job.
    pub trigger: bool,
    /// `version: every`: every version in turn, oldest first.
    pub every: bool,
    /// A pinned version, if any.
    pub pin: Option<Pin>,
    /// Where the resource's versions are kept.
    pub scope: String,
    /// The resource config's hash.
    pub config: String,
}

/// The inputs of `job` (the first `get` of each name, hooks included), with
/// the stored `resources` of its pipeline (and their pins by hand). A get
/// of a resource not stored is a problem named.
pub(crate) fn job_inputs(
    pipeline: &Pipeline,
    job: &pipeline::Job,
    resources: &[ResourceRow],
) -> Result<Vec<JobInput>, String> {
    let mut gets: Vec<&pipeline::GetStep> = Vec::new();
    job.visit(&mut |step| {
        if let StepKind::Get(get) = &step.kind {
            if !gets.iter().any(|g| g.name == get.name) {
                gets.push(get);
            }
        }
    });
    gets.into_iter()
        .map(|get| {
            let row = resources
                .iter()
                .find(|r| r.name == get.resource)
                .ok_or_else(|| {
                    format!(
                        "job {:?}: resource {:?} is not stored",
                        job.name, get.resource
                    )
                })?;
            let step_pin = match &get.version {
                Some(VersionSpec::Pinned(v)) => Some(Pin::Step(
                    serde_json::to_value(v)
                        .expect("strings serialize")
                        .to_string(),
                )),
                _ => None,
            };
            let config_pin = pipeline
                .resource(&get.resource)
                .and_then(|r| r.version.as_ref())
                .map(|v| params_json(v).map(|v| Pin::Config(v.to_string())))
                .transpose()
                .map_err(|e| format!("resource {:?}: version: {e}", get.resource))?;
            let pin = step_pin
                .or_else(|| row.pinned.clone().map(Pin::Api))
                .or(config_pin);
            Ok(JobInput {
                name: get.name.clone(),
                resource: get.resource.clone(),
                passed: get.passed.clone(),
                trigger: get.trigger,
                every: matches!(get.version, Some(VersionSpec::Every)),
                pin,
                scope: row.scope.clone(),
                config: row.config.clone(),
            })
        })
        .collect()
}
