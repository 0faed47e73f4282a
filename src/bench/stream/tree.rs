//! The data `gantry bench stream` moves: a generated tree of mixed files
//! (text, random bytes, many small files, a few large ones, with symlinks,
//! an executable and an empty directory), and a digest of a tree over its
//! paths, kinds, modes, sizes and contents, to check a copy.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest as _, Sha256};

/// Buffer size for writing and hashing files.
const BUF: usize = 1 << 20;

/// Small files per directory.
const SMALL_PER_DIR: usize = 200;

/// Words of the generated text (compressible, like logs and sources).
const WORDS: &[&str] = &[
    "the",
    "build",
    "step",
    "worker",
    "volume",
    "stream",
    "artifact",
    "task",
    "input",
    "output",
    "container",
    "process",
    "exit",
    "status",
    "ok",
    "error",
    "warning",
    "info",
    "debug",
    "fn",
    "let",
    "mut",
    "match",
    "return",
    "struct",
    "impl",
    "pub",
    "use",
    "crate",
    "self",
    "async",
    "await",
    "{",
    "}",
    "(",
    ")",
    ";",
    "=",
    "==",
    "->",
    "0",
    "1",
    "42",
    "1024",
    "true",
    "false",
    "cargo",
    "test",
    "passed",
    "failed",
    "compiling",
    "finished",
    "downloading",
    "resolving",
    "node_modules",
    "src",
    "lib",
    "main",
    "index.js",
    "package.json",
    "README.md",
    "v1.2.3",
];

/// What [`generate`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files.
    pub files: u64,
    /// Bytes of their contents.
    pub bytes: u64,
}

/// A fast deterministic generator (splitmix64): the data must be cheap to
/// make, not good randomness. Seeded with its state.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`hi > lo`).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    /// Fills `buf` with random (incompressible) bytes.
    pub(crate) fn fill_random(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in chunks.by_ref() {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// Fills `buf` with lines of words (compressible text).
    fn fill_text(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() {
            let r = self.next();
            let word = if r.is_multiple_of(11) {
                "\n"
            } else {
                WORDS[(r >> 8) as usize % WORDS.len()]
            };
            for &b in word.as_bytes().iter().chain(b" ") {
                if i == buf.len() {
                    break;
                }
                buf[i] = b;
                i += 1;
            }
        }
    }
}

/// What a generated file holds.
#[derive(Debug, Clone, Copy)]
enum Content {
    Random,
    Text,
}

/// Writes generated files, counting them.
struct Generator {
    rng: Rng,
    buf: Vec<u8>,
    stats: TreeStats,
}

impl Generator {
    /// Writes the file `path` (making its parents) with `len` bytes.
    fn file(&mut self, path: &Path, len: u64, content: Content) -> io::Result<()> {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut w = BufWriter::with_capacity(BUF, File::create(path)?);
        let mut left = len;
        while left > 0 {
            let n = left.min(BUF as u64) as usize;
            let buf = &mut self.buf[..n];
            match content {
                Content::Random => self.rng.fill_random(buf),
                Content::Text => self.rng.fill_text(buf),
            }
            w.write_all(buf)?;
            left -= n as u64;
        }
        w.into_inner().map_err(|e| e.into_error())?;
        self.stats.files += 1;
        self.stats.bytes += len;
        Ok(())
    }
}

/// Writes `dir` (created if missing) as a tree of about `size` bytes of file
/// contents, the same for the same `seed`: 40 % in a few large files (random
/// and text), 30 % in medium files (64 KiB to 1 MiB), 30 % in many small
/// ones (512 B to 16 KiB, in directories of [`SMALL_PER_DIR`]); plus an
/// executable, two symlinks, a private file and an empty directory.
pub fn generate(dir: &Path, size: u64, seed: u64) -> io::Result<TreeStats> {
    let mut g = Generator {
        rng: Rng(seed),
        buf: vec![0u8; BUF],
        stats: TreeStats::default(),
    };

    // A few large files: 25 % random (media, archives), 15 % text (logs).
    g.file(&dir.join("large/random-0.bin"), size / 8, Content::Random)?;
    g.file(&dir.join("large/random-1.bin"), size / 8, Content::Random)?;
    g.file(&dir.join("large/build.log"), size * 15 / 100, Content::Text)?;

    // Medium files, two text for one random.
    let mut left = size * 30 / 100;
    let mut i = 0u64;
    while left > 0 {
        let len = g.rng.range(64 << 10, 1 << 20).min(left);
        let (content, ext) = if i % 3 == 2 {
            (Content::Random, "bin")
        } else {
            (Content::Text, "txt")
        };
        g.file(
            &dir.join(format!("medium/m{:02}/f{i:05}.{ext}", i % 16)),
            len,
            content,
        )?;
        left -= len;
        i += 1;
    }

    // Many small files, mostly text (sources), some binary.
    let mut left = size.saturating_sub(g.stats.bytes);
    let mut i = 0usize;
    while left > 0 {
        let len = g.rng.range(512, 16 << 10).min(left);
        let d = i / SMALL_PER_DIR;
        let (content, ext) = if i % 4 == 3 {
            (Content::Random, "o")
        } else {
            (Content::Text, "rs")
        };
        let path = dir.join(format!("small/d{:03}/s{:02}/f{i:06}.{ext}", d / 16, d % 16));
        g.file(&path, len, content)?;
        left -= len;
        i += 1;
    }
    let mut stats = g.stats;

    // Modes, symlinks and an empty directory.
    let script = dir.join("bin/run.sh");
    fs::create_dir_all(dir.join("bin"))?;
    fs::write(&script, b"#!/bin/sh\necho bench\n")?;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    let private = dir.join("bin/secret.key");
    fs::write(&private, b"not really secret\n")?;
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600))?;
    stats.files += 2;
    stats.bytes += 21 + 18;
    fs::create_dir_all(dir.join("links"))?;
    symlink("../large/build.log", dir.join("links/latest.log"))?;
    symlink("../small", dir.join("links/sources"))?;
    fs::create_dir_all(dir.join("empty"))?;
    Ok(stats)
}

/// A digest of a tree, and what it covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeDigest {
    /// SHA-256 over every entry, in path order: path, kind, permission
    /// bits, size and contents (a symlink: its target).
    pub sha256: String,
    /// Regular files.
    pub files: u64,
    /// Bytes of their contents.
    pub bytes: u64,
}

/// The digest of the tree under `dir` (not `dir`'s own mode). Symlinks are
/// not followed; owners and mtimes are left out.
pub fn digest(dir: &Path) -> io::Result<TreeDigest> {
    let mut hasher = Sha256::new();
    let mut out = TreeDigest {
        sha256: String::new(),
        files: 0,
        bytes: 0,
    };
    let mut buf = vec![0u8; BUF];
    digest_dir(dir, Path::new(""), &mut hasher, &mut out, &mut buf)?;
    out.sha256 = hex::encode(hasher.finalize());
    Ok(out)
}

/// Hashes the entries of `dir` (at `rel` in the tree), sorted by name.
fn digest_dir(
    dir: &Path,
    rel: &Path,
    hasher: &mut Sha256,
    out: &mut TreeDigest,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let rel = rel.join(&name);
        let meta = fs::symlink_metadata(&path)?;
        let rel_bytes = rel.as_os_str().as_bytes();
        hasher.update((rel_bytes.len() as u64).to_le_bytes());
        hasher.update(rel_bytes);
        hasher.update((meta.mode() & 0o7777).to_le_bytes());
        let ft = meta.file_type();
        if ft.is_dir() {
            hasher.update(b"d");
            digest_dir(&path, &rel, hasher, out, buf)?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&path)?;
            let target = target.as_os_str().as_bytes();
            hasher.update(b"l");
            hasher.update((target.len() as u64).to_le_bytes());
            hasher.update(target);
        } else if ft.is_file() {
            hasher.update(b"f");
            hasher.update(meta.len().to_le_bytes());
            let mut file = File::open(&path)?;
            let mut read = 0u64;
            loop {
                let n = file.read(buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                read += n as u64;
            }
            if read != meta.len() {
                return Err(io::Error::other(format!(
                    "{} changed while it was hashed",
                    path.display()
                )));
            }
            out.files += 1;
            out.bytes += read;
        } else {
            hasher.update(b"o");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_trees_have_the_size_asked_and_mixed_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let size = 4 << 20;
        let stats = generate(tmp.path(), size, 7).unwrap();
        // Every byte asked for, plus the two tiny files of modes.
        assert_eq!(stats.bytes, size + 39);
        let d = digest(tmp.path()).unwrap();
        assert_eq!((d.files, d.bytes), (stats.files, stats.bytes));
        // 30 % of 4 MiB in files of 8 KiB on average.
        assert!(stats.files > 120, "{stats:?}: too few small files");
        let mode = |p: &str| fs::metadata(tmp.path().join(p)).unwrap().mode() & 0o777;
        assert_eq!(mode("bin/run.sh"), 0o755);
        assert_eq!(mode("bin/secret.key"), 0o600);
        assert!(fs::symlink_metadata(tmp.path().join("links/sources"))
            .unwrap()
            .file_type()
            .is_symlink());
        // Random files do not compress; text does.
        let random = fs::read(tmp.path().join("large/random-0.bin")).unwrap();
        let text = fs::read(tmp.path().join("large/build.log")).unwrap();
        let ratio = |b: &[u8]| zstd::encode_all(b, 1).unwrap().len() as f64 / b.len() as f64;
        assert!(ratio(&random) > 0.99, "{}", ratio(&random));
        assert!(ratio(&text) < 0.5, "{}", ratio(&text));
    }

    /// A change made to a copy.
    type Change<'a> = Box<dyn Fn() + 'a>;

    #[test]
    fn the_digest_sees_every_difference_a_wrong_copy_could_have() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        generate(&a, 256 << 10, 1).unwrap();
        generate(&b, 256 << 10, 1).unwrap();
        let same = digest(&a).unwrap();
        assert_eq!(same, digest(&b).unwrap(), "same seed, same tree");

        let file = b.join("large/random-1.bin");
        let changes: Vec<(&str, Change)> = vec![
            (
                "one byte of contents",
                Box::new(|| {
                    let mut data = fs::read(&file).unwrap();
                    data[100] ^= 1;
                    fs::write(&file, data).unwrap();
                }),
            ),
            (
                "a mode",
                Box::new(|| fs::set_permissions(&file, fs::Permissions::from_mode(0o700)).unwrap()),
            ),
            (
                "a missing empty directory",
                Box::new(|| fs::remove_dir(b.join("empty")).unwrap()),
            ),
            (
                "a symlink's target",
                Box::new(|| {
                    fs::remove_file(b.join("links/sources")).unwrap();
                    symlink("../medium", b.join("links/sources")).unwrap();
                }),
            ),
        ];
        for (what, change) in changes {
            // Start each change from a faithful copy.
            fs::remove_dir_all(&b).unwrap();
            generate(&b, 256 << 10, 1).unwrap();
            assert_eq!(digest(&b).unwrap(), same);
            change();
            assert_ne!(digest(&b).unwrap().sha256, same.sha256, "{what}");
        }
    }
}
