//! Storing a pipeline: what `set-pipeline` (the API) and the `set_pipeline`
//! step share. The pipeline is loaded with its vars (every var filled),
//! each job is translated as a build of it would be (so a step Gantry
//! cannot run is refused now, not at its first build), and its resources
//! are stored with where their versions are kept and how often they are
//! checked. Reading and translating run off the caller's thread within
//! [`PIPELINE_BUDGET`], in time linear in the pipeline's size.

use std::sync::Arc;

use crate::db::{Db, NameChange, Parent, PipelineRow, PublicParts, Renames, ResourceRow, SetBy};
use crate::error::EngineError;
use crate::off_thread::{off_thread, Deadline, PIPELINE_BUDGET};
use crate::pipeline::model::CheckEvery;
use crate::pipeline::{Pipeline, Vars};
use crate::plan::{job_plan, PipelineRef, StepDef};
use crate::resources::config::{resolve_type, resource_config};
use crate::resources::scope;
use crate::resources::ResourceType;

/// How often a resource is checked when it says nothing (Concourse's 1m).
pub const DEFAULT_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Stores pipeline `name` of `team` (`config` with `vars`; an instance's
/// `NAME/K:V,...`, whose instance vars fill it over `vars`) as a new config
/// version (`expected`: refuse unless the stored version is this one, 0
/// for none), its resources' versions kept per config in the team's
/// shared history when `global` (see [`crate::resources::scope`]), set
/// by `parent`'s `set_pipeline` step when given (see
/// [`Pipelines::set_pipeline_by`]); answers it and whether it is new. Nothing is stored when it has a
/// problem, each named.
pub(crate) async fn store_pipeline(
    db: &Db,
    at: (&str, &str),
    config: &str,
    vars: &Vars,
    expected: Option<i64>,
    (global, parent): (bool, Option<&Parent>),
) -> Result<(PipelineRow, bool), EngineError> {
    store_pipeline_warned(db, at, config, vars, expected, (global, parent))
        .await
        .map(|(row, created, _)| (row, created))
}

/// [`store_pipeline`], answering the config's warnings too: what it
/// accepts but does not take as written (e.g. a `get`'s `version:
/// some-string`, taken as `latest`).
pub(crate) async fn store_pipeline_warned(
    db: &Db,
    (team, name): (&str, &str),
    config: &str,
    vars: &Vars,
    expected: Option<i64>,
    (global, parent): (bool, Option<&Parent>),
) -> Result<(PipelineRow, bool, Vec<String>), EngineError> {
    // An instance's vars fill the config over any other var.
    let pipeline_ref = PipelineRef::parse(name)?;
    let name = &pipeline_ref.to_string();
    let mut vars = vars.clone();
    for (k, v) in pipeline_ref.vars() {
        vars.insert(&k, v);
    }
    let vars = &vars;
    let instance_vars = pipeline_ref
        .instance_vars
        .map(|v| serde_json::Value::Object(v).to_string());
    if !db.team_exists(team).await? {
        return Err(EngineError::NotFound {
            kind: "team",
            name: team.into(),
        });
    }
    let (config_text, vars_given, team_name) = (config.to_string(), vars.clone(), team.to_string());
    let what = format!("setting pipeline {name:?}");
    let Rows {
        jobs,
        resources,
        types,
        renames,
        warnings,
        public_jobs,
        public_resources,
    } = off_thread(&what, PIPELINE_BUDGET, move |deadline| {
        checked_rows(&config_text, &vars_given, (global, &team_name), deadline)
    })
    .await?;
    let vars_json = serde_json::to_string(vars).expect("vars serialize");
    let by = SetBy {
        parent,
        instance_vars: instance_vars.as_deref(),
        renames: Some(&renames),
        public: PublicParts {
            jobs: &public_jobs,
            resources: &public_resources,
        },
    };
    let (row, created) = db
        .pipelines()
        .set_pipeline_by(
            team,
            name,
            (config, &vars_json),
            expected,
            &jobs,
            (&resources, &types),
            by,
        )
        .await?;
    Ok((row, created, warnings))
}

/// What [`store_pipeline`] writes of a pipeline.
struct Rows {
    /// Its jobs' names.
    jobs: Vec<String>,
    /// Its resources.
    resources: Vec<ResourceRow>,
    /// Its custom resource types (their images are checked as resources).
    types: Vec<ResourceRow>,
    /// The jobs and resources it renames (`old_name`).
    renames: Renames,
    /// What it accepts but does not take as written.
    warnings: Vec<String>,
    /// Its jobs marked `public: true`.
    public_jobs: Vec<String>,
    /// Its resources marked `public: true`.
    public_resources: Vec<String>,
}

/// The [`Rows`] of pipeline `config`, loaded with `vars` and each job
/// translated as a build of it would be, its resources' versions kept as
/// `global` and `team` say (`resources/scope.rs`). Linear in the
/// pipeline's size (the jobs share one loaded pipeline); stops with an
/// error once `deadline` has passed.
fn checked_rows(
    config: &str,
    vars: &Vars,
    (global, team): (bool, &str),
    deadline: Deadline,
) -> Result<Rows, EngineError> {
    // The vars `vars` leaves are the credential manager's, filled when a
    // build needs them.
    let (pipeline, _, warnings) = Pipeline::load_leaving(config, vars)
        .map_err(|problems| EngineError::Invalid(problems.join("; ")))?;
    let renames = stored_renames(&pipeline)?;
    let pipeline = Arc::new(pipeline);
    deadline.check("reading the pipeline")?;
    for (i, job) in pipeline.jobs.iter().enumerate() {
        let plan = job_plan(&pipeline, job)?;
        for step in plan.steps() {
            if let StepDef::SetPipeline(set) = step {
                set.check_team(team)?;
            }
        }
        if i % 256 == 0 {
            deadline.check("translating the pipeline's jobs")?;
        }
    }
    let resources = pipeline
        .resources
        .iter()
        .map(|r| {
            let config = resource_config(&pipeline, r).map_err(EngineError::Invalid)?;
            // A config holding a credential var is the pipeline's own:
            // what the var gives may differ from one pipeline (and team)
            // to another, so its versions are not shared.
            let shared = global && !holds_vars(&config);
            Ok(ResourceRow {
                name: r.name.clone(),
                scope: scope::of_resource(shared, team, &r.name),
                config: config.key(),
                check_every_ms: check_every_ms(r.check_every),
                pinned: None,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    // Each resource type's image is checked as a resource is.
    let types = pipeline
        .resource_types
        .iter()
        .filter_map(|t| match resolve_type(&pipeline, &t.name) {
            Ok(ResourceType::Custom { image, .. }) => Some(Ok(ResourceRow {
                name: t.name.clone(),
                scope: scope::of_type(global && !holds_vars(&image), team, &t.name),
                config: image.key(),
                check_every_ms: check_every_ms(t.check_every),
                pinned: None,
            })),
            Ok(ResourceType::Base { .. }) => None,
            Err(e) => Some(Err(EngineError::Invalid(e))),
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let jobs: Vec<String> = pipeline.jobs.iter().map(|j| j.name.clone()).collect();
    let public_jobs = pipeline.jobs.iter().filter(|j| j.public);
    let public_resources = pipeline.resources.iter().filter(|r| r.public);
    Ok(Rows {
        jobs,
        resources,
        types,
        renames,
        warnings,
        public_jobs: public_jobs.map(|j| j.name.clone()).collect(),
        public_resources: public_resources.map(|r| r.name.clone()).collect(),
    })
}

/// The renames `pipeline` asks for (`old_name`), as stored: a resource's
/// with where a history of its own is kept under each name (it moves
/// when the resource keeps one; a shared history stays where it is).
fn stored_renames(pipeline: &Pipeline) -> Result<Renames, EngineError> {
    let asked = crate::pipeline::renames::renames(pipeline)
        .map_err(|problems| EngineError::Invalid(problems.join("; ")))?;
    let change = |r: crate::pipeline::renames::Rename, resource: bool| NameChange {
        own_scopes: resource.then(|| {
            (
                scope::pipeline_resource(&r.old),
                scope::pipeline_resource(&r.new),
            )
        }),
        old: r.old,
        new: r.new,
    };
    Ok(Renames {
        jobs: asked.jobs.into_iter().map(|r| change(r, false)).collect(),
        resources: asked
            .resources
            .into_iter()
            .map(|r| change(r, true))
            .collect(),
    })
}

/// Whether a resource config (its type chain included) holds a var left
/// for the credential manager.
fn holds_vars(config: &crate::resources::ResourceConfig) -> bool {
    serde_json::to_string(config).is_ok_and(|json| json.contains("(("))
}

/// A `check_every` in ms; none for `never`.
fn check_every_ms(every: Option<CheckEvery>) -> Option<i64> {
    match every {
        Some(CheckEvery::Never) => None,
        Some(CheckEvery::Interval(d)) => Some(d.as_millis().max(1) as i64),
        None => Some(DEFAULT_CHECK_EVERY.as_millis() as i64),
    }
}
