//! `get`, `put` and check steps of a pipeline translated into the steps
//! that run them: the resource found by name, its type resolved down to a
//! base type of the workers (custom types on top of it), its params as
//! JSON. A resource the pipeline does not declare, or a cycle of types, is
//! an error naming it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::EngineError;
use crate::pipeline::{self, Pipeline, Vars, VersionSpec};
use crate::resources::config::{params_json, resolve_type, resource_config};
use crate::resources::ResourceType;

use super::{CheckStep, GetStep, Plan, PutInputs, PutStep, StepDef};

/// The resource `name` of the pipeline, for step `step`.
fn resource<'a>(
    pipeline: &'a Pipeline,
    step: &str,
    name: &str,
) -> Result<&'a pipeline::Resource, EngineError> {
    pipeline.resource(name).ok_or_else(|| {
        EngineError::Invalid(format!(
            "step {step:?}: the pipeline declares no resource {name:?}"
        ))
    })
}

/// A step's tags, else its resource's (as Concourse's planner does).
fn tags_of(step_tags: &[String], resource: &pipeline::Resource) -> Vec<String> {
    if step_tags.is_empty() {
        resource.tags.clone()
    } else {
        step_tags.to_vec()
    }
}

/// Params of a step as JSON, naming the step when they cannot be.
fn params(step: &str, what: &str, p: &pipeline::Params) -> Result<Value, EngineError> {
    params_json(p).map_err(|e| EngineError::Invalid(format!("step {step:?}: {what}: {e}")))
}

/// The step running a `get`. `version: latest` and `every` fetch the newest
/// version (`every` means something only to a scheduler of triggers);
/// a pinned version, the step's or the resource's, is fetched as it is.
/// `name`: the step's name in the build (an `across` copy's is suffixed).
pub(super) fn get_step(
    pipeline: &Pipeline,
    get: &pipeline::GetStep,
    name: &str,
    tags: &[String],
) -> Result<GetStep, EngineError> {
    let r = resource(pipeline, name, &get.resource)?;
    let config = resource_config(pipeline, r).map_err(EngineError::Invalid)?;
    let version = match &get.version {
        Some(VersionSpec::Pinned(v)) => Some(serde_json::to_value(v).unwrap_or(Value::Null)),
        _ => r
            .version
            .as_ref()
            .map(|v| params(name, "the resource's version", v))
            .transpose()?,
    };
    Ok(GetStep {
        name: name.to_string(),
        resource: get.resource.clone(),
        config,
        version,
        params: params(name, "params", &get.params)?,
        tags: tags_of(tags, r),
        check_timeout: r.check_timeout,
    })
}

/// The step running a `put` and its implicit get; `name` as for
/// [`get_step`].
pub(super) fn put_step(
    pipeline: &Pipeline,
    put: &pipeline::PutStep,
    name: &str,
    tags: &[String],
) -> Result<PutStep, EngineError> {
    let r = resource(pipeline, name, &put.resource)?;
    let config = resource_config(pipeline, r).map_err(EngineError::Invalid)?;
    let inputs = match &put.inputs {
        None | Some(pipeline::PutInputs::All) => PutInputs::All,
        Some(pipeline::PutInputs::Detect) => PutInputs::Detect,
        Some(pipeline::PutInputs::Listed(names)) => PutInputs::Listed(names.clone()),
    };
    Ok(PutStep {
        name: name.to_string(),
        resource: put.resource.clone(),
        config,
        params: params(name, "params", &put.params)?,
        inputs,
        get_params: params(name, "get_params", &put.get_params)?,
        no_get: put.no_get,
        tags: tags_of(tags, r),
        expose_created_by: r
            .other
            .get("expose_build_created_by")
            .and_then(serde_yaml::Value::as_bool)
            .unwrap_or(false),
    })
}

/// The plan of a check build: the pipeline text, the resource checked and
/// the vars. Stored with the build as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckPlan {
    /// The pipeline's YAML text, as given.
    pub pipeline: String,
    /// The resource checked.
    pub check: String,
    /// The vars that fill the pipeline's `((vars))`.
    #[serde(default)]
    pub vars: Vars,
    /// Where the versions found are kept (`resource_versions.team`): a
    /// stored pipeline's periodic check names its resource's scope; none
    /// is the build's team's one-off history (`gantry check`). Read by
    /// `crate::resources::scope::check_scope`; a check refuses a scope not
    /// its build's team's. Never taken from a caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Whether `check` names a resource type of the pipeline, whose image
    /// is checked (a stored pipeline's periodic check of its types).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resource_type: bool,
    /// The stored pipeline's name, whose secrets the credential manager
    /// looks up first (none: `gantry check`, the team's alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_name: Option<String>,
    /// Whether the custom types the checked one is built on are checked
    /// first (`check-resource-type` without `--shallow`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub types_first: bool,
}

impl CheckPlan {
    /// Loads the pipeline and finds the resource (or resource type): a
    /// plan of one check step.
    pub fn plan(&self) -> Result<Plan<StepDef>, EngineError> {
        self.plan_with(&Vars::default())
    }

    /// The plan with the vars the credential manager gave (`creds`)
    /// filled too: what the check runs.
    pub(crate) fn plan_with(&self, creds: &Vars) -> Result<Plan<StepDef>, EngineError> {
        let pipeline =
            crate::resources::config::load_with_credentials(&self.pipeline, &self.vars, creds)
                .map_err(|problems| EngineError::Invalid(problems.join("; ")))?;
        if self.resource_type {
            return self.type_plan(&pipeline);
        }
        let r = pipeline.resource(&self.check).ok_or_else(|| {
            EngineError::Invalid(format!(
                "no resource {:?} in the pipeline (resources: {})",
                self.check,
                pipeline
                    .resources
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let config = resource_config(&pipeline, r).map_err(EngineError::Invalid)?;
        Ok(Plan::Step(StepDef::Check(CheckStep {
            name: r.name.clone(),
            config,
            tags: r.tags.clone(),
            scope: self.scope.clone(),
            types_first: self.types_first,
            check_timeout: r.check_timeout,
        })))
    }

    /// A check of the image of resource type `check`.
    fn type_plan(&self, pipeline: &Pipeline) -> Result<Plan<StepDef>, EngineError> {
        let declared = pipeline.resource_type(&self.check).ok_or_else(|| {
            EngineError::Invalid(format!("no resource type {:?} in the pipeline", self.check))
        })?;
        let image = match resolve_type(pipeline, &self.check).map_err(EngineError::Invalid)? {
            ResourceType::Custom { image, .. } => *image,
            ResourceType::Base { .. } => {
                return Err(EngineError::Invalid(format!(
                    "resource type {:?} is a base type: it has no image to check",
                    self.check
                )))
            }
        };
        Ok(Plan::Step(StepDef::Check(CheckStep {
            name: self.check.clone(),
            config: image,
            tags: declared.tags.clone(),
            scope: self.scope.clone(),
            types_first: self.types_first,
            check_timeout: None,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PIPELINE: &str = "resources:\n- {name: repo, type: git, source: {uri: /r}, tags: [rt], version: {ref: abc}}\n- {name: m, type: mock, source: {}}\njobs:\n- name: j\n  plan:\n  - {get: repo}\n  - {get: src, resource: m, version: {version: '2'}, params: {a: 1}, tags: [st]}\n  - {put: m, params: {file: src/x}, inputs: detect, get_params: {b: 2}}\n";

    #[test]
    fn gets_and_puts_find_their_resource_version_and_tags() {
        let p = Pipeline::load(PIPELINE, &Default::default()).unwrap();
        let job = p.job("j").unwrap();
        let pipeline::StepKind::Get(g) = &job.plan[0].kind else {
            panic!()
        };
        let step = get_step(&p, g, "repo", &[]).unwrap();
        assert_eq!(step.version, Some(json!({"ref": "abc"})));
        assert_eq!(step.tags, ["rt"]);
        assert_eq!(step.config.source, json!({"uri": "/r"}));
        let pipeline::StepKind::Get(g) = &job.plan[1].kind else {
            panic!()
        };
        let step = get_step(&p, g, "src", &["st".to_string()]).unwrap();
        assert_eq!((step.name.as_str(), step.resource.as_str()), ("src", "m"));
        assert_eq!(step.version, Some(json!({"version": "2"})));
        assert_eq!(step.params, json!({"a": 1}));
        let pipeline::StepKind::Put(put) = &job.plan[2].kind else {
            panic!()
        };
        let step = put_step(&p, put, "m", &[]).unwrap();
        assert_eq!(step.inputs, PutInputs::Detect);
        assert_eq!(step.get_params, json!({"b": 2}));
    }

    #[test]
    fn a_check_plan_names_an_unknown_resource() {
        let plan = CheckPlan {
            pipeline: PIPELINE.into(),
            check: "nope".into(),
            vars: Vars::new(),
            scope: None,
            resource_type: false,
            pipeline_name: None,
            types_first: false,
        };
        let Err(EngineError::Invalid(m)) = plan.plan() else {
            panic!()
        };
        assert!(
            m.contains("no resource \"nope\"") && m.contains("repo, m"),
            "{m}"
        );
        let plan = CheckPlan {
            check: "m".into(),
            ..plan
        };
        assert!(
            crate::steps::runnable(plan.plan().unwrap()).steps()[0]
                .worker_request()
                .is_check
        );
    }

    #[test]
    fn a_check_plan_of_a_resource_type_checks_its_image() {
        let pipeline = "resource_types:\n- {name: mine, type: mock, source: {mirror_self: true}, tags: [tt]}\nresources:\n- {name: r, type: mine, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}\n";
        let plan = CheckPlan {
            pipeline: pipeline.into(),
            check: "mine".into(),
            vars: Vars::new(),
            scope: Some("team:main".into()),
            resource_type: true,
            pipeline_name: None,
            types_first: false,
        };
        let Plan::Step(StepDef::Check(step)) = plan.plan().unwrap() else {
            panic!()
        };
        assert_eq!(step.name, "mine");
        assert_eq!(step.config.source, json!({"mirror_self": true}));
        assert_eq!(step.config.type_.name(), "mock");
        assert_eq!(
            (step.tags, step.scope.as_deref()),
            (vec!["tt".to_string()], Some("team:main"))
        );
        let Err(EngineError::Invalid(m)) = CheckPlan {
            check: "other".into(),
            ..plan
        }
        .plan() else {
            panic!()
        };
        assert!(m.contains("no resource type \"other\""), "{m}");
        // `check-resource-type` without `--shallow`: its step checks the
        // types below first.
        let Plan::Step(StepDef::Check(step)) = CheckPlan {
            pipeline: pipeline.into(),
            check: "mine".into(),
            vars: Vars::new(),
            scope: None,
            resource_type: true,
            pipeline_name: None,
            types_first: true,
        }
        .plan()
        .unwrap() else {
            panic!()
        };
        assert!(step.types_first);
    }
}
