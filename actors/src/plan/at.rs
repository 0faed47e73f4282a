//! Where a pipeline step is translated ([`At`]: the tags it inherits, the
//! suffix of its `across` combination, the pipeline it is in) and how a
//! step is named in messages ([`step_label`], [`step_name`]): what the
//! translation (`translate.rs`), `across` (`across.rs`) and the step
//! definitions (`defs.rs`) share.

use std::sync::Arc;

use crate::error::EngineError;
use crate::pipeline::{Pipeline, Step, StepKind};

use super::LocalVars;

/// Where a pipeline step is translated: the tags it inherits from an
/// enclosing composite, and the suffix an enclosing `across` combination
/// adds to the names of its steps.
#[derive(Debug, Clone, Default)]
pub struct At {
    /// Tags for steps that have none.
    pub tags: Vec<String>,
    /// `[var=value,...]` of the enclosing `across` combinations.
    pub suffix: String,
    /// The build's local vars, when translating at run time: values shown
    /// in step names are redacted through them.
    pub secrets: Option<LocalVars>,
    /// The pipeline, for the resources and resource types `get`, `put` and
    /// `image_resource` name.
    pub pipeline: Option<Arc<Pipeline>>,
}

impl At {
    /// The name of step `name` here.
    pub fn name(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// The pipeline, which step `step` (a `get` or a `put`) needs.
    pub fn pipeline(&self, step: &Step) -> Result<&Pipeline, EngineError> {
        self.pipeline.as_deref().ok_or_else(|| {
            EngineError::Invalid(format!(
                "{}resources are only known in a build of a pipeline's job",
                step_label(step, self)
            ))
        })
    }

    /// Here, for the insides of a step with tags `tags` (none: these).
    pub fn with_tags(&self, tags: &[String]) -> At {
        let mut at = self.clone();
        if !tags.is_empty() {
            at.tags = tags.to_vec();
        }
        at
    }
}

/// `step "NAME": ` for a step with a name, else `KIND step: `.
pub(crate) fn step_label(step: &Step, at: &At) -> String {
    match step_name(&step.kind) {
        Some(name) => format!("step {:?}: ", at.name(name)),
        None => format!("{} step: ", step.kind.key()),
    }
}

/// The name of a step of a kind that has one.
pub(super) fn step_name(kind: &StepKind) -> Option<&str> {
    match kind {
        StepKind::Task(t) => Some(&t.name),
        StepKind::Get(g) => Some(&g.name),
        StepKind::Put(p) => Some(&p.name),
        StepKind::LoadVar(l) => Some(&l.name),
        StepKind::SetPipeline(s) => Some(&s.name),
        StepKind::Run(r) => Some(&r.message),
        StepKind::Do(_) | StepKind::InParallel(_) | StepKind::Try(_) => None,
    }
}
