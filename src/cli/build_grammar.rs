//! The grammar of the verbs of one build (`execute`, `run`, `check`,
//! `hijack`, `watch`, `abort-build`, `clear-task-cache`), and what each does.

use std::path::PathBuf;

use clap::Subcommand;

use super::duration_flag::parse_duration_secs;
use super::{check, execute, follow, hijack, ApiClient};

/// The verbs of one build: run one, follow it, enter it, abort it.
#[derive(Subcommand, Debug)]
pub enum BuildCommand {
    /// Run a one-off task with local inputs, streaming its output.
    Execute {
        /// The task config (task.yml).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// An input: NAME=DIR (repeatable).
        #[arg(short = 'i', long = "input")]
        inputs: Vec<String>,
        /// An output to download: NAME=DIR (repeatable).
        #[arg(short = 'o', long = "output")]
        outputs: Vec<String>,
        /// A tag the worker must have (repeatable).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Platform (overrides the task's).
        #[arg(long)]
        platform: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
        /// Stop the step after this long (e.g. `90s`, `10m`, `1h`), waiting for a worker included.
        #[arg(long, value_parser = parse_duration_secs)]
        timeout: Option<u64>,
        /// Run the task in this image: a rootfs tar or an OCI image layout tar
        /// (`docker save`, `skopeo copy ... oci-archive:`).
        #[arg(long)]
        image: Option<PathBuf>,
    },
    /// Run a job of a Concourse pipeline (tasks with inline configs, do,
    /// in_parallel, try, hooks, attempts, timeout) and follow its build:
    /// exits 0 succeeded, 1 failed, 2 errored, 3 aborted.
    Run {
        /// The pipeline file.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: PathBuf,
        /// The job to run.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// The pipeline's name, which with the job names its task caches
        /// (default: the pipeline file's name without its extension).
        #[arg(long = "pipeline-name")]
        pipeline_name: Option<String>,
        /// A var: NAME=VALUE (a string, as with fly -v).
        #[arg(short = 'v', long = "var")]
        vars: Vec<String>,
        /// A YAML file of vars; later files and -v flags override.
        #[arg(short = 'l', long = "load-vars-from")]
        var_files: Vec<PathBuf>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Check a resource of a Concourse pipeline (a check build): its type's
    /// `check` runs on a worker and the versions found are stored and
    /// printed, oldest first, one JSON object a line.
    Check {
        /// The pipeline file.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: PathBuf,
        /// The resource to check.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// A var: NAME=VALUE (a string, as with fly -v).
        #[arg(short = 'v', long = "var")]
        vars: Vec<String>,
        /// A YAML file of vars; later files and -v flags override.
        #[arg(short = 'l', long = "load-vars-from")]
        var_files: Vec<PathBuf>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Run a shell or a command in a build step's container (or any container).
    Hijack {
        /// Build whose step container to enter.
        #[arg(short = 'b', long = "build")]
        build: Option<i64>,
        /// Step of that build (default: task).
        #[arg(short = 's', long = "step")]
        step: Option<String>,
        /// Enter this container instead (a handle from `gantry containers`).
        #[arg(long)]
        container: Option<String>,
        /// The command and its arguments, after `--` (default: bash, or sh
        /// when the container has no bash).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Follow a build's output to its end; exits with its task's exit status.
    Watch {
        /// Build id.
        #[arg(short = 'b', long = "build")]
        build: i64,
        /// Start with the last N lines printed so far, then follow.
        #[arg(long)]
        tail: Option<usize>,
        /// Print only what the steps printed, as they printed it (no step
        /// lines): the build's log as plain text.
        #[arg(long)]
        raw: bool,
    },
    /// Abort a running build.
    AbortBuild {
        /// Build id.
        #[arg(short = 'b', long = "build")]
        build: i64,
    },
    /// Clear a job's task caches on every worker (of one step with -s);
    /// prints how many were cleared.
    ClearTaskCache {
        /// The pipeline's name (as given to `gantry run --pipeline-name`).
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// The job.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// Only this task step's caches.
        #[arg(short = 's', long = "step")]
        step: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
}

/// Runs one build verb; returns the exit code.
pub async fn run(client: &ApiClient, command: BuildCommand) -> anyhow::Result<i32> {
    match command {
        BuildCommand::Execute {
            config,
            inputs,
            outputs,
            tags,
            platform,
            team,
            image,
            timeout,
        } => {
            let args = execute::ExecuteArgs {
                config,
                inputs,
                outputs,
                tags,
                platform,
                team,
                image,
                timeout,
            };
            execute::execute(client, args).await
        }
        BuildCommand::Run {
            pipeline,
            job,
            pipeline_name,
            vars,
            var_files,
            team,
        } => {
            let args = super::run::RunArgs {
                pipeline,
                job,
                pipeline_name,
                vars,
                var_files,
                team,
            };
            super::run::run(client, args).await
        }
        BuildCommand::Check {
            pipeline,
            resource,
            vars,
            var_files,
            team,
        } => {
            let args = check::CheckArgs {
                pipeline,
                resource,
                vars,
                var_files,
                team,
            };
            check::check(client, args).await
        }
        BuildCommand::Hijack {
            build,
            step,
            container,
            command,
        } => {
            let args = hijack::HijackArgs {
                build,
                step,
                container,
                command,
            };
            hijack::hijack(client, args).await
        }
        BuildCommand::Watch { build, tail, raw } => watch(client, build, tail, raw).await,
        BuildCommand::AbortBuild { build } => {
            let _: serde_json::Value = client.put(&format!("/api/v1/builds/{build}/abort")).await?;
            crate::outln!("build {build}: aborting");
            Ok(0)
        }
        BuildCommand::ClearTaskCache {
            pipeline,
            job,
            step,
            team,
        } => {
            let path = format!(
                "/api/v1/teams/{}/pipelines/{}/jobs/{}/clear-task-cache",
                gantry_wire::url::segment(&team),
                gantry_wire::url::segment(&pipeline),
                gantry_wire::url::segment(&job)
            );
            let answer: serde_json::Value = client
                .post(&path, &serde_json::json!({ "step": step }))
                .await?;
            let n = answer["cleared"].as_u64().unwrap_or(0);
            let what = if n == 1 { "cache" } else { "caches" };
            crate::outln!("{n} task {what} cleared");
            Ok(0)
        }
    }
}

/// `gantry watch`: a build's log, followed to its end (or printed raw).
async fn watch(
    client: &ApiClient,
    build: i64,
    tail: Option<usize>,
    raw: bool,
) -> anyhow::Result<i32> {
    let view: serde_json::Value = client.get(&format!("/api/v1/builds/{build}")).await?;
    if let Some(at) = view["log_reaped_at"].as_i64() {
        anyhow::bail!(
            "build {build} ended {}; its log was deleted by its job's build_log_retention (at {at} ms since the epoch)",
            view["status"].as_str().unwrap_or("unknown")
        );
    }
    if raw || tail.is_some() {
        follow::print_log(client, build, tail).await
    } else {
        follow::follow(client, build, follow::StepLines::Told)
            .await?
            .exit_code(build)
    }
}
