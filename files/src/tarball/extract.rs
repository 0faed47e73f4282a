//! Untrusted extraction: a tar stream (or a tar file) checked entry by entry
//! and written beneath a destination directory without ever following a
//! symlink, or only validated against the same rules. See [`unpack`].

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use tar::EntryType;

use super::attrs::{is_root, Attrs};
use super::encoding::decoder;
use super::entry_path::{check_symlink_target, display_name, split_path};
use super::plumbing::{reader_job, CHUNK};
use super::read_state::{ReadState, Shared, Tracker, META_LIMIT};
use super::{TarError, UnpackLimits, UnpackSummary};
use crate::dir_fd::Dir;

/// Most bytes read (and ignored) after the end-of-archive marker.
const TRAILING_LIMIT: u64 = 1024 * 1024;

/// Decodes `body` (a tar stream encoded with `encoding`) and safely extracts
/// it into `dest`, which must be an existing directory (a path the caller
/// trusts; [`unpack_at`] takes an open one).
///
/// The archive is untrusted; nothing is ever written outside `dest`:
/// - refused (as [`TarError::Unsafe`], naming the entry): absolute paths,
///   paths with a `..` component or a NUL byte, device files and fifos,
///   symlinks whose target is absolute or climbs out of `dest` (only leading
///   `..` components are allowed, no more than the link's depth), hardlinks
///   whose target is not an earlier regular file of the same archive, entries
///   below a symlink or a file, a non-directory replacing a directory, more
///   than `max_entries` entries or paths deeper than `max_depth`;
/// - [`TarError::TooLarge`] when the declared or actual sizes of the contents
///   add up to more than `max_bytes` (a sparse file counts its full size);
/// - symlinks are never followed, even if the tree changes during the
///   extraction: every parent is opened from its own parent's descriptor
///   with `O_NOFOLLOW` (see [`crate::dir_fd`]), and files are created
///   relative to it with `O_EXCL | O_NOFOLLOW` after removing whatever
///   non-directory was at their name (a later duplicate replaces an earlier
///   file; an existing symlink is removed, never written through).
///
/// Modes (including executable bits), mtimes, directories and symlinks are
/// preserved; numeric owners too when running as root (errors ignored). The
/// archive must end with its end-of-archive marker (a truncated stream is
/// [`TarError::Corrupt`]). Extraction runs on a blocking thread fed from
/// `body` through a bounded channel; dropping the returned future stops it.
/// On error, files already extracted stay in `dest`.
pub async fn unpack(
    body: ByteStream,
    encoding: Encoding,
    dest: PathBuf,
    limits: UnpackLimits,
) -> Result<UnpackSummary, TarError> {
    let open = move || Dir::open(&dest).map_err(|e| TarError::Io(format!("destination {e}")));
    unpack_with(body, encoding, Box::new(open), limits).await
}

/// Like [`unpack`], into an open directory (resolved beneath a volume with
/// [`Dir::make_dirs_beneath`], so its path is never looked up again).
pub async fn unpack_at(
    body: ByteStream,
    encoding: Encoding,
    dest: Dir,
    limits: UnpackLimits,
) -> Result<UnpackSummary, TarError> {
    unpack_with(body, encoding, Box::new(move || Ok(dest)), limits).await
}

/// Opens the destination of an extraction, on the blocking thread.
type OpenDest = Box<dyn FnOnce() -> Result<Dir, TarError> + Send>;

/// [`unpack`] and [`unpack_at`].
async fn unpack_with(
    body: ByteStream,
    encoding: Encoding,
    open: OpenDest,
    limits: UnpackLimits,
) -> Result<UnpackSummary, TarError> {
    let extraction = reader_job(body, move |reader, state| {
        let dest = open()?;
        extract(
            reader,
            Source::Stream(encoding),
            Some(&dest),
            &limits,
            state,
        )
    });
    match extraction.await {
        Some(result) => result,
        None => Err(TarError::Io("the extraction stopped unexpectedly".into())),
    }
}

/// Reads the plain (raw) tar file at `path` and checks that it is a
/// well-formed tar whose entries would all be accepted by [`unpack`] into an
/// empty directory (same rules and limits), without writing anything.
pub fn validate_file(path: &Path, limits: &UnpackLimits) -> Result<UnpackSummary, TarError> {
    let file = File::open(path).map_err(|e| TarError::Io(format!("{}: {e}", path.display())))?;
    let state = ReadState::shared();
    extract(
        BufReader::with_capacity(4 * CHUNK, file),
        Source::File(path.to_path_buf()),
        None,
        limits,
        state,
    )
}

/// Checks the plain (already decoded) tar stream read from `src` against
/// the rules of [`unpack`], without writing anything; `state` is the one
/// shared with the readers below `src` (a transport failure recorded there
/// is reported as such).
pub(super) fn validate_reader<R: Read>(
    src: R,
    limits: &UnpackLimits,
    state: Shared,
) -> Result<UnpackSummary, TarError> {
    extract(src, Source::Stream(Encoding::Raw), None, limits, state)
}

/// Where the bytes below the tar parser come from.
enum Source {
    /// A stream in this encoding.
    Stream(Encoding),
    /// A plain tar file (validation).
    File(PathBuf),
}

/// What the archive put at a path so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
}

/// What an entry becomes, decided (and checked) before anything touches the
/// disk.
enum NewEntry {
    /// A directory.
    Dir,
    /// A regular file, from the entry's data.
    File,
    /// A symlink to this (checked) target.
    Symlink(Vec<u8>),
    /// A hardlink to the earlier file of the archive with this key.
    Hardlink(Vec<u8>),
}

/// The refusal of the entry `entry`, for `reason`.
fn refuse(entry: &str, reason: impl Into<String>) -> TarError {
    TarError::Unsafe {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

/// Whether `buf` holds only zeros (a hole to leave in a sparse file).
fn is_zero(buf: &[u8]) -> bool {
    let mut chunks = buf.chunks_exact(16);
    let body = chunks
        .by_ref()
        .all(|c| u128::from_ne_bytes(c.try_into().expect("16 bytes")) == 0);
    body && chunks.remainder().iter().all(|b| *b == 0)
}

/// The extraction (or, without `dest`, validation) of one archive.
struct Extractor<'a> {
    limits: &'a UnpackLimits,
    dest: Option<&'a Dir>,
    source: Source,
    state: Shared,
    /// What the archive created so far (normalized path -> kind).
    model: HashMap<Vec<u8>, Kind>,
    /// Directory attributes to apply at the end.
    dirs: HashMap<Vec<u8>, Attrs>,
    entries: u64,
    /// Bytes of regular file contents.
    bytes: u64,
    /// Bytes of the data of other entries (counted against the limit).
    other_bytes: u64,
    last: Option<String>,
    root: bool,
    buf: Vec<u8>,
    /// The parent directory of the previous entry (its key and descriptor):
    /// archives list a directory's entries together, so it is usually the
    /// next entry's parent too.
    parent: Option<(Vec<u8>, Dir)>,
}

/// Extracts (or validates) the tar stream read from `src`.
fn extract<R: Read>(
    src: R,
    source: Source,
    dest: Option<&Dir>,
    limits: &UnpackLimits,
    state: Shared,
) -> Result<UnpackSummary, TarError> {
    let encoding = match &source {
        Source::Stream(e) => *e,
        Source::File(_) => Encoding::Raw,
    };
    let mut ex = Extractor {
        limits,
        dest,
        source,
        state: state.clone(),
        model: HashMap::new(),
        dirs: HashMap::new(),
        entries: 0,
        bytes: 0,
        other_bytes: 0,
        last: None,
        root: dest.is_some() && is_root(),
        buf: vec![0u8; 2 * CHUNK],
        parent: None,
    };
    let decoded = decoder(src, encoding).map_err(|e| TarError::Io(e.to_string()))?;
    let mut archive = tar::Archive::new(Tracker {
        inner: decoded,
        state: state.clone(),
    });
    {
        let mut entries = archive.entries().map_err(|e| TarError::Io(e.to_string()))?;
        loop {
            {
                let mut st = state.borrow_mut();
                st.meta_armed = true;
                st.meta_used = 0;
            }
            let next = entries.next();
            state.borrow_mut().meta_armed = false;
            match next {
                None => break,
                Some(Ok(mut entry)) => ex.entry(&mut entry)?,
                Some(Err(e)) => return Err(ex.read_error(e, None)),
            }
        }
    }
    {
        let st = state.borrow();
        if st.total == 0 {
            return Err(TarError::Corrupt(
                "not a tar stream: the stream is empty".into(),
            ));
        }
        if st.last_read_eof {
            return Err(TarError::Corrupt(format!(
                "truncated tar stream: no end-of-archive marker after {}",
                ex.after()
            )));
        }
    }
    // Read (and ignore) what follows the end-of-archive marker: this checks
    // the encoding's trailer (zstd checksum) and lets the sender finish.
    let mut rest = archive.into_inner().take(TRAILING_LIMIT);
    let mut sink = vec![0u8; CHUNK];
    loop {
        match rest.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ex.read_error(e, None)),
        }
    }
    ex.finish_dirs()?;
    Ok(UnpackSummary {
        entries: ex.entries,
        bytes: ex.bytes,
    })
}

impl Extractor<'_> {
    fn after(&self) -> String {
        match &self.last {
            Some(name) => format!("entry {name:?}"),
            None => "the start".into(),
        }
    }

    /// Turns a read error (from the tar parser or an entry's data) into the
    /// right [`TarError`]. `entry` is the entry being read, if any.
    fn read_error(&self, e: io::Error, entry: Option<&str>) -> TarError {
        let st = self.state.borrow();
        let place = match entry {
            Some(name) => format!("in entry {name:?}"),
            None => format!("after {}", self.after()),
        };
        if let Some(t) = &st.transport_error {
            return TarError::Io(format!("reading the tar stream: {t}"));
        }
        if st.meta_exceeded {
            return TarError::Corrupt(format!(
                "extended tar headers (long names, PAX records) {place} exceed {META_LIMIT} bytes"
            ));
        }
        if let Some(s) = &st.source_error {
            return match &self.source {
                Source::Stream(Encoding::Raw) => {
                    TarError::Io(format!("reading the tar stream: {s}"))
                }
                Source::Stream(enc) if st.total == 0 => {
                    TarError::Corrupt(format!("not a {} stream: {s}", enc.as_str()))
                }
                Source::Stream(enc) => {
                    TarError::Corrupt(format!("corrupt {} stream {place}: {s}", enc.as_str()))
                }
                Source::File(path) => TarError::Io(format!("reading {}: {s}", path.display())),
            };
        }
        if self.entries == 0 && entry.is_none() {
            TarError::Corrupt(format!("not a tar stream: {e}"))
        } else {
            TarError::Corrupt(format!("corrupt tar stream {place}: {e}"))
        }
    }

    fn write_error(name: &str, e: io::Error) -> TarError {
        TarError::Io(format!("extracting {name:?}: {e}"))
    }

    fn check_total(&self, more: u64) -> Result<(), TarError> {
        let total = self
            .bytes
            .saturating_add(self.other_bytes)
            .saturating_add(more);
        if total > self.limits.max_bytes {
            return Err(TarError::TooLarge {
                limit: self.limits.max_bytes,
            });
        }
        Ok(())
    }

    /// Reads the rest of an entry's data, into `out` if given (leaving holes
    /// for runs of zeros), counting it; checks that it is all there.
    fn copy_data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        declared: u64,
        mut out: Option<&mut File>,
        regular: bool,
        name: &str,
    ) -> Result<u64, TarError> {
        let mut copied = 0u64;
        let mut holes = false;
        loop {
            let n = match entry.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_error(e, Some(name))),
            };
            copied += n as u64;
            self.check_total(copied)?;
            if let Some(f) = out.as_deref_mut() {
                let data = &self.buf[..n];
                if is_zero(data) {
                    f.seek(SeekFrom::Current(n as i64))
                        .map_err(|e| Self::write_error(name, e))?;
                    holes = true;
                } else {
                    f.write_all(data).map_err(|e| Self::write_error(name, e))?;
                }
            }
        }
        if copied < declared {
            return Err(TarError::Corrupt(format!(
                "truncated tar stream: entry {name:?} has {copied} of its {declared} bytes"
            )));
        }
        if let (Some(f), true) = (out, holes) {
            f.set_len(copied).map_err(|e| Self::write_error(name, e))?;
        }
        if regular {
            self.bytes += copied;
        } else {
            self.other_bytes += copied;
        }
        Ok(copied)
    }

    fn skip_data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        declared: u64,
        name: &str,
    ) -> Result<(), TarError> {
        self.copy_data(entry, declared, None, false, name).map(drop)
    }

    /// Extracts (or validates) one entry: checks it against the limits and
    /// the rules of [`unpack`] before anything touches the disk, then makes
    /// its parents and writes it.
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), TarError> {
        let raw = entry.path_bytes().into_owned();
        let name = display_name(&raw);
        let header = entry.header();
        let etype = header.entry_type();
        let declared = entry.size().max(header.entry_size().unwrap_or(0));
        if etype.is_pax_global_extensions() {
            self.check_total(declared)?;
            return self.skip_data(entry, declared, &name);
        }
        self.count_entry(&name)?;
        self.check_total(declared)?;
        let attrs = Attrs::of(header, &name)?;
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let comps = split_path(&raw).map_err(|r| refuse(&name, r))?;
        let is_regular = matches!(
            etype,
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse
        );
        let is_dir = etype.is_dir() || (is_regular && raw.ends_with(b"/"));
        if comps.is_empty() {
            if is_dir {
                // The destination itself: left as it is.
                return self.skip_data(entry, declared, &name);
            }
            return Err(refuse(&name, "it names the destination itself"));
        }
        let new = self.plan(etype, is_dir, is_regular, &comps, link, &name)?;
        let parent = self.ensure_parents(&comps, &name)?;
        let last = OsStr::from_bytes(comps[comps.len() - 1]);
        let key = comps.join(&b'/');
        if self.model.get(&key) == Some(&Kind::Dir) && !is_dir {
            return Err(refuse(&name, "it would replace a directory"));
        }
        // Where to write it (nowhere when validating).
        let at = parent.as_ref().map(|dir| (dir, last));
        match new {
            NewEntry::Dir => {
                if let Some((parent, last)) = at {
                    Self::make_dir(parent, last, &name)?;
                }
                self.skip_data(entry, declared, &name)?;
                self.model.insert(key.clone(), Kind::Dir);
                self.dirs.insert(key, attrs);
            }
            NewEntry::File => {
                self.write_file(entry, declared, at, &attrs, &name)?;
                self.model.insert(key, Kind::File);
            }
            NewEntry::Symlink(target) => {
                if let Some((parent, last)) = at {
                    self.make_symlink(parent, last, &target, &attrs, &name)?;
                }
                self.skip_data(entry, declared, &name)?;
                self.model.insert(key, Kind::Symlink);
            }
            NewEntry::Hardlink(tkey) => {
                if let (Some((parent, last)), Some(dest)) = (at, self.dest) {
                    Self::make_hardlink(dest, parent, last, &tkey, &name)?;
                }
                self.skip_data(entry, declared, &name)?;
                self.model.insert(key, Kind::File);
            }
        }
        Ok(())
    }

    /// Counts one more entry, `name`; refuses more than `max_entries`.
    fn count_entry(&mut self, name: &str) -> Result<(), TarError> {
        self.entries += 1;
        self.last = Some(name.to_string());
        if self.entries > self.limits.max_entries {
            return Err(refuse(
                name,
                format!(
                    "the archive has more than {} entries",
                    self.limits.max_entries
                ),
            ));
        }
        Ok(())
    }

    /// Decides what the entry `comps` (of type `etype`) becomes, checking its
    /// depth, its type and its link target before anything touches the disk.
    fn plan(
        &self,
        etype: EntryType,
        is_dir: bool,
        is_regular: bool,
        comps: &[&[u8]],
        link: Option<Vec<u8>>,
        name: &str,
    ) -> Result<NewEntry, TarError> {
        if comps.len() > self.limits.max_depth {
            return Err(refuse(
                name,
                format!("it is nested deeper than {} levels", self.limits.max_depth),
            ));
        }
        match etype {
            EntryType::Char | EntryType::Block => Err(refuse(name, "device files are not allowed")),
            EntryType::Fifo => Err(refuse(name, "fifos are not allowed")),
            _ if is_dir => Ok(NewEntry::Dir),
            _ if is_regular => Ok(NewEntry::File),
            EntryType::Symlink => {
                let target = link.ok_or_else(|| refuse(name, "link without a target"))?;
                check_symlink_target(comps, &target, self.limits.allow_absolute_symlinks)
                    .map_err(|r| refuse(name, r))?;
                Ok(NewEntry::Symlink(target))
            }
            EntryType::Link => {
                let target = link.ok_or_else(|| refuse(name, "link without a target"))?;
                self.hardlink_target(comps, &target, name)
                    .map(NewEntry::Hardlink)
            }
            other => Err(refuse(
                name,
                format!("unsupported entry type {:?}", other.as_byte() as char),
            )),
        }
    }

    /// The key of the earlier regular file of the archive that the hardlink
    /// `comps` points to (`target`); anything else is refused.
    fn hardlink_target(
        &self,
        comps: &[&[u8]],
        target: &[u8],
        name: &str,
    ) -> Result<Vec<u8>, TarError> {
        let shown = display_name(target);
        let tcomps = split_path(target)
            .map_err(|r| refuse(name, format!("hardlink target {shown:?}: {r}")))?;
        let tkey = tcomps.join(&b'/');
        if tcomps.len() == comps.len() && tcomps == comps {
            return Err(refuse(name, "hardlink to itself"));
        }
        if self.model.get(&tkey) != Some(&Kind::File) {
            return Err(refuse(
                name,
                format!("hardlink target {shown:?} is not an earlier file of the archive"),
            ));
        }
        Ok(tkey)
    }
}

mod write;

#[cfg(test)]
mod tests;
