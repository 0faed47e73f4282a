//! Task configuration in Concourse's `task.yml` format, with validation that
//! reports every problem at once (unknown fields included, by name and
//! path) instead of the first one.
//!
//! Accepted: everything Concourse's `atc.TaskConfig` accepts (`platform`,
//! `rootfs_uri`, `image_resource`, `inputs`, `outputs`, `caches` with `ttl`,
//! `params` of any type, `run`, `container_limits` with units), plus
//! Gantry's `hermetic` and `container_limits.pids`. Gantry is stricter
//! where Concourse would run something else than was written: unknown
//! fields are refused at every level (Concourse checks only the top),
//! `run.path` is required, input and output names must be unique and
//! without `/`, and paths must not contain `..`.

mod caches;
mod image_resource;
mod inputs;
mod limits;
mod outputs;
mod params;
mod paths;
mod read;
mod run;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use gantry_wire::spec::RootfsSpec;

pub use caches::TaskCache;
pub use image_resource::ImageResource;
pub use inputs::TaskInput;
pub use limits::{cpu_shares, memory_bytes, ContainerLimits};
pub use outputs::TaskOutput;
pub use params::params_text;
pub use paths::container_path;
pub use run::TaskRun;

use read::{flag, scalar, unknown_fields};

/// A validated task configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Platform the task needs (`linux`).
    pub platform: String,
    /// `raw:///ABS/PATH`, or none for the worker's default image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_uri: Option<String>,
    /// An image fetched by a resource. Valid task.yml, but no executor
    /// fetches it yet: builds refuse it unless given an image instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_resource: Option<ImageResource>,
    /// Artifacts mounted into the container before it runs.
    #[serde(default)]
    pub inputs: Vec<TaskInput>,
    /// Directories kept as artifacts after it ran.
    #[serde(default)]
    pub outputs: Vec<TaskOutput>,
    /// Directories kept between runs of the same task (a one-off build's
    /// start empty, as in Concourse).
    #[serde(default)]
    pub caches: Vec<TaskCache>,
    /// Environment variables, rendered as text the way Concourse does.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// What to run.
    pub run: TaskRun,
    /// Kernel limits.
    #[serde(default)]
    pub container_limits: ContainerLimits,
    /// Only loopback networking (a Gantry extension; default false: outbound networking).
    #[serde(default)]
    pub hermetic: bool,
}

const TOP_FIELDS: &[&str] = &[
    "platform",
    "rootfs_uri",
    "image_resource",
    "inputs",
    "outputs",
    "caches",
    "params",
    "run",
    "container_limits",
    "hermetic",
];

impl TaskConfig {
    /// Parses and validates YAML; on failure returns every problem found.
    pub fn from_yaml(text: &str) -> Result<TaskConfig, Vec<String>> {
        let doc: Value = crate::bounded_yaml::parse_bounded_yaml(text, "task config")
            .map_err(|e| vec![e.to_string()])?;
        Self::from_value(&doc)
    }

    /// Validates an already-parsed document (YAML or JSON).
    pub fn from_value(doc: &Value) -> Result<TaskConfig, Vec<String>> {
        let mut p = Vec::new();
        let Some(top) = doc.as_mapping() else {
            return Err(vec!["task config must be a mapping of fields".into()]);
        };
        unknown_fields(top, TOP_FIELDS, "", &mut p);
        let platform = match top.get("platform") {
            None | Some(Value::Null) => {
                p.push("missing field platform (e.g. platform: linux)".into());
                String::new()
            }
            Some(v) => scalar(v, "platform", &mut p),
        };
        let rootfs_uri = match top.get("rootfs_uri") {
            None | Some(Value::Null) => None,
            Some(v) => Some(scalar(v, "rootfs_uri", &mut p)),
        };
        if let Err(e) = RootfsSpec::from_uri(rootfs_uri.as_deref()) {
            p.push(e);
        }
        let image_resource = image_resource::read_image_resource(top.get("image_resource"), &mut p);
        let inputs = inputs::read_inputs(top.get("inputs"), &mut p);
        let outputs = outputs::read_outputs(top.get("outputs"), &mut p);
        let caches = caches::read_caches(top.get("caches"), &mut p);
        let params = params::read_params(top.get("params"), &mut p);
        let run = run::read_run(top.get("run"), &mut p);
        let container_limits = limits::read_limits(top.get("container_limits"), &mut p);
        let hermetic = flag(top, "hermetic", "", &mut p);
        match (p.is_empty(), run) {
            (true, Some(run)) => Ok(TaskConfig {
                platform,
                rootfs_uri,
                image_resource,
                inputs,
                outputs,
                caches,
                params,
                run,
                container_limits,
                hermetic,
            }),
            _ => Err(p),
        }
    }
}

#[cfg(test)]
mod tests;
