//! The native image types, `registry-image` and `docker-image`, run in the
//! worker's own process (see `gantry_wire::native`): `check` resolves a tag
//! or a semver constraint to a digest, `in` writes an image as
//! concourse/registry-image-resource writes it (`rootfs/` with
//! `metadata.json`, or `image.tar`, or `oci/`), `out` pushes an image
//! tarball, and a volume becomes an image's root filesystem straight from
//! the registry (`pull_into`). Every blob goes through the worker's cache
//! ([`blobs::Blobs`]): a layer shared by several images, or pulled again, is
//! fetched once. The client is `oci-client` (the ORAS project's OCI
//! distribution client: registry token flow and basic auth, image indexes,
//! chunked uploads), on rustls with ring.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;

use gantry_wire::native::{NativeAnswer, NativeRun, PullImage, PulledImage};
use gantry_wire::spec::MountSpec;
use serde_json::{json, Value};

use crate::error::{blocking, AgentError};
use crate::tree::remove_tree;
use crate::volumes::VolumeStore;

pub mod blobs;
mod check;
mod client;
pub mod diffs;
mod image;
mod push;
pub mod source;

use blobs::Blobs;
use client::Remote;
use diffs::Diffs;
use source::{GetParams, PutParams, Source, Version};

/// The worker's native image types: the blob cache and a work directory.
pub struct NativeTypes {
    /// Every blob fetched, by digest.
    pub blobs: Blobs,
    /// Every layer applied, decompressed, by diff id.
    pub diffs: Diffs,
    /// `WORK_DIR/registry/work`: a directory per pull or push, removed after.
    work: PathBuf,
}

#[async_trait::async_trait]
impl crate::volumes::PullInto for NativeTypes {
    async fn pull_into(
        &self,
        pull: &PullImage,
        work: &Path,
        data: &Path,
    ) -> Result<PulledImage, AgentError> {
        NativeTypes::pull_into(self, pull, work, data).await
    }
}

/// A work directory removed when dropped.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = remove_tree(&self.0);
    }
}

impl NativeTypes {
    /// The native types of a worker whose work directory is `work_dir`;
    /// leftovers of pulls cut short are removed. Blocking.
    pub fn open(work_dir: &Path) -> std::io::Result<Self> {
        let work = work_dir.join("registry").join("work");
        remove_tree(&work)?;
        std::fs::create_dir_all(&work)?;
        let blobs = Blobs::open(work_dir)?;
        let diffs = Diffs::open(work_dir, blobs.http())?;
        Ok(NativeTypes { blobs, diffs, work })
    }

    /// Blobs fetched from registries, found in the cache, and fetched from
    /// peers (as blobs or decompressed layers) since start.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.blobs.fetched.load(Ordering::Relaxed),
            self.blobs.reused.load(Ordering::Relaxed),
            self.blobs.from_peers.load(Ordering::Relaxed)
                + self.diffs.from_peers.load(Ordering::Relaxed),
        )
    }

    /// Opens blob `digest` for a peer holding a grant for image volume
    /// `volume` (whose record `pulled` lists the image's blobs): only a
    /// blob of that image, and only one this worker has.
    pub async fn open_for_peer(
        &self,
        pulled: &PulledImage,
        digest: &str,
    ) -> Result<tokio::fs::File, AgentError> {
        let missing = || AgentError::NotFound {
            kind: "blob",
            handle: digest.to_string(),
        };
        if !pulled.blobs.iter().any(|b| b == digest) {
            return Err(missing());
        }
        let path = self.blobs.path(digest).map_err(AgentError::BadRequest)?;
        tokio::fs::File::open(&path).await.map_err(|_| missing())
    }

    /// Opens the decompressed layer (zstd) `diff_id` for a peer holding a
    /// grant for the image volume whose record is `pulled`: only a layer of
    /// that image, and only one this worker has.
    pub async fn open_diff_for_peer(
        &self,
        pulled: &PulledImage,
        diff_id: &str,
    ) -> Result<tokio::fs::File, AgentError> {
        let missing = || AgentError::NotFound {
            kind: "layer",
            handle: diff_id.to_string(),
        };
        if !pulled.diffs.iter().any(|d| d == diff_id) {
            return Err(missing());
        }
        self.diffs.open_diff(diff_id).await.ok_or_else(missing)
    }

    fn work_dir(&self) -> WorkDir {
        WorkDir(self.work.join(uuid::Uuid::new_v4().simple().to_string()))
    }

    /// Runs script `run.script` of native type `resource_type`.
    pub async fn run(
        &self,
        volumes: &VolumeStore,
        resource_type: &str,
        run: NativeRun,
    ) -> NativeAnswer {
        let mut log = Vec::new();
        let result = self.script(volumes, resource_type, &run, &mut log).await;
        match result {
            Ok(answer) => NativeAnswer {
                answer: Some(answer),
                failure: None,
                log,
            },
            Err(failure) => NativeAnswer {
                answer: None,
                failure: Some(failure),
                log,
            },
        }
    }

    async fn script(
        &self,
        volumes: &VolumeStore,
        resource_type: &str,
        run: &NativeRun,
        log: &mut Vec<String>,
    ) -> Result<Value, String> {
        let request = &run.request;
        let source = Source::parse(resource_type, request.get("source").unwrap_or(&Value::Null))?;
        let version = || -> Result<Option<Version>, String> {
            match request.get("version") {
                None | Some(Value::Null) => Ok(None),
                Some(v) => serde_json::from_value(v.clone())
                    .map(Some)
                    .map_err(|e| format!("{resource_type} version {v}: {e}")),
            }
        };
        let params = request.get("params").cloned().unwrap_or(Value::Null);
        let locate = |path: &str| -> Result<(PathBuf, PathBuf), String> {
            let dir = run.dir.as_deref().unwrap_or("/");
            let full = if path.starts_with('/') {
                path.to_string()
            } else {
                format!("{}/{path}", dir.trim_end_matches('/'))
            };
            locate(volumes, &run.mounts, &full)
        };
        match run.script.as_str() {
            "check" => {
                let versions = check::check(&source, version()?.as_ref()).await?;
                Ok(serde_json::to_value(versions).expect("versions serialize"))
            }
            "in" => {
                let version =
                    version()?.ok_or_else(|| format!("{resource_type} in: no version given"))?;
                let params = GetParams::parse(resource_type, &params)?;
                let (base, rel) = locate(".")?;
                let dest = base.join(rel);
                self.fetch(&source, &version, &params, &dest, log).await?;
                Ok(json!({
                    "version": version,
                    "metadata": [{"name": "repository", "value": source.repository}],
                }))
            }
            "out" if resource_type == "docker-image" => Err(
                "docker-image put (building and pushing with Docker) is not supported by Gantry: \
                 build the image in a task (an OCI tarball) and put it with registry-image"
                    .into(),
            ),
            "out" => {
                let params = PutParams::parse(&params)?;
                let work = self.work_dir();
                let (version, lines) = push::push(&source, &params, locate, &work.0).await?;
                log.extend(lines);
                Ok(json!({
                    "version": version,
                    "metadata": [{"name": "repository", "value": source.repository}],
                }))
            }
            other => Err(format!("{resource_type} has no script {other:?}")),
        }
    }

    /// `in`: the version's files, then the image in the format asked.
    async fn fetch(
        &self,
        source: &Source,
        version: &Version,
        params: &GetParams,
        dest: &Path,
        log: &mut Vec<String>,
    ) -> Result<(), String> {
        let write = |name: &str, text: &str| {
            std::fs::write(dest.join(name), text).map_err(|e| format!("writing {name}: {e}"))
        };
        write("tag", &version.tag)?;
        write("digest", &version.digest)?;
        write("repository", &source.repository)?;
        if params.skip_download {
            return Ok(());
        }
        log.push(format!("fetching {}@{}", source.repository, version.digest));
        let platform = source.platform();
        let blobs = &self.blobs;
        let digest = version.digest.clone();
        let resolved = check::with_mirror(source, |remote| {
            let (digest, platform) = (digest.clone(), platform.clone());
            async move {
                let image = image::resolve(&remote, blobs, &digest, &platform, &[]).await?;
                Ok((remote, image))
            }
        })
        .await?;
        let (remote, image) = resolved;
        let config = &image.config;
        let labels = serde_json::to_string(&config.labels.clone().unwrap_or_default())
            .expect("labels serialize");
        write("labels.json", &labels)?;
        match params.format.as_deref().unwrap_or("rootfs") {
            "rootfs" => {
                let rootfs = dest.join("rootfs");
                std::fs::create_dir_all(&rootfs).map_err(|e| format!("creating rootfs: {e}"))?;
                let work = self.work_dir();
                let fetched =
                    image::unpack(&remote, (blobs, &self.diffs), &image, &[], &work.0, &rootfs)
                        .await?;
                log.push(format!(
                    "{} layers, {} fetched from the registry",
                    image.manifest.layers.len(),
                    fetched.registry
                ));
                let meta = json!({
                    "env": config.env.clone().unwrap_or_default(),
                    "user": config.user.clone().unwrap_or_default(),
                    "entrypoint": config.entrypoint,
                    "cmd": config.cmd,
                });
                write("metadata.json", &meta.to_string())?;
            }
            format => {
                let scratch = self.work_dir();
                let layout = if format == "oci-layout" {
                    dest.join("oci")
                } else {
                    scratch.0.clone()
                };
                self.write_layout(&remote, &image, &version.tag, &layout)
                    .await?;
                if format == "oci" {
                    let (l, tar) = (layout.clone(), dest.join("image.tar"));
                    blocking("writing image.tar", move || {
                        let out = std::fs::File::create(&tar)
                            .map_err(|e| AgentError::io("creating image.tar", e))?;
                        let mut b = tar::Builder::new(out);
                        b.follow_symlinks(false);
                        b.append_dir_all(".", &l)
                            .and_then(|()| b.finish())
                            .map_err(|e| AgentError::io("writing image.tar", e))
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Writes `image` as an OCI image layout at `dir` (its layers linked, or
    /// copied, from the blob cache on a blocking thread).
    async fn write_layout(
        &self,
        remote: &Remote,
        image: &image::Image,
        tag: &str,
        dir: &Path,
    ) -> Result<(), String> {
        let mut files: Vec<(PathBuf, String)> = Vec::new();
        for layer in &image.manifest.layers {
            let (path, _) = self
                .blobs
                .ensure(remote, &image.reference, layer, &[])
                .await?;
            files.push((path, blobs::sha256_hex(&layer.digest)?.to_string()));
        }
        let media_type = image
            .manifest
            .media_type
            .clone()
            .unwrap_or_else(|| oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string());
        let index = json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": media_type,
                "digest": image.manifest_digest,
                "size": image.manifest_raw.len(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }],
        });
        let small = vec![
            (
                blobs::sha256_hex(&image.manifest.config.digest)?.to_string(),
                image.config_raw.clone(),
            ),
            (
                blobs::sha256_hex(&image.manifest_digest)?.to_string(),
                image.manifest_raw.to_vec(),
            ),
        ];
        let dir = dir.to_path_buf();
        blocking("writing an OCI layout", move || {
            let io = |what: &str, e| AgentError::io(format!("writing the OCI layout: {what}"), e);
            let blobs_dir = dir.join("blobs").join("sha256");
            std::fs::create_dir_all(&blobs_dir).map_err(|e| io("blobs/", e))?;
            for (from, hex) in files {
                let to = blobs_dir.join(&hex);
                std::fs::hard_link(&from, &to)
                    .or_else(|_| std::fs::copy(&from, &to).map(|_| ()))
                    .map_err(|e| io(&hex, e))?;
            }
            for (hex, bytes) in small {
                std::fs::write(blobs_dir.join(&hex), bytes).map_err(|e| io(&hex, e))?;
            }
            std::fs::write(dir.join("index.json"), index.to_string())
                .map_err(|e| io("index.json", e))?;
            std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
                .map_err(|e| io("oci-layout", e))
        })
        .await
        .map_err(|e| e.to_string())
    }

    /// Makes the empty volume `data` the root filesystem of `pull`'s image.
    pub async fn pull_into(
        &self,
        pull: &PullImage,
        work: &Path,
        data: &Path,
    ) -> Result<PulledImage, AgentError> {
        let source =
            Source::parse(&pull.resource_type, &pull.source).map_err(AgentError::BadRequest)?;
        let platform = source.platform();
        let blobs = &self.blobs;
        let (remote, image) = check::with_mirror(&source, |remote| {
            let (digest, platform) = (pull.digest.clone(), platform.clone());
            let peers = &pull.peers;
            async move {
                let image = image::resolve(&remote, blobs, &digest, &platform, peers).await?;
                Ok((remote, image))
            }
        })
        .await
        .map_err(AgentError::Backend)?;
        let fetched = image::unpack(
            &remote,
            (blobs, &self.diffs),
            &image,
            &pull.peers,
            work,
            data,
        )
        .await
        .map_err(AgentError::Backend)?;
        let mut blobs: Vec<String> = vec![image.manifest.config.digest.clone()];
        blobs.extend(image.manifest.layers.iter().map(|l| l.digest.clone()));
        Ok(PulledImage {
            manifest: image.manifest_digest.clone(),
            env: image.config.env.clone().unwrap_or_default(),
            user: image.config.user.clone().filter(|u| !u.is_empty()),
            layers: image.manifest.layers.len(),
            fetched: fetched.registry,
            from_peers: fetched.peers,
            blobs,
            diffs: image.diff_ids.clone(),
            unpacked: true,
        })
    }
}

/// The volume directory and the path beneath it that the container path
/// `path` is at, by the deepest mount holding it.
fn locate(
    volumes: &VolumeStore,
    mounts: &[MountSpec],
    path: &str,
) -> Result<(PathBuf, PathBuf), String> {
    let normal: PathBuf = Path::new(path)
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if normal
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!("{path:?}: \"..\" is not allowed"));
    }
    let mount = mounts
        .iter()
        .filter(|m| normal.starts_with(&m.path))
        .max_by_key(|m| m.path.len())
        .ok_or_else(|| format!("{path:?} is in no volume of the step"))?;
    let rel = normal
        .strip_prefix(&mount.path)
        .map_err(|_| format!("{path:?} is in no volume of the step"))?
        .to_path_buf();
    let volume = volumes.get(&mount.volume).map_err(|e| e.to_string())?;
    Ok((volume.data_dir(), rel))
}
