//! An artifact store holding no artifact, for the engine's unit tests:
//! opening or storing one fails naming the test double, deleting is
//! recorded, listing answers what the test said it holds; build logs are
//! kept in memory (or refused, to play a store that is down).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt as _;

use crate::artifact_store::{ArtifactStore, StoredArtifact};
use crate::error::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

/// A store with no artifact in it, which records what it is asked to delete.
#[derive(Default)]
pub(crate) struct EmptyStore {
    /// The artifacts it was asked to delete.
    deleted: Mutex<Vec<String>>,
    /// What it lists.
    listed: Vec<(String, std::time::SystemTime)>,
    /// The build logs it holds, by name.
    logs: Mutex<HashMap<String, Bytes>>,
    /// Whether it refuses every log operation (a store that is down).
    down: std::sync::atomic::AtomicBool,
}

impl EmptyStore {
    /// A store listing `listed` (ids and when each was written).
    pub(crate) fn listing(listed: Vec<(String, std::time::SystemTime)>) -> EmptyStore {
        EmptyStore {
            listed,
            ..EmptyStore::default()
        }
    }

    /// The ids it was asked to delete.
    pub(crate) fn deleted(&self) -> HashSet<String> {
        self.deleted.lock().unwrap().iter().cloned().collect()
    }

    /// The names of the build logs it holds.
    pub(crate) fn log_names(&self) -> HashSet<String> {
        self.logs.lock().unwrap().keys().cloned().collect()
    }

    /// Plays a store that is down (every log operation fails), or up.
    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    fn up(&self) -> Result<(), EngineError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EngineError::Unavailable("the test's store is down".into()));
        }
        Ok(())
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
        self.deleted.lock().unwrap().push(id.to_string());
        Ok(())
    }
    async fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, EngineError> {
        Ok(self.listed.clone())
    }
    async fn put_log(&self, name: &str, mut body: ByteStream) -> Result<u64, EngineError> {
        self.up()?;
        let mut all = Vec::new();
        while let Some(chunk) = body.next().await {
            all.extend_from_slice(&chunk.map_err(|e| EngineError::io("test log", e))?);
        }
        let size = all.len() as u64;
        self.logs
            .lock()
            .unwrap()
            .insert(name.to_string(), all.into());
        Ok(size)
    }
    async fn open_log(&self, name: &str) -> Result<ByteStream, EngineError> {
        self.up()?;
        let got = self.logs.lock().unwrap().get(name).cloned();
        match got {
            Some(bytes) => Ok(Box::pin(futures::stream::iter([Ok(bytes)]))),
            None => Err(EngineError::NotFound {
                kind: "build log",
                name: name.to_string(),
            }),
        }
    }
    async fn delete_log(&self, name: &str) -> Result<(), EngineError> {
        self.up()?;
        self.logs.lock().unwrap().remove(name);
        Ok(())
    }
}
