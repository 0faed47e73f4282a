//! Streaming a build artifact into a step's volume, told in the build's
//! events (which input went to which worker).

use std::sync::Arc;

use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::runtime::Volume;
use crate::steps::StepContext;

impl StepContext {
    /// Streams artifact `artifact` (the build's input `name`) into
    /// `volume` on the step's worker, then tells it with a `streaming`
    /// event naming the input, the worker and the bytes stored.
    pub async fn stream_input(
        &self,
        name: &str,
        artifact: &str,
        volume: &Arc<dyn Volume>,
    ) -> Result<(), EngineError> {
        let encoding = self.encoding();
        let body = self.artifacts().open(None, artifact, encoding).await?;
        volume.stream_in(".", encoding, body).await.map_err(|e| {
            EngineError::Invalid(format!("streaming input {name:?} to the worker: {e}"))
        })?;
        let bytes = self
            .db()
            .get_artifact(self.team(), artifact)
            .await?
            .map(|a| a.size_bytes.max(0) as u64)
            .unwrap_or(0);
        self.emit(&BuildEvent::Streaming {
            step: self.step().to_string(),
            what: format!(
                "input {name} (artifact {artifact}) from the web node to worker {}",
                self.worker().name()
            ),
            bytes,
            time: crate::db::now_ms(),
        })
        .await
    }
}
