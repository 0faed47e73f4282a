//! The command line's grammar: every command, its flags and their help
//! (clap's derive). What each command does is `dispatch.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::list;

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
    /// The stored pipeline verbs.
    #[command(flatten)]
    Pipelines(crate::cli::pipeline_grammar::PipelineCommand),
    /// List the web nodes sharing the database: alive or not, last heartbeat.
    WebNodes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
    /// Print a shell completion script: `gantry completions bash >
    /// /etc/bash_completion.d/gantry` (or zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// List teams (the admin sees all, a team token its own).
    Teams {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a team if it does not exist (admin), and give users and
    /// groups a role in it (the admin or the team's owner).
    SetTeam(crate::cli::team_grammar::SetTeamArgs),
    /// Sign in and save the web node as a target (`~/.gantryrc`,
    /// owner-only), as `fly login`: `gantry login -c URL -n TEAM -t NAME`
    /// prints the URL to sign in at through the node's OpenID provider
    /// and takes the token on a loopback callback; `-u USER` signs a local
    /// user in with a password instead. Then `-t NAME` on any command.
    Login {
        /// The web node's URL.
        #[arg(short = 'c', long = "api")]
        api: String,
        /// The team to act in; none: main, else the first you have a role in.
        #[arg(short = 'n', long = "team-name")]
        team: Option<String>,
        /// A local user's name (none: sign in through the provider).
        #[arg(short = 'u', long = "username")]
        username: Option<String>,
        /// The provider to sign in through, `oidc` or `github`, when the
        /// node has both.
        #[arg(long)]
        provider: Option<String>,
        /// The password; read from standard input when not given.
        #[arg(short = 'p', long = "password", hide_env_values = true)]
        password: Option<String>,
    },
    /// Sign out of a target: its token is revoked and forgotten.
    Logout,
    /// The saved targets (without their tokens).
    Targets {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Who the token of a target (or `--token`) is.
    Status,
    /// Print an argon2id hash of the password read from standard input,
    /// for `[web.users]`.
    HashPassword,
    /// Remove a team and revoke its tokens (admin); refused while its
    /// builds run.
    DestroyTeam {
        /// Team name.
        name: String,
    },
    /// Store a secret in the built-in credential manager, sealed: its
    /// value is read from standard input (a trailing newline dropped); a
    /// pipeline's `((NAME))` reads it when a build needs it.
    SetSecret {
        /// The secret's name.
        name: String,
        /// The pipeline it belongs to (looked up first by that pipeline's
        /// builds); none: the team's.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List a team's secrets: names and scopes, never values.
    Secrets {
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Destroy a secret of the built-in credential manager.
    DestroySecret {
        /// The secret's name.
        name: String,
        /// The pipeline it belongs to; none: the team's.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List team tokens, without their secrets.
    Tokens {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The audit log: who changed what, oldest first (a team's owner sees
    /// its team's, the admin everyone's).
    Audit {
        /// Only this team's changes.
        #[arg(long)]
        team: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make or revoke a team token (the admin, or the team's owner).
    Token {
        /// What to do.
        #[command(subcommand)]
        action: TokenCommand,
    },
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

/// `gantry token ...`
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token for a team; prints it (the only time it is shown).
    Create {
        /// The team it acts for.
        #[arg(long)]
        team: String,
        /// Its role in the team: owner, member, pipeline-operator or viewer.
        #[arg(long, default_value = "member", value_parser = crate::cli::team_grammar::parse_role)]
        role: gantry_actors::api::Role,
        /// It expires after this long (e.g. `90s`, `12h`, `30d`); never by default.
        #[arg(long, value_parser = parse_duration_secs)]
        expires: Option<u64>,
        /// What it is for.
        #[arg(long)]
        description: Option<String>,
    },
    /// Revoke a token at once, by its id (`gantry tokens`).
    Revoke {
        /// The token's id.
        id: String,
    },
}

/// Parses `90`, `90s`, `10m`, `1h` or `30d` into seconds.
fn parse_duration_secs(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 10m, 1h)"))?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use s, m, h or d)")),
    };
    match n.saturating_mul(mult) {
        0 => Err("a duration must be longer than 0s".into()),
        secs => Ok(secs),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_parse_with_units() {
        assert_eq!(super::parse_duration_secs("90"), Ok(90));
        assert_eq!(super::parse_duration_secs("10m"), Ok(600));
        assert_eq!(super::parse_duration_secs("1h"), Ok(3600));
        assert!(super::parse_duration_secs("0s").is_err());
        assert_eq!(super::parse_duration_secs("2d"), Ok(172_800));
        assert!(super::parse_duration_secs("5w")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(super::parse_duration_secs("x").is_err());
    }
}
