//! The parts of a fetched image that need no resource script: what a
//! worker pulls for a native type's image, the image a resource cache row
//! holds, and the `metadata.json` (env, user) `in` writes beside it.

use futures::StreamExt;
use serde_json::{json, Value};

use crate::db::ResourceCacheRow;
use crate::error::EngineError;
use crate::resources::{ResourceConfig, ResourceType};
use crate::steps::resource_script::FetchedImage;
use crate::steps::StepContext;
use gantry_wire::runtime::Volume;

/// The artifact id a cache row holds for an image that is the worker's
/// default image (`mock` with `mirror_self`): there is nothing to keep.
pub(crate) const DEFAULT_IMAGE: &str = "worker-default-image";

/// The marker `mock`'s `in` writes with `mirror_self`.
pub(super) const MIRROR_SELF_MARKER: &str = "rootfs/.gantry-mirror-self";

/// What a worker pulls for an image of a type the workers run natively
/// (`registry-image`, `docker-image`); none for other types. Such an image
/// is pulled by digest straight into a volume of the step's worker: no `in`,
/// nothing through the web node. `params` would be `in`'s: refused.
pub(super) fn native_pull(
    name: &str,
    config: &ResourceConfig,
    params: &Value,
    version: &Value,
) -> Result<Option<gantry_wire::native::PullImage>, EngineError> {
    let ResourceType::Base { name: type_name } = &config.type_ else {
        return Ok(None);
    };
    if !gantry_wire::native::is_native(type_name) {
        return Ok(None);
    }
    if params.as_object().is_some_and(|p| !p.is_empty()) {
        return Err(EngineError::Invalid(format!(
            "image {name:?}: params are not used when a worker pulls a {type_name} image; remove them"
        )));
    }
    let digest = version
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            EngineError::Invalid(format!(
                "image {name:?}: the version {version} has no digest"
            ))
        })?;
    Ok(Some(gantry_wire::native::PullImage {
        resource_type: type_name.clone(),
        source: config.source.clone(),
        digest: digest.to_string(),
        peers: Vec::new(),
    }))
}

/// The artifact id of image `digest` pulled for `team`: the same for every
/// build, so concurrent first pulls share one artifact (and one fleet lock).
fn pulled_image_id(team: &str, digest: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{team}\0{digest}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hash[..16]);
    uuid::Uuid::from_bytes(bytes).to_string()
}

/// Pulls a registry image onto the step's worker: the image is an artifact
/// of the team named by its digest (recorded once, kept only in volumes on
/// workers), and the cache row says its env and user.
pub(super) async fn pull_image(
    ctx: &StepContext,
    name: &str,
    pull: &gantry_wire::native::PullImage,
    version: Value,
) -> Result<ResourceCacheRow, EngineError> {
    let db = ctx.db();
    let artifact = pulled_image_id(ctx.team(), &pull.digest);
    db.artifact_index()
        .insert_pulled_image(&artifact, ctx.team(), name, &pull.digest)
        .await?;
    let (handle, pulled) = ctx
        .image_volume_by(&artifact, crate::steps::image::Fill::Pull(pull))
        .await?;
    let pulled = match pulled {
        Some(p) => p,
        // The worker held the image already (its cache row had gone): its
        // volume answers the image's env and user from its record.
        None => {
            let volume = ctx.worker().lookup_volume(&handle).await?.ok_or_else(|| {
                EngineError::Invalid(format!("image {name:?}: volume {handle} went away"))
            })?;
            volume.pull_image(pull).await.map_err(|e| {
                EngineError::Invalid(format!("image {name:?} could not be used: {e}"))
            })?
        }
    };
    Ok(ResourceCacheRow {
        artifact_id: artifact,
        version,
        metadata: json!([]),
        worker: Some(ctx.worker().name().to_string()),
        image_env: Some(pulled.env),
        image_user: pulled.user,
    })
}

/// The image a cache row holds; `fetched_by`: the base type whose `in`
/// fetched it, which a mirrored default image runs the scripts of (none: an
/// image whose type is not known, a task's `image:`).
pub(super) fn image_of(row: &ResourceCacheRow, fetched_by: Option<&str>) -> FetchedImage {
    let mirrored = row.artifact_id == DEFAULT_IMAGE;
    FetchedImage {
        artifact: (!mirrored).then(|| row.artifact_id.clone()),
        mirror_of: fetched_by.filter(|_| mirrored).map(str::to_string),
        env: row.image_env.clone().unwrap_or_default(),
        user: row.image_user.clone().filter(|u| !u.is_empty()),
        pull: None,
    }
}

/// `env` and `user` of the fetched image's `metadata.json` (none: empty).
pub(super) async fn image_metadata(
    volume: &dyn Volume,
) -> Result<(Vec<String>, Option<String>), EngineError> {
    let Ok(text) = read_file(volume, "metadata.json").await else {
        return Ok((vec![], None));
    };
    let meta: Value = serde_json::from_slice(&text)
        .map_err(|e| EngineError::Invalid(format!("the image's metadata.json: {e}")))?;
    let env = match meta.get("env") {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => vec![],
    };
    let user = meta
        .get("user")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .map(str::to_string);
    Ok((env, user))
}

/// Most bytes read of a small file of a volume.
const SMALL_FILE_LIMIT: usize = 1 << 20;

/// Reads a small file of a volume.
pub(super) async fn read_file(volume: &dyn Volume, path: &str) -> Result<Vec<u8>, EngineError> {
    let mut body = volume.stream_file_out(path).await?;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| EngineError::Invalid(format!("reading {path}: {e}")))?;
        if out.len() + chunk.len() > SMALL_FILE_LIMIT {
            return Err(EngineError::Invalid(format!(
                "{path} is larger than {SMALL_FILE_LIMIT} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
