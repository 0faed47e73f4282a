//! Task configuration in Concourse's `task.yml` format, with validation that
//! reports every problem at once (unknown fields included) instead of the
//! first one.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use crate::spec::RootfsSpec;

/// A validated task configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Platform the task needs (`linux`).
    pub platform: String,
    /// `raw:///ABS/PATH`, or none for the worker's default image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_uri: Option<String>,
    /// Artifacts mounted into the container before it runs.
    #[serde(default)]
    pub inputs: Vec<TaskInput>,
    /// Directories kept as artifacts after it ran.
    #[serde(default)]
    pub outputs: Vec<TaskOutput>,
    /// Directories kept between runs of the same task.
    #[serde(default)]
    pub caches: Vec<TaskCache>,
    /// Environment variables (YAML scalars become strings, as in Concourse).
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

/// A task input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInput {
    /// Name the artifact is given under.
    pub name: String,
    /// Directory in the build dir (defaults to the name).
    pub path: String,
    /// The task may run without it.
    #[serde(default)]
    pub optional: bool,
}

/// A task output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOutput {
    /// Name of the artifact.
    pub name: String,
    /// Directory in the build dir (defaults to the name).
    pub path: String,
}

/// A task cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCache {
    /// Directory in the build dir.
    pub path: String,
}

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

/// `container_limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLimits {
    /// CPU shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Maximum processes (a Gantry extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
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
        let doc: Value =
            serde_yaml::from_str(text).map_err(|e| vec![format!("not valid YAML: {e}")])?;
        Self::from_value(&doc)
    }

    /// Validates an already-parsed document (YAML or JSON).
    pub fn from_value(doc: &Value) -> Result<TaskConfig, Vec<String>> {
        let mut p = Vec::new();
        let Some(top) = doc.as_mapping() else {
            return Err(vec!["task config must be a mapping of fields".into()]);
        };
        unknown_fields(top, TOP_FIELDS, "", &mut p);
        if top.contains_key("image_resource") {
            p.push("image_resource is not supported yet: use rootfs_uri (raw:///ABS/PATH) or the worker's default image".into());
        }
        let platform = match top.get("platform") {
            None | Some(Value::Null) => {
                p.push("missing field platform (e.g. platform: linux)".into());
                String::new()
            }
            Some(v) => scalar(v, "platform", &mut p),
        };
        let rootfs_uri = top
            .get("rootfs_uri")
            .map(|v| scalar(v, "rootfs_uri", &mut p));
        if let Err(e) = RootfsSpec::from_uri(rootfs_uri.as_deref()) {
            p.push(e);
        }
        let inputs: Vec<TaskInput> = list(top.get("inputs"), "inputs", &mut p)
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let at = format!("inputs[{i}]");
                let m = entry(v, &at, &["name", "path", "optional"], &mut p)?;
                let name = named(m, &at, &mut p)?;
                let path = opt_scalar(m, "path", &at, &mut p).unwrap_or_else(|| name.clone());
                let optional = match m.get("optional") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => {
                        p.push(format!("{at}.optional must be true or false"));
                        false
                    }
                };
                Some(TaskInput {
                    name,
                    path,
                    optional,
                })
            })
            .collect();
        let outputs: Vec<TaskOutput> = list(top.get("outputs"), "outputs", &mut p)
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let at = format!("outputs[{i}]");
                let m = entry(v, &at, &["name", "path"], &mut p)?;
                let name = named(m, &at, &mut p)?;
                let path = opt_scalar(m, "path", &at, &mut p).unwrap_or_else(|| name.clone());
                Some(TaskOutput { name, path })
            })
            .collect();
        let caches: Vec<TaskCache> = list(top.get("caches"), "caches", &mut p)
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let at = format!("caches[{i}]");
                let m = entry(v, &at, &["path"], &mut p)?;
                match opt_scalar(m, "path", &at, &mut p) {
                    Some(path) => Some(TaskCache { path }),
                    None => {
                        p.push(format!("{at}: missing field path"));
                        None
                    }
                }
            })
            .collect();
        let mut seen = HashSet::new();
        for i in &inputs {
            if !seen.insert(i.name.clone()) {
                p.push(format!("inputs: duplicate input name {:?}", i.name));
            }
        }
        let mut seen = HashSet::new();
        for o in &outputs {
            if !seen.insert(o.name.clone()) {
                p.push(format!("outputs: duplicate output name {:?}", o.name));
            }
        }
        for (what, path) in inputs
            .iter()
            .map(|i| ("input", &i.path))
            .chain(outputs.iter().map(|o| ("output", &o.path)))
            .chain(caches.iter().map(|c| ("cache", &c.path)))
        {
            if let Err(e) = check_rel_path(path) {
                p.push(format!("{what} path {path:?}: {e}"));
            }
        }
        let params = match top.get("params") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Mapping(m)) => m
                .iter()
                .filter_map(|(k, v)| {
                    let Some(k) = k.as_str() else {
                        p.push("params: keys must be strings".into());
                        return None;
                    };
                    Some((k.to_string(), param_string(v)))
                })
                .collect(),
            Some(_) => {
                p.push("params must be a mapping of NAME: value".into());
                BTreeMap::new()
            }
        };
        let run = match top.get("run") {
            None | Some(Value::Null) => {
                p.push("missing field run (with run.path)".into());
                None
            }
            Some(v) => entry(v, "run", &["path", "args", "dir", "user"], &mut p).and_then(|m| {
                let path = opt_scalar(m, "path", "run", &mut p);
                if path.as_deref().is_none_or(str::is_empty) {
                    p.push("missing field run.path (the executable to run)".into());
                }
                let args = list(m.get("args"), "run.args", &mut p)
                    .iter()
                    .map(param_string)
                    .collect();
                let dir = opt_scalar(m, "dir", "run", &mut p);
                let user = opt_scalar(m, "user", "run", &mut p);
                path.map(|path| TaskRun {
                    path,
                    args,
                    dir,
                    user,
                })
            }),
        };
        let container_limits = match top.get("container_limits") {
            None | Some(Value::Null) => ContainerLimits::default(),
            Some(v) => match entry(v, "container_limits", &["cpu", "memory", "pids"], &mut p) {
                Some(m) => ContainerLimits {
                    cpu: limit(m, "cpu", &mut p),
                    memory: limit(m, "memory", &mut p),
                    pids: limit(m, "pids", &mut p),
                },
                None => ContainerLimits::default(),
            },
        };
        let hermetic = match top.get("hermetic") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                p.push("hermetic must be true or false".into());
                false
            }
        };
        match (p.is_empty(), run) {
            (true, Some(run)) => Ok(TaskConfig {
                platform,
                rootfs_uri,
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

fn unknown_fields(m: &serde_yaml::Mapping, known: &[&str], at: &str, p: &mut Vec<String>) {
    for k in m.keys() {
        let name = k
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{k:?}"));
        if !known.contains(&name.as_str()) {
            let prefix = if at.is_empty() {
                String::new()
            } else {
                format!("{at}: ")
            };
            p.push(format!(
                "{prefix}unknown field {name:?} (expected one of: {})",
                known.join(", ")
            ));
        }
    }
}

fn entry<'a>(
    v: &'a Value,
    at: &str,
    known: &[&str],
    p: &mut Vec<String>,
) -> Option<&'a serde_yaml::Mapping> {
    match v.as_mapping() {
        Some(m) => {
            unknown_fields(m, known, at, p);
            Some(m)
        }
        None => {
            p.push(format!("{at} must be a mapping"));
            None
        }
    }
}

fn list<'a>(v: Option<&'a Value>, at: &str, p: &mut Vec<String>) -> &'a [Value] {
    match v {
        None | Some(Value::Null) => &[],
        Some(Value::Sequence(s)) => s,
        Some(_) => {
            p.push(format!("{at} must be a list"));
            &[]
        }
    }
}

fn named(m: &serde_yaml::Mapping, at: &str, p: &mut Vec<String>) -> Option<String> {
    match opt_scalar(m, "name", at, p) {
        Some(n) if !n.is_empty() => {
            if n.contains('/') {
                p.push(format!("{at}: name {n:?} must not contain '/'"));
            }
            Some(n)
        }
        _ => {
            p.push(format!("{at}: missing field name"));
            None
        }
    }
}

fn scalar(v: &Value, at: &str, p: &mut Vec<String>) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => {
            p.push(format!("{at} must be a string"));
            String::new()
        }
    }
}

fn opt_scalar(m: &serde_yaml::Mapping, key: &str, at: &str, p: &mut Vec<String>) -> Option<String> {
    match m.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => Some(scalar(v, &format!("{at}.{key}"), p)),
    }
}

fn limit(m: &serde_yaml::Mapping, key: &str, p: &mut Vec<String>) -> Option<u64> {
    match m.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(_) => {
            p.push(format!(
                "container_limits.{key} must be a non-negative integer"
            ));
            None
        }
    }
}

/// Concourse turns param values into strings: scalars as written, null as
/// empty, lists and maps as JSON.
fn param_string(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn check_rel_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("must not be empty");
    }
    if path.starts_with('/') {
        return Err("must be relative to the build directory");
    }
    if path.split('/').any(|c| c == "..") {
        return Err("must not contain '..'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = r#"
platform: linux
inputs:
- name: src
- name: other
  path: deps/other
  optional: true
outputs:
- name: result
caches:
- path: .cache
params:
  NUMBER: 42
  FLAG: true
  EMPTY:
  LIST: [1, 2]
run:
  path: sh
  args: [-c, "echo hi"]
  dir: src
  user: nobody
container_limits:
  memory: 67108864
"#;

    #[test]
    fn valid_config_parses_with_defaults_and_string_params() {
        let c = TaskConfig::from_yaml(VALID).unwrap();
        assert_eq!(c.platform, "linux");
        assert_eq!(c.inputs[0].path, "src");
        assert_eq!(c.inputs[1].path, "deps/other");
        assert!(c.inputs[1].optional);
        assert_eq!(c.outputs[0].path, "result");
        assert_eq!(c.params["NUMBER"], "42");
        assert_eq!(c.params["FLAG"], "true");
        assert_eq!(c.params["EMPTY"], "");
        assert_eq!(c.params["LIST"], "[1,2]");
        assert_eq!(c.run.args, vec!["-c", "echo hi"]);
        assert_eq!(c.container_limits.memory, Some(67108864));
    }

    fn problems(yaml: &str) -> Vec<String> {
        TaskConfig::from_yaml(yaml).unwrap_err()
    }

    #[test]
    fn every_problem_is_reported_with_its_name() {
        let p = problems(
            "inputs:\n- path: x\n- name: a\n- name: a\noutputs:\n- {}\nrun: {args: []}\nbogus: 1\n",
        );
        let all = p.join("\n");
        assert!(all.contains("missing field platform"), "{all}");
        assert!(all.contains("missing field run.path"), "{all}");
        assert!(all.contains("inputs[0]: missing field name"), "{all}");
        assert!(all.contains("outputs[0]: missing field name"), "{all}");
        assert!(all.contains("duplicate input name \"a\""), "{all}");
        assert!(all.contains("unknown field \"bogus\""), "{all}");
        assert_eq!(p.len(), 6, "{all}");
    }

    #[test]
    fn nested_unknown_fields_and_bad_paths_are_named() {
        let all = problems(
            "platform: linux\nrun: {path: sh, shell: bash}\ninputs: [{name: a, path: /abs}]\noutputs: [{name: o, path: ../up}]\n",
        )
        .join("\n");
        assert!(all.contains("run: unknown field \"shell\""), "{all}");
        assert!(all.contains("input path \"/abs\""), "{all}");
        assert!(all.contains("output path \"../up\""), "{all}");
    }

    #[test]
    fn missing_run_and_non_mapping_are_errors() {
        assert!(problems("platform: linux\n")
            .join("")
            .contains("missing field run"));
        assert!(problems("- a\n").join("").contains("must be a mapping"));
        assert!(problems(": :\n  -").join("").contains("not valid YAML"));
    }
}
