//! Reading a [`Step`] out of YAML: exactly one kind, the modifiers, the keys
//! each kind takes (everything else is named as unknown), and the checks
//! that need nothing but the step itself (`timeout` parses, `attempts` and
//! `limit` at least 1, a task with one of `file` or `config`, ...).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::read::{join, kind_of, Reader};
use super::step::*;
use super::vars::find_vars;
use crate::go_duration::parse_non_negative;
use crate::task_config::{cpu_shares, memory_bytes, TaskConfig};

/// The kinds, in Concourse's order of precedence, with the keys each takes
/// besides the modifiers.
const KINDS: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "run",
            "type",
            "params",
            "privileged",
            "tags",
            "container_limits",
        ],
    ),
    (
        "task",
        &[
            "task",
            "privileged",
            "hermetic",
            "file",
            "container_limits",
            "config",
            "params",
            "vars",
            "tags",
            "input_mapping",
            "output_mapping",
            "image",
        ],
    ),
    (
        "put",
        &[
            "put",
            "resource",
            "params",
            "inputs",
            "tags",
            "get_params",
            "no_get",
        ],
    ),
    (
        "get",
        &[
            "get", "resource", "version", "params", "passed", "trigger", "tags",
        ],
    ),
    (
        "set_pipeline",
        &[
            "set_pipeline",
            "file",
            "team",
            "vars",
            "var_files",
            "instance_vars",
        ],
    ),
    ("load_var", &["load_var", "file", "format", "reveal"]),
    ("try", &["try"]),
    ("do", &["do", "tags"]),
    ("in_parallel", &["in_parallel", "tags"]),
];

/// Keys any step takes.
const MODIFIERS: &[&str] = &[
    "ensure",
    "on_error",
    "on_abort",
    "on_failure",
    "on_success",
    "across",
    "attempts",
    "timeout",
];

/// Top-level keys of a task config (Concourse's, and Gantry's `hermetic`).
const TASK_CONFIG_KEYS: &[&str] = &[
    "platform",
    "rootfs_uri",
    "image_resource",
    "container_limits",
    "params",
    "run",
    "inputs",
    "outputs",
    "caches",
    "hermetic",
];

/// Reads a plan (a list of steps) at `at`.
pub(crate) fn parse_plan(r: &mut Reader, v: &Value, at: &str) -> Vec<Step> {
    match v {
        Value::Null => Vec::new(),
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, s)| parse_step(r, s, &format!("{at}[{i}]")))
            .collect(),
        other => {
            r.problem(
                at,
                format!("must be a list of steps, not {}", kind_of(other)),
            );
            Vec::new()
        }
    }
}

/// Reads one step at `at`; problems are recorded in `r`.
pub(crate) fn parse_step(r: &mut Reader, v: &Value, at: &str) -> Option<Step> {
    let Value::Mapping(m) = v else {
        r.problem(at, format!("a step must be a mapping, not {}", kind_of(v)));
        return None;
    };
    let kinds: Vec<&(&str, &[&str])> = KINDS.iter().filter(|(k, _)| m.contains_key(*k)).collect();
    let all_kinds = || KINDS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ");
    let Some(&&(kind, kind_keys)) = kinds.first() else {
        let has: Vec<&str> = m.keys().filter_map(Value::as_str).collect();
        r.problem(
            at,
            format!(
                "no step kind: a step needs one of {} (found only: {})",
                all_kinds(),
                if has.is_empty() {
                    "nothing".to_string()
                } else {
                    has.join(", ")
                }
            ),
        );
        return None;
    };
    if kinds.len() > 1 {
        let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
        r.problem(
            at,
            format!(
                "a step has exactly one kind, this one has {}: {}",
                names.len(),
                names.join(" and ")
            ),
        );
    }
    // Report keys that belong to no kind present and no modifier.
    let mut known: Vec<&str> = MODIFIERS.to_vec();
    known.extend_from_slice(kind_keys);
    known.extend(kinds.iter().map(|(k, _)| *k));
    if m.contains_key("across") {
        known.push("fail_fast");
    }
    r.unknown_keys(m, at, &format!("a {kind} step"), &known);

    let kind_value = parse_kind(r, kind, m, at)?;
    let timeout = m
        .get("timeout")
        .and_then(|v| timeout(r, v, &join(at, "timeout")));
    let attempts = r.positive(m, "attempts", at);
    let tags = if kind_keys.contains(&"tags") {
        r.strings(m, "tags", at)
    } else {
        Vec::new()
    };
    let across = m.get("across").and_then(|v| across(r, v, m, at));
    let hooks = hooks(r, m, at);
    Some(Step {
        kind: kind_value,
        timeout,
        attempts,
        tags,
        across,
        hooks,
    })
}

/// Reads the hooks of a step or a job.
pub(crate) fn hooks(r: &mut Reader, m: &Mapping, at: &str) -> Hooks {
    let mut hook = |key: &str| {
        m.get(key)
            .filter(|v| !v.is_null())
            .and_then(|v| parse_step(r, v, &join(at, key)))
            .map(Box::new)
    };
    Hooks {
        on_success: hook("on_success"),
        on_failure: hook("on_failure"),
        on_abort: hook("on_abort"),
        on_error: hook("on_error"),
        ensure: hook("ensure"),
    }
}

fn timeout(r: &mut Reader, v: &Value, at: &str) -> Option<Timeout> {
    let text = match v {
        Value::String(s) => s.clone(),
        other => {
            r.problem(
                at,
                format!(
                    "must be a duration like 90s or 1h30m, not {}",
                    kind_of(other)
                ),
            );
            return None;
        }
    };
    if r.deferred(v) {
        return Some(Timeout {
            text,
            duration: None,
        });
    }
    match parse_non_negative(&text) {
        Ok(d) => Some(Timeout {
            text,
            duration: Some(d),
        }),
        Err(e) => {
            r.problem(at, e);
            None
        }
    }
}

fn across(r: &mut Reader, v: &Value, m: &Mapping, at: &str) -> Option<Across> {
    let at_across = join(at, "across");
    let Value::Sequence(items) = v else {
        r.problem(
            &at_across,
            format!(
                "must be a list of {{var, values, max_in_flight}}, not {}",
                kind_of(v)
            ),
        );
        return None;
    };
    if items.is_empty() {
        r.problem(&at_across, "no vars specified");
    }
    let mut vars = Vec::new();
    let mut seen = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let at_var = format!("{at_across}[{i}]");
        let Some(vm) = r.mapping(
            item,
            &at_var,
            "an across var",
            &["var", "values", "max_in_flight"],
        ) else {
            continue;
        };
        let var = r.required_str(vm, "var", &at_var);
        if !var.is_empty() && seen.insert(var.clone(), i).is_some() {
            r.problem(&at_var, format!("repeated var name {var:?}"));
        }
        let values = vm
            .get("values")
            .cloned()
            .unwrap_or(Value::Sequence(Vec::new()));
        if !values.is_sequence() && !values.is_null() && !r.deferred(&values) {
            r.problem(
                &join(&at_var, "values"),
                format!(
                    "must be a list (or a var holding one), not {}",
                    kind_of(&values)
                ),
            );
        }
        let max_in_flight = match vm.get("max_in_flight") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "all" => Some(MaxInFlight::All),
            Some(v) if r.deferred_typed(v, &join(&at_var, "max_in_flight")) => None,
            Some(Value::Number(_)) => r
                .positive(vm, "max_in_flight", &at_var)
                .map(MaxInFlight::Limit),
            Some(other) => {
                r.problem(
                    &join(&at_var, "max_in_flight"),
                    format!(
                        "must be \"all\" or a number at least 1, not {}",
                        kind_of(other)
                    ),
                );
                None
            }
        };
        vars.push(AcrossVar {
            var,
            values,
            max_in_flight,
        });
    }
    let fail_fast = r.bool(m, "fail_fast", at);
    Some(Across { vars, fail_fast })
}

fn parse_kind(r: &mut Reader, kind: &str, m: &Mapping, at: &str) -> Option<StepKind> {
    let name = |r: &mut Reader| r.required_str(m, kind, at);
    Some(match kind {
        "task" => {
            let name = name(r);
            let file = r.opt_str(m, "file", at);
            let config = m.get("config").filter(|v| !v.is_null()).cloned();
            match (&file, &config) {
                (None, None) => r.problem(
                    &join(at, "task"),
                    "must specify either `file:` or `config:`",
                ),
                (Some(_), Some(_)) => r.problem(
                    &join(at, "task"),
                    "must specify one of `file:` or `config:`, not both",
                ),
                _ => {}
            }
            if let Some(c) = &config {
                task_config(r, c, &join(at, "config"));
            }
            StepKind::Task(TaskStep {
                name,
                file,
                config,
                image: r.opt_str(m, "image", at),
                privileged: r.bool(m, "privileged", at),
                hermetic: r.bool(m, "hermetic", at),
                params: r.params(m, "params", at),
                vars: r.params(m, "vars", at),
                input_mapping: r.string_map(m, "input_mapping", at),
                output_mapping: r.string_map(m, "output_mapping", at),
                container_limits: limits(r, m, at),
            })
        }
        "get" => {
            let name = name(r);
            let resource = r.opt_str(m, "resource", at).unwrap_or_else(|| name.clone());
            StepKind::Get(GetStep {
                version: version(r, m, at, &name),
                params: r.params(m, "params", at),
                passed: r.strings(m, "passed", at),
                trigger: r.bool(m, "trigger", at),
                name,
                resource,
            })
        }
        "put" => {
            let name = name(r);
            let resource = r.opt_str(m, "resource", at).unwrap_or_else(|| name.clone());
            StepKind::Put(PutStep {
                params: r.params(m, "params", at),
                inputs: put_inputs(r, m, at),
                get_params: r.params(m, "get_params", at),
                no_get: r.bool(m, "no_get", at),
                name,
                resource,
            })
        }
        "in_parallel" => {
            let at_p = join(at, "in_parallel");
            match &m["in_parallel"] {
                Value::Mapping(pm) => {
                    r.unknown_keys(pm, &at_p, "in_parallel", &["steps", "limit", "fail_fast"]);
                    let steps = pm.get("steps").cloned().unwrap_or(Value::Null);
                    StepKind::InParallel(InParallel {
                        steps: parse_plan(r, &steps, &at_p),
                        limit: r.positive(pm, "limit", &at_p),
                        fail_fast: r.bool(pm, "fail_fast", &at_p),
                    })
                }
                list => StepKind::InParallel(InParallel {
                    steps: parse_plan(r, list, &at_p),
                    limit: None,
                    fail_fast: false,
                }),
            }
        }
        "do" => StepKind::Do(parse_plan(r, &m["do"], &join(at, "do"))),
        "try" => StepKind::Try(Box::new(parse_step(r, &m["try"], &join(at, "try"))?)),
        "load_var" => {
            let name = name(r);
            let file = r.required_str(m, "file", at);
            let format = r.opt_str(m, "format", at);
            if let Some(f) = &format {
                if !["json", "yaml", "yml", "trim", "raw"].contains(&f.as_str())
                    && !r.deferred(&Value::String(f.clone()))
                {
                    r.problem(
                        &join(at, "format"),
                        format!("unknown format {f:?} (json, yaml, yml, trim or raw)"),
                    );
                }
            }
            StepKind::LoadVar(LoadVarStep {
                name,
                file,
                format,
                reveal: r.bool(m, "reveal", at),
            })
        }
        "set_pipeline" => StepKind::SetPipeline(SetPipelineStep {
            name: name(r),
            file: r.required_str(m, "file", at),
            team: r.opt_str(m, "team", at),
            vars: r.params(m, "vars", at),
            var_files: r.strings(m, "var_files", at),
            instance_vars: r.params(m, "instance_vars", at),
        }),
        "run" => StepKind::Run(RunStep {
            message: name(r),
            prototype: r.required_str(m, "type", at),
            params: r.params(m, "params", at),
            privileged: r.bool(m, "privileged", at),
            container_limits: limits(r, m, at),
        }),
        _ => unreachable!("every kind of KINDS is handled"),
    })
}

/// An inline task config: checked in full as a task.yml is
/// ([`TaskConfig::from_value`]) when it holds no var; with vars still to be
/// filled, only its shape (keys, `platform`, `run.path`, `image_resource`),
/// and the full check runs when the step does.
fn task_config(r: &mut Reader, v: &Value, at: &str) {
    if r.deferred(v) {
        return;
    }
    if !holds_vars(v) {
        if let Err(problems) = TaskConfig::from_value(v) {
            for p in problems {
                // `run: unknown field ...` becomes `...config.run: unknown field ...`.
                match p.split_once(": ") {
                    Some((field, rest)) if !field.contains(' ') => {
                        r.problem(&join(at, field), rest)
                    }
                    _ => r.problem(at, p),
                }
            }
        }
        return;
    }
    let Some(c) = r.mapping(v, at, "a task config", TASK_CONFIG_KEYS) else {
        return;
    };
    if c.get("platform").is_none_or(Value::is_null) {
        r.problem(at, "missing field platform (e.g. platform: linux)");
    }
    match c.get("run") {
        None | Some(Value::Null) => r.problem(at, "missing field run (with run.path)"),
        Some(run) if r.deferred(run) => {}
        Some(run) => {
            let at_run = join(at, "run");
            if let Some(rm) = r.mapping(run, &at_run, "run", &["path", "args", "dir", "user"]) {
                if rm.get("path").is_none_or(Value::is_null) {
                    r.problem(&at_run, "missing field path (the executable to run)");
                }
            }
        }
    }
    if let Some(image) = c
        .get("image_resource")
        .filter(|v| !v.is_null() && !r.deferred(v))
    {
        let at_image = join(at, "image_resource");
        let known = ["name", "type", "source", "version", "params", "tags"];
        if let Some(im) = r.mapping(image, &at_image, "image_resource", &known) {
            r.required_str(im, "type", &at_image);
        }
    }
}

/// Whether any string in `v` holds a `((var))`.
fn holds_vars(v: &Value) -> bool {
    match v {
        Value::String(s) => !find_vars(s).is_empty(),
        Value::Sequence(items) => items.iter().any(holds_vars),
        Value::Mapping(m) => m.iter().any(|(k, v)| holds_vars(k) || holds_vars(v)),
        Value::Tagged(t) => holds_vars(&t.value),
        _ => false,
    }
}

fn limits(r: &mut Reader, m: &Mapping, at: &str) -> Option<Limits> {
    let v = m.get("container_limits").filter(|v| !v.is_null())?;
    let at = join(at, "container_limits");
    if r.deferred_typed(v, &at) {
        return None;
    }
    let lm = r.mapping(v, &at, "container_limits", &["cpu", "memory"])?;
    // Read as a task config reads them, so the two never disagree.
    let mut field = |key: &str, read: fn(&Value) -> Result<u64, String>| match lm.get(key) {
        None | Some(Value::Null) => None,
        Some(v) if r.deferred_typed(v, &join(&at, key)) => None,
        Some(v) => read(v).map_err(|e| r.problem(&join(&at, key), e)).ok(),
    };
    let cpu = field("cpu", cpu_shares);
    let memory = field("memory", memory_bytes);
    Some(Limits { cpu, memory })
}

fn version(r: &mut Reader, m: &Mapping, at: &str, step: &str) -> Option<VersionSpec> {
    let v = m.get("version").filter(|v| !v.is_null())?;
    let at = join(at, "version");
    match v {
        Value::String(s) if s == "latest" => Some(VersionSpec::Latest),
        Value::String(s) if s == "every" => Some(VersionSpec::Every),
        v if r.deferred_typed(v, &at) => None,
        // Concourse takes any other string as `latest` (`atc/steps.go`,
        // `VersionConfig`): so does Gantry, saying so.
        Value::String(s) => {
            r.warn(
                &at,
                format!(
                    "get {step:?}: version {s:?} is neither latest nor every nor a version: \
                     it is treated as latest (as Concourse does)"
                ),
            );
            Some(VersionSpec::Latest)
        }
        Value::Mapping(fields) => {
            let mut pinned = BTreeMap::new();
            for (k, val) in fields {
                match (k.as_str(), val) {
                    (Some(k), Value::String(s)) => {
                        pinned.insert(k.to_string(), s.clone());
                    }
                    (Some(k), other) => r.problem(
                        &at,
                        format!(
                            "the value of {k:?} must be a string, not {}",
                            kind_of(other)
                        ),
                    ),
                    (None, _) => r.problem(&at, format!("key {k:?} must be a string")),
                }
            }
            Some(VersionSpec::Pinned(pinned))
        }
        other => {
            r.problem(
                &at,
                format!(
                    "must be latest, every or a mapping of version fields, not {}",
                    show(other)
                ),
            );
            None
        }
    }
}

fn put_inputs(r: &mut Reader, m: &Mapping, at: &str) -> Option<PutInputs> {
    let v = m.get("inputs").filter(|v| !v.is_null())?;
    match v {
        Value::String(s) if s == "all" => Some(PutInputs::All),
        Value::String(s) if s == "detect" => Some(PutInputs::Detect),
        v if r.deferred_typed(v, &join(at, "inputs")) => None,
        Value::Sequence(_) => Some(PutInputs::Listed(
            r.strings(m, "inputs", at)
                .into_iter()
                .map(|s| s.trim().to_string())
                .collect(),
        )),
        other => {
            r.problem(
                &join(at, "inputs"),
                format!(
                    "must be all, detect or a list of artifact names, not {}",
                    show(other)
                ),
            );
            None
        }
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => kind_of(other).to_string(),
    }
}
