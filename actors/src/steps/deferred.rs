//! Steps translated when they run, not when the build is created
//! (Concourse fills build-local vars and reads task files at run time too):
//! a [`DeferredStep`] keeps its pipeline definition; when the walker
//! prepares it, it fills the definition's build-local vars (`((.:name))`)
//! from the build's, reads a `file:` task's config from its artifact, and
//! translates it with the same code as at creation (`plan/translate.rs`)
//! into the plan to run in its place.

use async_trait::async_trait;

use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::pipeline::vars::interpolate_task_file;
use crate::pipeline::{Step as PipelineStep, StepKind, Vars};
use crate::plan::{fill_own, step_label, step_plan, task_step, At, DeferredStep, Plan, StepDef};
use crate::scheduler::StepRequest;
use crate::task_config::TaskConfig;

use super::{read_artifact_file, runnable, BuildScope, Prepared, Step, StepContext, StepEnd};

#[async_trait]
impl Step for DeferredStep {
    fn name(&self) -> &str {
        &self.name
    }

    /// Never asked: the step is prepared into another before placement.
    fn worker_request(&self) -> StepRequest {
        StepRequest::default()
    }

    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        let locals = scope.locals.snapshot();
        let label = step_label(&self.step, &self.at);
        let filled = fill_own(&self.step, &locals)
            .map_err(|e| EngineError::Invalid(format!("{label}{}", e.join("; "))))?;
        let at = At {
            secrets: Some(scope.locals.clone()),
            ..self.at.clone()
        };
        if let (StepKind::Task(task), true) = (&filled.kind, is_bare(&filled)) {
            if let Some(file) = &task.file {
                let config = task_file(scope, file, &task.vars, &locals)
                    .await
                    .map_err(|e| EngineError::Invalid(format!("{label}{e}")))?;
                let step = task_step(task, Some(config), &at.with_tags(&filled.tags))?;
                return Ok(Prepared::Plan(runnable(Plan::Step(StepDef::Task(step)))));
            }
        }
        Ok(Prepared::Plan(runnable(step_plan(&filled, &at)?)))
    }

    /// The plan it became when it ran (its translation is the same again:
    /// the build's vars are restored first, in the plan's order).
    async fn restore(&self, scope: &BuildScope) -> Result<Option<super::Plan>, EngineError> {
        match self.prepare(scope).await? {
            Prepared::Plan(plan) => Ok(Some(plan)),
            _ => Ok(None),
        }
    }

    async fn run(&self, _ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        Err(EngineError::Invalid(format!(
            "step {:?} was placed before it was prepared",
            self.name
        )))
    }
}

/// Whether the step is its kind alone: no modifiers, hooks or `across`.
fn is_bare(step: &PipelineStep) -> bool {
    step.timeout.is_none()
        && step.attempts.is_none()
        && step.across.is_none()
        && step.hooks.is_empty()
}

/// A `file:` task's config: read from the artifact, its `((vars))` filled
/// from the step's `vars` and the build's local vars, then checked as a
/// task.yml; every problem names the file.
async fn task_file(
    scope: &BuildScope,
    file: &str,
    vars: &crate::pipeline::Params,
    locals: &Vars,
) -> Result<TaskConfig, String> {
    let data = read_artifact_file(scope, file)
        .await
        .map_err(|e| e.to_string())?;
    let (file, vars, locals) = (file.to_string(), Vars::from(vars.clone()), locals.clone());
    // Off the build's event loop: a file may be a few MiB of YAML.
    let read = off_thread("reading a task file", PIPELINE_BUDGET, move |_| {
        Ok(read_task_file(&data, &file, &vars, &locals))
    });
    read.await.map_err(|e| e.to_string())?
}

/// The task config of task file `file` (its contents `data`), its vars
/// filled from the step's `vars` and the build's `locals`.
fn read_task_file(
    data: &[u8],
    file: &str,
    vars: &Vars,
    locals: &Vars,
) -> Result<TaskConfig, String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("file {file:?}: not UTF-8 ({e})"))?;
    let doc = crate::pipeline::parse_yaml(text, "task file")
        .map_err(|e| format!("file {file:?}: {e}"))?;
    let doc = interpolate_task_file(&doc, vars, locals)
        .map_err(|p| format!("file {file:?}: {}", p.join("; ")))?;
    TaskConfig::from_value(&doc).map_err(|p| format!("file {file:?}: {}", p.join("; ")))
}
