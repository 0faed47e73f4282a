//! `run`: the process a task runs.

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::read::{entry, list, opt_scalar, scalar, Problems};

/// The process a task runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRun {
    /// Executable.
    pub path: String,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory, relative to the build dir (or absolute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// User to run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Reads `run`. Gantry requires `run.path`: Concourse may take the
/// executable from an image's entrypoint, which Gantry's images do not
/// offer yet.
pub(super) fn read_run(v: Option<&Value>, p: &mut Problems) -> Option<TaskRun> {
    let v = match v {
        None | Some(Value::Null) => {
            p.push("missing field run (with run.path)".into());
            return None;
        }
        Some(v) => v,
    };
    let m = entry(v, "run", &["path", "args", "dir", "user"], p)?;
    let path = opt_scalar(m, "path", "run", p);
    if path.as_deref().is_none_or(str::is_empty) {
        p.push("missing field run.path (the executable to run)".into());
    }
    // Arguments are strings; numbers and booleans are taken as written (as
    // Concourse's YAML conversion does), lists and mappings are refused.
    let args = list(m.get("args"), "run.args", p)
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            Value::Null => String::new(),
            a => scalar(a, &format!("run.args[{i}]"), p),
        })
        .collect();
    let dir = opt_scalar(m, "dir", "run", p);
    let user = opt_scalar(m, "user", "run", p);
    path.map(|path| TaskRun {
        path,
        args,
        dir,
        user,
    })
}
