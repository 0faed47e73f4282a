//! Tar streams: packing directories into (encoded) tar streams and safely
//! extracting untrusted ones.
//!
//! Used by the worker agent (stream volumes in and out), by the web node
//! (validate and relay artifacts) and by the CLI (upload input directories,
//! download outputs).
//!
//! Every transfer is a GNU/PAX compatible tar stream with an [`Encoding`]
//! (`zstd`, `gzip` or `raw`). All the work on files and on compression runs on
//! blocking threads (never on the async executor) and talks to the async side
//! through bounded channels, so memory stays bounded whatever the size of the
//! archive.
//!
//! Extraction treats the archive as untrusted: nothing is ever written outside
//! the destination directory. See [`unpack`] for the exact rules;
//! [`validate_file`] applies the same rules without writing anything.
//!
//! One layer per file: `plumbing.rs` (blocking jobs fed from and feeding
//! async streams), `encoding.rs` (zstd, gzip, raw), `pack.rs` (directories
//! into tar), `extract.rs` (untrusted tar onto disk, or validated; `extract/write.rs`
//! makes each entry on disk),
//! `entry_path.rs` (which entry paths and link targets are safe),
//! `attrs.rs` (modes, mtimes and owners restored), `read_state.rs` (what
//! the readers below the tar parser saw),
//! `tee.rs` (an upload copied as zstd and checked in one pass),
//! `limits.rs`, `summary.rs` and `error.rs`.
//!
//! [`Encoding`]: gantry_wire::spec::Encoding

mod attrs;
mod encoding;
mod entry_path;
mod error;
mod extract;
mod limits;
mod pack;
mod plumbing;
mod read_state;
mod summary;
mod tee;

#[cfg(test)]
mod round_trip_tests;
#[cfg(test)]
mod symlink_race_tests;
#[cfg(test)]
mod test_support;

pub use encoding::{decode, encode, GZIP_LEVEL, ZSTD_LEVEL};
pub use error::TarError;
pub use extract::{unpack, unpack_at, validate_file};
pub use limits::UnpackLimits;
pub use pack::{pack_dir, pack_opened, write_tar_file};
pub use summary::UnpackSummary;
pub use tee::{copy_checked, CheckedCopy, CopyError};
