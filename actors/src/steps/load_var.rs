//! The `load_var` step (Concourse's `atc/exec/load_var_step.go`): reads a
//! file of an artifact of the build into a build-local var, read later as
//! `((.:NAME))`.
//!
//! It needs no worker: the file is read on the web node from the artifact
//! store (see [`super::read_artifact_file`]), so the step does all its work
//! in its prepare phase ([`Step::prepare`]) and answers
//! [`Prepared::Ended`]; it is never placed, and neither asks the Scheduler
//! nor takes a worker's capacity. Its value is a secret unless `reveal:
//! true`: it is redacted wherever the engine writes it to the build log
//! (see [`super::LocalVars::redact`]) and the step's log line names the var
//! and the file, never the value.

use async_trait::async_trait;
use serde_yaml::Value;

use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::scheduler::StepRequest;

use super::{read_artifact_file, BuildScope, Prepared, Step, StepContext, StepEnd};

/// How a `load_var` file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, parsed.
    Json,
    /// YAML, parsed.
    Yaml,
    /// Text, whitespace trimmed at both ends.
    Trim,
    /// Text, as it is.
    Raw,
}

impl Format {
    /// A `format:` as written (`json`, `yaml`, `yml`, `trim`, `raw`).
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "json" => Format::Json,
            "yaml" | "yml" => Format::Yaml,
            "trim" => Format::Trim,
            "raw" => Format::Raw,
            _ => return None,
        })
    }

    /// The format of a file without `format:`, by its extension as
    /// Concourse decides it: `.json`, `.yml` and `.yaml` are parsed, any
    /// other file is trimmed text.
    pub fn of_file(path: &str) -> Format {
        let name = path.rsplit('/').next().unwrap_or(path);
        match name.rsplit_once('.') {
            Some((_, "json")) => Format::Json,
            Some((_, "yml" | "yaml")) => Format::Yaml,
            _ => Format::Trim,
        }
    }

    /// The format's name, for messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Trim => "trim",
            Format::Raw => "raw",
        }
    }

    /// The var's value from the file's contents; a file that does not parse
    /// (or is not UTF-8 text) is an error naming the format.
    pub fn value(&self, data: &[u8]) -> Result<Value, String> {
        let text = || std::str::from_utf8(data).map_err(|e| format!("not UTF-8 text ({e})"));
        match self {
            Format::Json => {
                serde_json::from_slice::<Value>(data).map_err(|e| format!("not valid json: {e}"))
            }
            Format::Yaml => {
                serde_yaml::from_slice::<Value>(data).map_err(|e| format!("not valid yaml: {e}"))
            }
            Format::Trim => Ok(Value::String(text()?.trim().to_string())),
            Format::Raw => Ok(Value::String(text()?.to_string())),
        }
    }
}

/// A `load_var` step.
#[derive(Debug, Clone)]
pub struct LoadVarStep {
    /// The step's name (the var's, with an `across` combination's suffix).
    pub name: String,
    /// The var it sets.
    pub var: String,
    /// `ARTIFACT/PATH` of the file.
    pub file: String,
    /// `format:`; by the file's extension when not given.
    pub format: Option<Format>,
    /// `reveal: true`: the value is not redacted.
    pub reveal: bool,
}

#[async_trait]
impl Step for LoadVarStep {
    fn name(&self) -> &str {
        &self.name
    }

    /// Never asked: the step needs no worker and ends in [`Step::prepare`].
    fn worker_request(&self) -> StepRequest {
        StepRequest::default()
    }

    async fn prepare(&self, scope: &BuildScope) -> Result<Prepared, EngineError> {
        let named = |e: String| EngineError::Invalid(format!("step {:?}: {e}", self.name));
        let data = read_artifact_file(scope, &self.file)
            .await
            .map_err(|e| named(e.to_string()))?;
        let format = self.format.unwrap_or_else(|| Format::of_file(&self.file));
        let value = format
            .value(&data)
            .map_err(|e| named(format!("file {:?}: {e}", self.file)))?;
        scope.locals.set(&self.var, value, !self.reveal);
        let shown = if self.reveal { "" } else { " (redacted)" };
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
