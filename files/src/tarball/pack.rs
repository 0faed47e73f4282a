//! Packing: directory trees (or one open file) into tar streams, read
//! through directory descriptors so that no symlink is ever followed.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use tar::{EntryType, Header};

use super::encoding::with_encoder;
use super::plumbing::{job_stream, CHUNK};
use super::{TarError, UnpackSummary};
use crate::dir_fd::{changed_meanwhile, Dir, Kind as DiskKind, Opened, Stat};

/// Tars the contents of `dir` (paths relative to `dir`, without a leading
/// component and without an entry for `dir` itself), encoded with `encoding`.
///
/// The archive is produced on a blocking thread, started when the stream is
/// first polled, into a bounded channel: memory stays bounded and dropping the
/// stream stops the work. The tree is read through directory descriptors
/// (see [`crate::dir_fd`]): symlinks are stored as symlinks, never followed,
/// not even when a directory is swapped for one while it is being packed;
/// sockets, fifos and device files are skipped. A missing or unreadable
/// `dir` yields an `Err` item.
pub fn pack_dir(dir: PathBuf, encoding: Encoding) -> ByteStream {
    job_stream(
        None,
        Box::new(move |_, out| {
            let root = Dir::open(&dir)?;
            with_encoder(encoding, out, |w| pack_tree(w, &root, None)).map(drop)
        }),
    )
}

/// Tars `target`, already opened (resolved once by
/// [`Dir::open_beneath`], so nothing is looked up by path again): a
/// directory is packed like [`pack_dir`] (its contents); a regular file
/// gives an archive with that one file, under its name.
pub fn pack_opened(target: Opened, encoding: Encoding) -> ByteStream {
    job_stream(
        None,
        Box::new(move |_, out| match target {
            Opened::Dir(dir) => with_encoder(encoding, out, |w| pack_tree(w, &dir, None)).map(drop),
            Opened::File { mut file, name } => {
                with_encoder(encoding, out, |w| pack_single_file(w, &mut file, &name)).map(drop)
            }
        }),
    )
}

/// Writes a plain (raw) tar file at `out` (created or truncated) with the
/// contents of `dir`, like [`pack_dir`] (blocking). `out` itself is skipped
/// if it lies inside `dir`; the file is synced to disk before returning.
/// Returns what was packed. On error a partial `out` may be left behind.
pub fn write_tar_file(dir: &Path, out: &Path) -> Result<UnpackSummary, TarError> {
    let io_err = |e: io::Error| TarError::Io(e.to_string());
    let file = File::create(out).map_err(|e| io_err(with_path(out, e)))?;
    let meta = file.metadata().map_err(|e| io_err(with_path(out, e)))?;
    let root = Dir::open(dir).map_err(io_err)?;
    let mut w = BufWriter::with_capacity(4 * CHUNK, file);
    let summary = pack_tree(&mut w, &root, Some((meta.dev(), meta.ino()))).map_err(io_err)?;
    let file = w
        .into_inner()
        .map_err(|e| io_err(with_path(out, e.into_error())))?;
    file.sync_all().map_err(|e| io_err(with_path(out, e)))?;
    Ok(summary)
}

/// `e`, its message prefixed with `path`.
fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A tar header with the mode, owner and mtime of `st` (type and size are
/// set by the caller).
fn header_for(st: &Stat) -> Header {
    let mut h = Header::new_gnu();
    h.set_mode(st.mode);
    h.set_uid(st.uid.into());
    h.set_gid(st.gid.into());
    h.set_mtime(st.mtime.max(0) as u64);
    h
}

/// The first `size` bytes of `file`, padded with zeros if it shrank meanwhile
/// (the header already says `size`).
fn exact_reader(file: &mut File, size: u64) -> impl Read + '_ {
    file.take(size).chain(io::repeat(0)).take(size)
}

/// Tars one open regular file as `name`.
fn pack_single_file(w: &mut dyn Write, file: &mut File, name: &OsStr) -> io::Result<UnpackSummary> {
    let mut builder = tar::Builder::new(w);
    let st = Stat::of(file)?;
    let mut h = header_for(&st);
    h.set_entry_type(EntryType::Regular);
    h.set_size(st.size);
    builder.append_data(&mut h, name, exact_reader(file, st.size))?;
    builder.into_inner()?;
    Ok(UnpackSummary {
        entries: 1,
        bytes: st.size,
    })
}

/// Size of the reads of file contents while packing.
const READ_SIZE: usize = 4 * CHUNK;

/// A reader that reads `inner` in pieces of its buffer's size, whatever the
/// size of the reads asked of it: the tar builder copies data in 8 KiB
/// pieces, which would make as many system calls.
struct LargeReads<'a, R> {
    /// The file (or whatever) read.
    inner: R,
    /// The buffer, reused from file to file.
    buf: &'a mut [u8],
    /// Where the unread bytes of `buf` start.
    pos: usize,
    /// Where they end.
    len: usize,
}

impl<'a, R: Read> LargeReads<'a, R> {
    fn new(inner: R, buf: &'a mut [u8]) -> Self {
        LargeReads {
            inner,
            buf,
            pos: 0,
            len: 0,
        }
    }
}

impl<R: Read> Read for LargeReads<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.len {
            if out.len() >= self.buf.len() {
                return self.inner.read(out);
            }
            self.len = self.inner.read(self.buf)?;
            self.pos = 0;
        }
        let n = out.len().min(self.len - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Tars the contents of the open directory `dir` into `w` (depth first,
/// sorted by name), reading only through descriptors. `skip` is a
/// (device, inode) not to pack (the output file itself).
fn pack_tree(w: &mut dyn Write, dir: &Dir, skip: Option<(u64, u64)>) -> io::Result<UnpackSummary> {
    let mut builder = tar::Builder::new(w);
    let mut summary = UnpackSummary::default();
    let mut buf = vec![0u8; READ_SIZE];
    dir.walk(|e| {
        let rel = e.path;
        match e.stat.kind {
            DiskKind::Dir => {
                let mut h = header_for(&e.stat);
                h.set_entry_type(EntryType::Directory);
                h.set_size(0);
                builder.append_data(&mut h, rel, io::empty())?;
            }
            DiskKind::File => {
                if skip == Some((e.stat.dev, e.stat.ino)) {
                    return Ok(false);
                }
                let mut file = match e.parent.open_file(e.name) {
                    Ok(f) => f,
                    Err(err) if changed_meanwhile(&err) => return Ok(false),
                    Err(err) => return Err(with_path(rel, err)),
                };
                let st = Stat::of(&file).map_err(|err| with_path(rel, err))?;
                let mut h = header_for(&st);
                h.set_entry_type(EntryType::Regular);
                h.set_size(st.size);
                let data = LargeReads::new(exact_reader(&mut file, st.size), &mut buf);
                builder.append_data(&mut h, rel, data)?;
                summary.bytes += st.size;
            }
            DiskKind::Symlink => {
                let target = match e.parent.read_link(e.name) {
                    Ok(t) => t,
                    Err(err) if changed_meanwhile(&err) => return Ok(false),
                    Err(err) => return Err(with_path(rel, err)),
                };
                let mut h = header_for(&e.stat);
                h.set_entry_type(EntryType::Symlink);
                h.set_size(0);
                builder.append_link(&mut h, rel, &target)?;
            }
            DiskKind::Other => {
                tracing::warn!(path = %rel.display(), "not packing a socket, fifo or device file");
                return Ok(false);
            }
        }
        summary.entries += 1;
        Ok(true)
    })?;
    builder.into_inner()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{collect, listing};
    use super::*;
    use crate::dir_fd::BeneathError;
    use std::fs;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    /// A reader that records the size of each read asked of it.
    struct Recorder<'a> {
        data: &'a [u8],
        asked: Vec<usize>,
    }

    impl Read for Recorder<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.asked.push(out.len());
            let n = out.len().min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn file_contents_are_read_in_large_pieces_and_come_out_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut inner = Recorder {
            data: &data,
            asked: vec![],
        };
        let mut buf = vec![0u8; 32 * 1024];
        let mut out = vec![];
        let mut piece = [0u8; 8 * 1024];
        {
            let mut reader = LargeReads::new(&mut inner, &mut buf);
            loop {
                let n = reader.read(&mut piece).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&piece[..n]);
            }
        }
        assert_eq!(out, data);
        assert!(
            inner.asked.iter().all(|n| *n == 32 * 1024),
            "{:?}",
            inner.asked
        );
        assert_eq!(inner.asked.len(), 5, "4 reads and the one at the end");
    }

    #[tokio::test]
    async fn pack_opened_file_dir_and_escapes() {
        let tmp = TempDir::new().unwrap();
        let root = tmp.path().join("vol");
        fs::create_dir_all(root.join("sub/inner")).unwrap();
        fs::write(root.join("sub/inner/f.txt"), b"f").unwrap();
        fs::write(root.join("top.txt"), b"top").unwrap();
        fs::write(tmp.path().join("host.txt"), b"host").unwrap();
        symlink("../host.txt", root.join("escape")).unwrap();
        symlink("/", root.join("abs")).unwrap();
        symlink("sub", root.join("alias")).unwrap();
        let open = |sub: &str| Dir::open(&root).unwrap().open_beneath(Path::new(sub));

        let file = collect(pack_opened(
            open("/sub/inner/f.txt").unwrap(),
            Encoding::Raw,
        ))
        .await
        .unwrap();
        assert_eq!(listing(file), vec![("f.txt".to_string(), b"f".to_vec())]);

        let dir = collect(pack_opened(open("sub").unwrap(), Encoding::Zstd))
            .await
            .unwrap();
        let dir = zstd::decode_all(&dir[..]).unwrap();
        let names: Vec<String> = listing(dir).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["inner", "inner/f.txt"]);

        // No symlink is followed on the way, not even one that stays inside.
        for sub in ["escape", "abs/etc", "alias/inner", "alias"] {
            let err = open(sub).unwrap_err();
            assert!(matches!(err, BeneathError::Symlink { .. }), "{sub}: {err}");
            let err = io::Error::from(err);
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{sub}: {err}");
        }
        for sub in ["../host.txt", "sub/../../host.txt"] {
            assert!(
                matches!(open(sub).unwrap_err(), BeneathError::Escapes { .. }),
                "{sub}"
            );
        }
        assert!(matches!(
            open("missing").unwrap_err(),
            BeneathError::NotFound { .. }
        ));
        let err = collect(pack_dir(tmp.path().join("nope"), Encoding::Zstd))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
