//! An artifact store holding nothing, for the engine's unit tests: opening
//! or storing fails naming the test double, deleting is recorded, listing
//! answers what the test said it holds.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::artifact_store::{ArtifactStore, StoredArtifact};
use crate::error::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

/// A store with no artifact in it, which records what it is asked to delete.
#[derive(Default)]
pub(crate) struct EmptyStore(Mutex<Vec<String>>, Vec<(String, std::time::SystemTime)>);

impl EmptyStore {
    /// A store listing `listed` (ids and when each was written).
    pub(crate) fn listing(listed: Vec<(String, std::time::SystemTime)>) -> EmptyStore {
        EmptyStore(Mutex::default(), listed)
    }

    /// The ids it was asked to delete.
    pub(crate) fn deleted(&self) -> HashSet<String> {
        self.0.lock().unwrap().iter().cloned().collect()
    }
}

#[async_trait]
impl ArtifactStore for EmptyStore {
    async fn open(&self, id: &str, _: Encoding) -> Result<ByteStream, EngineError> {
        Err(EngineError::Invalid(format!(
            "no artifact {id} in the test's empty store"
        )))
    }
    async fn store(
        &self,
        _: ByteStream,
        _: Encoding,
        _: ArtifactKind,
    ) -> Result<StoredArtifact, EngineError> {
        Err(EngineError::Invalid(
            "nothing is stored in the test's empty store".into(),
        ))
    }
    async fn delete(&self, id: &str) -> Result<(), EngineError> {
        self.0.lock().unwrap().push(id.to_string());
        Ok(())
    }
    async fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, EngineError> {
        Ok(self.1.clone())
    }
}
