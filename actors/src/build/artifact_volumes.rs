//! When a build ends, the volumes holding its artifacts go: its task
//! outputs on the workers that made them and the copies streamed to other
//! workers (newest first, so a copy-on-write child goes before its
//! parent). A volume whose worker is not running, or that cannot be
//! destroyed now, stays `destroying` for the garbage collector.

use crate::build::actor::BuildRun;
use crate::db::HandleKind;
use crate::scheduler::ArtifactLocality;
use crate::state::{HandleState, WorkerState};

impl BuildRun {
    /// Destroys the volumes holding the build's artifacts.
    pub(super) async fn release_artifact_volumes(&self) {
        let db = &self.deps.db;
        let volumes = match db.build_artifact_volumes(self.id).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(build = self.id, "listing the build's artifact volumes: {e}");
                return;
            }
        };
        let mut clients = std::collections::BTreeMap::new();
        for (copy, artifact) in volumes {
            let _ = db
                .set_handle_state(HandleKind::Volume, &copy.volume, HandleState::Destroying)
                .await;
            self.deps.scheduler.do_send(ArtifactLocality {
                artifact,
                worker: copy.worker.clone(),
                present: false,
            });
            if !clients.contains_key(&copy.worker) {
                let client = match db.get_worker(&copy.worker).await {
                    Ok(Some(row)) if row.state == WorkerState::Running => {
                        Some(self.deps.connector.connect(&row.registration))
                    }
                    _ => None,
                };
                clients.insert(copy.worker.clone(), client);
            }
            let Some(Some(worker)) = clients.get(&copy.worker) else {
                continue;
            };
            match worker.destroy_volume(&copy.volume).await {
                Ok(()) => {
                    let _ = db.delete_handle(HandleKind::Volume, &copy.volume).await;
                }
                Err(e) => tracing::warn!(
                    build = self.id,
                    volume = %copy.volume,
                    worker = %copy.worker,
                    "destroying an artifact volume failed, left for GC: {e}"
                ),
            }
        }
    }
}
