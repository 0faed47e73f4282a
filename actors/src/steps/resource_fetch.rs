//! What resource steps do with scripts: `check` (the versions found are
//! stored), `in` (what it fetched is kept once per (config, version,
//! params): the resource cache, answered without running `in` again), and
//! fetching an image for a custom type or a task's `image_resource`.
//!
//! A cache's files are an artifact of the web node's store owned by no
//! build, so a later build on any worker uses it without `in`: the step's
//! worker gets it by streaming, as it gets any input.

use std::time::Duration;
use tracing::Instrument as _;

use serde_json::{json, Value};

use crate::artifacts::ArtifactOwner;
use crate::db::ResourceCacheRow;
use crate::error::EngineError;
use crate::resources::scope::{self, Owner};
use crate::resources::{ResourceConfig, ResourceStats, ResourceType};
use crate::steps::fetched_image::DEFAULT_IMAGE;
use crate::steps::resource_script::{
    check_answer, fetch_answer, run_script, Script, ScriptEnd, TypeImage,
};
use crate::steps::{StepContext, StepEnd};
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::{ByteStream, Volume};
use gantry_wire::spec::{Encoding, MountSpec};
use gantry_wire::state::ArtifactKind;

mod image;

pub(crate) use image::{fetch_image, image_of_artifact, type_image};

/// Where `in` and `out` find their directory in the container.
pub(crate) const RESOURCE_DIR: &str = "/tmp/build/resource";

/// Why resource work stopped short of an answer.
#[derive(Debug)]
pub(crate) enum Halt {
    /// The step ends this way: a script failed, or the build was stopped.
    End(StepEnd),
    /// Gantry could not go on.
    Error(EngineError),
}

impl From<EngineError> for Halt {
    fn from(e: EngineError) -> Self {
        Halt::Error(e)
    }
}

impl From<gantry_wire::error::RuntimeError> for Halt {
    fn from(e: gantry_wire::error::RuntimeError) -> Self {
        Halt::Error(e.into())
    }
}

impl Halt {
    /// The step's end, or its error.
    pub(crate) fn into_end(self) -> Result<StepEnd, EngineError> {
        match self {
            Halt::End(end) => Ok(end),
            Halt::Error(e) => Err(e),
        }
    }
}

/// The answer of a script that answered; a failed or stopped one halts.
fn answered(end: ScriptEnd) -> Result<Value, Halt> {
    match end {
        ScriptEnd::Answered(v) => Ok(v),
        ScriptEnd::Failed(status) => Err(Halt::End(StepEnd::Exited(status))),
        ScriptEnd::Stopped => Err(Halt::End(StepEnd::Stopped)),
    }
}

/// One resource of a step: its name (for events), config and the image
/// its scripts run in.
pub(crate) struct Resource<'a> {
    /// The resource's name, or the type's for an image.
    pub name: &'a str,
    /// Its type and source.
    pub config: &'a ResourceConfig,
    /// Where its scripts run.
    pub image: &'a TypeImage,
    /// How long its `check` may take (the resource's `check_timeout`);
    /// none: the node's default ([`StepContext::default_check_timeout`]).
    pub check_timeout: Option<Duration>,
}

/// Stores and shows what a resource's script answered (a `resource` event
/// of the step).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn tell(
    ctx: &StepContext,
    resource: &str,
    action: &str,
    version: &Value,
    metadata: &Value,
    cached: bool,
    worker: Option<&str>,
) -> Result<(), EngineError> {
    ctx.emit(&BuildEvent::Resource {
        step: ctx.step().to_string(),
        resource: resource.to_string(),
        action: action.to_string(),
        version: version.clone(),
        metadata: metadata.clone(),
        cached,
        worker: worker.map(str::to_string),
        time: crate::db::now_ms(),
    })
    .await
}

/// Where a check of this build stores what it finds: `stored` (the scope
/// its plan names) read by [`scope::check_scope`]. A history that is not
/// the build's team's is refused: one team's check never writes another
/// team's versions (see [`crate::resources::scope`]).
async fn own_scope(ctx: &StepContext, stored: Option<&str>) -> Result<String, EngineError> {
    let team = ctx.team();
    let scope = scope::check_scope(stored, team);
    let own = match scope::owner(&scope) {
        Owner::Team(t) => t == team,
        Owner::Pipeline(id) => ctx
            .db()
            .pipelines()
            .pipeline_by_id(id)
            .await?
            .is_some_and(|p| p.team == team),
        Owner::Nobody => false,
    };
    if own {
        Ok(scope)
    } else {
        Err(EngineError::Invalid(format!(
            "versions kept as {scope:?} are not team {team:?}'s to check (its pipeline is gone, or another team's)"
        )))
    }
}

/// Runs `check` from the newest stored version, stores what it reports
/// (under `scope`, else the build's team's one-off history) and returns it
/// (oldest first). A check running past its timeout (the resource's
/// `check_timeout`, else the node's default; its container made within it,
/// as Concourse's check step does) fails with `timeout exceeded`, told in
/// an error event; its container goes with the step.
pub(crate) async fn check(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    scope: Option<&str>,
) -> Result<Vec<Value>, Halt> {
    let db = ctx.db().clone();
    let key = r.config.key();
    let scope = own_scope(ctx, scope).await?;
    let from = db.versions().newest(&scope, &key, 1).await?.pop();
    let request = json!({
        "source": r.config.source,
        "version": from.map(|v| v.version),
    });
    ResourceStats::count(&ctx.resource_stats().checks);
    let limit = r.check_timeout.or(ctx.default_check_timeout());
    let run = run_script(
        ctx,
        r.image,
        Script {
            name: "check",
            dir: None,
            request,
            mounts: vec![],
            env: vec![],
        },
    );
    let end = match limit {
        Some(limit) => match tokio::time::timeout(limit, run).await {
            Ok(end) => end?,
            Err(_) => {
                ctx.emit(&BuildEvent::Error {
                    message: crate::steps::TIMEOUT_EXCEEDED.to_string(),
                    time: crate::db::now_ms(),
                })
                .await?;
                return Err(Halt::End(StepEnd::TimedOut));
            }
        },
        None => run.await?,
    };
    let answer = answered(end)?;
    let versions = check_answer(&answer)?;
    let rows: Vec<(Value, Value)> = versions.iter().map(|v| (v.clone(), json!([]))).collect();
    db.versions().save_versions(&scope, &key, &rows).await?;
    let worker = ctx.worker().name().to_string();
    tell(
        ctx,
        r.name,
        "check",
        &Value::Array(versions.clone()),
        &json!([]),
        false,
        Some(&worker),
    )
    .await?;
    Ok(versions)
}

/// The version to fetch: the one pinned, else the newest after a `check`.
pub(crate) async fn version_to_fetch(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    pinned: Option<&Value>,
) -> Result<Value, Halt> {
    match pinned {
        Some(v) => Ok(v.clone()),
        None => checked_newest(ctx, r, None).await,
    }
}

/// Checks `r` into `scope` (else the build's team's one-off history) and
/// answers the newest version stored there.
async fn checked_newest(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    scope: Option<&str>,
) -> Result<Value, Halt> {
    check(ctx, r, scope).await?;
    let scope = own_scope(ctx, scope).await?;
    match ctx
        .db()
        .versions()
        .newest(&scope, &r.config.key(), 1)
        .await?
        .pop()
    {
        Some(row) => Ok(row.version),
        None => Err(Halt::Error(EngineError::Invalid(format!(
            "resource {:?}: check found no version to fetch",
            r.name
        )))),
    }
}

/// Fetches `version` with `params`: from the resource cache when one was
/// kept, else by running `in` (its files then kept as the cache): the
/// cache, whose artifact holds the files.
pub(crate) async fn get(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    version: &Value,
    params: &Value,
) -> Result<ResourceCacheRow, Halt> {
    let span = tracing::info_span!(
        "resource fetch",
        otel.name = %format!("get {}", r.name),
        resource.name = r.name,
        resource.type = r.config.type_.name(),
        worker = ctx.worker().name(),
    );
    get_in(ctx, r, version, params).instrument(span).await
}

/// [`get`], in its span.
async fn get_in(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    version: &Value,
    params: &Value,
) -> Result<ResourceCacheRow, Halt> {
    if is_native(r.config) {
        return get_native(ctx, r, version, params).await;
    }
    let key = r.config.cache_key(version, params);
    let mut found = cached(ctx, &key).await?;
    if found.as_ref().is_some_and(|hit| hit.image_env.is_some()) {
        // An image fetch kept only the image (its files could not be
        // kept): a get needs the files, so `in` runs and its files become
        // the cache; the image goes by the collector's rules for images.
        ctx.db()
            .versions()
            .delete_resource_cache(ctx.team(), &key)
            .await?;
        found = None;
    }
    if let Some(hit) = found {
        ResourceStats::count(&ctx.resource_stats().cache_hits);
        tell(
            ctx,
            r.name,
            "get",
            &hit.version,
            &hit.metadata,
            true,
            hit.worker.as_deref(),
        )
        .await?;
        return Ok(hit);
    }
    ResourceStats::count(&ctx.resource_stats().cache_misses);
    let (volume, (answer_version, metadata)) = run_in(ctx, r, version, params).await?;
    let body = volume.stream_out(".", ctx.encoding()).await?;
    let kept = keep(ctx, body, ctx.encoding(), ArtifactKind::Files, r.name).await?;
    let row = ResourceCacheRow {
        artifact_id: kept,
        version: answer_version,
        metadata,
        worker: Some(ctx.worker().name().to_string()),
        image_env: None,
        image_user: None,
    };
    let row = ctx
        .db()
        .versions()
        .save_resource_cache(ctx.team(), &key, &row)
        .await?;
    ctx.db()
        .versions()
        .tag_resource_cache(ctx.team(), &key, &r.config.key())
        .await?;
    tell(
        ctx,
        r.name,
        "get",
        &row.version,
        &row.metadata,
        false,
        row.worker.as_deref(),
    )
    .await?;
    Ok(row)
}

/// Whether `config`'s type is a base type the workers run natively.
fn is_native(config: &ResourceConfig) -> bool {
    matches!(&config.type_, ResourceType::Base { name } if gantry_wire::native::is_native(name))
}

/// `get` of a type the workers run natively (`registry-image`,
/// `docker-image`): `in` runs every time, from the worker's blob cache (a
/// second get of an image fetches no blob), and what it wrote stays on the
/// worker as the build's artifact, like a task's output, instead of going
/// through the web node's store: an image's root filesystem is large, and
/// its absolute symlinks are refused by the store's rules for files.
async fn get_native(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    version: &Value,
    params: &Value,
) -> Result<ResourceCacheRow, Halt> {
    let (volume, (version, metadata)) = run_in(ctx, r, version, params).await?;
    let artifact_id = ctx.keep_on_worker(r.name, &volume).await?;
    let worker = ctx.worker().name().to_string();
    tell(
        ctx,
        r.name,
        "get",
        &version,
        &metadata,
        false,
        Some(&worker),
    )
    .await?;
    Ok(ResourceCacheRow {
        artifact_id,
        version,
        metadata,
        worker: Some(worker),
        image_env: None,
        image_user: None,
    })
}

/// A kept cache whose artifact still exists (one whose artifact is gone is
/// forgotten).
async fn cached(ctx: &StepContext, key: &str) -> Result<Option<ResourceCacheRow>, EngineError> {
    let db = ctx.db();
    let Some(row) = db.versions().resource_cache(ctx.team(), key).await? else {
        return Ok(None);
    };
    if row.artifact_id == DEFAULT_IMAGE
        || db
            .artifact_index()
            .get_artifact(ctx.team(), &row.artifact_id)
            .await?
            .is_some()
    {
        db.gc()
            .touch_resource_cache(ctx.team(), key, crate::db::now_ms())
            .await?;
        return Ok(Some(row));
    }
    db.versions().delete_resource_cache(ctx.team(), key).await?;
    Ok(None)
}

/// Runs `in` into a new volume of the step; returns the volume with the
/// version and metadata `in` answered.
async fn run_in(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    version: &Value,
    params: &Value,
) -> Result<(std::sync::Arc<dyn Volume>, (Value, Value)), Halt> {
    let volume = ctx.create_volume(&format!("get:{}", r.name)).await?;
    let answer = answered(
        run_script(
            ctx,
            r.image,
            Script {
                name: "in",
                dir: Some(RESOURCE_DIR),
                request: json!({"source": r.config.source, "version": version, "params": params}),
                mounts: vec![MountSpec {
                    volume: volume.handle().to_string(),
                    path: RESOURCE_DIR.to_string(),
                    readonly: false,
                }],
                env: vec![],
            },
        )
        .await?,
    )?;
    Ok((volume, fetch_answer("in", &answer)?))
}

/// Keeps a stream as an artifact owned by no build (a cache outlives it).
async fn keep(
    ctx: &StepContext,
    body: ByteStream,
    encoding: Encoding,
    kind: ArtifactKind,
    name: &str,
) -> Result<String, EngineError> {
    let owner = ArtifactOwner {
        team: ctx.team(),
        name: Some(name),
        build: None,
    };
    let kept = ctx
        .artifacts()
        .keep(body, encoding, kind, owner)
        .await
        .map_err(|e| EngineError::Invalid(format!("keeping what {name:?} fetched: {e}")))?;
    Ok(kept.id)
}
