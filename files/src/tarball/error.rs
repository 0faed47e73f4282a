//! Why a tar stream could not be packed, extracted or validated, and how
//! that reads as an I/O error.

use std::io;

/// Why a tar stream could not be packed, extracted or validated.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// An entry that would not be safe to extract (it would escape the
    /// destination, it is a device file, ...).
    #[error("refused tar entry {entry:?}: {reason}")]
    Unsafe {
        /// The entry's path as found in the archive.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// The contents exceed [`UnpackLimits::max_bytes`].
    #[error("tar stream exceeds the size limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The stream is not a well-formed (encoded) tar stream; the message
    /// says where (`not a tar stream: ...` for garbage).
    #[error("{0}")]
    Corrupt(String),
    /// Reading the stream or writing the files failed.
    #[error("{0}")]
    Io(String),
}

impl TarError {
    /// Whether the archive itself is at fault (refused, too large or
    /// corrupt) rather than the system (I/O): a client error, not a server
    /// one.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, TarError::Io(_))
    }
}

impl From<TarError> for io::Error {
    fn from(e: TarError) -> Self {
        let kind = match e {
            TarError::Unsafe { .. } => io::ErrorKind::PermissionDenied,
            TarError::TooLarge { .. } | TarError::Corrupt(_) => io::ErrorKind::InvalidData,
            TarError::Io(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}
