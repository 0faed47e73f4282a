//! The translation work on build-local vars (`((.:name))`): whether a
//! step's own definition holds them (such a step is deferred until it
//! runs), filling them, and `across` expanded into one copy of the step per
//! combination of values, each with where it is translated
//! ([`expand_across`]; `translate.rs` translates the copies).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::Value;

use crate::pipeline::vars::{find_vars, interpolate_local, VarRef};
use crate::pipeline::{Across, MaxInFlight, Step as PipelineStep, StepKind, Timeout, Vars};

use super::{At, Plan};

/// Whether a step's own definition (not the steps inside it, which are
/// translated on their own) holds a build-local var: for a step with
/// `across`, its values; else its kind's fields (a leaf kind's) and its
/// `timeout`. Such a step is deferred until it runs.
pub(super) fn holds_own_locals(step: &PipelineStep) -> bool {
    if let Some(across) = &step.across {
        return across.vars.iter().any(|v| holds_locals(&v.values));
    }
    let timeout = step
        .timeout
        .as_ref()
        .is_some_and(|t| holds_locals(&Value::String(t.text.clone())));
    let kind = match &step.kind {
        StepKind::Do(_) | StepKind::InParallel(_) | StepKind::Try(_) => false,
        leaf => serde_yaml::to_value(leaf).is_ok_and(|v| holds_locals(&v)),
    };
    timeout || kind
}

/// Whether any string in `v` holds a `((.:name))`.
fn holds_locals(v: &Value) -> bool {
    match v {
        Value::String(s) => find_vars(s)
            .iter()
            .any(|(_, body)| VarRef::parse(body).is_ok_and(|r| r.is_local())),
        Value::Sequence(items) => items.iter().any(holds_locals),
        Value::Mapping(m) => m.iter().any(|(k, v)| holds_locals(k) || holds_locals(v)),
        Value::Tagged(t) => holds_locals(&t.value),
        _ => false,
    }
}

/// The step with its own definition's local vars filled from `locals`
/// (every one must be known): its `across` values for an `across` step,
/// else its leaf kind's fields and its `timeout`. What is inside it is
/// left for when it runs.
pub(crate) fn fill_own(step: &PipelineStep, locals: &Vars) -> Result<PipelineStep, Vec<String>> {
    let mut out = step.clone();
    if let Some(across) = &mut out.across {
        for var in &mut across.vars {
            var.values = interpolate_local(&var.values, locals, true)
                .map_err(|p| prefixed(p, &format!("across var {:?}: ", var.var)))?;
        }
        return Ok(out);
    }
    if !matches!(
        step.kind,
        StepKind::Do(_) | StepKind::InParallel(_) | StepKind::Try(_)
    ) {
        out.kind = fill_typed(&step.kind, locals, true)?;
    }
    if let Some(t) = &step.timeout {
        out.timeout = Some(fill_timeout(t, locals, true)?);
    }
    Ok(out)
}

fn prefixed(problems: Vec<String>, prefix: &str) -> Vec<String> {
    problems
        .into_iter()
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// A typed value with its local vars filled (through its YAML form); a
/// value of the wrong type for its field is a problem.
fn fill_typed<T: Serialize + DeserializeOwned>(
    t: &T,
    locals: &Vars,
    strict: bool,
) -> Result<T, Vec<String>> {
    let v = serde_yaml::to_value(t).map_err(|e| vec![e.to_string()])?;
    let v = interpolate_local(&v, locals, strict)?;
    serde_yaml::from_value(v).map_err(|e| {
        vec![format!(
            "a local var gave a field a value of the wrong type: {e}"
        )]
    })
}

/// A `timeout` with its local vars filled, its duration read again.
fn fill_timeout(t: &Timeout, locals: &Vars, strict: bool) -> Result<Timeout, Vec<String>> {
    let doc = Value::Mapping(
        [(Value::from("timeout"), Value::from(t.text.clone()))]
            .into_iter()
            .collect(),
    );
    let filled = interpolate_local(&doc, locals, strict)?;
    let text = match &filled["timeout"] {
        Value::String(s) => s.clone(),
        other => return Err(vec![format!("timeout: {other:?} is not a duration")]),
    };
    if holds_locals(&Value::String(text.clone())) {
        return Ok(Timeout {
            text,
            duration: None,
        });
    }
    let duration = crate::go_duration::parse_non_negative(&text)
        .map_err(|e| vec![format!("timeout {text:?}: {e}")])?;
    Ok(Timeout {
        text,
        duration: Some(duration),
    })
}

/// `across`: the step `body` (no hooks, no across) once per combination of
/// the vars' values, outermost var first; each var is one `in_parallel`
/// level whose limit is its `max_in_flight` (default 1, `all`: none) and
/// whose `fail_fast` is the step's. Each copy has the combination's
/// `((.:var))`s filled (other local vars stay for when it runs) and the
/// combination as the suffix of its steps' names (a secret value redacted,
/// with the combination's position: `[w=((redacted)),#2]`); a combination
/// given twice is refused (two steps would share a name).
pub(super) fn expand_across(
    across: &Across,
    body: &PipelineStep,
    at: &At,
) -> Result<Plan<(PipelineStep, At)>, String> {
    let mut levels = Vec::new();
    for var in &across.vars {
        let values = match &var.values {
            Value::Null => Vec::new(),
            Value::Sequence(items) => items.clone(),
            other => {
                return Err(format!(
                    "var {:?}: values must be a list, not {}",
                    var.var,
                    serde_json::to_string(other).unwrap_or_default()
                ))
            }
        };
        let limit = match var.max_in_flight {
            None => Some(1),
            Some(MaxInFlight::All) => None,
            Some(MaxInFlight::Limit(n)) => Some(n as usize),
        };
        levels.push((var.var.as_str(), values, limit));
    }
    let mut seen = std::collections::BTreeSet::new();
    expand_level(
        &levels,
        across.fail_fast,
        body,
        at,
        &mut Vec::new(),
        &mut seen,
    )
}

type Level<'a> = (&'a str, Vec<Value>, Option<usize>);

fn expand_level(
    levels: &[Level<'_>],
    fail_fast: bool,
    body: &PipelineStep,
    at: &At,
    bound: &mut Vec<(String, Value)>,
    seen: &mut std::collections::BTreeSet<String>,
) -> Result<Plan<(PipelineStep, At)>, String> {
    let Some(((var, values, limit), rest)) = levels.split_first() else {
        return copy(body, at, bound, seen);
    };
    let mut plans = Vec::new();
    for value in values {
        bound.push((var.to_string(), value.clone()));
        let plan = expand_level(rest, fail_fast, body, at, bound, seen);
        bound.pop();
        plans.push(plan?);
    }
    Ok(Plan::InParallel {
        plans,
        limit: *limit,
        fail_fast,
    })
}

/// One combination's copy of the step, translated.
fn copy(
    body: &PipelineStep,
    at: &At,
    bound: &[(String, Value)],
    seen: &mut std::collections::BTreeSet<String>,
) -> Result<Plan<(PipelineStep, At)>, String> {
    let mut vars = Vars::new();
    let mut shown = Vec::new();
    for (name, value) in bound {
        vars.insert(name, value.clone());
        let text = match value {
            Value::String(s) => s.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        };
        shown.push(format!("{name}={text}"));
    }
    let raw = shown.join(",");
    if !seen.insert(raw.clone()) {
        return Err(format!(
            "the combination [{raw}] is given twice (each combination runs once, under its own name)"
        ));
    }
    // A secret value is not shown in the name; the combination's position
    // keeps names of redacted combinations apart.
    let suffix = match &at.secrets {
        Some(secrets) if secrets.redact(&raw) != raw => {
            format!("[{},#{}]", secrets.redact(&raw), seen.len())
        }
        _ => format!("[{raw}]"),
    };
    let mut copy = fill_typed(body, &vars, false).map_err(|p| p.join("; "))?;
    if let Some(t) = &body.timeout {
        copy.timeout = Some(fill_timeout(t, &vars, false).map_err(|p| p.join("; "))?);
    }
    let at = At {
        suffix: format!("{}{suffix}", at.suffix),
        ..at.clone()
    };
    Ok(Plan::Step((copy, at)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Pipeline;
    use crate::plan::{step_plan, Leaf, LocalVars};

    fn step_of(yaml: &str) -> PipelineStep {
        let text = format!("jobs:\n- name: j\n  plan:\n  - {yaml}\n");
        let p = Pipeline::load(&text, &Vars::new()).unwrap();
        p.job("j").unwrap().plan[0].clone()
    }

    const TASK: &str = "config: {platform: linux, run: {path: echo, args: [((.:os)), ((.:v))]}}";

    #[test]
    fn across_runs_each_combination_outermost_first_with_its_own_limits() {
        let step = step_of(&format!(
            "{{task: t, {TASK}, across: [{{var: os, values: [linux, bsd], max_in_flight: all}}, {{var: v, values: [1, 2, 3], max_in_flight: 2}}], fail_fast: true}}"
        ));
        let plan = step_plan(&step, &At::default()).unwrap();
        let d = plan.describe("0");
        assert_eq!(
            (d.kind.as_str(), d.limit, d.fail_fast),
            ("in_parallel", None, true)
        );
        assert_eq!(d.children.len(), 2);
        assert_eq!(
            (d.children[0].limit, d.children[0].fail_fast),
            (Some(2), true)
        );
        let names: Vec<_> = plan.steps().iter().map(|s| s.name().to_string()).collect();
        assert_eq!(
            names,
            [
                "t[os=linux,v=1]",
                "t[os=linux,v=2]",
                "t[os=linux,v=3]",
                "t[os=bsd,v=1]",
                "t[os=bsd,v=2]",
                "t[os=bsd,v=3]"
            ]
        );
        // Each copy has its values filled: the args are concrete.
        let request = crate::steps::runnable(plan).steps()[4].worker_request();
        assert_eq!(request.platform, "linux");
    }

    #[test]
    fn across_defaults_to_one_at_a_time_and_refuses_a_repeated_combination() {
        let step = step_of(&format!(
            "{{task: t, {TASK}, across: [{{var: os, values: [a]}}, {{var: v, values: [x]}}]}}"
        ));
        let plan = step_plan(&step, &At::default()).unwrap();
        let d = plan.describe("0");
        assert_eq!((d.limit, d.fail_fast), (Some(1), false));
        let step = step_of(&format!(
            "{{task: t, {TASK}, across: [{{var: os, values: [a, a]}}, {{var: v, values: [x]}}]}}"
        ));
        let Err(err) = step_plan(&step, &At::default()) else {
            panic!("a repeated combination was accepted")
        };
        let err = err.to_string();
        assert!(
            err.contains("step \"t\": across: the combination [os=a,v=x] is given twice"),
            "{err}"
        );
    }

    #[test]
    fn values_from_a_local_var_and_other_local_vars_defer_the_step() {
        let step = step_of(&format!(
            "{{task: t, {TASK}, across: [{{var: os, values: ((.:list))}}]}}"
        ));
        assert!(holds_own_locals(&step));
        let plan = step_plan(&step, &At::default()).unwrap();
        assert_eq!(plan.steps()[0].name(), "t");
        // With the list known, the copies still hold ((.:v)): each is
        // deferred under its own name.
        let mut locals = Vars::new();
        locals.insert("list", serde_yaml::from_str("[linux]").unwrap());
        let filled = fill_own(&step, &locals).unwrap();
        let plan = step_plan(&filled, &At::default()).unwrap();
        assert_eq!(plan.steps()[0].name(), "t[os=linux]");
        assert!(
            fill_own(&step, &Vars::new()).unwrap_err()[0].contains("unfilled local var ((.:list))")
        );
    }

    #[test]
    fn secret_values_are_redacted_in_names() {
        let secrets = LocalVars::new();
        secrets.set("pw", serde_yaml::Value::String("hunter2".into()), true);
        let step = step_of("{task: t, config: {platform: linux, run: {path: echo}}, across: [{var: pw, values: [hunter2]}]}");
        let at = At {
            secrets: Some(secrets),
            ..At::default()
        };
        let plan = step_plan(&step, &at).unwrap();
        assert_eq!(plan.steps()[0].name(), "t[pw=((redacted)),#1]");
    }

    #[test]
    fn a_timeout_held_by_a_local_var_is_read_when_filled() {
        let step =
            step_of("{task: t, config: {platform: linux, run: {path: echo}}, timeout: ((.:t))}");
        assert!(holds_own_locals(&step));
        let mut locals = Vars::new();
        locals.insert("t", Value::from("90s"));
        let filled = fill_own(&step, &locals).unwrap();
        assert_eq!(
            filled.timeout.unwrap().duration,
            Some(std::time::Duration::from_secs(90))
        );
    }
}
