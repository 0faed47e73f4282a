//! Where artifacts live when they are on no worker: the interface the engine
//! uses; the web node implements it on its disk or on S3-compatible object
//! storage.

use async_trait::async_trait;

use crate::error::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;

use gantry_wire::state::ArtifactKind;

/// What [`ArtifactStore::store`] kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredArtifact {
    /// The new artifact's id.
    pub id: String,
    /// Bytes of the (decoded) tar stream kept; the store may hold it
    /// compressed.
    pub size: u64,
    /// `sha256:...` of the stored tar, for images (which are deduplicated by it).
    pub digest: Option<String>,
}

/// Worker-independent storage of artifacts (tar streams).
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Opens an artifact as a tar stream in `encoding`.
    async fn open(&self, id: &str, encoding: Encoding) -> Result<ByteStream, EngineError>;
    /// Stores a tar stream given in `encoding` under a new id. Nothing is left
    /// behind when it fails.
    async fn store(
        &self,
        body: ByteStream,
        encoding: Encoding,
        kind: ArtifactKind,
    ) -> Result<StoredArtifact, EngineError>;
    /// Deletes an artifact's data; deleting a missing one is not an error.
    async fn delete(&self, id: &str) -> Result<(), EngineError>;
    /// Stores a finished build's log (its events, as the engine wrote and
    /// compressed them) as object `name`, streamed; answers its bytes. A
    /// failed write leaves nothing. A store that keeps no logs refuses.
    async fn put_log(&self, name: &str, body: ByteStream) -> Result<u64, EngineError> {
        let _ = (name, body);
        Err(EngineError::Unavailable(format!(
            "{} keeps no build logs",
            self.location()
        )))
    }
    /// Opens log object `name` as it was stored.
    async fn open_log(&self, name: &str) -> Result<ByteStream, EngineError> {
        Err(EngineError::NotFound {
            kind: "build log",
            name: name.to_string(),
        })
    }
    /// Deletes log object `name`; deleting a missing one is not an error.
    async fn delete_log(&self, name: &str) -> Result<(), EngineError> {
        let _ = name;
        Ok(())
    }
    /// Every artifact whose data the store holds, with when its data was
    /// last written: the `store-orphans` rule deletes the data no row
    /// records (a node killed between storing an artifact and recording
    /// it). A store that cannot list answers none.
    async fn list(&self) -> Result<Vec<(String, std::time::SystemTime)>, EngineError> {
        Ok(Vec::new())
    }
    /// Removes what web node `node`, taken over as dead, left of its
    /// uploads in progress: it will never finish them. A store whose
    /// unfinished uploads leave nothing behind ignores it.
    async fn forget_node(&self, node: &str) -> Result<(), EngineError> {
        let _ = node;
        Ok(())
    }
    /// Hands the store the engine's owned tasks, for the tasks it spawns
    /// (aborting an upload its request left): at shutdown they are drained
    /// and counted with the others. A store that spawns none ignores it.
    fn own_tasks(&self, tasks: gantry_jobs::Tasks) {
        let _ = tasks;
    }
    /// Where the store is, for messages (its directory, or its
    /// `s3://bucket/prefix`).
    fn location(&self) -> String {
        "the artifact store".into()
    }
    /// What an operator does to point this node at the store the other
    /// web nodes share, for the message refusing a node whose store is not
    /// theirs.
    fn share_hint(&self) -> String {
        "point artifacts_dir at the directory they share".into()
    }
    /// The store's id, if it was given one (see [`ArtifactStore::set_id`]).
    /// Web nodes sharing a database must share one store: the engine
    /// compares this id with the one the database records.
    async fn id(&self) -> Result<Option<String>, EngineError> {
        Ok(None)
    }
    /// Gives the store its id.
    async fn set_id(&self, id: &str) -> Result<(), EngineError> {
        let _ = id;
        Ok(())
    }
    /// Whether the store answers now, for readiness (`/readyz`): a cheap
    /// request, failing with [`EngineError::Unavailable`] when the store
    /// cannot be reached. A local directory always answers.
    async fn check(&self) -> Result<(), EngineError> {
        Ok(())
    }
}
