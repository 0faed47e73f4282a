//! Test helpers for the crates that use this one (with the `testing`
//! feature): an attacker racing the extraction.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::Path;

/// Starts a thread that atomically exchanges the directory `dir` with a
/// symlink to `outside` (`renameat2(RENAME_EXCHANGE)`, as an attacker
/// would, so that `dir` always exists) until `stop`, leaving the
/// directory in place; it returns the number of exchanges.
pub fn flip_until(
    dir: &Path,
    outside: &Path,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let link = dir.with_extension("flip");
    symlink(outside, &link).unwrap();
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let (a, b) = (c(dir), c(&link));
    std::thread::spawn(move || {
        let mut flips = 0u64;
        while flips % 2 == 1
            || (!stop.load(std::sync::atomic::Ordering::Relaxed) && flips < 10_000_000)
        {
            // SAFETY: both paths are NUL-terminated and outlive the call.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(r, 0, "{}", io::Error::last_os_error());
            flips += 1;
        }
        flips
    })
}
