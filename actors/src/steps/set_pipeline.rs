//! The `set_pipeline` step (Concourse's `atc/exec/set_pipeline_step.go`):
//! stores a pipeline of the build's team (`team:` may only name it, or be
//! `""`), `self` (the build's own) or another by name, from a file of the
//! build's artifacts, with `vars` over the vars of `var_files`. It is
//! stored as `gantry set-pipeline` stores one (checked whole, each job
//! translated, a new config version); a pipeline it creates starts
//! unpaused, as Concourse's step leaves it. Its log (stdout) is
//! Concourse's: the difference from the stored config, `setting pipeline:
//! NAME`, then `done`; or `no changes to apply.` when the config and vars
//! are those stored (nothing is written then). The next build of a job of
//! that pipeline runs the new config.
//!
//! Like `load_var` it needs no worker: it reads its files on the web node
//! and ends in its prepare phase. Taken over after it ended, it does
//! nothing again (the pipeline is stored).

use async_trait::async_trait;

use crate::db::{Parent, PipelineRow};
use crate::error::EngineError;
use crate::pipeline::Vars;
use crate::plan::{PipelineRef, SetPipelineStep};
use crate::scheduler::StepRequest;
use crate::triggers::store_pipeline;
use gantry_wire::events::BuildEvent;

use super::{read_artifact_file, BuildScope, Prepared, Step, StepContext, StepEnd};

impl SetPipelineStep {
    /// Refuses a `team` other than `team` (the build's own): Gantry sets
    /// only the build's team's pipelines.
    pub fn check_team(&self, team: &str) -> Result<(), EngineError> {
        match &self.team {
            Some(t) if t != team => Err(EngineError::Invalid(format!(
                "step {:?}: set_pipeline: team {t:?}: only the build's own team ({team:?}) can be set",
                self.name
            ))),
            _ => Ok(()),
        }
    }

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

    /// The build's own pipeline, for `self` given `instance_vars`: they
    /// must name the build's own instance. Concourse quietly sets the
    /// build's own instance whatever they say; Gantry sets it when they
    /// agree and otherwise errors this step (never the whole pipeline
    /// holding it, which is stored as Concourse stores it), so vars that
    /// would be ignored are named instead.
    fn own_instance(
        &self,
        scope: &BuildScope,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, EngineError> {
        let own = self.target(scope)?;
        let given = PipelineRef::parse(own)
            .and_then(|r| PipelineRef::new(&r.name, Some(vars.clone())))
            .map(|r| r.to_string());
        match given {
            Ok(given) if given == own => Ok(own.to_string()),
            Ok(given) => Err(EngineError::Invalid(format!(
                "step {:?}: set_pipeline: instance_vars: self is the build's own pipeline, instance and all ({own:?}, not {given:?})",
                self.name
            ))),
            Err(e) => Err(EngineError::Invalid(format!(
                "step {:?}: set_pipeline: instance_vars: {e}",
                self.name
            ))),
        }
    }

    /// Reads the file and the vars and stores the pipeline, saying so in
    /// the step's log as Concourse's step does: the difference from the
    /// stored config, `setting pipeline: NAME`, `done` (or `no changes to
    /// apply.` when config and vars are those stored).
    async fn set(&self, scope: &BuildScope) -> Result<(), EngineError> {
        self.check_team(&scope.team)?;
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
        let name = match &self.instance_vars {
            None => self.target(scope)?.to_string(),
            Some(v) if self.pipeline == "self" => self.own_instance(scope, v)?,
            Some(v) => PipelineRef::new(&self.pipeline, Some(v.clone()))
                .map_err(|e| named(e.to_string()))?
                .to_string(),
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
        // As stored: an instance's vars fill it over the others.
        let pipeline_ref = PipelineRef::parse(&name).map_err(|e| named(e.to_string()))?;
        for (k, v) in pipeline_ref.vars() {
            vars.insert(&k, v);
        }
        let stored = scope.db.pipelines().pipeline(&scope.team, &name).await?;
        // A pipeline that sets itself (`self`) is not its own child: it
        // never archives itself when its job stops setting it.
        let parent = self
            .parent(scope)
            .await?
            .filter(|p| stored.as_ref().map(|r| r.id) != Some(p.pipeline_id));
        if let Some(row) = &stored {
            // Concourse's ErrSetByNewerBuild: a newer build's set stands.
            if parent.is_some() && row.parent_build_id.is_some_and(|b| b > scope.build) {
                let warning = "WARNING: the pipeline was not saved because it was already saved by a newer build\n";
                return self.log_to(scope, "stderr", warning).await;
            }
        }
        let vars_json = serde_json::to_string(&vars).expect("vars serialize");
        // An archived pipeline is set again however like its config is.
        let same = |r: &&PipelineRow| r.config == config && r.vars == vars_json && !r.archived;
        if let Some(row) = stored.as_ref().filter(same) {
            self.log(scope, "no changes to apply.\n").await?;
            if let Some(parent) = &parent {
                scope
                    .db
                    .pipelines()
                    .set_pipeline_parent(row.id, parent)
                    .await?;
            }
            return Ok(());
        }
        let before = stored
            .as_ref()
            .map(|r| r.config.as_str())
            .unwrap_or_default();
        let diff = similar::TextDiff::from_lines(before, config.as_str())
            .unified_diff()
            .context_radius(3)
            .header(&format!("{name} (stored)"), &format!("{name} (new)"))
            .to_string();
        self.log(scope, &format!("{diff}setting pipeline: {name}\n"))
            .await?;
        let (row, created) = store_pipeline(
            &scope.db,
            (&scope.team, &name),
            &config,
            &vars,
            None,
            (scope.global_resources, parent.as_ref()),
        )
        .await
        .map_err(|e| named(format!("pipeline {name:?}: {e}")))?;
        if created && parent.is_none() {
            // A one-off build has no job to be the parent; its pipeline
            // starts unpaused all the same.
            scope
                .db
                .pipelines()
                .set_pipeline_paused(row.id, false)
                .await?;
        }
        self.log(scope, "done\n").await
    }

    /// The job build running the step, when it is a job's: the parent of
    /// the pipelines it sets.
    async fn parent(&self, scope: &BuildScope) -> Result<Option<Parent>, EngineError> {
        let Some(job) = &scope.job else {
            return Ok(None);
        };
        Ok(scope
            .db
            .pipelines()
            .pipeline(&scope.team, &job.pipeline)
            .await?
            .map(|p| Parent {
                pipeline_id: p.id,
                job: job.job.clone(),
                build_id: scope.build,
            }))
    }

    /// Writes `text` to the step's stdout.
    async fn log(&self, scope: &BuildScope, text: &str) -> Result<(), EngineError> {
        self.log_to(scope, "stdout", text).await
    }

    /// Writes `text` to the step's `stream`.
    async fn log_to(
        &self,
        scope: &BuildScope,
        stream: &str,
        text: &str,
    ) -> Result<(), EngineError> {
        scope
            .events
            .emit(&BuildEvent::Log {
                step: self.name.clone(),
                stream: stream.into(),
                data: text.to_string(),
                time: crate::db::now_ms(),
            })
            .await
    }
}

#[async_trait]
impl Step for SetPipelineStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind_name(&self) -> Option<&'static str> {
        Some("set_pipeline")
    }

    /// Never asked: the step needs no worker and ends in [`Step::prepare`].
    fn worker_request(&self) -> StepRequest {
        StepRequest::default()
    }

    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        self.set(scope).await?;
        Ok(Prepared::Ended(StepEnd::Exited(0)))
    }

    async fn run(&self, _ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        Err(EngineError::Invalid(format!(
            "step {:?}: set_pipeline runs without a worker and is never placed",
            self.name
        )))
    }
}
