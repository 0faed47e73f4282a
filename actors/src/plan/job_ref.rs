//! The job a build runs, by pipeline and name.

use crate::error::EngineError;

/// Which job of which pipeline a build runs: what its task caches belong
/// to (with the team), and what its steps are told as `BUILD_PIPELINE_NAME`
/// and `BUILD_JOB_NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobRef {
    /// The pipeline's name.
    pub pipeline: String,
    /// The job's name.
    pub job: String,
}

impl JobRef {
    /// A job of the pipeline named `pipeline` (an instance's
    /// `NAME/K:V,...`, see [`super::PipelineRef`]), whose name is checked:
    /// it must be non-empty, at most 128 characters of ASCII letters,
    /// digits, `-`, `_` and `.`, starting with a letter or digit.
    pub fn new(pipeline: &str, job: &str) -> Result<JobRef, EngineError> {
        let pipeline = super::PipelineRef::parse(pipeline)?.to_string();
        Ok(JobRef {
            pipeline,
            job: job.to_string(),
        })
    }

    /// The pipeline's name without its instance vars (`BUILD_PIPELINE_NAME`)
    /// and those as JSON, for an instance (`BUILD_PIPELINE_INSTANCE_VARS`).
    pub fn pipeline_name_and_vars(&self) -> (String, Option<String>) {
        match super::PipelineRef::parse(&self.pipeline) {
            Ok(r) => (
                r.name,
                r.instance_vars
                    .map(|v| serde_json::Value::Object(v).to_string()),
            ),
            Err(_) => (self.pipeline.clone(), None),
        }
    }
}
