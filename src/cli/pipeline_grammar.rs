//! The verbs of stored pipelines, as `fly` names them: `set-pipeline`,
//! `pipelines`, `get-pipeline`, `destroy-pipeline`, `rename-pipeline`,
//! `pause-pipeline`/`unpause-pipeline`, `archive-pipeline`,
//! `expose-pipeline`/`hide-pipeline`,
//! `pause-job`/`unpause-job`,
//! `trigger-job`, `rerun-build`, `why` (their resources' verbs are
//! `resource_grammar.rs`). (`jobs -p` and `builds -j P/J` extend the verbs
//! of the same names.)

use std::path::PathBuf;

use clap::Subcommand;

/// The stored pipeline verbs.
#[derive(Subcommand, Debug)]
pub enum PipelineCommand {
    /// Store a pipeline from its file: shows the difference from the stored
    /// config, then sets it as a new config version (a new pipeline starts
    /// paused).
    SetPipeline {
        /// The pipeline's name (an instance: NAME/KEY:VALUE,...).
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// An instance var: KEY=VALUE (a YAML value), making the pipeline
        /// set an instance of an instanced pipeline.
        #[arg(long = "instance-var")]
        instance_vars: Vec<String>,
        /// The pipeline file.
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// A var: NAME=VALUE (a string, as with fly -v).
        #[arg(short = 'v', long = "var")]
        vars: Vec<String>,
        /// A var: NAME=YAML (the value read as YAML: a number, a list, a
        /// mapping..., as with fly -y); applied after -v.
        #[arg(short = 'y', long = "yaml-var")]
        yaml_vars: Vec<String>,
        /// A YAML file of vars; later files and -v flags override.
        #[arg(short = 'l', long = "load-vars-from")]
        var_files: Vec<PathBuf>,
        /// Refuse unless the stored config version is this one (0: the
        /// pipeline must be new): no write over a change made meanwhile.
        #[arg(long = "config-version")]
        config_version: Option<i64>,
        /// Apply without asking "apply configuration? [yN]" (asked only
        /// when stdin is a terminal), as fly -n.
        #[arg(short = 'n', long = "non-interactive")]
        non_interactive: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List the team's pipelines.
    Pipelines {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Print a stored pipeline's config (as set, vars not filled).
    GetPipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Destroy a stored pipeline (its builds stay).
    DestroyPipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Rename a stored pipeline.
    RenamePipeline {
        /// Its name.
        #[arg(short = 'o', long = "old-name")]
        old: String,
        /// Its new name.
        #[arg(short = 'n', long = "new-name")]
        new: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Order the team's pipelines (as fly's `order-pipelines`): those
    /// named first, in this order; the others after them, by name.
    OrderPipelines {
        /// A pipeline (repeatable, in the new order).
        #[arg(short = 'p', long = "pipeline", required = true)]
        pipelines: Vec<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Pause a pipeline: nothing is checked or triggered.
    PausePipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Unpause a pipeline.
    UnpausePipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Archive a pipeline: paused, its jobs never triggered, until it is
    /// set again (its config and builds are kept). Asks first on a
    /// terminal, as fly does.
    ArchivePipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Do not ask for confirmation.
        #[arg(short = 'n', long = "non-interactive")]
        non_interactive: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Expose a pipeline: anyone, signed in or not, reads it, its jobs'
    /// statuses and builds, and the logs of its `public: true` jobs.
    ExposePipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Hide an exposed pipeline: only its team reads it again.
    HidePipeline {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Pause a job: no build is triggered.
    PauseJob {
        /// PIPELINE/JOB.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Unpause a job.
    UnpauseJob {
        /// PIPELINE/JOB.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Start a build of a job with the newest versions its inputs allow.
    TriggerJob {
        /// PIPELINE/JOB.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// Follow the build: exits 0 succeeded, 1 failed, 2 errored, 3 aborted.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Start a new build of a job with exactly the versions one of its
    /// builds was given (named N.M, the M-th rerun of build N).
    RerunBuild {
        /// PIPELINE/JOB.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// The build's name within the job (N, or N.M).
        #[arg(short = 'b', long = "build")]
        build: String,
        /// Follow the build: exits 0 succeeded, 1 failed, 2 errored, 3 aborted.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Why a job was or was not triggered: the versions chosen per input,
    /// or why an input could not be satisfied.
    Why {
        /// PIPELINE/JOB.
        #[arg(short = 'j', long = "job")]
        job: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
}
