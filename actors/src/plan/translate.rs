//! A build of a Concourse job: the stored [`JobPlan`] (the pipeline text,
//! its name, the job's name and the vars given) and its translation from the
//! typed pipeline steps ([`crate::pipeline::Step`]) into the walker's [`Plan`].
//!
//! What Gantry runs: `task` steps (an inline `config`, or a `file:` read
//! from an artifact of the build when the step runs, its `((vars))` filled
//! from the step's `vars`; `image_resource` fetched with its type, a
//! pipeline's custom type or a base type), `get` and `put` (see
//! `resource_plan.rs`), `load_var`, `do`, `in_parallel`, `try`, the hooks
//! (of steps and of the job), `across`, `attempts`, `timeout` and `tags`.
//! Every other step kind or field is refused when the build is created,
//! with an error naming the step and what it cannot run (`step "p":
//! set_pipeline steps are not supported yet`) — never skipped. Steps may
//! share a name, as in Concourse (a `get` and a `put` of one resource).
//!
//! Build-local vars (`((.:name))`) are filled when a step runs, not when
//! the build is created: a step whose own definition holds one (or a
//! `file:` task, whose config only exists then) becomes a
//! [`DeferredStep`] keeping its pipeline definition; the walker prepares it
//! just before placing it (see `Step::prepare` in the steps module), which
//! fills the vars from the build's and translates it with this module's
//! code into the plan it stands for. A local var still unfilled then errors
//! the build, naming it.
//!
//! `across` runs the step once per combination of its vars' values
//! (outermost var first), each combination an `in_parallel` level per var
//! whose limit is that var's `max_in_flight` (default 1, `all`: no limit)
//! and `fail_fast` the step's, as Concourse's `across_step.go`. Each copy
//! has its `((.:var))`s filled, and the names of the steps inside it take
//! the combination as a suffix (`test[os=linux,go=1.22]`), so step names
//! stay unique within a build; a combination given twice is refused.
//! Values given as a local var (`values: ((.:list))`) are read when the
//! step runs. Departure: vars set by a `load_var` inside an `across` copy
//! are the build's, not local to the copy.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use crate::pipeline::{self, Pipeline, Step, StepKind, Vars};
use crate::resources::config::ImageSource;
use crate::task_config::{params_text, TaskConfig};

use super::across::{expand_across, holds_own_locals};
use super::at::step_label;
use super::{
    resources, At, DeferredStep, Format, JobRef, LoadVarStep, Plan, SetPipelineStep, StepDef,
    TaskStep,
};

/// The plan of a build of a pipeline's job, stored with the build as JSON
/// so a reader sees what ran: the pipeline as given, the job and the vars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobPlan {
    /// The pipeline's YAML text, as given (vars not filled).
    pub pipeline: String,
    /// The pipeline's name: with the team and the job, what the job's task
    /// caches belong to (`main` for plans stored before it was recorded).
    #[serde(default = "default_pipeline_name")]
    pub pipeline_name: String,
    /// The job the build runs.
    pub job: String,
    /// The vars that fill the pipeline's `((vars))`.
    #[serde(default)]
    pub vars: Vars,
    /// The versions scheduling chose for the job's `get` steps, by step
    /// name: each such step fetches that version (none: every get finds
    /// its own, as a build typed with `gantry run` does).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, BTreeMap<String, String>>,
}

/// The pipeline name of a job plan that names none.
pub fn default_pipeline_name() -> String {
    "main".to_string()
}

impl JobPlan {
    /// The build's pipeline and job; a bad pipeline name is an
    /// [`EngineError::Invalid`] naming it.
    pub fn job_ref(&self) -> Result<JobRef, EngineError> {
        JobRef::new(&self.pipeline_name, &self.job)
    }

    /// Loads the pipeline with the vars (those they leave are the
    /// credential manager's, filled when the build starts: see
    /// [`JobPlan::plan_with`]), finds the job and translates it into a
    /// plan; every problem of the pipeline, or the first thing Gantry
    /// cannot run, is an [`EngineError::Invalid`] naming it.
    pub fn plan(&self) -> Result<Plan<StepDef>, EngineError> {
        self.plan_and_turns().map(|(plan, _)| plan)
    }

    /// [`JobPlan::plan`], and the turns a build of the job waits for
    /// ([`job_turns`], keyed within `team`'s pipeline).
    pub fn plan_and_turns(&self) -> Result<(Plan<StepDef>, Turns), EngineError> {
        let (pipeline, _, _) = Pipeline::load_leaving(&self.pipeline, &self.vars)
            .map_err(|problems| EngineError::Invalid(problems.join("; ")))?;
        self.plan_and_turns_of(&Arc::new(pipeline))
    }

    /// The plan of the build with the vars the credential manager gave
    /// (`creds`) filled too: what the build runs.
    pub(crate) fn plan_with(&self, creds: &Vars) -> Result<Plan<StepDef>, EngineError> {
        let pipeline =
            crate::resources::config::load_with_credentials(&self.pipeline, &self.vars, creds)
                .map_err(|problems| EngineError::Invalid(problems.join("; ")))?;
        self.plan_and_turns_of(&Arc::new(pipeline))
            .map(|(plan, _)| plan)
    }

    /// [`JobPlan::plan_and_turns`] of `pipeline`, this plan's pipeline
    /// already loaded with its vars (scheduling loads it once for many
    /// builds).
    pub fn plan_and_turns_of(
        &self,
        pipeline: &Arc<Pipeline>,
    ) -> Result<(Plan<StepDef>, Turns), EngineError> {
        let job = pipeline
            .job(&self.job)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        if self.inputs.is_empty() {
            // A build by hand; scheduling chose the inputs of the others.
            if job.disable_manual_trigger {
                return Err(EngineError::Invalid(format!(
                    "job {:?} has disable_manual_trigger set: it may not be started by hand",
                    job.name
                )));
            }
            return Ok((job_plan(pipeline, job)?, job_turns(job)));
        }
        let mut job = job.clone();
        pin_inputs(&mut job, &self.inputs);
        Ok((job_plan(pipeline, &job)?, job_turns(&job)))
    }
}

/// Pins each `get` step of `job` named in `inputs` to its version there.
fn pin_inputs(job: &mut pipeline::Job, inputs: &BTreeMap<String, BTreeMap<String, String>>) {
    fn pin(step: &mut Step, inputs: &BTreeMap<String, BTreeMap<String, String>>) {
        match &mut step.kind {
            StepKind::Get(get) => {
                if let Some(v) = inputs.get(&get.name) {
                    get.version = Some(pipeline::VersionSpec::Pinned(v.clone()));
                }
            }
            StepKind::Do(steps) => steps.iter_mut().for_each(|s| pin(s, inputs)),
            StepKind::InParallel(p) => p.steps.iter_mut().for_each(|s| pin(s, inputs)),
            StepKind::Try(s) => pin(s, inputs),
            _ => {}
        }
        for hook in step.hooks.iter_mut() {
            pin(hook, inputs);
        }
    }
    for s in &mut job.plan {
        pin(s, inputs);
    }
    for hook in job.hooks.iter_mut() {
        pin(hook, inputs);
    }
}

/// The turns a build waits for before its plan starts: (key, most builds
/// at once) each.
pub(super) type Turns = Vec<(String, u32)>;

/// The turns a build of `job` waits for before its plan starts, as
/// (key, most builds at once), keys relative to the team's pipeline:
/// `job:NAME` with the job's `max_in_flight` (1 with `serial` or
/// `serial_groups`, as Concourse computes it), and `group:NAME` with 1 for
/// each of its `serial_groups` (one build at a time across the group's
/// jobs). None for a job with neither.
pub(super) fn job_turns(job: &pipeline::Job) -> Turns {
    let mut turns: Vec<(String, u32)> = job
        .effective_max_in_flight()
        .map(|n| (format!("job:{}", job.name), n))
        .into_iter()
        .collect();
    turns.extend(job.serial_groups.iter().map(|g| (format!("group:{g}"), 1)));
    turns
}

/// The plan of a job: its steps one after another, under its hooks.
///
/// `serial`, `serial_groups` and `max_in_flight` are the build's turns
/// ([`job_turns`]), waited for before the plan starts. Job `tags` are the
/// tags of every step that has none of its own (and of no enclosing
/// `do` or `in_parallel`). The settings about history and display
/// (`public`, `old_name`, `disable_reruns`, `interruptible`, log
/// retention) do not change what a build does. `disable_manual_trigger`
/// is [`JobPlan`]'s to refuse (a build by hand), not this translation's.
///
/// The plan shares `pipeline` (the steps that need it hold the `Arc`), so
/// translating every job of a pipeline is linear in its size.
pub(crate) fn job_plan(
    pipeline: &Arc<Pipeline>,
    job: &pipeline::Job,
) -> Result<Plan<StepDef>, EngineError> {
    let at = At {
        pipeline: Some(Arc::clone(pipeline)),
        tags: job.tags.clone(),
        ..At::default()
    };
    let body = Plan::Do(
        job.plan
            .iter()
            .map(|s| step_plan(s, &at))
            .collect::<Result<_, _>>()?,
    );
    with_hooks(body, &job.hooks, &at)
}

/// The plan of one step, its modifiers nested as Concourse nests them:
/// hooks ( across ( attempts ( timeout ( the step's kind )))). `at`: the
/// tags of an enclosing `do` or `in_parallel` (for steps that have none)
/// and the suffix of an enclosing `across` combination. A step whose own
/// definition holds build-local vars is deferred: filled and translated
/// when it runs.
pub(crate) fn step_plan(step: &Step, at: &At) -> Result<Plan<StepDef>, EngineError> {
    if holds_own_locals(step) {
        return Ok(Plan::Step(StepDef::Deferred(DeferredStep::new(
            step.clone(),
            at.clone(),
        ))));
    }
    let inner = at.with_tags(&step.tags);
    let plan = match &step.across {
        Some(across) => {
            let body = Step {
                across: None,
                hooks: Default::default(),
                ..step.clone()
            };
            // Each combination's copy is translated as a step of its own.
            expand_across(across, &body, &inner)
                .map_err(|e| EngineError::Invalid(format!("{}across: {e}", step_label(step, at))))?
                .try_flat_map(&|(copy, copy_at)| {
                    step_plan(&copy, &copy_at).map_err(|e| {
                        EngineError::Invalid(format!("{}across: {e}", step_label(step, at)))
                    })
                })?
        }
        None => modified_plan(step, &inner)?,
    };
    // Hooks are steps of their own: they take the tags of the enclosing
    // composite, not the step's.
    with_hooks(plan, &step.hooks, at)
}

/// A step's kind under its `attempts` and `timeout` (no hooks, no across).
fn modified_plan(step: &Step, at: &At) -> Result<Plan<StepDef>, EngineError> {
    let mut plan = match &step.kind {
        StepKind::Task(task) if task.file.is_some() => {
            // Its config is read from an artifact when it runs.
            let bare = Step {
                kind: step.kind.clone(),
                timeout: None,
                attempts: None,
                tags: step.tags.clone(),
                across: None,
                hooks: Default::default(),
            };
            Plan::Step(StepDef::Deferred(DeferredStep::new(bare, at.clone())))
        }
        StepKind::Task(task) => Plan::Step(StepDef::Task(task_step(task, None, at)?)),
        StepKind::LoadVar(load) => Plan::Step(StepDef::LoadVar(load_var_step(load, at)?)),
        StepKind::Do(steps) => Plan::Do(
            steps
                .iter()
                .map(|s| step_plan(s, at))
                .collect::<Result<_, _>>()?,
        ),
        StepKind::InParallel(p) => Plan::InParallel {
            plans: p
                .steps
                .iter()
                .map(|s| step_plan(s, at))
                .collect::<Result<_, _>>()?,
            limit: p.limit.map(|l| l as usize),
            fail_fast: p.fail_fast,
        },
        StepKind::Try(inner) => Plan::Try(Box::new(step_plan(inner, at)?)),
        StepKind::Get(get) => Plan::Step(StepDef::Get(resources::get_step(
            at.pipeline(step)?,
            get,
            &at.name(&get.name),
            &at.tags,
        )?)),
        StepKind::Put(put) => Plan::Step(StepDef::Put(resources::put_step(
            at.pipeline(step)?,
            put,
            &at.name(&put.name),
            &at.tags,
        )?)),
        StepKind::SetPipeline(set) => {
            Plan::Step(StepDef::SetPipeline(set_pipeline_step(step, set, at)?))
        }
        StepKind::Run(_) => return Err(unsupported_step(step, step.kind.key())),
    };
    if let Some(timeout) = &step.timeout {
        let duration = timeout.duration.ok_or_else(|| {
            EngineError::Invalid(format!(
                "{}timeout {:?} is not a duration",
                step_label(step, at),
                timeout.text
            ))
        })?;
        plan = Plan::Timeout {
            plan: Box::new(plan),
            duration,
        };
    }
    if let Some(attempts) = step.attempts {
        plan = Plan::Attempts {
            plan: Box::new(plan),
            attempts: attempts.max(1),
        };
    }
    Ok(plan)
}

/// `plan` under the hooks, when there are any.
fn with_hooks(
    plan: Plan<StepDef>,
    hooks: &pipeline::Hooks,
    at: &At,
) -> Result<Plan<StepDef>, EngineError> {
    if hooks.is_empty() {
        return Ok(plan);
    }
    Ok(Plan::Hooks {
        plan: Box::new(plan),
        hooks: hooks.try_map(|s| step_plan(s, at))?,
    })
}

/// A `load_var` step: its format checked now (a var in it is filled first).
fn load_var_step(load: &pipeline::LoadVarStep, at: &At) -> Result<LoadVarStep, EngineError> {
    let name = at.name(&load.name);
    let format = match &load.format {
        None => None,
        Some(f) => Some(Format::parse(f).ok_or_else(|| {
            EngineError::Invalid(format!(
                "step {name:?}: unknown format {f:?} (json, yaml, yml, trim or raw)"
            ))
        })?),
    };
    Ok(LoadVarStep {
        name,
        var: load.name.clone(),
        file: load.file.clone(),
        format,
        reveal: load.reveal,
    })
}

/// A `task` step, its step-level fields applied to its config (`config`
/// given: read from its `file:` at run time; else the inline one):
/// `params` override the config's, `container_limits` its limits,
/// `hermetic` adds to its own; `input_mapping` and `output_mapping` rename
/// artifacts; `privileged` makes its container privileged (placed only on
/// workers allowing it). `vars` without `file:` are refused (Concourse
/// ignores them there).
pub(crate) fn task_step(
    task: &pipeline::TaskStep,
    config: Option<TaskConfig>,
    at: &At,
) -> Result<TaskStep, EngineError> {
    let name = &at.name(&task.name);
    if task.file.is_some() && task.config.is_some() {
        return Err(EngineError::Invalid(format!(
            "step {name:?}: a task has either file: or config:, not both"
        )));
    }
    if task.file.is_none() && !task.vars.is_empty() {
        return Err(EngineError::Invalid(format!(
            "step {name:?}: vars: fill a file: task config; an inline config takes the pipeline's vars"
        )));
    }
    let mut config = match config {
        Some(config) => config,
        None => {
            let inline = task.config.as_ref().ok_or_else(|| {
                EngineError::Invalid(format!("step {name:?}: the task has no config"))
            })?;
            TaskConfig::from_value(inline).map_err(|problems| {
                EngineError::Invalid(format!("step {name:?}: config: {}", problems.join("; ")))
            })?
        }
    };
    let image_resource = config
        .image_resource
        .as_ref()
        .map(|ir| ImageSource::of(ir, at.pipeline.as_deref()))
        .transpose()
        .map_err(|e| EngineError::Invalid(format!("step {name:?}: image_resource: {e}")))?;
    let params = params_text(&task.params).map_err(|problems| {
        EngineError::Invalid(format!("step {name:?}: params: {}", problems.join("; ")))
    })?;
    config.params.extend(params);
    if let Some(limits) = task.container_limits {
        if limits.cpu.is_some() {
            config.container_limits.cpu = limits.cpu;
        }
        if limits.memory.is_some() {
            config.container_limits.memory = limits.memory;
        }
    }
    config.hermetic |= task.hermetic;
    Ok(TaskStep {
        name: name.clone(),
        config,
        inputs: Default::default(),
        tags: at.tags.clone(),
        image: None,
        input_mapping: task.input_mapping.clone(),
        output_mapping: task.output_mapping.clone(),
        image_resource,
        image_artifact: task.image.clone(),
        privileged: task.privileged,
    })
}

/// The step running a `set_pipeline`: `team: ""` is the build's own
/// team; `instance_vars` name the instance set (with `self`, checked when
/// the step runs, against the build's own instance: the pipeline holding
/// the step is stored, as Concourse stores it).
fn set_pipeline_step(
    step: &Step,
    set: &crate::pipeline::step::SetPipelineStep,
    at: &At,
) -> Result<SetPipelineStep, EngineError> {
    let bad = |what: String| {
        EngineError::Invalid(format!("{}set_pipeline: {what}", step_label(step, at)))
    };
    let instance_vars = match set.instance_vars.is_empty() {
        true => None,
        false => {
            let mut vars = serde_json::Map::new();
            for (k, v) in &set.instance_vars {
                let v = serde_json::to_value(v)
                    .map_err(|e| bad(format!("instance_vars: {k:?}: {e}")))?;
                vars.insert(k.clone(), v);
            }
            Some(vars)
        }
    };
    Ok(SetPipelineStep {
        name: at.name(&set.name),
        pipeline: set.name.clone(),
        file: set.file.clone(),
        vars: set.vars.clone(),
        var_files: set.var_files.clone(),
        team: set.team.clone().filter(|t| !t.is_empty()),
        instance_vars,
    })
}

/// The refusal of a step Gantry cannot run, naming the step and its kind.
fn unsupported_step(step: &Step, what: &str) -> EngineError {
    EngineError::Invalid(format!(
        "{}{what} steps are not supported yet",
        step_label(step, &At::default())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Leaf;

    fn plan_of(yaml: &str, vars: &[(&str, &str)]) -> Result<Plan<StepDef>, EngineError> {
        let mut v = Vars::new();
        for (k, val) in vars {
            v.set_flag(&format!("{k}={val}")).unwrap();
        }
        JobPlan {
            pipeline: yaml.into(),
            pipeline_name: "p".into(),
            job: "j".into(),
            vars: v,
            inputs: Default::default(),
        }
        .plan()
    }

    fn invalid(r: Result<Plan<StepDef>, EngineError>) -> String {
        match r {
            Err(EngineError::Invalid(m)) => m,
            Err(e) => panic!("not Invalid: {e}"),
            Ok(p) => panic!("accepted: {}", p.kind()),
        }
    }

    const TASK: &str = "config: {platform: linux, run: {path: echo}}";

    #[test]
    fn a_job_becomes_hooks_around_its_steps_with_modifiers_nested() {
        let yaml = format!(
            "jobs:\n- name: j\n  ensure: {{task: e, {TASK}}}\n  plan:\n  - in_parallel:\n      limit: 1\n      fail_fast: true\n      steps:\n      - {{task: a, {TASK}, attempts: 3, timeout: 1m}}\n      - try: {{task: b, {TASK}}}\n"
        );
        let plan = plan_of(&yaml, &[]).unwrap();
        let d = plan.describe("0");
        assert_eq!(d.kind, "hooks");
        let par = &d.children[0].children[0];
        assert_eq!(
            (par.kind.as_str(), par.limit, par.fail_fast),
            ("in_parallel", Some(1), true)
        );
        let a = &par.children[0];
        assert_eq!((a.kind.as_str(), a.attempts), ("attempts", Some(3)));
        assert_eq!(a.children[0].timeout_ms, Some(60_000));
        assert_eq!(par.children[1].kind, "try");
        let names: Vec<_> = plan.steps().iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, ["a", "b", "e"]);
    }

    #[test]
    fn steps_gantry_does_not_run_are_refused_by_name() {
        let yaml = "prototypes:\n- {name: proto, type: registry-image, source: {}}\njobs:\n- name: j\n  plan:\n  - {run: p, type: proto}\n";
        assert_eq!(
            invalid(plan_of(yaml, &[])),
            "step \"p\": run steps are not supported yet"
        );
        // `self` with `instance_vars` is translated (the step checks them
        // against the build's own instance when it runs).
        let yaml = "jobs:\n- name: j\n  plan:\n  - {set_pipeline: self, file: c/p.yml, instance_vars: {a: b}}\n";
        let plan = plan_of(yaml, &[]).unwrap();
        let StepDef::SetPipeline(set) = plan.steps()[0] else {
            panic!("a set_pipeline step")
        };
        let vars = set.instance_vars.as_ref().map(|v| v.len());
        assert_eq!((set.pipeline.as_str(), vars), ("self", Some(1)));
        let yaml = "jobs:\n- name: j\n  plan:\n  - {set_pipeline: p, file: c/p.yml, team: '', instance_vars: {a: {b: 1}}}\n";
        let plan = plan_of(yaml, &[]).unwrap();
        let StepDef::SetPipeline(set) = plan.steps()[0] else {
            panic!("a set_pipeline step")
        };
        assert_eq!(
            (
                set.team.as_deref(),
                set.instance_vars.as_ref().map(|v| v.len())
            ),
            (None, Some(1))
        );
        assert!(
            set.check_team("any").is_ok(),
            "team \"\" is the build's own"
        );
        // Another team than the build's is refused, naming both.
        let yaml = "jobs:\n- name: j\n  plan:\n  - {set_pipeline: p, file: c/p.yml, team: other}\n";
        let plan = plan_of(yaml, &[]).unwrap();
        let StepDef::SetPipeline(set) = plan.steps()[0] else {
            panic!("a set_pipeline step")
        };
        assert!(set.check_team("other").is_ok());
        assert_eq!(
            set.check_team("main").unwrap_err().to_string(),
            "step \"p\": set_pipeline: team \"other\": only the build's own team (\"main\") can be set"
        );
        let yaml = "jobs:\n- name: j\n  plan:\n  - {set_pipeline: self, file: c/p.yml, vars: {a: b}, var_files: [c/v.yml]}\n";
        assert_eq!(plan_of(yaml, &[]).unwrap().steps()[0].name(), "self");
        // A get names a resource the pipeline declares.
        let yaml = "resources:\n- {name: repo, type: git, source: {}}\njobs:\n- name: j\n  plan:\n  - {get: src, resource: repo}\n";
        assert_eq!(plan_of(yaml, &[]).unwrap().steps()[0].name(), "src");
        let yaml = format!("jobs:\n- name: j\n  plan:\n  - {{task: t, {TASK}, vars: {{a: b}}}}\n");
        assert!(invalid(plan_of(&yaml, &[])).contains("step \"t\": vars: fill a file: task config"));
        // privileged: true makes the task's container privileged.
        let yaml =
            format!("jobs:\n- name: j\n  plan:\n  - {{task: t, {TASK}, privileged: true}}\n");
        let plan = plan_of(&yaml, &[]).unwrap();
        assert!(matches!(plan.steps()[0], StepDef::Task(t) if t.privileged));
    }

    #[test]
    fn file_tasks_and_steps_with_local_vars_wait_for_the_run_and_load_var_needs_no_worker() {
        let yaml = format!(
            "jobs:\n- name: j\n  plan:\n  - {{load_var: v, file: out/v.json, reveal: true}}\n  - {{task: f, file: out/task.yml, vars: {{x: y}}, attempts: 2}}\n  - {{task: t, {TASK}, params: {{V: ((.:v))}}}}\n"
        );
        let plan = plan_of(&yaml, &[]).unwrap();
        let names: Vec<_> = plan.steps().iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, ["v", "f", "t"]);
        let d = plan.describe("0");
        assert_eq!(d.children[1].kind, "attempts");
        let yaml = "jobs:\n- name: j\n  plan:\n  - {load_var: v, file: out/v, format: ((.:f))}\n";
        assert_eq!(plan_of(yaml, &[]).unwrap().steps()[0].name(), "v");
    }

    #[test]
    fn a_resource_filled_by_the_manager_keeps_its_config_key_as_set() {
        let yaml = "resources:\n- {name: r, type: git, source: {uri: ((uri)), branch: main}}\njobs:\n- name: j\n  plan:\n  - get: r\n";
        let stored = JobPlan {
            pipeline: yaml.into(),
            pipeline_name: "p".into(),
            job: "j".into(),
            vars: Vars::new(),
            inputs: Default::default(),
        };
        let config = |plan: &Plan<StepDef>| match plan.steps()[0] {
            StepDef::Get(g) => g.config.clone(),
            _ => panic!("not a get"),
        };
        let as_set = config(&stored.plan().unwrap());
        let mut creds = Vars::new();
        creds
            .set_flag("uri=https://example.com/secret-repo")
            .unwrap();
        let filled = config(&stored.plan_with(&creds).unwrap());
        assert_eq!(filled.source["uri"], "https://example.com/secret-repo");
        assert_eq!(as_set.source["uri"], "((uri))");
        assert_eq!(
            filled.key(),
            as_set.key(),
            "versions stay with the config as set"
        );
        creds.set_flag("uri=https://example.com/rotated").unwrap();
        assert_eq!(
            config(&stored.plan_with(&creds).unwrap()).key(),
            as_set.key()
        );
    }

    /// The task's params in a plan of one task.
    fn params(plan: &Plan<StepDef>) -> BTreeMap<String, String> {
        match plan.steps()[0] {
            StepDef::Task(t) => t.config.params.clone(),
            _ => panic!("not a task"),
        }
    }

    #[test]
    fn a_var_left_is_the_credential_managers_and_a_filled_one_reaches_the_params() {
        let yaml = format!(
            "jobs:\n- name: j\n  plan:\n  - {{task: t, {TASK}, params: {{GREETING: ((greeting)), N: 3}}}}\n"
        );
        // Left in place, for the credential manager to fill.
        let left = plan_of(&yaml, &[]).unwrap();
        assert_eq!(params(&left)["GREETING"], "((greeting))");
        let plan = plan_of(&yaml, &[("greeting", "hi")]).unwrap();
        assert_eq!(params(&plan)["GREETING"], "hi");
        let mut creds = Vars::new();
        creds.set_flag("greeting=from-the-manager").unwrap();
        let stored = JobPlan {
            pipeline: yaml.clone(),
            pipeline_name: "p".into(),
            job: "j".into(),
            vars: Vars::new(),
            inputs: Default::default(),
        };
        let filled = stored.plan_with(&creds).unwrap();
        assert_eq!(params(&filled)["GREETING"], "from-the-manager");
        // A static var given with the pipeline wins over the manager's.
        let mut given = stored.clone();
        given.vars.set_flag("greeting=given").unwrap();
        assert_eq!(
            params(&given.plan_with(&creds).unwrap())["GREETING"],
            "given"
        );
        let stored = JobPlan {
            pipeline: yaml,
            pipeline_name: "p".into(),
            job: "j".into(),
            vars: Vars::new(),
            inputs: Default::default(),
        };
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(serde_json::from_value::<JobPlan>(json).unwrap(), stored);
    }

    #[test]
    fn steps_without_tags_take_their_composites_and_hooks_do_not_take_the_steps() {
        let yaml = format!(
            "jobs:\n- name: j\n  plan:\n  - in_parallel:\n      steps:\n      - {{task: a, {TASK}}}\n      - {{task: b, {TASK}, tags: [own], ensure: {{task: c, {TASK}}}}}\n    tags: [pool]\n"
        );
        let plan = crate::steps::runnable(plan_of(&yaml, &[]).unwrap());
        let tags: Vec<_> = plan
            .steps()
            .iter()
            .map(|s| (s.name().to_string(), s.worker_request().tags))
            .collect();
        assert_eq!(
            tags,
            [
                ("a".to_string(), vec!["pool".to_string()]),
                ("b".into(), vec!["own".into()]),
                ("c".into(), vec!["pool".into()]),
            ]
        );
    }

    #[test]
    fn job_tags_are_the_tags_of_steps_without_their_own_and_manual_triggers_can_be_refused() {
        let yaml = format!(
            "jobs:\n- name: j\n  tags: [gpu]\n  plan:\n  - {{task: t, {TASK}}}\n  - {{task: u, {TASK}, tags: [own]}}\n"
        );
        let plan = crate::steps::runnable(plan_of(&yaml, &[]).unwrap());
        let tags: Vec<_> = plan
            .steps()
            .iter()
            .map(|s| (s.name().to_string(), s.worker_request().tags))
            .collect();
        assert_eq!(
            tags,
            [
                ("t".to_string(), vec!["gpu".to_string()]),
                ("u".into(), vec!["own".into()])
            ]
        );
        let yaml = format!(
            "jobs:\n- name: j\n  disable_manual_trigger: true\n  plan:\n  - {{task: t, {TASK}}}\n"
        );
        assert_eq!(
            invalid(plan_of(&yaml, &[])),
            "job \"j\" has disable_manual_trigger set: it may not be started by hand"
        );
        // Scheduling chose its inputs: a triggered build runs.
        let mut stored: JobPlan = serde_json::from_value(serde_json::json!({
            "pipeline": yaml, "pipeline_name": "p", "job": "j",
        }))
        .unwrap();
        stored.inputs.insert("x".into(), Default::default());
        assert!(stored.plan().is_ok());
        let yaml = format!("jobs:\n- name: j\n  public: true\n  plan:\n  - {{task: t, {TASK}}}\n");
        assert!(plan_of(&yaml, &[]).is_ok());
    }

    #[test]
    fn serial_max_in_flight_and_serial_groups_are_turns() {
        let turns = |job: &str| {
            let yaml = format!("jobs:\n- name: j\n{job}  plan:\n  - {{task: t, {TASK}}}\n");
            let pipeline = Arc::new(Pipeline::load(&yaml, &Vars::default()).unwrap());
            let job = pipeline.job("j").unwrap();
            assert!(job_plan(&pipeline, job).is_ok());
            job_turns(job)
        };
        assert_eq!(turns(""), vec![]);
        assert_eq!(turns("  serial: true\n"), vec![("job:j".to_string(), 1)]);
        assert_eq!(
            turns("  max_in_flight: 3\n"),
            vec![("job:j".to_string(), 3)]
        );
        assert_eq!(
            turns("  max_in_flight: 3\n  serial_groups: [a, b]\n"),
            vec![
                ("job:j".to_string(), 1),
                ("group:a".to_string(), 1),
                ("group:b".to_string(), 1)
            ]
        );
    }

    #[test]
    fn step_params_and_limits_override_the_configs() {
        let task = pipeline::TaskStep {
            name: "t".into(),
            file: None,
            config: Some(
                serde_yaml::from_str(
                    "{platform: linux, params: {A: config, B: kept}, container_limits: {cpu: 1, memory: 1024}, run: {path: echo}}",
                )
                .unwrap(),
            ),
            image: None,
            privileged: false,
            hermetic: true,
            params: serde_yaml::from_str("{A: step, C: true}").unwrap(),
            vars: Default::default(),
            input_mapping: [("in".to_string(), "x".to_string())].into(),
            output_mapping: Default::default(),
            container_limits: Some(pipeline::step::Limits {
                cpu: None,
                memory: Some(2048),
            }),
        };
        let at = At {
            tags: vec!["t1".into()],
            ..At::default()
        };
        let step = task_step(&task, None, &at).unwrap();
        let p = &step.config.params;
        assert_eq!(
            (p["A"].as_str(), p["B"].as_str(), p["C"].as_str()),
            ("step", "kept", "true")
        );
        assert_eq!(step.config.container_limits.cpu, Some(1));
        assert_eq!(step.config.container_limits.memory, Some(2048));
        assert!(step.config.hermetic);
        assert_eq!(step.tags, ["t1"]);
        assert_eq!(step.input_mapping["in"], "x");
    }
}
