//! `outputs`: directories kept as artifacts after the task ran.

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::paths::check_path;
use super::read::{entry, list, named, opt_scalar, Problems};

/// A task output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOutput {
    /// Name of the artifact.
    pub name: String,
    /// Where the task writes it: relative to the build dir, or absolute
    /// (defaults to the name). An output at the same path as an input is
    /// that input's directory, as the task left it (as in Concourse).
    pub path: String,
}

/// Reads `outputs`; each must have a name, and names must be unique.
pub(super) fn read_outputs(v: Option<&Value>, p: &mut Problems) -> Vec<TaskOutput> {
    let mut outputs: Vec<TaskOutput> = Vec::new();
    for (i, v) in list(v, "outputs", p).iter().enumerate() {
        let at = format!("outputs[{i}]");
        let Some(m) = entry(v, &at, &["name", "path"], p) else {
            continue;
        };
        let Some(name) = named(m, &at, p) else {
            continue;
        };
        let path = opt_scalar(m, "path", &at, p).unwrap_or_else(|| name.clone());
        if let Err(e) = check_path(&path) {
            p.push(format!("output path {path:?}: {e}"));
        }
        if outputs.iter().any(|o| o.name == name) {
            p.push(format!("outputs: duplicate output name {name:?}"));
        }
        outputs.push(TaskOutput { name, path });
    }
    outputs
}
