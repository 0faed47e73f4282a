//! Test helpers for the crates that use this one (with the `testing`
//! feature): an attacker racing the extraction, and tar archives built by
//! hand (entries written as they are, `..` ones too): the one `tar_of`
//! every crate's tests use; byte streams in uneven chunks and back.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt as _;
use gantry_wire::runtime::ByteStream;

/// A stream of `data` in uneven chunks (7919 bytes, a prime: no chunk
/// lines up with a tar block).
pub fn stream_of(data: Vec<u8>) -> ByteStream {
    let chunks: Vec<io::Result<Bytes>> = data
        .chunks(7919)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

/// Everything `s` yields, or its first error.
pub async fn collect(mut s: ByteStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(item) = s.next().await {
        out.extend_from_slice(&item?);
    }
    Ok(out)
}

/// `len` bytes of xorshift noise from `seed` (incompressible).
pub fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

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

/// Appends a tar entry; the path and link target are written as they
/// are (at most 100 bytes each), even `..` ones.
pub fn entry(
    b: &mut tar::Builder<Vec<u8>>,
    path: &str,
    kind: tar::EntryType,
    link: &str,
    data: &[u8],
    mode: u32,
) {
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        old.name[..path.len()].copy_from_slice(path.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(1_600_000_000);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

/// A tar archive of files (`name`, contents), directories (`name/`) and
/// symlinks (`name -> target`).
pub fn tar_of(items: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in items {
        if let Some((link, target)) = name.split_once(" -> ") {
            entry(&mut b, link, tar::EntryType::Symlink, target, b"", 0o777);
        } else if name.ends_with('/') {
            entry(&mut b, name, tar::EntryType::Directory, "", b"", 0o755);
        } else {
            entry(&mut b, name, tar::EntryType::Regular, "", data, 0o755);
        }
    }
    b.into_inner().unwrap()
}
