//! Where artifacts live when they are on no worker: the interface the engine
//! uses; the web node implements it on its disk.

use async_trait::async_trait;

use crate::error::EngineError;
use crate::runtime::ByteStream;
use crate::spec::Encoding;

/// Worker-independent storage of artifacts (tar streams).
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Opens an artifact as a tar stream in `encoding`.
    async fn open(&self, id: &str, encoding: Encoding) -> Result<ByteStream, EngineError>;
    /// Stores a tar stream given in `encoding` under a new id; returns the id and stored size.
    /// Nothing is left behind when it fails.
    async fn store(
        &self,
        body: ByteStream,
        encoding: Encoding,
    ) -> Result<(String, u64), EngineError>;
    /// Deletes an artifact's data; deleting a missing one is not an error.
    async fn delete(&self, id: &str) -> Result<(), EngineError>;
}
