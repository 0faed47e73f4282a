//! A catalogue of malicious tar archives, shared by the end-to-end tar-safety
//! suite of the artifact API (`tests/tar_safety.rs`) and by the worker
//! agent's stream-in suite (`src/agent/tar_safety_tests.rs`, which includes
//! this file with `#[path]`), so both sides face exactly the same archives.
//!
//! The archives are built header by header: the `tar` crate's `Builder`
//! refuses most of these paths, and an attacker does not use it. Every case
//! aims at a marker file in `BASE/outside/` (next to the data or work
//! directory the archive ends up under): overwriting it, hardlinking it,
//! creating a file next to it, or writing through a link into it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tar::{EntryType, Header};

/// Contents of the marker file no archive may change.
pub const MARKER: &[u8] = b"marker: must never change\n";

/// What must happen to an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Refused with a client error whose message contains every one of these
    /// strings (the entry's name and the reason).
    Refused(Vec<String>),
    /// Refused because it is over the size limit.
    TooLarge,
    /// Accepted, and everything it creates stays inside the destination.
    Contained,
}

/// One malicious archive.
#[derive(Debug, Clone)]
pub struct Case {
    /// Short name, used in assertion messages and to pick the checks of a
    /// contained case.
    pub name: &'static str,
    /// The plain (raw) tar stream.
    pub archive: Vec<u8>,
    /// What must happen to it.
    pub expect: Expect,
}

/// The fixture around the destination: `BASE/outside/marker.txt`.
pub struct Outside {
    /// `BASE/outside`.
    pub dir: PathBuf,
}

impl Outside {
    /// Creates `base/outside/marker.txt`.
    pub fn create(base: &Path) -> Outside {
        let dir = base.join("outside");
        std::fs::create_dir_all(&dir).expect("creating the outside dir");
        std::fs::write(dir.join("marker.txt"), MARKER).expect("writing the marker");
        Outside { dir }
    }

    /// The marker's absolute path.
    pub fn marker(&self) -> PathBuf {
        self.dir.join("marker.txt")
    }

    /// What an archive could change about the outside directory: its
    /// entries, and the marker's inode, link count, size, mtime and contents.
    pub fn snapshot(&self) -> Snapshot {
        use std::os::unix::fs::MetadataExt;
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .expect("listing the outside dir")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        let m = std::fs::symlink_metadata(self.marker()).expect("the marker exists");
        Snapshot {
            names,
            is_file: m.file_type().is_file(),
            ino: m.ino(),
            nlink: m.nlink(),
            mtime: (m.mtime(), m.mtime_nsec()),
            contents: std::fs::read(self.marker()).expect("reading the marker"),
        }
    }

    /// Asserts that the outside directory holds only the untouched marker.
    pub fn assert_untouched(&self, initial: &Snapshot, what: &str) {
        let now = self.snapshot();
        assert_eq!(
            now.names,
            vec!["marker.txt"],
            "{what}: something appeared next to the marker"
        );
        assert!(
            now.is_file,
            "{what}: the marker is no longer a regular file"
        );
        assert_eq!(now.nlink, 1, "{what}: the marker was hardlinked");
        assert_eq!(now.contents, MARKER, "{what}: the marker changed");
        assert_eq!(now, *initial, "{what}: the marker's metadata changed");
    }
}

/// See [`Outside::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Entries of the outside directory, sorted.
    pub names: Vec<String>,
    /// Whether the marker is (still) a regular file.
    pub is_file: bool,
    /// The marker's inode.
    pub ino: u64,
    /// Its link count.
    pub nlink: u64,
    /// Its mtime (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Its contents.
    pub contents: Vec<u8>,
}

/// Builds tar archives header by header, with raw paths.
pub struct RawTar(Vec<u8>);

impl Default for RawTar {
    fn default() -> Self {
        Self::new()
    }
}

impl RawTar {
    /// An empty archive.
    pub fn new() -> Self {
        RawTar(Vec::new())
    }

    /// A GNU header with a raw name and link name (each at most 100 bytes).
    pub fn header(path: &[u8], kind: EntryType, link: &[u8], size: u64) -> Header {
        let mut h = Header::new_gnu();
        {
            let old = h.as_old_mut();
            old.name[..path.len()].copy_from_slice(path);
            old.linkname[..link.len()].copy_from_slice(link);
        }
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_mtime(1_600_000_000);
        h.set_cksum();
        h
    }

    /// Appends a header and its data, padded to a block.
    pub fn raw(mut self, h: &Header, data: &[u8]) -> Self {
        self.0.extend_from_slice(h.as_bytes());
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0, pad));
        self
    }

    /// A regular file.
    pub fn file(self, path: &[u8], data: &[u8]) -> Self {
        let h = Self::header(path, EntryType::Regular, b"", data.len() as u64);
        self.raw(&h, data)
    }

    /// A directory.
    pub fn dir(self, path: &[u8]) -> Self {
        let h = Self::header(path, EntryType::Directory, b"", 0);
        self.raw(&h, b"")
    }

    /// A symlink.
    pub fn symlink(self, path: &[u8], target: &[u8]) -> Self {
        let h = Self::header(path, EntryType::Symlink, target, 0);
        self.raw(&h, b"")
    }

    /// A hardlink.
    pub fn hardlink(self, path: &[u8], target: &[u8]) -> Self {
        let h = Self::header(path, EntryType::Link, target, 0);
        self.raw(&h, b"")
    }

    /// A device node or fifo.
    pub fn special(self, path: &[u8], kind: EntryType, major: u32, minor: u32) -> Self {
        let mut h = Self::header(path, kind, b"", 0);
        h.set_device_major(major).expect("a GNU header");
        h.set_device_minor(minor).expect("a GNU header");
        h.set_cksum();
        self.raw(&h, b"")
    }

    /// A GNU long name (`L`) for the next entry.
    pub fn long_name(self, name: &[u8]) -> Self {
        self.gnu_long(EntryType::GNULongName, name)
    }

    /// A GNU long link name (`K`) for the next entry.
    pub fn long_link(self, target: &[u8]) -> Self {
        self.gnu_long(EntryType::GNULongLink, target)
    }

    fn gnu_long(self, kind: EntryType, value: &[u8]) -> Self {
        let mut data = value.to_vec();
        data.push(0);
        let h = Self::header(b"././@LongLink", kind, b"", data.len() as u64);
        self.raw(&h, &data)
    }

    /// PAX records for the next entry.
    pub fn pax(self, records: &[(&str, &[u8])]) -> Self {
        let mut data = Vec::new();
        for (k, v) in records {
            let body_len = k.len() + v.len() + 3; // ' ' '=' '\n'
            let mut len = body_len + 1;
            while len != body_len + len.to_string().len() {
                len = body_len + len.to_string().len();
            }
            data.extend_from_slice(format!("{len} {k}=").as_bytes());
            data.extend_from_slice(v);
            data.push(b'\n');
        }
        let h = Self::header(b"PaxHeaders/x", EntryType::XHeader, b"", data.len() as u64);
        self.raw(&h, &data)
    }

    /// The archive with its end-of-archive marker.
    pub fn finish(mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0u8; 1024]);
        self.0
    }
}

/// A 12-byte GNU numeric field: octal, or base-256 when too big for octal.
fn numeric(v: u64) -> [u8; 12] {
    let mut f = [0u8; 12];
    if v < 8u64.pow(11) {
        f.copy_from_slice(format!("{v:011o}\0").as_bytes());
    } else {
        f[0] = 0x80;
        f[4..].copy_from_slice(&v.to_be_bytes());
    }
    f
}

/// A GNU sparse file of `real` bytes whose only data is its last 512-byte
/// block: a tiny archive that unpacks to a huge file.
pub fn sparse_archive(real: u64) -> Vec<u8> {
    let mut h = RawTar::header(b"sparse", EntryType::GNUSparse, b"", 512);
    {
        let gnu = h.as_gnu_mut().expect("a GNU header");
        gnu.sparse[0].offset = numeric(real - 512);
        gnu.sparse[0].numbytes = numeric(512);
        gnu.realsize = numeric(real);
    }
    h.set_cksum();
    RawTar::new().raw(&h, &[b'z'; 512]).finish()
}

fn s(v: &str) -> String {
    v.to_string()
}

fn refused(parts: &[&str]) -> Expect {
    Expect::Refused(parts.iter().map(|p| p.to_string()).collect())
}

/// The malicious archives. `base` holds `outside/marker.txt` (see
/// [`Outside`]); `depth` is how many directories the destination the archive
/// is unpacked into lies below `base`, so that the relative escapes really
/// lead to the marker.
pub fn catalogue(base: &Path, depth: usize) -> Vec<Case> {
    use std::os::unix::ffi::OsStrExt;
    let up = "../".repeat(depth);
    let outside = base.join("outside");
    let outside_abs = outside.as_os_str().as_bytes().to_vec();
    let marker_abs = outside.join("marker.txt").as_os_str().as_bytes().to_vec();
    let new_abs = outside.join("new.txt").as_os_str().as_bytes().to_vec();
    let marker_rel = format!("{up}outside/marker.txt");
    let new_rel = format!("{up}outside/new.txt");
    let outside_rel = format!("{up}outside");
    let abs_shown = String::from_utf8_lossy(&marker_abs).into_owned();

    let deep_name = format!("{}x", "d/".repeat(300));

    vec![
        // --- absolute paths -------------------------------------------------
        Case {
            name: "absolute path overwriting the marker",
            archive: RawTar::new().file(&marker_abs, b"pwned").finish(),
            expect: Expect::Refused(vec![abs_shown.clone(), s("absolute paths are not allowed")]),
        },
        Case {
            name: "absolute path creating a file next to the marker",
            archive: RawTar::new().dir(b"ok").file(&new_abs, b"pwned").finish(),
            expect: refused(&["outside/new.txt", "absolute paths are not allowed"]),
        },
        // --- `..` escapes ---------------------------------------------------
        Case {
            name: "../ escape overwriting the marker",
            archive: RawTar::new().file(marker_rel.as_bytes(), b"pwned").finish(),
            expect: Expect::Refused(vec![marker_rel.clone(), s("path escapes the destination")]),
        },
        Case {
            name: "../ escape after a directory",
            archive: RawTar::new()
                .dir(b"a")
                .file(format!("a/../{new_rel}").as_bytes(), b"pwned")
                .finish(),
            expect: refused(&["a/../", "path escapes the destination"]),
        },
        Case {
            name: "../ escape hidden in a PAX path",
            archive: RawTar::new()
                .pax(&[("path", new_rel.as_bytes())])
                .file(b"innocent.txt", b"pwned")
                .finish(),
            expect: Expect::Refused(vec![new_rel.clone(), s("path escapes the destination")]),
        },
        Case {
            name: "../ escape hidden in a GNU long name",
            archive: RawTar::new()
                .long_name(format!("{}{new_rel}", "ok/".repeat(40)).as_bytes())
                .file(b"innocent.txt", b"pwned")
                .finish(),
            expect: refused(&["ok/ok/ok/", "path escapes the destination"]),
        },
        // --- symlinks -------------------------------------------------------
        Case {
            name: "symlink escape then a write through it",
            archive: RawTar::new()
                .symlink(b"evil", outside_rel.as_bytes())
                .file(b"evil/new.txt", b"pwned")
                .file(b"evil/marker.txt", b"pwned")
                .finish(),
            expect: refused(&["\"evil\"", "points outside the destination"]),
        },
        Case {
            name: "absolute symlink then a write through it",
            archive: RawTar::new()
                .symlink(b"evil", &outside_abs)
                .file(b"evil/marker.txt", b"pwned")
                .finish(),
            expect: refused(&["\"evil\"", "is absolute"]),
        },
        Case {
            name: "symlink escape through a long link name",
            archive: RawTar::new()
                .long_link(format!("{}{outside_rel}", "./".repeat(60)).as_bytes())
                .symlink(b"evil", b"placeholder")
                .file(b"evil/new.txt", b"pwned")
                .finish(),
            expect: refused(&["\"evil\"", "points outside the destination"]),
        },
        Case {
            name: "symlink climbing through another symlink",
            archive: RawTar::new()
                .dir(b"a/b")
                .symlink(b"a/b/s", b"../..")
                .symlink(b"a/b/t", format!("s/../{outside_rel}").as_bytes())
                .file(b"a/b/t/new.txt", b"pwned")
                .finish(),
            expect: refused(&["\"a/b/t\"", "only leading `..` are allowed"]),
        },
        Case {
            name: "write through an in-volume symlink",
            archive: RawTar::new()
                .dir(b"sub")
                .symlink(b"in", b"sub")
                .file(b"in/x", b"x")
                .finish(),
            expect: refused(&["\"in/x\"", "its parent \"in\" is a symlink"]),
        },
        // --- hardlinks ------------------------------------------------------
        Case {
            name: "hardlink to the marker by absolute path",
            archive: RawTar::new().hardlink(b"h", &marker_abs).finish(),
            expect: refused(&["\"h\"", "hardlink target", "absolute paths are not allowed"]),
        },
        Case {
            name: "hardlink to the marker by ../ path",
            archive: RawTar::new().hardlink(b"h", marker_rel.as_bytes()).finish(),
            expect: refused(&["\"h\"", "hardlink target", "path escapes the destination"]),
        },
        Case {
            name: "hardlink through a symlink",
            archive: RawTar::new()
                .dir(b"sub")
                .file(b"sub/f", b"f")
                .symlink(b"s", b"sub")
                .hardlink(b"h", b"s/f")
                .finish(),
            expect: refused(&["\"h\"", "is not an earlier file of the archive"]),
        },
        // --- device files and fifos ----------------------------------------
        Case {
            name: "character device",
            archive: RawTar::new()
                .special(b"null", EntryType::Char, 1, 3)
                .finish(),
            expect: refused(&["\"null\"", "device files are not allowed"]),
        },
        Case {
            name: "block device",
            archive: RawTar::new()
                .special(b"disk", EntryType::Block, 8, 0)
                .finish(),
            expect: refused(&["\"disk\"", "device files are not allowed"]),
        },
        Case {
            name: "fifo",
            archive: RawTar::new()
                .special(b"pipe", EntryType::Fifo, 0, 0)
                .finish(),
            expect: refused(&["\"pipe\"", "fifos are not allowed"]),
        },
        // --- size -----------------------------------------------------------
        Case {
            name: "sparse file of 1 TiB",
            archive: sparse_archive(1 << 40),
            expect: Expect::TooLarge,
        },
        Case {
            name: "header declaring 64 GiB",
            archive: RawTar::new()
                .raw(
                    &RawTar::header(b"huge", EntryType::Regular, b"", 64 << 30),
                    b"",
                )
                .finish(),
            expect: Expect::TooLarge,
        },
        // --- NUL bytes ------------------------------------------------------
        Case {
            name: "NUL in a GNU long name",
            archive: RawTar::new()
                .long_name(format!("ok\0/{new_rel}").as_bytes())
                .file(b"innocent.txt", b"pwned")
                .finish(),
            expect: refused(&[r"ok\0/", "path contains a NUL byte"]),
        },
        Case {
            name: "NUL in a PAX path",
            archive: RawTar::new()
                .pax(&[("path", b"a\0b")])
                .file(b"innocent.txt", b"x")
                .finish(),
            expect: refused(&[r"a\0b", "path contains a NUL byte"]),
        },
        Case {
            name: "NUL in a PAX link path",
            archive: RawTar::new()
                .pax(&[("linkpath", format!("ok\0/{outside_rel}").as_bytes())])
                .symlink(b"l", b"placeholder")
                .finish(),
            expect: refused(&["\"l\"", "contains a NUL byte"]),
        },
        // --- nesting --------------------------------------------------------
        Case {
            name: "nesting 301 levels deep",
            archive: RawTar::new()
                .long_name(deep_name.as_bytes())
                .file(b"placeholder", b"x")
                .finish(),
            expect: refused(&["d/d/d/d/", "nested deeper than 256 levels"]),
        },
        // --- duplicates -----------------------------------------------------
        Case {
            name: "duplicate entries",
            archive: RawTar::new()
                .file(b"dup", b"one")
                .file(b"./dup", b"two!")
                .symlink(b"l", b"dup")
                .file(b"l", b"now a file")
                .file(b"x", b"file first")
                .dir(b"x")
                .file(b"x/inner", b"inner")
                .finish(),
            expect: Expect::Contained,
        },
        Case {
            name: "duplicate replacing a directory with a symlink",
            archive: RawTar::new()
                .dir(b"d")
                .file(b"d/keep", b"k")
                .symlink(b"d", b"elsewhere")
                .finish(),
            expect: refused(&["\"d\"", "it would replace a directory"]),
        },
        // --- symlink loops --------------------------------------------------
        Case {
            name: "symlink loop",
            archive: RawTar::new()
                .symlink(b"a", b"b")
                .symlink(b"b", b"a")
                .symlink(b"self", b"self")
                .dir(b"sub")
                .symlink(b"sub/up", b"..")
                .file(b"f", b"plain")
                .finish(),
            expect: Expect::Contained,
        },
        Case {
            name: "write through a symlink loop",
            archive: RawTar::new()
                .symlink(b"a", b"b")
                .symlink(b"b", b"a")
                .file(b"a/x", b"x")
                .finish(),
            expect: refused(&["\"a/x\"", "its parent \"a\" is a symlink"]),
        },
    ]
}

/// Encodes a plain tar stream with zstd.
pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).expect("zstd encoding in memory")
}
