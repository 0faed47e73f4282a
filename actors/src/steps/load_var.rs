//! The `load_var` step (Concourse's `atc/exec/load_var_step.go`): reads a
//! file of an artifact of the build into a build-local var, read later as
//! `((.:NAME))`.
//!
//! It needs no worker: the file is read on the web node from the artifact
//! store (see [`super::read_artifact_file`]), so the step does all its work
//! in its prepare phase ([`Step::prepare`]) and answers
//! [`Prepared::Ended`]; it is never placed, and neither asks the Scheduler
//! nor takes a worker's capacity. Its value is a secret unless `reveal:
//! true`, as Concourse's tracker takes one (a string, and the strings
//! inside a mapping; not a list, see `crate::redact`): it is redacted
//! wherever the engine writes it to the build log (see
//! [`super::LocalVars::redact`]) and the step's log line names the var
//! and the file, never the value.

use async_trait::async_trait;

use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::plan::{Format, LoadVarStep};
use crate::scheduler::StepRequest;
use gantry_wire::events::BuildEvent;

use super::{read_artifact_file, BuildScope, Plan, Prepared, Step, StepContext, StepEnd};

impl LoadVarStep {
    /// Reads the file and sets the var; answers the format it was read as
    /// and whether the value is redacted (not revealed, and holding a
    /// string: a list, a number or a boolean is shown, as Concourse's
    /// tracker leaves them).
    async fn load(&self, scope: &BuildScope) -> Result<(Format, bool), EngineError> {
        let named = |e: String| EngineError::Invalid(format!("step {:?}: {e}", self.name));
        let data = read_artifact_file(scope, &self.file)
            .await
            .map_err(|e| named(e.to_string()))?;
        let format = self.format.unwrap_or_else(|| Format::of_file(&self.file));
        // Off the build's event loop: a file may be a few MiB of YAML.
        let value = off_thread("reading a load_var file", PIPELINE_BUDGET, move |_| {
            Ok(format.value(&data))
        })
        .await?
        .map_err(|e| named(format!("file {:?}: {e}", self.file)))?;
        let redacted = !self.reveal && crate::redact::holds_secrets(&value);
        scope.locals.set(&self.var, value, !self.reveal);
        Ok((format, redacted))
    }
}

#[async_trait]
impl Step for LoadVarStep {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind_name(&self) -> Option<&'static str> {
        Some("load_var")
    }

    /// Never asked: the step needs no worker and ends in [`Step::prepare`].
    fn worker_request(&self) -> StepRequest {
        StepRequest::default()
    }

    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        let (format, redacted) = self.load(scope).await?;
        let shown = if redacted { " (redacted)" } else { "" };
        scope
            .events
            .emit(&BuildEvent::Log {
                step: self.name.clone(),
                stream: "stderr".into(),
                data: format!(
                    "loaded var {:?} from {} as {}{shown}\n",
                    self.var,
                    self.file,
                    format.as_str()
                ),
                time: crate::db::now_ms(),
            })
            .await?;
        Ok(Prepared::Ended(StepEnd::Exited(0)))
    }

    /// Sets the var again from its file (an artifact of the build, which
    /// lives as long as the build): a value is never stored, so a secret
    /// one is nowhere at rest.
    async fn restore(&self, scope: &BuildScope) -> Result<Option<Plan>, EngineError> {
        self.load(scope).await?;
        Ok(None)
    }

    async fn run(&self, _ctx: &mut StepContext) -> Result<StepEnd, EngineError> {
        Err(EngineError::Invalid(format!(
            "step {:?}: load_var runs without a worker and is never placed",
            self.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml::Value;

    #[test]
    fn the_format_comes_from_the_extension_unless_given() {
        assert_eq!(Format::of_file("out/v.json"), Format::Json);
        assert_eq!(Format::of_file("out/dir.d/v.yml"), Format::Yaml);
        assert_eq!(Format::of_file("out/v.yaml"), Format::Yaml);
        assert_eq!(Format::of_file("out/version"), Format::Trim);
        assert_eq!(Format::of_file("out.json/version.txt"), Format::Trim);
        assert_eq!(Format::parse("yml"), Some(Format::Yaml));
        assert_eq!(Format::parse("toml"), None);
    }

    #[test]
    fn values_are_parsed_or_kept_as_text() {
        let v = Format::Json.value(br#"{"k": [1, "two"]}"#).unwrap();
        assert_eq!(v, serde_yaml::from_str::<Value>("{k: [1, two]}").unwrap());
        let v = Format::Yaml.value(b"a: b\n").unwrap();
        assert_eq!(v["a"], Value::String("b".into()));
        assert_eq!(
            Format::Trim.value(b"  1.2.3\n").unwrap(),
            Value::String("1.2.3".into())
        );
        assert_eq!(
            Format::Raw.value(b"  1.2.3\n").unwrap(),
            Value::String("  1.2.3\n".into())
        );
        assert!(Format::Json
            .value(b"{nope")
            .unwrap_err()
            .starts_with("not valid json"));
        assert!(Format::Trim.value(&[0xff, 0xfe]).is_err());
    }
}
