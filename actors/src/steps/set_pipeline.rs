//! The `set_pipeline` step (Concourse's `atc/exec/set_pipeline_step.go`):
//! stores a pipeline of the build's team, `self` (the build's own) or
//! another by name, from a file of the build's artifacts, with `vars` over
//! the vars of `var_files`. It is stored as `gantry set-pipeline` stores
//! one (checked whole, each job translated, a new config version); a
//! pipeline it creates starts unpaused, as Concourse's step leaves it.
//! The next build of a job of that pipeline runs the new config.
//!
//! Like `load_var` it needs no worker: it reads its files on the web node
//! and ends in its prepare phase. Taken over after it ended, it does
//! nothing again (the pipeline is stored).

use async_trait::async_trait;

use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::pipeline::Vars;
use crate::plan::SetPipelineStep;
use crate::scheduler::StepRequest;
use crate::triggers::store_pipeline;

use super::{read_artifact_file, BuildScope, Prepared, Step, StepContext, StepEnd};

impl SetPipelineStep {
    /// The pipeline set: the build's own for `self`.
    fn target<'a>(&'a self, scope: &'a BuildScope) -> Result<&'a str, EngineError> {
        if self.pipeline != "self" {
            return Ok(&self.pipeline);
        }
        scope
            .job
            .as_ref()
            .map(|j| j.pipeline.as_str())
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "step {:?}: set_pipeline: self means the build's pipeline, and this build is of none",
                    self.name
                ))
            })
    }

    /// Reads the file and the vars, and stores the pipeline; answers its
    /// name, config version and whether it is new.
    async fn set(&self, scope: &BuildScope) -> Result<(String, i64, bool), EngineError> {
        let named = |e: String| EngineError::Invalid(format!("step {:?}: {e}", self.name));
        let read = |file: &str| {
            let file = file.to_string();
            async move {
                let data = read_artifact_file(scope, &file)
                    .await
                    .map_err(|e| named(e.to_string()))?;
                String::from_utf8(data)
                    .map_err(|_| named(format!("file {file:?} is not UTF-8 text")))
            }
        };
        let config = read(&self.file).await?;
        let mut vars = Vars::new();
        for file in &self.var_files {
            let text = read(file).await?;
            vars.load_yaml(&text)
                .map_err(|e| named(format!("var file {file:?}: {e}")))?;
        }
        for (name, value) in &self.vars {
            vars.set(name, value.clone());
        }
        let name = self.target(scope)?.to_string();
        let (row, created) = store_pipeline(
            &scope.db,
            (&scope.team, &name),
            &config,
            &vars,
            None,
            scope.global_resources,
        )
        .await
        .map_err(|e| named(format!("pipeline {name:?}: {e}")))?;
        if created {
            scope.db.set_pipeline_paused(row.id, false).await?;
        }
        Ok((name, row.config_version, created))
    }
}

#[async_trait]
impl Step for SetPipelineStep {
    fn name(&self) -> &str {
        &self.name
    }

    /// Never asked: the step needs no worker and ends in [`Step::prepare`].
    fn worker_request(&self) -> StepRequest {
        StepRequest::default()
    }

    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        let (name, version, created) = self.set(scope).await?;
        let what = if created {
            "created (unpaused)"
        } else {
            "updated"
        };
        scope
            .events
            .emit(&BuildEvent::Log {
                step: self.name.clone(),
                stream: "stderr".into(),
                data: format!(
                    "pipeline {name} {what} from {}: config version {version}\n",
                    self.file
                ),
                time: crate::db::now_ms(),
            })
            .await?;
        Ok(Prepared::Ended(StepEnd::Exited(0)))
    }

    async fn run(&self, _ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        Err(EngineError::Invalid(format!(
            "step {:?}: set_pipeline runs without a worker and is never placed",
            self.name
        )))
    }
}
