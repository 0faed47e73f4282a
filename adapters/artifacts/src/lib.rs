//! `gantry-artifacts`: where the web node keeps artifacts (uploaded inputs
//! of one-off builds, outputs kept between steps, images): the engine's
//! [`ArtifactStore`](gantry_actors::api::ArtifactStore) on a directory
//! ([`ArtifactFiles`], `DATA_DIR/artifacts` or a shared file system) and on
//! S3-compatible object storage ([`ArtifactS3`]), with the configuration
//! that picks one ([`ArtifactLocation`]).
//!
//! Both keep an artifact as one zstd tar stream received in one pass under
//! the same rules ([`format`]). The web node builds the store at start and
//! hands it to the engine; nothing else in Gantry names these types.

mod files;
pub mod format;
mod location;
mod s3;

pub use files::ArtifactFiles;
pub use location::{parse_s3_url, ArtifactLocation, S3Config};
pub use s3::{ArtifactS3, IN_FLIGHT, PART};

/// Default of the web node's `max_artifact_bytes`: 10 GiB.
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 10 * 1024 * 1024 * 1024;
