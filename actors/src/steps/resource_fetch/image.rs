//! Fetching an image: for a custom type's scripts (its parent type's `in`,
//! cached like any fetch), for a task's `image_resource`, natively pulled
//! where the worker can, or from an artifact's files.

use std::future::Future;
use std::pin::Pin;
use tracing::Instrument as _;

use serde_json::{json, Value};

use crate::db::ResourceCacheRow;
use crate::error::EngineError;
use crate::resources::{ResourceConfig, ResourceStats, ResourceType};
use crate::steps::fetched_image::DEFAULT_IMAGE;
use crate::steps::fetched_image::{
    image_metadata, image_of, native_pull, pull_image, read_file, MIRROR_SELF_MARKER,
};
use crate::steps::resource_script::{FetchedImage, TypeImage};
use crate::steps::StepContext;

use super::{cached, checked_newest, keep, run_in, tell, version_to_fetch, Halt, Resource};
use gantry_wire::runtime::Volume;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

/// Where the scripts of type `t` run: a base type's in the worker's default
/// image; a custom type's in the image its parent type fetches (cached).
pub(crate) fn type_image<'a>(
    ctx: &'a mut StepContext,
    t: &'a ResourceType,
) -> Pin<Box<dyn Future<Output = Result<TypeImage, Halt>> + Send + 'a>> {
    Box::pin(async move {
        match t {
            ResourceType::Base { name } => Ok(TypeImage::Base(name.clone())),
            ResourceType::Custom {
                name,
                image,
                params,
                version,
                privileged,
            } => Ok(TypeImage::Fetched {
                image: fetch_image(ctx, name, image, params, version.as_ref()).await?,
                privileged: *privileged,
            }),
        }
    })
}

/// Fetches an image with `config`'s type (the newest version, or
/// `pinned`), as Concourse does: `in` writes `rootfs/` (or an OCI layout
/// `image.tar`) and `metadata.json` with `env` and `user`. Kept once per
/// (config, version, params); the worker imports it once.
pub(crate) async fn fetch_image(
    ctx: &mut StepContext,
    name: &str,
    config: &ResourceConfig,
    params: &Value,
    pinned: Option<&Value>,
) -> Result<FetchedImage, Halt> {
    let span = tracing::info_span!(
        "image fetch",
        otel.name = %format!("image {name}"),
        image.name = name,
        image.type = config.type_.name(),
        worker = ctx.worker().name(),
    );
    fetch_image_in(ctx, name, config, params, pinned)
        .instrument(span)
        .await
}

/// [`fetch_image`], in its span.
async fn fetch_image_in(
    ctx: &mut StepContext,
    name: &str,
    config: &ResourceConfig,
    params: &Value,
    pinned: Option<&Value>,
) -> Result<FetchedImage, Halt> {
    let image = type_image(ctx, &config.type_).await?;
    let r = Resource {
        name,
        config,
        image: &image,
        check_timeout: None,
    };
    let version = image_version(ctx, &r, pinned).await?;
    let base = Some(config.type_.base());
    if let Some(pull) = native_pull(name, config, params, &version)? {
        return fetch_pulled(ctx, name, config, params, version, pull).await;
    }
    // The key of a `get` of the same type, source, version and params: a
    // get and an image share one cache, as in Concourse.
    let key = config.cache_key(&version, params);
    if let Some(hit) = cached(ctx, &key).await? {
        ResourceStats::count(&ctx.resource_stats().cache_hits);
        tell(ctx, name, "image", &hit.version, &hit.metadata, true, None).await?;
        return match hit.image_env {
            Some(_) => Ok(image_of(&hit, base)),
            // A get's files: the image in them, converted once.
            None => Ok(image_of_files(ctx, name, &hit.artifact_id, base).await?),
        };
    }
    ResourceStats::count(&ctx.resource_stats().cache_misses);
    let (volume, (version, metadata)) = run_in(ctx, &r, &version, params).await?;
    let image = keep_image(ctx, name, volume.as_ref(), version, metadata).await?;
    // The whole of what `in` wrote is the cache (what a get of it uses);
    // the image is kept as the image of those files.
    let files = match volume.stream_out(".", ctx.encoding()).await {
        Ok(body) => keep(ctx, body, ctx.encoding(), ArtifactKind::Files, name).await,
        Err(e) => Err(e.into()),
    };
    let mine = files.as_ref().ok().cloned();
    let row = match files {
        Ok(files) => ResourceCacheRow {
            artifact_id: files,
            image_env: None,
            image_user: None,
            ..image.clone()
        },
        Err(e) => {
            // E.g. a root filesystem with absolute symlinks, which the
            // store refuses as files: the image alone is the cache.
            tracing::warn!(image = name, error = %e, "the image's files could not be kept; caching the image only");
            image.clone()
        }
    };
    let row = ctx
        .db()
        .versions()
        .save_resource_cache(ctx.team(), &key, &row)
        .await?;
    tell(
        ctx,
        name,
        "image",
        &row.version,
        &row.metadata,
        false,
        row.worker.as_deref(),
    )
    .await?;
    if row.image_env.is_some() {
        return Ok(image_of(&row, base));
    }
    if mine.as_deref() == Some(row.artifact_id.as_str()) {
        let image_key = artifact_image_key(&row.artifact_id);
        ctx.db()
            .versions()
            .save_resource_cache(ctx.team(), &image_key, &image)
            .await?;
    }
    Ok(image_of_files(ctx, name, &row.artifact_id, base).await?)
}

/// [`fetch_image`] of an image the workers pull themselves: cached apart
/// from gets (a get of a native type keeps no cache).
async fn fetch_pulled(
    ctx: &mut StepContext,
    name: &str,
    config: &ResourceConfig,
    params: &Value,
    version: Value,
    pull: gantry_wire::native::PullImage,
) -> Result<FetchedImage, Halt> {
    let key = config.cache_key(&version, &json!({"image": params}));
    let base = Some(config.type_.base());
    let pulled = Some(pull.clone());
    if let Some(hit) = cached(ctx, &key).await? {
        ResourceStats::count(&ctx.resource_stats().cache_hits);
        tell(ctx, name, "image", &hit.version, &hit.metadata, true, None).await?;
        return Ok(FetchedImage {
            pull: pulled,
            ..image_of(&hit, base)
        });
    }
    ResourceStats::count(&ctx.resource_stats().cache_misses);
    let row = pull_image(ctx, name, &pull, version).await?;
    let row = ctx
        .db()
        .versions()
        .save_resource_cache(ctx.team(), &key, &row)
        .await?;
    tell(
        ctx,
        name,
        "image",
        &row.version,
        &row.metadata,
        false,
        row.worker.as_deref(),
    )
    .await?;
    Ok(FetchedImage {
        pull: pulled,
        ..image_of(&row, base)
    })
}

/// Keeps the image a volume holds (as a resource's `in` writes it: the
/// mock's mirror marker, an OCI layout `image.tar`, or `rootfs/`, with
/// `metadata.json`), for a cache row of `version`.
async fn keep_image(
    ctx: &StepContext,
    name: &str,
    volume: &dyn Volume,
    version: Value,
    metadata: Value,
) -> Result<ResourceCacheRow, EngineError> {
    let (env, user) = image_metadata(volume).await?;
    let artifact = if read_file(volume, MIRROR_SELF_MARKER).await.is_ok() {
        DEFAULT_IMAGE.to_string()
    } else if let Ok(tar) = volume.stream_file_out("image.tar").await {
        keep(ctx, tar, Encoding::Raw, ArtifactKind::Image, name).await?
    } else {
        let encoding = ctx.encoding();
        let body = volume.stream_out("rootfs", encoding).await.map_err(|e| {
            EngineError::Invalid(format!(
                "the image {name:?} has neither rootfs/ nor image.tar: {e}"
            ))
        })?;
        keep(ctx, body, encoding, ArtifactKind::Image, name).await?
    };
    Ok(ResourceCacheRow {
        artifact_id: artifact,
        version,
        metadata,
        worker: Some(ctx.worker().name().to_string()),
        image_env: Some(env),
        image_user: user,
    })
}

/// The image in the build's artifact `name` (`artifact`): a `get` of an
/// image resource (a task's `image:`). Its type is unknown, so a mirrored
/// image is the worker's default image without resource scripts.
pub(crate) async fn image_of_artifact(
    ctx: &mut StepContext,
    name: &str,
    artifact: &str,
) -> Result<FetchedImage, EngineError> {
    image_of_files(ctx, name, artifact, None).await
}

/// The key of the cache row holding the image in files artifact `artifact`.
fn artifact_image_key(artifact: &str) -> String {
    format!("artifact-image:{artifact}")
}

/// The image in files artifact `artifact` (what a resource's `in` wrote),
/// converted once per artifact (kept as a cache row named after it);
/// `fetched_by` as for [`image_of`].
async fn image_of_files(
    ctx: &mut StepContext,
    name: &str,
    artifact: &str,
    fetched_by: Option<&str>,
) -> Result<FetchedImage, EngineError> {
    let key = artifact_image_key(artifact);
    if let Some(hit) = cached(ctx, &key).await? {
        return Ok(image_of(&hit, fetched_by));
    }
    let volume = ctx
        .input_volume(&format!("image:{name}"), name, artifact)
        .await?;
    let row = keep_image(ctx, name, volume.as_ref(), json!({}), json!([])).await?;
    let row = ctx
        .db()
        .versions()
        .save_resource_cache(ctx.team(), &key, &row)
        .await?;
    Ok(image_of(&row, fetched_by))
}

/// The version of image `r` to fetch: `pinned`; else, when periodic checks
/// of a resource type of one of the build's team's pipelines keep the
/// versions of this image (`pipeline-checks`), the newest they found
/// (checked now only when they found none yet, into the same history);
/// else checked now, as a `get` does.
async fn image_version(
    ctx: &mut StepContext,
    r: &Resource<'_>,
    pinned: Option<&Value>,
) -> Result<Value, Halt> {
    let key = r.config.key();
    let periodic = match pinned {
        None => {
            ctx.db()
                .pipelines()
                .resource_type_scope(ctx.team(), &key)
                .await?
        }
        Some(_) => None,
    };
    let Some(scope) = periodic else {
        return version_to_fetch(ctx, r, pinned).await;
    };
    match ctx.db().versions().newest(&scope, &key, 1).await?.pop() {
        Some(row) => Ok(row.version),
        None => checked_newest(ctx, r, Some(&scope)).await,
    }
}
