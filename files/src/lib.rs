//! `gantry-files`: files handled safely on behalf of others. Untrusted tar
//! streams packed and extracted with limits (`tarball`), paths resolved
//! beneath an open directory one component at a time without following a
//! symlink (`dir_fd`), and directory trees removed, copied and measured
//! (`tree`). The worker agent unpacks what builds send it with these, and
//! the web node its uploads; a crate of its own, because it is the part
//! where a mistake lets a container reach outside its volume, and it
//! depends on nothing of Gantry but the wire types (an encoding, a byte
//! stream).

pub mod dir_fd;
pub mod tarball;
pub mod tree;

/// Test helpers for the crates that use this one (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// The malicious-archive catalogue shared with the end-to-end suites
/// (`tests/malicious_tars/`), for the unit tests of tar handling.
#[cfg(test)]
#[path = "../../tests/malicious_tars/mod.rs"]
pub(crate) mod malicious_tars;
