//! `gantry run -p PIPELINE.yml -j JOB [--pipeline-name NAME] [-v NAME=VALUE]...
//! [-l VARS.yml]...`: runs one job of a Concourse pipeline as a build and
//! follows it. The pipeline's name (by default the file's name without its
//! extension) with the job names the job's task caches. The
//! pipeline is checked here first, with its vars (every problem, one line
//! each); then the web node creates the build, and the command follows its
//! events and exits 0 when it succeeded, 1 failed, 2 errored (or could not
//! be created), 3 aborted.

use std::path::PathBuf;

use gantry_actors::api::check_pipeline_name;
use gantry_actors::api::JobPlan;
use gantry_actors::api::Pipeline;
use serde::Deserialize;

use crate::cli::client::ApiClient;
use crate::cli::follow::{follow, Ended, StepLines};

/// What `run` was asked to do.
pub struct RunArgs {
    /// Path of the pipeline file.
    pub pipeline: PathBuf,
    /// The job to run.
    pub job: String,
    /// The pipeline's name; none for the file's stem.
    pub pipeline_name: Option<String>,
    /// `-v NAME=VALUE` flags.
    pub vars: Vec<String>,
    /// `-l VARS.yml` files.
    pub var_files: Vec<PathBuf>,
    /// Team.
    pub team: String,
}

#[derive(Deserialize)]
struct Created {
    id: i64,
}

/// Runs `run`; returns the process exit code.
pub async fn run(client: &ApiClient, args: RunArgs) -> anyhow::Result<i32> {
    let file = args.pipeline.display().to_string();
    let Some((text, vars)) = load_pipeline(&args.pipeline, &args.vars, &args.var_files)? else {
        return Ok(2);
    };
    let pipeline_name = match args.pipeline_name {
        Some(name) => name,
        None => args
            .pipeline
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    check_pipeline_name(&pipeline_name)
        .map_err(|e| anyhow::anyhow!("{e} (give a valid one with --pipeline-name)"))?;
    let stored = JobPlan {
        pipeline_name,
        pipeline: text,
        job: args.job,
        vars,
        inputs: Default::default(),
    };
    // What the web node would refuse (an unknown job, a step kind Gantry
    // does not run yet), refused before anything is created.
    stored.plan().map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let body = serde_json::json!({
        "pipeline_name": stored.pipeline_name,
        "pipeline": stored.pipeline,
        "job": stored.job,
        "vars": stored.vars,
    });
    let (id, ended) = submit_and_follow(client, &args.team, &body).await?;
    Ok(ended.run_exit_code(id))
}

/// Reads a pipeline file and its vars (`-v` flags, `-l` files) and checks
/// the pipeline with them; `None` when it has problems, each printed on
/// stderr as one line naming the file (and its warnings, see
/// [`load_instance`]).
pub(super) fn load_pipeline(
    path: &std::path::Path,
    flags: &[String],
    files: &[PathBuf],
) -> anyhow::Result<Option<(String, gantry_actors::api::Vars)>> {
    load_instance(path, (flags, &[], files), &[])
}

/// [`load_pipeline`] with `-y NAME=YAML` flags too (`yaml_flags`), of an
/// instance: its instance vars (`instance`) fill the config over the
/// others (and are not among the vars answered). What the pipeline has
/// that is accepted but not taken as written is said on stderr, one
/// `warning:` line each.
pub(super) fn load_instance(
    path: &std::path::Path,
    (flags, yaml_flags, files): (&[String], &[String], &[PathBuf]),
    instance: &[(String, serde_yaml::Value)],
) -> anyhow::Result<Option<(String, gantry_actors::api::Vars)>> {
    let file = path.display().to_string();
    let vars = super::validate_plan::read_typed_vars(flags, yaml_flags, files)
        .map_err(anyhow::Error::msg)?;
    // A file that cannot be read, or is past the bound, is a problem of
    // the document given, as an invalid one is.
    let text = match super::read_bounded::read_document(path, "pipeline config") {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(None);
        }
    };
    let mut all = vars.clone();
    for (k, v) in instance {
        all.insert(k, v.clone());
    }
    // Vars the flags leave are the credential manager's: the web node
    // looks them up when a build needs them.
    match Pipeline::load_leaving(&text, &all).map(|(_, _, warnings)| ((), warnings)) {
        Err(problems) => {
            for p in problems {
                eprintln!("error: {file}: {p}");
            }
            return Ok(None);
        }
        Ok((_, warnings)) => {
            for w in warnings {
                eprintln!("warning: {file}: {w}");
            }
        }
    }
    Ok(Some((text, vars)))
}

/// Creates a build of `team` from `body`, says `build: N` on stderr and
/// follows it, telling its steps, to its end.
pub(super) async fn submit_and_follow(
    client: &ApiClient,
    team: &str,
    body: &serde_json::Value,
) -> anyhow::Result<(i64, Ended)> {
    let created: Created = client
        .post(&format!("/api/v1/teams/{team}/builds"), body)
        .await?;
    eprintln!("build: {}", created.id);
    let ended = follow(client, created.id, StepLines::Told).await?;
    Ok((created.id, ended))
}
