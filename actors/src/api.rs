//! The engine's one surface for its edges (the web node, the CLI, the
//! Kubernetes runtime, the benchmarks): the [`Engine`] and what its
//! methods take and answer. Every other module of the engine is private.
//! Responses are types made for the API ([`Build`], [`Handle`], [`Team`],
//! [`Token`]), never the database's rows. The wire types the engine shares
//! with the workers (`gantry-wire`) are re-exported at the crate's root.

pub use crate::views::{
    AuditEntry, Build, BuildResources, BuildVersion, Handle, JobInputView, JobView, MemberKind,
    NextInput, PipelineView, Publicity, QueueKind, ResourceView, Team, TeamRole, Token,
    VersionBuild, VersionView, VERSION_BUILDS,
};

// The engine, its settings, its errors.
pub use crate::engine::{
    check_team_name, describe_histograms, Engine, EngineConfig, EngineSetup, HandleOwner,
    NodeConfig, PipelinesConfig, Session, SetPipeline, WebNodeView, DEFAULT_CHECK_EVERY,
    DEFAULT_CHECK_TIMEOUT, DEFAULT_WORKER_RECONNECT_GRACE, DEFAULT_WORKER_RETURN, TOKEN_PREFIX,
};
pub use crate::error::EngineError;
pub use crate::gc::collector::{CollectorConfig, Rule, RuleStats};
pub use crate::gc::log_retention::RetentionLimits;
pub use crate::gc::rules_artifacts::ArtifactAges;
pub use crate::gc::rules_pressure::DiskPressure;
pub use crate::placement::{parse_chain, Load, Strategy};
pub use crate::registry::{HeartbeatRefused, LifecycleAction, LifecycleConfig, WorkerProof};
pub use crate::roles::Role;
pub use crate::scheduler::{Placement, PlacementConfig, SchedulerStats, Selection, StepRequest};
pub use crate::sealer::{SealError, Sealer};
pub use crate::streaming::{
    LinkRule, StreamConfig, StreamMode, Streams, TransferPath, DEFAULT_MAX_STREAMS, DEFAULT_URL_TTL,
};

// Builds: what is asked and what is told.
pub use crate::bounded_yaml::{parse_yaml_value, MAX_DOCUMENT_BYTES};
pub use crate::credentials::{
    CacheConfig as CredentialCacheConfig, CredentialManager, Lookup, ManagerError, SecretScope,
    VarSourceTypes,
};
pub use crate::db::{now_ms, BuildQuery, HandleKind, SecretEntry};
pub use crate::digest::sha256_hex;
pub use crate::engine::MAX_SECRET;
pub use crate::events::StoredEvent;
pub use crate::pipeline::{
    load as load_pipeline, load_warned as load_pipeline_warned, Document, Pipeline, Vars, MAX_NAME,
};
pub use crate::plan::{
    check_pipeline_name, default_pipeline_name, instance_vars_text, set_dotted, CheckPlan, JobPlan,
    OneOffPlan, PipelineRef, ONE_OFF_STEP,
};
pub use crate::task_config::TaskConfig;

// Artifacts, intercepts, background jobs, garbage collection, metrics.
pub use crate::artifact_store::{ArtifactStore, StoredArtifact};
pub use crate::artifacts::{ArtifactOwner, KeptArtifact, WorkerArtifact};
pub use crate::gc::sweep::{GcStatsSnapshot, SweepError};
pub use crate::histograms::{HistogramSpec, ALL as HISTOGRAMS};
pub use crate::intercept::InterceptGuard;
pub use crate::resources::ResourceStats;

/// What only the benchmarks use: their own database handle
/// ([`BenchStore`](bench::BenchStore), which keeps its connection private:
/// the database layer itself is never handed out) and the parts of the
/// engine they time on their own. Always compiled (a binary that does not
/// call them links none of it), so the builds with and without `gantry
/// bench` share this crate and compile it once.
pub mod bench {
    pub use crate::bench_store::BenchStore;
    pub use crate::credentials::bench::SecretsFigures;
    pub use crate::db::Bench;
    pub use crate::events::EventSink;
    pub use crate::gc::sweep::Sweeps;
    pub use crate::streaming::{Source, StreamTransfer, TransferJob};
    pub use crate::testing::{registration, DetachedConnector};
}
