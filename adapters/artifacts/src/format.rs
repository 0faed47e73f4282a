//! What every artifact store of the web node shares (the directory one,
//! `files.rs`, and the object storage one, `s3.rs`): an
//! artifact is kept as one zstd tar stream, received in one pass
//! ([`tarball::copy_checked`]) under the same extraction rules and size
//! limit, named by an id that can only be a UUID, and served in the
//! encoding asked for from its stored zstd bytes.

use gantry_actors::EngineError;
use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use gantry_wire::state::ArtifactKind;

use gantry_files::tarball::{self, CopyError, TarError, UnpackLimits};

/// An upload's rules: what its tar stream may hold, and how large it and
/// its contents may be.
#[derive(Debug, Clone, Copy)]
pub struct UploadRules {
    /// Largest artifact accepted: its decoded tar stream and the contents
    /// it unpacks to (`web.max_artifact_bytes`).
    pub max_bytes: u64,
}

impl UploadRules {
    /// The extraction rules an upload of this kind must pass.
    pub fn limits(&self, kind: ArtifactKind) -> UnpackLimits {
        UnpackLimits {
            max_bytes: self.max_bytes,
            // Images hold absolute symlinks (resolved inside the container's
            // root); extraction never follows a symlink, so they are safe.
            allow_absolute_symlinks: kind == ArtifactKind::Image,
            ..UnpackLimits::default()
        }
    }

    /// The engine's answer to an upload over the limit.
    pub fn too_large(&self) -> EngineError {
        EngineError::TooLarge(format!(
            "artifact too large: it exceeds the limit of {} bytes (web.max_artifact_bytes)",
            self.max_bytes
        ))
    }

    /// The engine's answer to a failed upload; `write` turns a failure to
    /// write the stored copy into the store's own error.
    pub fn refusal(
        &self,
        e: CopyError,
        write: impl FnOnce(std::io::Error) -> EngineError,
    ) -> EngineError {
        match e {
            CopyError::Write(e) => write(e),
            CopyError::Tar(TarError::TooLarge { .. }) => self.too_large(),
            CopyError::Tar(e) => {
                EngineError::Invalid(format!("the upload is not an acceptable tar stream: {e}"))
            }
        }
    }
}

/// Checks that `id` can be an artifact's id (hex digits and dashes, as a
/// UUID is written), so it is safe in a file name or an object key; any
/// other is not found.
pub fn checked_id(id: &str) -> Result<&str, EngineError> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(EngineError::NotFound {
            kind: "artifact",
            name: id.to_string(),
        });
    }
    Ok(id)
}

/// A stored zstd tar stream served in `encoding`: the stored bytes as they
/// are for zstd; decoded (and re-encoded for gzip) on the way otherwise,
/// streaming.
pub fn serve_zstd(stored: ByteStream, encoding: Encoding) -> ByteStream {
    match encoding {
        Encoding::Zstd => stored,
        Encoding::Raw => tarball::decode(stored, Encoding::Zstd),
        other => tarball::encode(tarball::decode(stored, Encoding::Zstd), other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hex_and_dashes_can_be_an_id() {
        assert!(checked_id("0f3a-9b").is_ok());
        for bad in ["", "../x", "a/b", "id.tar", "zz"] {
            assert!(
                matches!(checked_id(bad), Err(EngineError::NotFound { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn images_may_hold_absolute_symlinks_and_files_may_not() {
        let rules = UploadRules { max_bytes: 7 };
        assert!(rules.limits(ArtifactKind::Image).allow_absolute_symlinks);
        assert!(!rules.limits(ArtifactKind::Files).allow_absolute_symlinks);
        assert_eq!(rules.limits(ArtifactKind::Files).max_bytes, 7);
        let refused = rules.refusal(CopyError::Tar(TarError::TooLarge { limit: 7 }), |e| {
            EngineError::io("x", e)
        });
        assert!(matches!(refused, EngineError::TooLarge(m) if m.contains("limit of 7 bytes")));
    }
}
