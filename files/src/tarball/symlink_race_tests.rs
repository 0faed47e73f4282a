//! Symlink races: a directory swapped for a symlink to the host after it was
//! resolved, or flipping back and forth while archives are packed from and
//! extracted into the tree, never leads a read or a write outside.

use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use gantry_wire::spec::Encoding;
use tempfile::TempDir;

use super::test_support::{collect, listing, stream_of, unsafe_reason};
use super::{pack_dir, pack_opened, unpack, unpack_at, TarError, UnpackLimits};
use crate::dir_fd::Dir;
use crate::malicious_tars::RawTar;

/// `vol/a/b/f.txt` ("inside") next to `host/` holding the same names
/// ("secret"), which nothing may read or write.
struct SwapFx {
    _tmp: TempDir,
    vol: PathBuf,
    host: PathBuf,
}

impl SwapFx {
    fn new() -> SwapFx {
        let tmp = TempDir::new().unwrap();
        let vol = tmp.path().join("vol");
        let host = tmp.path().join("host");
        for base in [&vol, &host] {
            fs::create_dir_all(base.join("a/b")).unwrap();
        }
        fs::write(vol.join("a/b/f.txt"), b"inside").unwrap();
        fs::write(host.join("a/b/f.txt"), b"secret").unwrap();
        fs::write(host.join("secret.txt"), b"secret").unwrap();
        SwapFx {
            _tmp: tmp,
            vol,
            host,
        }
    }

    /// Replaces `vol/REL` with a symlink to the same place in `host/`
    /// (the original moves to `REL.old`).
    fn swap(&self, rel: &str) {
        let at = self.vol.join(rel);
        fs::rename(&at, self.vol.join(format!("{rel}.old"))).unwrap();
        symlink(self.host.join(rel), &at).unwrap();
    }

    fn assert_host_untouched(&self) {
        let mut all = Vec::new();
        let root = Dir::open(&self.host).unwrap();
        root.walk(|e| {
            all.push(e.path.display().to_string());
            Ok(true)
        })
        .unwrap();
        assert_eq!(all, vec!["a", "a/b", "a/b/f.txt", "secret.txt"]);
        assert_eq!(fs::read(self.host.join("a/b/f.txt")).unwrap(), b"secret");
    }
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_after_resolution_is_not_followed() {
    // Packing: resolved, then `a` and `a/b` swapped for host symlinks.
    let fx = SwapFx::new();
    let target = Dir::open(&fx.vol)
        .unwrap()
        .open_beneath(Path::new("a/b"))
        .unwrap();
    fx.swap("a/b");
    fx.swap("a");
    let data = collect(pack_opened(target, Encoding::Raw)).await.unwrap();
    assert_eq!(
        listing(data),
        vec![("f.txt".to_string(), b"inside".to_vec())]
    );
    // Packing the volume now stores the planted links as links.
    let data = collect(pack_dir(fx.vol.clone(), Encoding::Raw))
        .await
        .unwrap();
    let entries = listing(data);
    assert!(entries.contains(&(
        "a".to_string(),
        fx.host.join("a").into_os_string().into_vec()
    )));
    assert!(
        entries.iter().all(|(_, body)| body != b"secret"),
        "{entries:?}"
    );
    fx.assert_host_untouched();

    // Extraction: the destination resolved, then swapped.
    let fx = SwapFx::new();
    let dest = Dir::open(&fx.vol)
        .unwrap()
        .make_dirs_beneath(Path::new("a/b"))
        .unwrap();
    fx.swap("a");
    let archive = RawTar::new()
        .file(b"f.txt", b"pwned")
        .dir(b"c")
        .file(b"c/g.txt", b"new")
        .finish();
    unpack_at(
        stream_of(archive),
        Encoding::Raw,
        dest,
        UnpackLimits::default(),
    )
    .await
    .unwrap();
    assert_eq!(fs::read(fx.vol.join("a.old/b/f.txt")).unwrap(), b"pwned");
    assert_eq!(fs::read(fx.vol.join("a.old/b/c/g.txt")).unwrap(), b"new");
    fx.assert_host_untouched();

    // A parent inside the destination that is a planted symlink is
    // refused, at every level.
    for level in ["a", "a/b"] {
        let fx = SwapFx::new();
        fx.swap(level);
        let r = unpack(
            stream_of(RawTar::new().file(b"a/b/f.txt", b"pwned").finish()),
            Encoding::Raw,
            fx.vol.clone(),
            UnpackLimits::default(),
        )
        .await;
        let (entry, reason) = unsafe_reason(&r);
        assert_eq!(entry, "a/b/f.txt");
        assert!(reason.contains("symlink"), "{reason}");
        fx.assert_host_untouched();
    }
}

#[tokio::test]
async fn a_tree_changing_during_extraction_and_packing_never_leads_outside() {
    // Another thread flips `vol/a` between the real directory and a
    // symlink to the host while archives are extracted into and packed
    // from the volume: each run either works inside or is refused.
    let fx = SwapFx::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = crate::testing::flip_until(&fx.vol.join("a"), &fx.host.join("a"), stop.clone());
    let (mut extracted, mut packed) = (0, 0);
    for i in 0..150 {
        let name = format!("a/b/new{i}.txt");
        let archive = RawTar::new().file(name.as_bytes(), b"pwned").finish();
        let r = unpack(
            stream_of(archive),
            Encoding::Raw,
            fx.vol.clone(),
            UnpackLimits::default(),
        )
        .await;
        match r {
            Ok(_) => extracted += 1,
            Err(TarError::Unsafe { .. }) | Err(TarError::Io(_)) => {}
            Err(e) => panic!("{e}"),
        }
        if let Ok(data) = collect(pack_dir(fx.vol.clone(), Encoding::Raw)).await {
            packed += 1;
            let entries = listing(data);
            assert!(
                entries.iter().all(|(_, body)| body != b"secret"),
                "{entries:?}"
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    assert!(packed > 0, "no packing got through");
    // The directory is back in place (an even number of exchanges).
    assert!(fs::symlink_metadata(fx.vol.join("a")).unwrap().is_dir());
    fx.assert_host_untouched();
    eprintln!("{flips} flips, {extracted} extractions and {packed} packings inside");
}
