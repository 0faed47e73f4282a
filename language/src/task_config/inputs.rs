//! `inputs`: artifacts mounted into the task's container before it runs.

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::paths::check_path;
use super::read::{entry, flag, list, named, opt_scalar, Problems};

/// A task input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInput {
    /// Name the artifact is given under.
    pub name: String,
    /// Where it is mounted: relative to the build dir, or absolute
    /// (defaults to the name).
    pub path: String,
    /// The task may run without it.
    #[serde(default)]
    pub optional: bool,
}

/// Reads `inputs`; each must have a name, and names must be unique.
pub(super) fn read_inputs(v: Option<&Value>, p: &mut Problems) -> Vec<TaskInput> {
    let mut inputs: Vec<TaskInput> = Vec::new();
    for (i, v) in list(v, "inputs", p).iter().enumerate() {
        let at = format!("inputs[{i}]");
        let Some(m) = entry(v, &at, &["name", "path", "optional"], p) else {
            continue;
        };
        let Some(name) = named(m, &at, p) else {
            continue;
        };
        let path = opt_scalar(m, "path", &at, p).unwrap_or_else(|| name.clone());
        if let Err(e) = check_path(&path) {
            p.push(format!("input path {path:?}: {e}"));
        }
        let optional = flag(m, "optional", &at, p);
        if inputs.iter().any(|o| o.name == name) {
            p.push(format!("inputs: duplicate input name {name:?}"));
        }
        inputs.push(TaskInput {
            name,
            path,
            optional,
        });
    }
    inputs
}
