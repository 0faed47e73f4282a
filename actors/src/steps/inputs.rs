//! A step's input volumes: an artifact of the web node's store is streamed
//! into a new volume of the step; an artifact held on workers (a job
//! build's task output) is copied to the step's worker once (see
//! `streaming/copies.rs`) and the step gets a copy-on-write child of it, so
//! what the step writes into its input does not change the artifact.

use std::sync::Arc;

use crate::error::EngineError;
use crate::steps::StepContext;
use crate::streaming::{CopyRequest, Source, StreamTransfer, TransferJob};
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::Volume;
use gantry_wire::spec::VolumeStrategy;

impl StepContext {
    /// A new volume of the step, with `role`, holding artifact `artifact`
    /// (the step's input `name`); each transfer is told as a `transfer`
    /// event.
    pub async fn input_volume(
        &self,
        role: &str,
        name: &str,
        artifact: &str,
    ) -> Result<Arc<dyn Volume>, EngineError> {
        if self
            .db()
            .artifact_index()
            .artifact_in_store(artifact)
            .await?
        {
            let volume = self.create_volume(role).await?;
            self.stream_from_store(name, artifact, &volume).await?;
            return Ok(volume);
        }
        let copy = self
            .scope
            .streams
            .copy_to(self.copy_request(name, artifact))
            .await?;
        self.create_volume_with(role, VolumeStrategy::Cow { parent: copy })
            .await
    }

    /// [`Self::input_volume`] for each (role, name, artifact), in
    /// parallel; the volumes by role, in the order given.
    pub async fn input_volumes(
        &self,
        wanted: impl IntoIterator<Item = (String, String, String)>,
    ) -> Result<Vec<(String, Arc<dyn Volume>)>, EngineError> {
        let making = wanted.into_iter().map(|(role, name, artifact)| async move {
            let volume = self.input_volume(&role, &name, &artifact).await?;
            Ok::<_, EngineError>((role, volume))
        });
        futures::future::try_join_all(making).await
    }

    /// What [`crate::streaming::Streams::copy_to`] needs to copy artifact
    /// `artifact` (named `name`) to the step's worker.
    fn copy_request(&self, name: &str, artifact: &str) -> CopyRequest {
        CopyRequest {
            build: self.build(),
            team: self.team().to_string(),
            step: self.step().to_string(),
            name: name.to_string(),
            artifact: artifact.to_string(),
            worker: self.worker().clone(),
            events: self.scope.events.clone(),
            scheduler: self.scope.scheduler.clone(),
        }
    }

    /// Streams artifact `artifact` of the web node's store into `volume`
    /// (under the worker's cap on incoming streams), then tells it.
    async fn stream_from_store(
        &self,
        name: &str,
        artifact: &str,
        volume: &Arc<dyn Volume>,
    ) -> Result<(), EngineError> {
        let streams = &self.scope.streams;
        let config = streams.config();
        let job = TransferJob {
            what: format!("input {name} (artifact {artifact})"),
            source: Source::Store {
                artifact: artifact.to_string(),
            },
            to: self.worker().name().to_string(),
            dest: volume.clone(),
            on_wait: crate::streaming::waiting_event(
                streams,
                &self.scope.events,
                self.step(),
                name,
            ),
        };
        let done = StreamTransfer::run(streams.clone(), job).await?;
        self.emit(&BuildEvent::Transfer {
            step: self.step().to_string(),
            name: name.to_string(),
            artifact: artifact.to_string(),
            from: "web".into(),
            to: self.worker().name().to_string(),
            path: done.path.as_str().to_string(),
            encoding: config.encoding.as_str().to_string(),
            bytes: done.bytes,
            seconds: done.seconds,
            time: crate::db::now_ms(),
        })
        .await
    }
}
