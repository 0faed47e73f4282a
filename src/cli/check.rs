//! `gantry check -p PIPELINE.yml -r RESOURCE [-v NAME=VALUE]... [-l VARS.yml]...`:
//! runs the resource's `check` as a check build, follows it, and prints the
//! versions it found (oldest first, one JSON object a line) on stdout. Exits
//! as `run` does: 0 succeeded, 1 failed, 2 errored, 3 aborted.

use std::path::PathBuf;

use anyhow::Context as _;
use gantry_actors::build::CheckPlan;
use gantry_actors::pipeline::Pipeline;
use serde::Deserialize;

use crate::cli::client::ApiClient;
use crate::cli::follow::{follow, StepLines};
use crate::cli::validate_plan::read_vars;

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

#[derive(Deserialize)]
struct Created {
    id: i64,
}

/// Runs `check`; returns the process exit code.
pub async fn check(client: &ApiClient, args: CheckArgs) -> anyhow::Result<i32> {
    let file = args.pipeline.display().to_string();
    let vars = read_vars(&args.vars, &args.var_files).map_err(anyhow::Error::msg)?;
    let text =
        std::fs::read_to_string(&args.pipeline).with_context(|| format!("cannot read {file}"))?;
    if let Err(problems) = Pipeline::load(&text, &vars) {
        for p in problems {
            eprintln!("error: {file}: {p}");
        }
        return Ok(2);
    }
    let stored = CheckPlan {
        pipeline: text,
        check: args.resource,
        vars,
    };
    stored.plan().map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let created: Created = client
        .post(
            &format!("/api/v1/teams/{}/builds", args.team),
            &serde_json::json!({
                "pipeline": stored.pipeline,
                "check": stored.check,
                "vars": stored.vars,
            }),
        )
        .await?;
    eprintln!("build: {}", created.id);
    let ended = follow(client, created.id, StepLines::Told).await?;
    for v in &ended.checked {
        println!("{v}");
    }
    Ok(ended.run_exit_code(created.id))
}
