//! The verbs of a stored pipeline's resources, as `fly` names them:
//! `resources`, `resource-versions`, `check-resource`,
//! `check-resource-type`, `resource-type-versions`,
//! `pin-resource`/`unpin-resource`,
//! `disable-resource-version`/`enable-resource-version`.

use clap::Subcommand;

/// The verbs of a stored pipeline's resources.
#[derive(Subcommand, Debug)]
pub enum ResourceCommand {
    /// List a pipeline's resources: last check, its error, pin.
    Resources {
        /// The pipeline.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List a resource's versions, newest first.
    ResourceVersions {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// How many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON (the API's versions: id, version, enabled, metadata, check_order, builds).
        #[arg(long)]
        json: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Check a stored resource now (a check build), optionally from a
    /// version; waits for it and exits non-zero when it did not succeed.
    CheckResource {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// Check from this version: KEY:VALUE (repeatable).
        #[arg(short = 'f', long = "from")]
        from: Vec<String>,
        /// Check the resource alone; else the custom types it is built on
        /// are checked first (as fly's `check-resource`).
        #[arg(long)]
        shallow: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Check a stored pipeline's resource type now (a check build of its
    /// image), optionally from a version; waits for it and exits non-zero
    /// when it did not succeed. The custom types it is built on are
    /// checked first unless --shallow.
    CheckResourceType {
        /// PIPELINE/RESOURCE-TYPE.
        #[arg(short = 'r', long = "resource-type")]
        resource_type: String,
        /// Check from this version: KEY:VALUE (repeatable).
        #[arg(short = 'f', long = "from")]
        from: Vec<String>,
        /// Check the resource type itself only, not the types it is built on.
        #[arg(long)]
        shallow: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List the versions of a resource type's image its checks found,
    /// newest first.
    ResourceTypeVersions {
        /// PIPELINE/RESOURCE-TYPE.
        #[arg(short = 'r', long = "resource-type")]
        resource_type: String,
        /// How many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON (the API's versions: version, check_order).
        #[arg(long)]
        json: bool,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Pin a resource to a version its checks found (the newest whose
    /// fields are the KEY:VALUEs given, as fly's); and/or comment on its
    /// pin.
    PinResource {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// The version: KEY:VALUE (repeatable).
        #[arg(short = 'v', long = "version", required_unless_present = "comment")]
        version: Vec<String>,
        /// A comment saved on the pin (as fly's): the resource must be
        /// pinned, by this -v or before.
        #[arg(short = 'c', long = "comment")]
        comment: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Unpin a resource.
    UnpinResource {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Disable a version of a resource: it is never an input again.
    DisableResourceVersion {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// The version: KEY:VALUE (repeatable).
        #[arg(short = 'v', long = "version", required = true)]
        version: Vec<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// Enable a disabled version of a resource.
    EnableResourceVersion {
        /// PIPELINE/RESOURCE.
        #[arg(short = 'r', long = "resource")]
        resource: String,
        /// The version: KEY:VALUE (repeatable).
        #[arg(short = 'v', long = "version", required = true)]
        version: Vec<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
}
