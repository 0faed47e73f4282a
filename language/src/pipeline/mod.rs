//! Concourse pipelines, as they are: reading a pipeline file (or a bare
//! plan, a list of steps), filling its `((vars))`, and checking it the way
//! Concourse does, every problem at once, each with its path
//! (`jobs[build].plan[2].get: unknown resource "repo"`).
//!
//! A build runs one job of a pipeline: [`load`] the file with its vars,
//! then take the job with [`Pipeline::job`]; its typed [`Step`] tree is what
//! the build's plan is made from (see [`step`] for how the modifiers nest).
//!
//! - [`vars`]: `((name))`, `((name.field))`, `((source:name))`;
//! - [`model`] and [`step`]: the typed pipeline and steps;
//! - `read`, `parse_pipeline`, `parse_step`: reading them out of YAML;
//! - `validate`: the checks across the document;
//!
//! What Gantry accepts is Concourse's whole pipeline schema, including what
//! a runtime does not run (`set_pipeline`, `serial`, `groups`, ...); what it
//! refuses is what Concourse refuses, plus vars it cannot fill (var
//! sources) when vars are required.

mod identifier;
pub mod model;
mod parse_pipeline;
mod parse_step;
mod read;
pub mod renames;
pub mod step;
mod validate;
pub mod vars;

#[cfg(test)]
mod tests;

use serde_yaml::Value;

pub use identifier::MAX_NAME;
pub use model::Pipeline;
pub use model::{Job, Resource};
pub use read::Params;
pub use step::{
    Across, GetStep, Hooks, LoadVarStep, MaxInFlight, PutInputs, PutStep, Step, StepKind, TaskStep,
    Timeout, VersionSpec,
};
pub use vars::interpolate;
pub use vars::Vars;

/// A checked document: a pipeline, or a bare plan. Made once per read and
/// taken apart at once, so the pipeline is not boxed.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Document {
    /// A pipeline file (a mapping with `jobs`, `resources`, ...).
    Pipeline(Pipeline),
    /// A bare plan: a list of steps.
    Plan(Vec<Step>),
}

/// Parses YAML text (document `what`, as errors name it: `pipeline
/// config`) into a document, YAML merge keys (`<<: *anchor`) applied,
/// once it is known to stay within the bounds of
/// [`crate::bounded_yaml`]. The one problem it can have is returned as a
/// single line.
pub fn parse_yaml(text: &str, what: &str) -> Result<Value, String> {
    if let Some(line) = text
        .lines()
        .find(|l| l.trim_start().starts_with("#@") || l.contains(" #@ "))
    {
        return Err(format!(
            "a ytt template, not a pipeline (line {:?} is a ytt annotation): render it with ytt first and check the output",
            line.trim()
        ));
    }
    let mut doc: Value =
        crate::bounded_yaml::parse_bounded_yaml(text, what).map_err(|e| e.to_string())?;
    doc.apply_merge()
        .map_err(|e| format!("not valid YAML: {}", e.to_string().replace('\n', " ")))?;
    Ok(doc)
}

/// Checks a parsed document: its shape (unknown keys, types, one kind per
/// step, ...) and its references (declared resources, `passed` jobs,
/// unique names, ...). With `vars_may_be_unfilled`, a field held by a var
/// is not type-checked (validation without vars, like `fly
/// validate-pipeline`); without it, only build-local vars (`((.:name))`)
/// may remain.
///
/// A document checked with unfilled vars is for reporting: fields held by
/// vars read as absent.
pub fn check(doc: &Value, vars_may_be_unfilled: bool) -> Result<Document, Vec<String>> {
    check_warned(doc, vars_may_be_unfilled).0
}

/// [`check`], with the warnings found: what is accepted but not taken as
/// written (e.g. a `get`'s `version: some-string`, taken as `latest`),
/// each with its path.
pub fn check_warned(
    doc: &Value,
    vars_may_be_unfilled: bool,
) -> (Result<Document, Vec<String>>, Vec<String>) {
    let mut r = read::Reader {
        problems: Vec::new(),
        vars_may_be_unfilled,
        warnings: Vec::new(),
    };
    let document = match doc {
        Value::Mapping(top) => {
            let p = parse_pipeline::parse_pipeline(&mut r, top);
            validate::check_pipeline(&p, &mut r.problems, &mut r.warnings);
            Document::Pipeline(p)
        }
        Value::Sequence(_) => {
            let steps = parse_step::parse_plan(&mut r, doc, "plan");
            validate::check_plan(&steps, &mut r.problems, &mut r.warnings);
            Document::Plan(steps)
        }
        Value::Null => {
            return (
                Err(vec![
            "empty document: expected a pipeline (a mapping with jobs) or a plan (a list of steps)"
                .into(),
        ]),
                Vec::new(),
            )
        }
        other => {
            return (
                Err(vec![format!(
                    "expected a pipeline (a mapping with jobs) or a plan (a list of steps), not {}",
                    read::kind_of(other)
                )]),
                Vec::new(),
            )
        }
    };
    if r.problems.is_empty() {
        (Ok(document), r.warnings)
    } else {
        (Err(r.problems), r.warnings)
    }
}

/// Reads and checks a pipeline or plan. With `vars`, every var is filled
/// first and an unfilled one is a problem naming it; without, vars may
/// stay unfilled (validation only).
pub fn load(text: &str, vars: Option<&Vars>) -> Result<Document, Vec<String>> {
    load_warned(text, vars).0
}

/// [`load`], with the warnings found (see [`check_warned`]).
pub fn load_warned(
    text: &str,
    vars: Option<&Vars>,
) -> (Result<Document, Vec<String>>, Vec<String>) {
    let doc = match parse_yaml(text, "pipeline config") {
        Ok(doc) => doc,
        Err(e) => return (Err(vec![e]), Vec::new()),
    };
    match vars {
        None => check_warned(&doc, true),
        Some(vars) => match interpolate(&doc, vars) {
            Ok(doc) => check_warned(&doc, false),
            Err(problems) => (Err(problems), Vec::new()),
        },
    }
}

impl Pipeline {
    /// Reads and checks a pipeline whose vars are filled (build-local vars
    /// aside): what a build runs.
    pub fn from_value(doc: &Value) -> Result<Pipeline, Vec<String>> {
        match check(doc, false)? {
            Document::Pipeline(p) => Ok(p),
            Document::Plan(_) => Err(vec![
                "expected a pipeline (a mapping with jobs), not a plan".into(),
            ]),
        }
    }

    /// Reads a pipeline file, fills its vars and checks it (the whole of
    /// it, as Concourse does when it is set).
    pub fn load(text: &str, vars: &Vars) -> Result<Pipeline, Vec<String>> {
        Pipeline::load_warned(text, vars).map(|(p, _)| p)
    }

    /// Reads a pipeline file, fills the vars `vars` gives and checks it;
    /// the vars left are the credential manager's, filled when a build
    /// needs them (answered by their text). Fields a var left holds read
    /// as absent, as in validation without vars.
    pub fn load_leaving(
        text: &str,
        vars: &Vars,
    ) -> Result<(Pipeline, std::collections::BTreeSet<String>, Vec<String>), Vec<String>> {
        let doc = parse_yaml(text, "pipeline config").map_err(|e| vec![e])?;
        let (doc, left) = vars::interpolate_leaving(&doc, vars)?;
        match check_warned(&doc, !left.is_empty()) {
            (Ok(Document::Pipeline(mut p)), warnings) => {
                p.as_set = model::AsSet::leaving(left.clone());
                Ok((p, left, warnings))
            }
            (Ok(Document::Plan(_)), _) => Err(vec![
                "expected a pipeline (a mapping with jobs), not a plan".into(),
            ]),
            (Err(problems), _) => Err(problems),
        }
    }

    /// [`Pipeline::load`], with the warnings found (see [`check_warned`]).
    pub fn load_warned(text: &str, vars: &Vars) -> Result<(Pipeline, Vec<String>), Vec<String>> {
        let doc = parse_yaml(text, "pipeline config").map_err(|e| vec![e])?;
        match check_warned(&interpolate(&doc, vars)?, false) {
            (Ok(Document::Pipeline(p)), warnings) => Ok((p, warnings)),
            (Ok(Document::Plan(_)), _) => Err(vec![
                "expected a pipeline (a mapping with jobs), not a plan".into(),
            ]),
            (Err(problems), _) => Err(problems),
        }
    }
}
