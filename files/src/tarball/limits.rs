//! The limits applied while extracting (or validating) untrusted tar.

/// Limits applied while extracting (or validating) untrusted tar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most bytes of entry contents (regular files, and the data of any other
    /// entry), checked against both the sizes the headers declare and the
    /// bytes actually read.
    pub max_bytes: u64,
    /// Most entries (files, directories, links).
    pub max_entries: u64,
    /// Most path components in an entry's path (`a/b/c` has 3).
    pub max_depth: usize,
    /// Accept symlinks whatever their target (absolute, or climbing above
    /// the destination), as root filesystem images need (`/bin/sh ->
    /// /bin/busybox`). Safe because extraction never follows a symlink; the
    /// target only matters to whoever resolves the link later, such as a
    /// container whose root is the destination. Default false.
    pub allow_absolute_symlinks: bool,
}

impl Default for UnpackLimits {
    /// 10 GiB, 1 000 000 entries, depth 256, symlinks kept inside.
    fn default() -> Self {
        UnpackLimits {
            max_bytes: 10 * 1024 * 1024 * 1024,
            max_entries: 1_000_000,
            max_depth: 256,
            allow_absolute_symlinks: false,
        }
    }
}
