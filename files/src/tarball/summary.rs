//! What an extraction, a validation or a packing handled.

/// What an extraction, a validation or a packing handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Number of entries (files, directories, links).
    pub entries: u64,
    /// Total bytes of regular file contents.
    pub bytes: u64,
}
