//! The grammar of the fleet's verbs (`workers`, `queue`, `builds`,
//! `containers`, `volumes`, `jobs`, `web-nodes`, `land-worker`,
//! `retire-worker`, `prune-worker`), and what each does.

use clap::Subcommand;

use super::{list, ApiClient};

/// The fleet's verbs: workers, their queue, builds, containers, volumes, jobs.
#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// List workers.
    Workers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the fleet's steps waiting for a worker, by the kind of worker
    /// they need (what an autoscaler reads).
    Queue {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List builds, newest first.
    Builds {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Which builds.
        #[command(flatten)]
        filters: list::BuildFilters,
    },
    /// List containers.
    Containers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List volumes.
    Volumes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the web node's background jobs (state, runs, errors, last
    /// error); with `--worker`, a worker's (its beacon and sweeper); with
    /// `-p`, a stored pipeline's jobs instead (paused, newest build, last
    /// scheduling outcome).
    Jobs {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// A stored pipeline whose jobs to list.
        #[arg(short = 'p', long = "pipeline", conflicts_with = "worker")]
        pipeline: Option<String>,
        /// A worker whose background jobs to list.
        #[arg(long = "worker")]
        worker: Option<String>,
        /// Team (with `-p`).
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List the web nodes sharing the database: alive or not, last heartbeat.
    WebNodes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Land a worker: its running steps finish, then it takes no work.
    LandWorker {
        /// Worker name.
        name: String,
    },
    /// Retire a worker: its running steps finish, then it is deleted.
    RetireWorker {
        /// Worker name.
        name: String,
    },
    /// Remove a worker that is not running (stalled, landing, landed,
    /// retiring); with --force, whatever its state. A worker's name is
    /// pinned to the worker that first registered under it until it is
    /// pruned.
    PruneWorker {
        /// Worker name.
        name: String,
        /// Prune it even when it is running (its running steps are lost,
        /// and any worker may then register under its name).
        #[arg(long)]
        force: bool,
    },
}

/// Runs one fleet verb; returns the exit code.
pub async fn run(client: &ApiClient, command: FleetCommand) -> anyhow::Result<i32> {
    match command {
        FleetCommand::Workers { json } => list::workers(client, json).await,
        FleetCommand::Queue { json } => list::queue(client, json).await,
        FleetCommand::Builds { json, filters } => list::builds(client, &filters, json).await,
        FleetCommand::Containers { json } => list::handles(client, "containers", json).await,
        FleetCommand::Volumes { json } => list::handles(client, "volumes", json).await,
        FleetCommand::Jobs {
            json,
            pipeline: Some(pipeline),
            team,
            ..
        } => list::pipeline_jobs(client, &team, &pipeline, json).await,
        FleetCommand::Jobs {
            json,
            worker: Some(worker),
            ..
        } => list::worker_jobs(client, &worker, json).await,
        FleetCommand::Jobs { json, .. } => list::jobs(client, json).await,
        FleetCommand::WebNodes { json } => list::web_nodes(client, json).await,
        FleetCommand::LandWorker { name } => list::lifecycle(client, &name, "land").await,
        FleetCommand::RetireWorker { name } => list::lifecycle(client, &name, "retire").await,
        FleetCommand::PruneWorker { name, force } => list::prune(client, &name, force).await,
    }
    .map(|_| 0)
}
