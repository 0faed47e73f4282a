//! The command line's grammar: every command, its flags and their help
//! (clap's derive). What each command does is `dispatch.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[cfg(feature = "bench")]
use super::bench_grammar::BenchCommand;

/// Gantry: a self-hosted CI runtime.
#[derive(Parser, Debug)]
#[command(name = "gantry", version, about)]
pub struct Cli {
    /// URL of the web node (client commands).
    #[arg(
        long,
        global = true,
        env = "GANTRY_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// Bearer token for the API (a team's or the admin's).
    #[arg(long, global = true, env = "GANTRY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A saved target (`gantry login`, `~/.gantryrc`): its URL, team and
    /// token, where `--url`, `--token` and `--team` do not say otherwise.
    #[arg(short = 't', long, global = true, env = "GANTRY_TARGET")]
    pub target: Option<String>,
    /// Show tables' cells whole (by default a cell shows at most 60
    /// characters; `--json` prints every field whole).
    #[arg(long, global = true)]
    pub wide: bool,
    /// Log format of the servers: `human` or `json`.
    #[arg(
        long,
        global = true,
        env = "GANTRY_LOG_FORMAT",
        default_value = "human"
    )]
    pub log_format: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags of the web node (override the config file and `GANTRY_*` variables).
#[derive(Args, Debug, Default)]
pub struct WebFlags {
    /// Config file (TOML with `[web]` and `[worker]` tables).
    #[arg(long, env = "GANTRY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the API and dashboard.
    #[arg(long, env = "GANTRY_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// Directory for the SQLite database and artifacts.
    #[arg(long, env = "GANTRY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `postgres://...` or `sqlite://...`; default SQLite in the data dir.
    #[arg(long, env = "GANTRY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// File of the key that seals stored secrets (made when missing);
    /// default DATA_DIR/secret.key. Web nodes sharing a database share it.
    #[arg(long, env = "GANTRY_ENCRYPTION_KEY_FILE")]
    pub encryption_key_file: Option<PathBuf>,
    /// File of the key the database was sealed with before (key
    /// rotation): every stored secret is sealed again with the new key at
    /// start. Give it to one node with the others stopped, then remove it.
    #[arg(long, env = "GANTRY_OLD_ENCRYPTION_KEY_FILE")]
    pub old_encryption_key_file: Option<PathBuf>,
    /// Key workers present to register.
    #[arg(long, env = "GANTRY_REGISTRATION_KEY")]
    pub registration_key: Option<String>,
    /// Token that may see and do everything.
    #[arg(long, env = "GANTRY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// With no token, user or provider set: answer anyone as the admin
    /// (loopback only; for tests and throwaway nodes) instead of refusing
    /// to start (`web`) or making an `admin` user (`quickstart`).
    #[arg(long, env = "GANTRY_OPEN_API")]
    pub open_api: bool,
    /// Largest artifact accepted, in bytes (upload or task output).
    #[arg(long, env = "GANTRY_MAX_ARTIFACT_BYTES")]
    pub max_artifact_bytes: Option<u64>,
    /// How artifacts move between workers: `p2p` (the destination pulls
    /// from the source) or `relay` (through the web node).
    #[arg(long, env = "GANTRY_STREAM_MODE")]
    pub stream_mode: Option<String>,
    /// Most concurrent streams out of one worker; more wait in order.
    #[arg(long, env = "GANTRY_MAX_STREAMS_OUT")]
    pub max_streams_out: Option<usize>,
    /// Most concurrent streams into one worker; more wait in order.
    #[arg(long, env = "GANTRY_MAX_STREAMS_IN")]
    pub max_streams_in: Option<usize>,
    /// Seconds between two runs of each garbage-collection rule (and, for
    /// `quickstart`, between two sweeps of its embedded worker).
    #[arg(long, env = "GANTRY_GC_INTERVAL")]
    pub gc_interval: Option<u64>,
    /// One history of versions per resource config, shared by every
    /// pipeline of one team using the same type and source, never across
    /// teams (default true); false: one per pipeline resource, as
    /// Concourse does by default.
    #[arg(long, env = "GANTRY_GLOBAL_RESOURCES")]
    pub global_resources: Option<bool>,
    /// Seconds an archived pipeline is kept before it is destroyed (its
    /// builds stay); 0 (the default): kept until destroyed by hand.
    #[arg(long, env = "GANTRY_ARCHIVED_PIPELINE_RETENTION_SECS")]
    pub archived_pipeline_retention_secs: Option<u64>,
}

/// Flags of a worker (override the config file and `GANTRY_WORKER_*` variables).
#[derive(Args, Debug, Default)]
pub struct WorkerFlags {
    /// Unique worker name.
    #[arg(long, env = "GANTRY_WORKER_NAME")]
    pub name: Option<String>,
    /// URL of the web node to register with, or several separated by commas
    /// (web nodes sharing one database; the worker fails over between them).
    #[arg(long, env = "GANTRY_WORKER_WEB")]
    pub web: Option<String>,
    /// Address of the worker agent's API (port 0: any free port).
    #[arg(long = "listen", env = "GANTRY_WORKER_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// Directory for volumes and containers.
    #[arg(long, env = "GANTRY_WORKER_WORK_DIR")]
    pub work_dir: Option<PathBuf>,
    /// Tag (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Platform advertised.
    #[arg(long, env = "GANTRY_WORKER_PLATFORM")]
    pub platform: Option<String>,
    /// Team served (default: all).
    #[arg(long, env = "GANTRY_WORKER_TEAM")]
    pub team: Option<String>,
    /// Container backend: runc, crun, bwrap or local (default: runc as root
    /// when installed, else crun, else bwrap, else local).
    #[arg(long, env = "GANTRY_WORKER_BACKEND")]
    pub backend: Option<String>,
    /// Seconds between heartbeats.
    #[arg(long, env = "GANTRY_WORKER_HEARTBEAT_INTERVAL")]
    pub heartbeat_interval: Option<u64>,
    /// Most task steps at once (with the limit-active-tasks strategy).
    #[arg(long)]
    pub max_active_tasks: Option<u32>,
    /// Most containers at once (with the limit-active-containers strategy).
    #[arg(long)]
    pub max_containers: Option<u32>,
    /// Most volumes at once (with the limit-active-volumes strategy).
    #[arg(long)]
    pub max_volumes: Option<u32>,
    /// On SIGTERM, retire instead of landing.
    #[arg(long)]
    pub retire_on_stop: bool,
    /// A one-build worker: it takes the steps of exactly one build, then is
    /// retired, destroys its containers and volumes and exits 0.
    #[arg(long, env = "GANTRY_WORKER_EPHEMERAL")]
    pub ephemeral: bool,
    /// Run privileged containers (`privileged: true` tasks), which are root
    /// on this host in all but name; runc only.
    #[arg(long, env = "GANTRY_WORKER_ALLOW_PRIVILEGED")]
    pub allow_privileged: bool,
    /// Seconds between GC sweeps (each ± 20 % at random); 0: no sweeps.
    #[arg(long, env = "GANTRY_WORKER_SWEEP_INTERVAL")]
    pub sweep_interval: Option<u64>,
    /// Most destroys a GC sweep runs at once.
    #[arg(long)]
    pub max_parallel_destroys: Option<usize>,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the web node (API, dashboard, scheduler, builds).
    Web {
        #[command(flatten)]
        /// Web node flags.
        web: WebFlags,
    },
    /// Run a worker that registers with a web node.
    Worker {
        /// Config file (TOML with a `[worker]` table).
        #[arg(long, env = "GANTRY_CONFIG")]
        config: Option<PathBuf>,
        /// Key presented when registering.
        #[arg(long, env = "GANTRY_REGISTRATION_KEY")]
        registration_key: Option<String>,
        #[command(flatten)]
        /// Worker flags.
        worker: WorkerFlags,
    },
    /// Run a web node and one embedded worker with SQLite: the one-command default.
    Quickstart {
        #[command(flatten)]
        /// Web node flags.
        web: WebFlags,
        /// Container backend of the embedded worker.
        #[arg(long, env = "GANTRY_WORKER_BACKEND")]
        backend: Option<String>,
    },
    /// The verbs of one build: run one, follow it, enter it, abort it.
    #[command(flatten)]
    Build(crate::cli::build_grammar::BuildCommand),
    /// The fleet's verbs: workers, their queue, builds, containers, volumes, jobs.
    #[command(flatten)]
    Fleet(crate::cli::fleet_grammar::FleetCommand),
    /// The stored pipeline verbs.
    #[command(flatten)]
    Pipelines(crate::cli::pipeline_grammar::PipelineCommand),
    /// The verbs of a stored pipeline's resources.
    #[command(flatten)]
    Resources(crate::cli::resource_grammar::ResourceCommand),
    /// Print a shell completion script: `gantry completions bash >
    /// /etc/bash_completion.d/gantry` (or zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The team verbs: teams, their members, tokens and secrets, the audit log.
    #[command(flatten)]
    Team(crate::cli::team_grammar::TeamCommand),
    /// The verbs of signing in: targets, login, logout, status.
    #[command(flatten)]
    Session(crate::cli::session_grammar::SessionCommand),
    /// Run a benchmark and print its figures as `name: value` lines (in a
    /// binary built with the `bench` feature).
    #[cfg(feature = "bench")]
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Check a task config; prints every problem.
    ValidateTask {
        /// The task config file.
        file: PathBuf,
    },
    /// Check a Concourse pipeline (or a bare plan); prints every problem.
    ValidatePlan {
        /// The pipeline file, or a plan (a list of steps).
        file: PathBuf,
        /// A var: NAME=VALUE, a string (repeatable; overrides -l).
        #[arg(short = 'v', long = "var")]
        vars: Vec<String>,
        /// A YAML file of vars (repeatable; later files override earlier ones).
        #[arg(short = 'l', long = "load-vars-from")]
        var_files: Vec<PathBuf>,
    },
}
