//! Image volumes: an image artifact unpacked into a volume once per worker
//! and kept there for the next containers that use it as their root
//! filesystem. Builds that need the same image on the same worker wait for
//! the first one's import instead of importing it again.

use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument as _;

use crate::db::HandleKind;
use crate::error::EngineError;
use crate::scheduler::ArtifactLocality;

use crate::steps::StepContext;
use gantry_wire::native::{PullImage, PulledImage};
use gantry_wire::state::HandleState;

/// How an image volume is filled when the worker has none.
#[derive(Clone, Copy)]
pub enum Fill<'a> {
    /// From the artifact in the web node's store (an upload, a fetched image).
    Import,
    /// Pulled by the worker from the image's registry.
    Pull(&'a PullImage),
}

impl StepContext {
    /// The handle of the volume holding image `artifact` on the step's
    /// worker, imported there first if it is not. The volume belongs to no
    /// build: it is kept for later steps.
    pub async fn image_volume(&self, artifact: &str) -> Result<String, EngineError> {
        self.image_volume_by(artifact, Fill::Import)
            .await
            .map(|(handle, _)| handle)
    }

    /// [`Self::image_volume`], filled as `fill` says; with what the pull
    /// answered (the image's env and user) when it pulled now.
    pub async fn image_volume_by(
        &self,
        artifact: &str,
        fill: Fill<'_>,
    ) -> Result<(String, Option<PulledImage>), EngineError> {
        let span = tracing::info_span!(
            "image import",
            image.artifact = artifact,
            worker = self.worker.name(),
        );
        self.image_volume_in(artifact, fill).instrument(span).await
    }

    /// [`Self::image_volume_by`], in its span.
    async fn image_volume_in(
        &self,
        artifact: &str,
        fill: Fill<'_>,
    ) -> Result<(String, Option<PulledImage>), EngineError> {
        self.scope
            .db
            .gc()
            .touch_artifact(artifact, crate::db::now_ms())
            .await?;
        let imports = &self.scope.imports;
        let key = (self.worker.name().to_string(), artifact.to_string());
        let lock = imports.entry(key.clone()).or_default().clone();
        let guard = lock.lock().await;
        let found = self.find_or_import_image(artifact, fill).await;
        drop(guard);
        drop(lock);
        // The last one out removes the lock, so the map holds only imports in use.
        imports.remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        found
    }

    /// [`Self::image_volume`] under its lock.
    async fn find_or_import_image(
        &self,
        artifact: &str,
        fill: Fill<'_>,
    ) -> Result<(String, Option<PulledImage>), EngineError> {
        let db = &self.scope.db;
        let worker = &self.worker;
        let encoding = self.scope.encoding;
        if let Some(handle) = db
            .handles()
            .find_artifact_volume(worker.name(), artifact)
            .await?
        {
            if worker.lookup_volume(&handle).await?.is_some() {
                return Ok((handle, None));
            }
            // The worker lost it (e.g. a new disk): forget the row, import again.
            db.handles()
                .delete_handle(HandleKind::Volume, &handle)
                .await?;
        }
        let properties = BTreeMap::from([("image".to_string(), artifact.to_string())]);
        let volume = self.create_unowned_volume(None, properties).await?;
        let handle = volume.handle().to_string();
        let imported = async {
            db.handles().set_volume_artifact(&handle, artifact).await?;
            match fill {
                Fill::Import => {
                    let body = self.scope.artifacts.open(None, artifact, encoding).await?;
                    volume.import_image(encoding, body).await.map(|()| None)
                }
                Fill::Pull(pull) => {
                    return self.pull_from_fleet(volume.as_ref(), artifact, pull).await
                }
            }
            .map_err(|e| EngineError::Invalid(format!("the image could not be used: {e}")))
        }
        .await;
        match imported {
            Ok(pulled) => {
                if let Some(p) = &pulled {
                    tracing::info!(
                        worker = %worker.name(),
                        artifact,
                        layers = p.layers,
                        from_registry = p.fetched,
                        from_peers = p.from_peers,
                        "image pulled onto the worker"
                    );
                }
                db.handles()
                    .set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
                    .await?;
                self.scope.scheduler.do_send(ArtifactLocality {
                    artifact: artifact.to_string(),
                    worker: worker.name().to_string(),
                    present: true,
                });
                Ok((handle, pulled))
            }
            Err(e) => {
                // Half imported: the worker's sweeper destroys it.
                let _ = db
                    .handles()
                    .set_handle_state(HandleKind::Volume, &handle, HandleState::Destroying)
                    .await;
                Err(e)
            }
        }
    }
}

impl StepContext {
    /// Pulls image `artifact` into `volume` (empty, on the step's worker):
    /// its blobs from workers holding the image when there are any (signed
    /// URLs of their image volumes), else from the registry. With image
    /// peers on (the fleet's setting), the first worker of the fleet to
    /// pull an image holds a lock of the image while it does, so the others
    /// wait for it and then pull from it: N workers cost the registry one
    /// fetch of each blob, not N.
    async fn pull_from_fleet(
        &self,
        volume: &dyn gantry_wire::runtime::Volume,
        artifact: &str,
        pull: &PullImage,
    ) -> Result<Option<PulledImage>, EngineError> {
        let pulled = |e: gantry_wire::error::RuntimeError| {
            EngineError::Invalid(format!("the image could not be used: {e}"))
        };
        if !self.scope.streams.config().image_peers {
            return volume.pull_image(pull).await.map(Some).map_err(pulled);
        }
        let peers = self.image_peers(artifact).await?;
        if !peers.is_empty() {
            let with = PullImage {
                peers,
                ..pull.clone()
            };
            return volume.pull_image(&with).await.map(Some).map_err(pulled);
        }
        // No worker holds it yet: the first pulls from the registry under
        // the image's fleet lock (key: no worker), the others wait for it.
        let imports = &self.scope.imports;
        let key = (String::new(), artifact.to_string());
        let lock = imports.entry(key.clone()).or_default().clone();
        let guard = lock.lock().await;
        let result = async {
            let peers = self.image_peers(artifact).await?;
            let with = PullImage {
                peers,
                ..pull.clone()
            };
            let done = volume.pull_image(&with).await.map_err(pulled)?;
            // Marked created before the lock goes, so the workers waiting
            // for it find this worker as a peer.
            self.scope
                .db
                .handles()
                .set_handle_state(HandleKind::Volume, volume.handle(), HandleState::Created)
                .await?;
            Ok(Some(done))
        }
        .await;
        drop(guard);
        drop(lock);
        imports.remove_if(&key, |_, l| Arc::strong_count(l) == 1);
        result
    }

    /// Signed blob URLs of the image volumes holding `artifact` on other
    /// running workers that can check a signed URL.
    async fn image_peers(&self, artifact: &str) -> Result<Vec<String>, EngineError> {
        let db = &self.scope.db;
        let ttl = self.scope.streams.config().url_ttl;
        let mut urls = Vec::new();
        for copy in db.handles().artifact_holders(artifact).await? {
            if copy.worker == self.worker.name() {
                continue;
            }
            let Some(row) = db.workers().get_worker(&copy.worker).await? else {
                continue;
            };
            let reg = &row.registration;
            if row.state != gantry_wire::state::WorkerState::Running || reg.stream_key.is_empty() {
                continue;
            }
            let grant = gantry_wire::stream_url::StreamGrant {
                worker: reg.name.clone(),
                volume: copy.volume,
                path: gantry_wire::stream_url::BLOBS_PATH.to_string(),
                encoding: gantry_wire::spec::Encoding::Raw,
                expires_ms: crate::db::now_ms() + ttl.as_millis() as i64,
            };
            urls.push(grant.blob_url(&reg.agent_url, &reg.stream_key));
        }
        Ok(urls)
    }
}
