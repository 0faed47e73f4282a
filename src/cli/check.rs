//! `gantry check -p PIPELINE.yml -r RESOURCE [-v NAME=VALUE]... [-l VARS.yml]...`:
//! runs the resource's `check` as a check build, follows it, and prints the
//! versions it found (oldest first, one JSON object a line) on stdout. Exits
//! as `run` does: 0 succeeded, 1 failed, 2 errored, 3 aborted.

use std::path::PathBuf;

use gantry_actors::api::CheckPlan;

use crate::cli::client::ApiClient;
use crate::cli::run::{load_pipeline, submit_and_follow};

/// What `check` was asked to do.
pub struct CheckArgs {
    /// Path of the pipeline file.
    pub pipeline: PathBuf,
    /// The resource to check.
    pub resource: String,
    /// `-v NAME=VALUE` flags.
    pub vars: Vec<String>,
    /// `-l VARS.yml` files.
    pub var_files: Vec<PathBuf>,
    /// Team.
    pub team: String,
}

/// Runs `check`; returns the process exit code.
pub async fn check(client: &ApiClient, args: CheckArgs) -> anyhow::Result<i32> {
    let file = args.pipeline.display().to_string();
    let Some((text, vars)) = load_pipeline(&args.pipeline, &args.vars, &args.var_files)? else {
        return Ok(2);
    };
    let stored = CheckPlan {
        pipeline: text,
        check: args.resource,
        vars,
        scope: None,
        resource_type: false,
        pipeline_name: None,
        types_first: false,
    };
    stored.plan().map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let body = serde_json::json!({
        "pipeline": stored.pipeline,
        "check": stored.check,
        "vars": stored.vars,
    });
    let (id, ended) = submit_and_follow(client, &args.team, &body).await?;
    for v in &ended.checked {
        crate::outln!("{v}");
    }
    Ok(ended.run_exit_code(id))
}
