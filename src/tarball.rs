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

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use gantry_actors::runtime::ByteStream;
use gantry_actors::spec::Encoding;
use tar::{EntryType, Header};
use tokio::sync::{mpsc, oneshot};

use crate::dir_fd::{changed_meanwhile, BeneathError, Dir, Kind as DiskKind, Opened, Stat};

/// zstd compression level used when encoding (fast; zstd's own default).
pub const ZSTD_LEVEL: i32 = 3;

/// gzip compression level used when encoding (the fastest).
pub const GZIP_LEVEL: u32 = 1;

/// Size of the chunks produced by the streams of this module.
const CHUNK: usize = 64 * 1024;

/// How many chunks may wait in a channel between two stages.
const CHANNEL_DEPTH: usize = 16;

/// Most bytes of extended headers (GNU long names, PAX records) accepted
/// before one entry; the `tar` crate holds them in memory.
const META_LIMIT: u64 = 1024 * 1024;

/// Most bytes read (and ignored) after the end-of-archive marker.
const TRAILING_LIMIT: u64 = 1024 * 1024;

/// Longest entry name quoted in an error message.
const NAME_DISPLAY_LIMIT: usize = 512;

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

/// What an extraction, a validation or a packing handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Number of entries (files, directories, links).
    pub entries: u64,
    /// Total bytes of regular file contents.
    pub bytes: u64,
}

/// Why a tar stream could not be packed, extracted or validated.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// An entry that would not be safe to extract (it would escape the
    /// destination, it is a device file, ...).
    #[error("refused tar entry {entry:?}: {reason}")]
    Unsafe {
        /// The entry's path as found in the archive.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// The contents exceed [`UnpackLimits::max_bytes`].
    #[error("tar stream exceeds the size limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The stream is not a well-formed (encoded) tar stream; the message
    /// says where (`not a tar stream: ...` for garbage).
    #[error("{0}")]
    Corrupt(String),
    /// Reading the stream or writing the files failed.
    #[error("{0}")]
    Io(String),
}

impl TarError {
    /// Whether the archive itself is at fault (refused, too large or
    /// corrupt) rather than the system (I/O): a client error, not a server
    /// one.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, TarError::Io(_))
    }
}

impl From<TarError> for io::Error {
    fn from(e: TarError) -> Self {
        let kind = match e {
            TarError::Unsafe { .. } => io::ErrorKind::PermissionDenied,
            TarError::TooLarge { .. } | TarError::Corrupt(_) => io::ErrorKind::InvalidData,
            TarError::Io(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

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
    let (in_tx, in_rx) = mpsc::channel(CHANNEL_DEPTH);
    let _forwarder = AbortOnDrop(spawn_forwarder(body, in_tx));
    let (res_tx, res_rx) = oneshot::channel();
    spawn_blocking_job(move || {
        let result = open().and_then(|dest| {
            let state = ReadState::shared();
            let reader = ChanReader::new(in_rx, state.clone());
            extract(
                reader,
                Source::Stream(encoding),
                Some(&dest),
                &limits,
                state,
            )
        });
        let _ = res_tx.send(result);
    });
    match res_rx.await {
        Ok(result) => result,
        Err(_) => Err(TarError::Io("the extraction stopped unexpectedly".into())),
    }
}

/// Decodes a stream encoded with `encoding` into a plain stream (streaming,
/// on a blocking thread, bounded memory). `Raw` returns `body` unchanged.
/// Malformed input yields an `Err` item of kind `InvalidData`.
pub fn decode(body: ByteStream, encoding: Encoding) -> ByteStream {
    if encoding == Encoding::Raw {
        return body;
    }
    job_stream(
        Some(body),
        Box::new(move |input, out| {
            let state = ReadState::shared();
            let reader = ChanReader::new(input.expect("decode has an input"), state.clone());
            let mut decoder = decoder(reader, encoding)?;
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = match decoder.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        if let Some(t) = state.borrow().transport_error.clone() {
                            return Err(io::Error::new(e.kind(), t));
                        }
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("not a valid {} stream: {e}", encoding.as_str()),
                        ));
                    }
                };
                out.write_all(&buf[..n])?;
            }
        }),
    )
}

/// Encodes a plain stream with `encoding` (streaming, on a blocking thread,
/// bounded memory); zstd at level [`ZSTD_LEVEL`] with a checksum, gzip at
/// level [`GZIP_LEVEL`]. `Raw` returns `body` unchanged.
pub fn encode(body: ByteStream, encoding: Encoding) -> ByteStream {
    if encoding == Encoding::Raw {
        return body;
    }
    job_stream(
        Some(body),
        Box::new(move |input, out| {
            let state = ReadState::shared();
            let mut reader = ChanReader::new(input.expect("encode has an input"), state);
            with_encoder(encoding, out, |w| io::copy(&mut reader, w)).map(drop)
        }),
    )
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

// ---------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------

fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Runs `f` with a writer that encodes into `out`, then finishes the
/// encoding.
fn with_encoder<W: Write, T>(
    encoding: Encoding,
    mut out: W,
    f: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<(T, W)> {
    match encoding {
        Encoding::Raw => {
            let t = f(&mut out)?;
            Ok((t, out))
        }
        Encoding::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?;
            enc.include_checksum(true)?;
            let t = f(&mut enc)?;
            Ok((t, enc.finish()?))
        }
        Encoding::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
            let t = f(&mut enc)?;
            Ok((t, enc.finish()?))
        }
    }
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

/// Tars the contents of the open directory `dir` into `w` (depth first,
/// sorted by name), reading only through descriptors. `skip` is a
/// (device, inode) not to pack (the output file itself).
fn pack_tree(w: &mut dyn Write, dir: &Dir, skip: Option<(u64, u64)>) -> io::Result<UnpackSummary> {
    let mut builder = tar::Builder::new(w);
    let mut summary = UnpackSummary::default();
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
                builder.append_data(&mut h, rel, exact_reader(&mut file, st.size))?;
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

// ---------------------------------------------------------------------------
// Async <-> blocking plumbing
// ---------------------------------------------------------------------------

/// A message from the task that polls an input stream to a blocking reader.
enum Msg {
    Data(Bytes),
    Fail(io::Error),
    End,
}

/// A message from a blocking producer to its output stream.
enum Out {
    Chunk(Bytes),
    Fail(io::Error),
    Done,
}

/// What the readers below the tar parser saw (shared on one thread).
#[derive(Default)]
struct ReadState {
    /// The input stream failed (or was cancelled).
    transport_error: Option<String>,
    /// A reader below the tar parser (decoder, file, transport) failed.
    source_error: Option<String>,
    /// Decoded bytes read so far.
    total: u64,
    /// The last read returned end of file.
    last_read_eof: bool,
    /// Counting extended-header bytes (while the tar parser looks for the
    /// next entry).
    meta_armed: bool,
    meta_used: u64,
    meta_exceeded: bool,
}

type Shared = Rc<RefCell<ReadState>>;

impl ReadState {
    fn shared() -> Shared {
        Rc::new(RefCell::new(ReadState::default()))
    }
}

/// Polls `body` on the async side and forwards it into a bounded channel.
async fn forward(mut body: ByteStream, tx: mpsc::Sender<Msg>) {
    while let Some(item) = body.next().await {
        let msg = match item {
            Ok(b) if b.is_empty() => continue,
            Ok(b) => Msg::Data(b),
            Err(e) => {
                let _ = tx.send(Msg::Fail(e)).await;
                return;
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
    let _ = tx.send(Msg::End).await;
}

/// Starts [`forward`] on the current tokio runtime, or on a thread of its own
/// when there is none.
fn spawn_forwarder(body: ByteStream, tx: mpsc::Sender<Msg>) -> Option<tokio::task::AbortHandle> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Some(handle.spawn(forward(body, tx)).abort_handle()),
        Err(_) => {
            let spawned = std::thread::Builder::new()
                .name("gantry-tar-input".into())
                .spawn(move || futures::executor::block_on(forward(body, tx)));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not start a tar stream thread");
            }
            None
        }
    }
}

/// Runs `f` on tokio's blocking pool, or on a thread of its own outside a
/// runtime.
fn spawn_blocking_job(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn_blocking(f)),
        Err(_) => {
            let spawned = std::thread::Builder::new()
                .name("gantry-tar".into())
                .spawn(f);
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not start a tar stream thread");
            }
        }
    }
}

/// Aborts a forwarding task when dropped.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(h) = &self.0 {
            h.abort();
        }
    }
}

/// A blocking `Read` over the chunks sent by [`forward`].
struct ChanReader {
    rx: mpsc::Receiver<Msg>,
    cur: Bytes,
    done: bool,
    failed: Option<(io::ErrorKind, String)>,
    state: Shared,
}

impl ChanReader {
    fn new(rx: mpsc::Receiver<Msg>, state: Shared) -> Self {
        ChanReader {
            rx,
            cur: Bytes::new(),
            done: false,
            failed: None,
            state,
        }
    }

    fn fail(&mut self, kind: io::ErrorKind, msg: String) -> io::Error {
        let mut st = self.state.borrow_mut();
        if st.transport_error.is_none() {
            st.transport_error = Some(msg.clone());
        }
        self.failed = Some((kind, msg.clone()));
        io::Error::new(kind, msg)
    }
}

impl Read for ChanReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some((kind, msg)) = &self.failed {
                return Err(io::Error::new(*kind, msg.clone()));
            }
            if !self.cur.is_empty() {
                let n = buf.len().min(self.cur.len());
                buf[..n].copy_from_slice(&self.cur.split_to(n));
                return Ok(n);
            }
            if self.done || buf.is_empty() {
                return Ok(0);
            }
            match self.rx.blocking_recv() {
                Some(Msg::Data(b)) => self.cur = b,
                Some(Msg::End) => self.done = true,
                Some(Msg::Fail(e)) => return Err(self.fail(e.kind(), e.to_string())),
                None => {
                    return Err(self.fail(
                        io::ErrorKind::UnexpectedEof,
                        "the input stream was cancelled".into(),
                    ))
                }
            }
        }
    }
}

/// A blocking `Write` that sends chunks of [`CHUNK`] bytes to a stream.
struct ChanWriter {
    tx: mpsc::Sender<Out>,
    buf: BytesMut,
    closed: bool,
}

impl ChanWriter {
    fn send(&mut self, out: Out) -> io::Result<()> {
        if self.closed || self.tx.blocking_send(out).is_err() {
            self.closed = true;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the reader of the tar stream went away",
            ));
        }
        Ok(())
    }

    fn send_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.send(Out::Chunk(chunk))
    }

    /// Ends the stream with the job's result.
    fn finish(mut self, result: io::Result<()>) {
        let end = match result {
            Ok(()) => self.send_buffered().map(|_| Out::Done),
            Err(e) => Err(e),
        };
        let out = match end {
            Ok(out) => out,
            Err(e) => {
                if self.closed {
                    return;
                }
                let _ = self.send_buffered();
                Out::Fail(e)
            }
        };
        let _ = self.send(out);
    }
}

impl Write for ChanWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the reader of the tar stream went away",
            ));
        }
        if self.buf.capacity() - self.buf.len() < data.len() {
            self.buf.reserve(CHUNK.max(data.len()));
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send_buffered()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_buffered()
    }
}

type Job = Box<dyn FnOnce(Option<mpsc::Receiver<Msg>>, &mut ChanWriter) -> io::Result<()> + Send>;

/// The output stream of a blocking job, started when first polled.
struct JobStream {
    pending: Option<(Job, mpsc::Sender<Out>, Option<ByteStream>)>,
    rx: mpsc::Receiver<Out>,
    forwarder: AbortOnDrop,
    finished: bool,
}

fn job_stream(input: Option<ByteStream>, job: Job) -> ByteStream {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    Box::pin(JobStream {
        pending: Some((job, tx, input)),
        rx,
        forwarder: AbortOnDrop(None),
        finished: false,
    })
}

impl Stream for JobStream {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some((job, tx, input)) = this.pending.take() {
            let in_rx = input.map(|body| {
                let (in_tx, in_rx) = mpsc::channel(CHANNEL_DEPTH);
                this.forwarder = AbortOnDrop(spawn_forwarder(body, in_tx));
                in_rx
            });
            spawn_blocking_job(move || {
                let mut out = ChanWriter {
                    tx,
                    buf: BytesMut::new(),
                    closed: false,
                };
                let result = job(in_rx, &mut out);
                out.finish(result);
            });
        }
        if this.finished {
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Out::Chunk(b))) => Poll::Ready(Some(Ok(b))),
            Poll::Ready(Some(Out::Fail(e))) => {
                this.finished = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Out::Done)) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(Some(Err(io::Error::other(
                    "the tar stream producer stopped unexpectedly",
                ))))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Extraction and validation
// ---------------------------------------------------------------------------

/// Where the bytes below the tar parser come from.
enum Source {
    Stream(Encoding),
    File(PathBuf),
}

fn decoder<'a, R: Read + 'a>(r: R, encoding: Encoding) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match encoding {
        Encoding::Raw => Box::new(r),
        Encoding::Zstd => Box::new(zstd::stream::read::Decoder::new(r)?),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
    })
}

/// The reader right below the tar parser: counts bytes, notes errors and end
/// of file, and bounds extended headers.
struct Tracker<R> {
    inner: R,
    state: Shared,
}

impl<R: Read> Read for Tracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut want = buf.len();
        {
            let mut st = self.state.borrow_mut();
            if st.meta_armed {
                if st.meta_used >= META_LIMIT {
                    st.meta_exceeded = true;
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "extended tar headers are too large",
                    ));
                }
                want = want.min((META_LIMIT - st.meta_used) as usize);
            }
        }
        let result = self.inner.read(&mut buf[..want]);
        let mut st = self.state.borrow_mut();
        match &result {
            Ok(n) => {
                st.total += *n as u64;
                st.last_read_eof = *n == 0 && want > 0;
                if st.meta_armed {
                    st.meta_used += *n as u64;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if st.source_error.is_none() {
                    st.source_error = Some(e.to_string());
                }
            }
        }
        result
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
}

/// Attributes applied to a directory once everything is extracted.
#[derive(Debug, Clone, Copy)]
struct Attrs {
    mode: u32,
    mtime: u64,
    uid: Option<u64>,
    gid: Option<u64>,
}

fn display_name(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    if s.chars().count() > NAME_DISPLAY_LIMIT {
        let mut t: String = s.chars().take(NAME_DISPLAY_LIMIT).collect();
        t.push('…');
        t
    } else {
        s.into_owned()
    }
}

fn refuse(entry: &str, reason: impl Into<String>) -> TarError {
    TarError::Unsafe {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

/// Splits an entry path into its normal components (dropping `.` and empty
/// ones), refusing what could escape the destination.
fn split_path(raw: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    if raw.contains(&0) {
        return Err("path contains a NUL byte");
    }
    if raw.first() == Some(&b'/') {
        return Err("absolute paths are not allowed");
    }
    let mut out = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("path escapes the destination"),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Checks a symlink target, `link` being the link's own path components.
///
/// Only leading `..` components are allowed (at most as many as the link
/// has parents): a `..` after a name could climb out through another
/// symlink, whatever it looks like lexically. With `any_target` (root
/// filesystem images) every non-empty target without a NUL byte is fine.
fn check_symlink_target(link: &[&[u8]], target: &[u8], any_target: bool) -> Result<(), String> {
    let shown = display_name(target);
    if target.is_empty() {
        return Err("symlink has an empty target".into());
    }
    if target.contains(&0) {
        return Err(format!("symlink target {shown:?} contains a NUL byte"));
    }
    if any_target {
        return Ok(());
    }
    if target[0] == b'/' {
        return Err(format!("symlink target {shown:?} is absolute"));
    }
    let mut ups = 0usize;
    let mut named = false;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." if !named => ups += 1,
            b".." => {
                return Err(format!(
                "symlink target {shown:?} has a `..` after a name (only leading `..` are allowed)"
            ))
            }
            _ => named = true,
        }
    }
    if ups + 1 > link.len() {
        return Err(format!(
            "symlink target {shown:?} points outside the destination"
        ));
    }
    Ok(())
}

fn is_zero(buf: &[u8]) -> bool {
    let mut chunks = buf.chunks_exact(16);
    let body = chunks
        .by_ref()
        .all(|c| u128::from_ne_bytes(c.try_into().expect("16 bytes")) == 0);
    body && chunks.remainder().iter().all(|b| *b == 0)
}

fn system_time(secs: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn id(v: Option<u64>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
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

    /// Makes sure every parent of `comps` is a real directory (creating
    /// missing ones), never a symlink; returns the entry's parent directory,
    /// opened (`None` when validating). Each parent is opened from its own
    /// parent's descriptor with `O_NOFOLLOW`: a directory swapped for a
    /// symlink meanwhile is refused, never followed.
    fn ensure_parents(&mut self, comps: &[&[u8]], name: &str) -> Result<Option<Dir>, TarError> {
        let parents = &comps[..comps.len() - 1];
        let parent_key = parents.join(&b'/');
        if let Some((key, dir)) = &self.parent {
            if *key == parent_key {
                return dir
                    .try_clone()
                    .map(Some)
                    .map_err(|e| Self::write_error(name, e));
            }
        }
        let mut cur = match self.dest {
            Some(d) => Some(d.try_clone().map_err(|e| Self::write_error(name, e))?),
            None => None,
        };
        let mut key: Vec<u8> = Vec::new();
        for c in parents {
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(c);
            match self.model.get(&key) {
                Some(Kind::Symlink) => {
                    return Err(refuse(
                        name,
                        format!("its parent {:?} is a symlink", display_name(&key)),
                    ))
                }
                Some(Kind::File) => {
                    return Err(refuse(
                        name,
                        format!("its parent {:?} is not a directory", display_name(&key)),
                    ))
                }
                Some(Kind::Dir) | None => {}
            }
            if let Some(dir) = &cur {
                cur = Some(Self::open_parent(dir, c, &key, name)?);
            }
            self.model.insert(key.clone(), Kind::Dir);
        }
        if let Some(dir) = &cur {
            let kept = dir.try_clone().map_err(|e| Self::write_error(name, e))?;
            self.parent = Some((parent_key, kept));
        }
        Ok(cur)
    }

    /// Opens (creating it if missing) the directory `c` in `dir`, the
    /// parent `key` of the entry `name`; a symlink or a non-directory there
    /// is refused.
    fn open_parent(dir: &Dir, c: &[u8], key: &[u8], name: &str) -> Result<Dir, TarError> {
        let shown = display_name(key);
        dir.enter(
            OsStr::from_bytes(c),
            Path::new(OsStr::from_bytes(key)),
            true,
        )
        .map_err(|e| match e {
            BeneathError::Symlink { .. } => {
                refuse(name, format!("its parent {shown:?} is a symlink"))
            }
            BeneathError::NotADirectory { .. } => {
                refuse(name, format!("its parent {shown:?} is not a directory"))
            }
            BeneathError::Changing { .. } => refuse(
                name,
                format!("its parent {shown:?} keeps changing while it is opened"),
            ),
            other => Self::write_error(name, other.into()),
        })
    }

    /// Clears the way for a new entry `last` in `parent`: a directory stays
    /// (only if the new entry is one too), anything else is removed (never
    /// followed). Returns whether a directory is there.
    fn clear(parent: &Dir, last: &OsStr, new_is_dir: bool, name: &str) -> Result<bool, TarError> {
        match parent.stat(last) {
            Ok(s) if s.kind == DiskKind::Dir => {
                if new_is_dir {
                    Ok(true)
                } else {
                    Err(refuse(name, "it would replace a directory"))
                }
            }
            Ok(_) => {
                parent
                    .remove_file(last)
                    .map_err(|e| Self::write_error(name, e))?;
                Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Self::write_error(name, e)),
        }
    }

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
        self.entries += 1;
        self.last = Some(name.clone());
        if self.entries > self.limits.max_entries {
            return Err(refuse(
                &name,
                format!(
                    "the archive has more than {} entries",
                    self.limits.max_entries
                ),
            ));
        }
        self.check_total(declared)?;
        let attrs = Attrs {
            mode: header
                .mode()
                .map_err(|e| TarError::Corrupt(format!("entry {name:?}: bad mode: {e}")))?
                & 0o7777,
            mtime: header.mtime().unwrap_or(0),
            uid: header.uid().ok(),
            gid: header.gid().ok(),
        };
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
        if comps.len() > self.limits.max_depth {
            return Err(refuse(
                &name,
                format!("it is nested deeper than {} levels", self.limits.max_depth),
            ));
        }
        match etype {
            EntryType::Char | EntryType::Block => {
                return Err(refuse(&name, "device files are not allowed"))
            }
            EntryType::Fifo => return Err(refuse(&name, "fifos are not allowed")),
            _ if is_dir || is_regular => {}
            EntryType::Symlink | EntryType::Link => {}
            other => {
                return Err(refuse(
                    &name,
                    format!("unsupported entry type {:?}", other.as_byte() as char),
                ))
            }
        }
        // Check the link target before touching the disk.
        let hard_target = match (etype, &link) {
            (EntryType::Symlink, None) | (EntryType::Link, None) => {
                return Err(refuse(&name, "link without a target"))
            }
            (EntryType::Symlink, Some(target)) => {
                check_symlink_target(&comps, target, self.limits.allow_absolute_symlinks)
                    .map_err(|r| refuse(&name, r))?;
                None
            }
            (EntryType::Link, Some(target)) => {
                let shown = display_name(target);
                let tcomps = split_path(target)
                    .map_err(|r| refuse(&name, format!("hardlink target {shown:?}: {r}")))?;
                let tkey = tcomps.join(&b'/');
                if tcomps.len() == comps.len() && tcomps == comps {
                    return Err(refuse(&name, "hardlink to itself"));
                }
                if self.model.get(&tkey) != Some(&Kind::File) {
                    return Err(refuse(
                        &name,
                        format!("hardlink target {shown:?} is not an earlier file of the archive"),
                    ));
                }
                Some(tkey)
            }
            _ => None,
        };
        let parent = self.ensure_parents(&comps, &name)?;
        let last = OsStr::from_bytes(comps[comps.len() - 1]);
        let key = comps.join(&b'/');
        let existing = self.model.get(&key).copied();
        if existing == Some(Kind::Dir) && !is_dir {
            return Err(refuse(&name, "it would replace a directory"));
        }

        if is_dir {
            if let Some(parent) = &parent {
                if !Self::clear(parent, last, true, &name)? {
                    parent
                        .create_dir(last, 0o777)
                        .map_err(|e| Self::write_error(&name, e))?;
                }
            }
            self.skip_data(entry, declared, &name)?;
            self.model.insert(key.clone(), Kind::Dir);
            self.dirs.insert(key, attrs);
        } else if is_regular {
            match &parent {
                Some(parent) => {
                    Self::clear(parent, last, false, &name)?;
                    let mut file = parent
                        .create_file(last, 0o600)
                        .map_err(|e| Self::write_error(&name, e))?;
                    self.copy_data(entry, declared, Some(&mut file), true, &name)?;
                    self.apply_attrs(&file, &attrs)
                        .map_err(|e| Self::write_error(&name, e))?;
                }
                None => {
                    self.copy_data(entry, declared, None, true, &name)?;
                }
            }
            self.model.insert(key, Kind::File);
        } else if etype == EntryType::Symlink {
            let target = link.as_deref().unwrap_or_default();
            if let Some(parent) = &parent {
                Self::clear(parent, last, false, &name)?;
                parent
                    .symlink(OsStr::from_bytes(target), last)
                    .map_err(|e| Self::write_error(&name, e))?;
                // Best effort, like tar: a link keeps working without them.
                if self.root {
                    let _ = parent.chown_nofollow(last, id(attrs.uid), id(attrs.gid));
                }
                let _ = parent.set_mtime_nofollow(last, attrs.mtime.min(i64::MAX as u64) as i64);
            }
            self.skip_data(entry, declared, &name)?;
            self.model.insert(key, Kind::Symlink);
        } else {
            // Hardlink to an earlier file of the archive.
            let tkey = hard_target.expect("hardlink target checked");
            if let (Some(parent), Some(dest)) = (&parent, self.dest) {
                let not_a_file = || {
                    refuse(
                        &name,
                        format!(
                            "hardlink target {:?} is not a regular file",
                            display_name(&tkey)
                        ),
                    )
                };
                let tpath = Path::new(OsStr::from_bytes(&tkey));
                let (Some(tparent), Some(tlast)) = (tpath.parent(), tpath.file_name()) else {
                    return Err(not_a_file());
                };
                let tdir = dest.dir_beneath(tparent).map_err(|_| not_a_file())?;
                match tdir.stat(tlast) {
                    Ok(s) if s.kind == DiskKind::File => {}
                    _ => return Err(not_a_file()),
                }
                Self::clear(parent, last, false, &name)?;
                parent
                    .hard_link(&tdir, tlast, last)
                    .map_err(|e| Self::write_error(&name, e))?;
            }
            self.skip_data(entry, declared, &name)?;
            self.model.insert(key, Kind::File);
        }
        Ok(())
    }

    fn apply_attrs(&self, f: &File, attrs: &Attrs) -> io::Result<()> {
        if self.root {
            let _ = std::os::unix::fs::fchown(f, id(attrs.uid), id(attrs.gid));
        }
        f.set_permissions(Permissions::from_mode(attrs.mode))?;
        if let Some(t) = system_time(attrs.mtime) {
            f.set_modified(t)?;
        }
        Ok(())
    }

    /// Applies the directories' modes and mtimes, deepest first.
    fn finish_dirs(&mut self) -> Result<(), TarError> {
        let Some(dest) = self.dest else {
            return Ok(());
        };
        let mut dirs: Vec<(Vec<u8>, Attrs)> = self.dirs.drain().collect();
        dirs.sort_by_key(|(k, _)| std::cmp::Reverse(k.iter().filter(|b| **b == b'/').count()));
        for (key, attrs) in dirs {
            let name = display_name(&key);
            let dir = dest
                .dir_beneath(Path::new(OsStr::from_bytes(&key)))
                .map_err(|e| Self::write_error(&name, e.into()))?;
            self.apply_attrs(dir.as_file(), &attrs)
                .map_err(|e| Self::write_error(&name, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    const MARKER: &[u8] = b"marker: must never change";

    // ----- helpers -------------------------------------------------------

    /// A stream of `data` in uneven chunks.
    fn stream_of(data: Vec<u8>) -> ByteStream {
        let chunks: Vec<io::Result<Bytes>> = data
            .chunks(7919)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Box::pin(futures::stream::iter(chunks))
    }

    async fn collect(mut s: ByteStream) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(item) = s.next().await {
            out.extend_from_slice(&item?);
        }
        Ok(out)
    }

    fn encoded(data: &[u8], enc: Encoding) -> Vec<u8> {
        match enc {
            Encoding::Raw => data.to_vec(),
            Encoding::Zstd => zstd::encode_all(data, 3).unwrap(),
            Encoding::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        }
    }

    fn pseudo_random(len: usize, mut seed: u64) -> Vec<u8> {
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

    fn set_mtime(path: &Path, secs: u64) {
        File::open(path)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    }

    /// A destination next to a directory holding a marker file that no
    /// archive may create, change or replace.
    struct Fx {
        _tmp: TempDir,
        base: PathBuf,
        dest: PathBuf,
        outside: PathBuf,
    }

    impl Fx {
        fn new() -> Fx {
            let tmp = TempDir::new().unwrap();
            let base = tmp.path().to_path_buf();
            let dest = base.join("dest");
            let outside = base.join("outside");
            fs::create_dir(&dest).unwrap();
            fs::create_dir(&outside).unwrap();
            fs::write(outside.join("marker.txt"), MARKER).unwrap();
            Fx {
                _tmp: tmp,
                base,
                dest,
                outside,
            }
        }

        fn marker(&self) -> PathBuf {
            self.outside.join("marker.txt")
        }

        fn assert_outside_untouched(&self) {
            assert_eq!(names(&self.base), vec!["dest", "outside"]);
            assert_eq!(names(&self.outside), vec!["marker.txt"]);
            let m = fs::symlink_metadata(self.marker()).unwrap();
            assert!(m.file_type().is_file());
            assert_eq!(m.nlink(), 1, "no hardlink to the marker");
            assert_eq!(fs::read(self.marker()).unwrap(), MARKER);
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    // Archives are built header by header with the builder shared with the
    // end-to-end suites (the `tar` crate refuses most of these paths).
    use crate::malicious_tars::RawTar;

    /// Unpacks `archive` (raw) into a fresh fixture and validates it too;
    /// both must agree.
    async fn attack(
        archive: Vec<u8>,
        limits: UnpackLimits,
    ) -> (Result<UnpackSummary, TarError>, Fx) {
        let fx = Fx::new();
        attack_in(archive, limits, fx).await
    }

    async fn attack_in(
        archive: Vec<u8>,
        limits: UnpackLimits,
        fx: Fx,
    ) -> (Result<UnpackSummary, TarError>, Fx) {
        let checked = TempDir::new().unwrap();
        let file = checked.path().join("archive.tar");
        fs::write(&file, &archive).unwrap();
        let validated = validate_file(&file, &limits);
        let result = unpack(stream_of(archive), Encoding::Raw, fx.dest.clone(), limits).await;
        match (&result, &validated) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("unpack {result:?} but validate {validated:?}"),
        }
        fx.assert_outside_untouched();
        (result, fx)
    }

    fn unsafe_reason(r: &Result<UnpackSummary, TarError>) -> (String, String) {
        match r {
            Err(TarError::Unsafe { entry, reason }) => (entry.clone(), reason.clone()),
            other => panic!("expected Unsafe, got {other:?}"),
        }
    }

    /// Builds the source tree of the round trip tests.
    fn source_tree(root: &Path) -> Vec<u8> {
        let big = pseudo_random(12 * 1024 * 1024, 0x9e37_79b9_7f4a_7c15);
        fs::create_dir_all(root.join("a/b/c")).unwrap();
        fs::create_dir_all(root.join("a/empty_dir")).unwrap();
        fs::create_dir_all(root.join("a/private")).unwrap();
        fs::write(root.join("a/b/c/deep.txt"), b"deep").unwrap();
        fs::write(root.join("a/private/secret"), b"s").unwrap();
        fs::write(root.join("big.bin"), &big).unwrap();
        fs::write(root.join("empty.txt"), b"").unwrap();
        fs::write(root.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
        fs::write(root.join("ro.txt"), b"read only").unwrap();
        let long_dir = root.join("long").join("x".repeat(150));
        fs::create_dir_all(&long_dir).unwrap();
        fs::write(long_dir.join("y".repeat(120)), b"long name").unwrap();
        symlink("b/c/deep.txt", root.join("a/link")).unwrap();
        symlink("../../big.bin", root.join("a/b/up")).unwrap();
        symlink("nowhere", root.join("a/dangling")).unwrap();
        symlink(
            "x".repeat(150) + "/" + &"y".repeat(120),
            root.join("long/lnk"),
        )
        .unwrap();
        fs::set_permissions(root.join("run.sh"), Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(root.join("ro.txt"), Permissions::from_mode(0o444)).unwrap();
        fs::set_permissions(root.join("a/private"), Permissions::from_mode(0o700)).unwrap();
        set_mtime(&root.join("a/b/c/deep.txt"), 1_500_000_000);
        set_mtime(&root.join("a/b/c"), 1_400_000_000);
        big
    }

    /// Asserts that two trees are the same: kinds, contents, link targets,
    /// modes and mtimes.
    fn assert_same_tree(a: &Path, b: &Path) {
        assert_eq!(names(a), names(b), "entries of {}", a.display());
        for name in names(a) {
            let (pa, pb) = (a.join(&name), b.join(&name));
            let (ma, mb) = (
                fs::symlink_metadata(&pa).unwrap(),
                fs::symlink_metadata(&pb).unwrap(),
            );
            assert_eq!(ma.file_type(), mb.file_type(), "{name}");
            assert_eq!(ma.mtime(), mb.mtime(), "mtime of {name}");
            if ma.file_type().is_symlink() {
                assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap());
                continue;
            }
            assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {name}");
            if ma.is_dir() {
                assert_same_tree(&pa, &pb);
            } else {
                assert_eq!(ma.len(), mb.len(), "size of {name}");
                assert!(fs::read(&pa).unwrap() == fs::read(&pb).unwrap(), "{name}");
            }
        }
    }

    // ----- round trips ---------------------------------------------------

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn round_trip_each_encoding() {
        let src = TempDir::new().unwrap();
        let big = source_tree(src.path());
        let mut expected_bytes = 0;
        for name in [
            "a/b/c/deep.txt",
            "a/private/secret",
            "big.bin",
            "run.sh",
            "ro.txt",
        ] {
            expected_bytes += fs::metadata(src.path().join(name)).unwrap().len();
        }
        expected_bytes += 9; // the long-named file
        let mut tasks = Vec::new();
        for enc in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
            let src = src.path().to_path_buf();
            tasks.push(tokio::spawn(async move {
                let dest = TempDir::new().unwrap();
                let summary = unpack(
                    pack_dir(src.clone(), enc),
                    enc,
                    dest.path().to_path_buf(),
                    UnpackLimits::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("{enc:?}: {e}"));
                (enc, dest, summary)
            }));
        }
        for task in tasks {
            let (enc, dest, summary) = task.await.unwrap();
            assert_same_tree(src.path(), dest.path());
            assert!(
                fs::read(dest.path().join("big.bin")).unwrap() == big,
                "{enc:?}"
            );
            assert_eq!(fs::read(dest.path().join("a/link")).unwrap(), b"deep");
            assert_eq!(summary.bytes, expected_bytes, "{enc:?}");
            // 7 dirs, 7 files, 4 symlinks
            assert_eq!(summary.entries, 18, "{enc:?}");
        }
    }

    #[tokio::test]
    async fn tar_file_round_trip_and_encode_decode() {
        let src = TempDir::new().unwrap();
        fs::create_dir_all(src.path().join("d/e")).unwrap();
        fs::write(src.path().join("d/e/f"), b"hello").unwrap();
        fs::write(src.path().join("exe"), b"x").unwrap();
        fs::set_permissions(src.path().join("exe"), Permissions::from_mode(0o750)).unwrap();
        symlink("d/e/f", src.path().join("l")).unwrap();

        // write_tar_file skips its own output inside the packed directory.
        let out = src.path().join("self.tar");
        let written = write_tar_file(src.path(), &out).unwrap();
        assert_eq!(
            written,
            UnpackSummary {
                entries: 5,
                bytes: 6
            }
        );
        let validated = validate_file(&out, &UnpackLimits::default()).unwrap();
        assert_eq!(validated, written);
        let raw = fs::read(&out).unwrap();
        fs::remove_file(&out).unwrap();

        // pack_dir(raw) gives the same archive.
        let packed = collect(pack_dir(src.path().to_path_buf(), Encoding::Raw))
            .await
            .unwrap();
        assert!(packed == raw);

        for enc in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
            let enc_bytes = collect(encode(stream_of(raw.clone()), enc)).await.unwrap();
            if enc != Encoding::Raw {
                assert_ne!(enc_bytes, raw);
            }
            let dec = collect(decode(stream_of(enc_bytes.clone()), enc))
                .await
                .unwrap();
            assert!(dec == raw, "{enc:?}");
            let dest = TempDir::new().unwrap();
            unpack(
                stream_of(enc_bytes),
                enc,
                dest.path().to_path_buf(),
                UnpackLimits::default(),
            )
            .await
            .unwrap();
            assert_same_tree(src.path(), dest.path());
            // Packed directly in the encoding, decoded back to the same tar.
            let direct = collect(pack_dir(src.path().to_path_buf(), enc))
                .await
                .unwrap();
            let dec = collect(decode(stream_of(direct), enc)).await.unwrap();
            assert!(dec == raw, "{enc:?}");
        }

        // Garbage does not decode.
        let err = collect(decode(stream_of(vec![7u8; 5000]), Encoding::Zstd))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
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

    /// The entries of a raw tar: name and contents (a symlink's target for
    /// a symlink).
    fn listing(data: Vec<u8>) -> Vec<(String, Vec<u8>)> {
        let mut ar = tar::Archive::new(&data[..]);
        ar.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = String::from_utf8(e.path_bytes().into_owned()).unwrap();
                let mut body = Vec::new();
                if e.header().entry_type() == EntryType::Symlink {
                    body = e.link_name_bytes().unwrap().into_owned();
                } else {
                    e.read_to_end(&mut body).unwrap();
                }
                (name, body)
            })
            .collect()
    }

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
        let flipper =
            crate::dir_fd::tests::flip_until(&fx.vol.join("a"), &fx.host.join("a"), stop.clone());
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

    #[test]
    fn pack_dir_works_without_a_runtime() {
        let src = TempDir::new().unwrap();
        fs::write(src.path().join("f"), b"data").unwrap();
        let data = futures::executor::block_on(collect(pack_dir(
            src.path().to_path_buf(),
            Encoding::Gzip,
        )))
        .unwrap();
        assert!(!data.is_empty());
    }

    // ----- corrupt input -------------------------------------------------

    #[tokio::test]
    async fn garbage_and_truncation_are_corrupt() {
        let limits = UnpackLimits::default();
        let cases: Vec<(&str, Vec<u8>, Encoding)> = vec![
            ("raw garbage", pseudo_random(4000, 1), Encoding::Raw),
            ("short garbage", b"hello world".to_vec(), Encoding::Raw),
            ("empty", Vec::new(), Encoding::Raw),
            ("zstd garbage", pseudo_random(4000, 2), Encoding::Zstd),
            ("gzip garbage", pseudo_random(4000, 3), Encoding::Gzip),
            (
                "gzip of garbage",
                encoded(&pseudo_random(4000, 4), Encoding::Gzip),
                Encoding::Gzip,
            ),
        ];
        for (what, data, enc) in cases {
            let dest = TempDir::new().unwrap();
            let err = unpack(stream_of(data), enc, dest.path().to_path_buf(), limits)
                .await
                .unwrap_err();
            match &err {
                TarError::Corrupt(msg) => assert!(msg.starts_with("not a "), "{what}: {msg}"),
                other => panic!("{what}: {other:?}"),
            }
        }
        let dest = TempDir::new().unwrap();
        let err = unpack(
            stream_of(pseudo_random(4000, 1)),
            Encoding::Raw,
            dest.path().to_path_buf(),
            limits,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().starts_with("not a tar stream: "), "{err}");

        // No end-of-archive marker.
        let mut no_end = RawTar::new().file(b"a", b"aaa").finish();
        no_end.truncate(1024);
        // Data cut short.
        let mut cut = RawTar::new().file(b"a", &[1u8; 2000]).finish();
        cut.truncate(1200);
        // Trailing bytes of a zstd frame missing.
        let mut zcut = encoded(&RawTar::new().file(b"a", b"aaa").finish(), Encoding::Zstd);
        zcut.truncate(zcut.len() - 3);
        for (what, data, enc) in [
            ("no end", no_end, Encoding::Raw),
            ("cut", cut, Encoding::Raw),
            ("zstd cut", zcut, Encoding::Zstd),
        ] {
            let dest = TempDir::new().unwrap();
            let err = unpack(stream_of(data), enc, dest.path().to_path_buf(), limits)
                .await
                .unwrap_err();
            assert!(matches!(err, TarError::Corrupt(_)), "{what}: {err:?}");
        }

        // A failing input stream is an I/O error.
        let good = RawTar::new().file(b"a", &[1u8; 20000]).finish();
        let items: Vec<io::Result<Bytes>> = vec![
            Ok(Bytes::copy_from_slice(&good[..3000])),
            Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "peer went away",
            )),
        ];
        let dest = TempDir::new().unwrap();
        let err = unpack(
            Box::pin(futures::stream::iter(items)),
            Encoding::Raw,
            dest.path().to_path_buf(),
            limits,
        )
        .await
        .unwrap_err();
        match err {
            TarError::Io(msg) => assert!(msg.contains("peer went away"), "{msg}"),
            other => panic!("{other:?}"),
        }

        // A missing destination.
        let err = unpack(
            stream_of(RawTar::new().finish()),
            Encoding::Raw,
            PathBuf::from("/nonexistent/gantry/dest"),
            limits,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, TarError::Io(_)));
    }

    // ----- malicious archives --------------------------------------------

    #[tokio::test]
    async fn refuses_parent_escapes_and_absolute_paths() {
        let limits = UnpackLimits::default();
        let (r, _) = attack(RawTar::new().file(b"../x", b"x").finish(), limits).await;
        assert_eq!(
            r.unwrap_err().to_string(),
            r#"refused tar entry "../x": path escapes the destination"#
        );

        let fx = Fx::new();
        let abs = fx.marker().into_os_string().into_vec();
        let (r, _) = attack_in(RawTar::new().file(&abs, b"pwned").finish(), limits, fx).await;
        let (entry, reason) = unsafe_reason(&r);
        assert!(entry.ends_with("outside/marker.txt"));
        assert!(reason.contains("absolute"), "{reason}");

        for path in [
            &b"../outside/marker.txt"[..],
            b"a/../../outside/marker.txt",
            b"./../outside/marker.txt",
            b"a/b/../../../outside/new.txt",
        ] {
            let (r, _) = attack(
                RawTar::new().dir(b"a").file(path, b"pwned").finish(),
                limits,
            )
            .await;
            let (_, reason) = unsafe_reason(&r);
            assert_eq!(reason, "path escapes the destination");
        }

        // A `..` hidden in a GNU long name or a PAX path.
        let long = [b"ok/".repeat(40), b"../../outside/marker.txt".to_vec()].concat();
        let (r, _) = attack(
            RawTar::new()
                .long_name(&long)
                .file(b"placeholder", b"pwned")
                .finish(),
            limits,
        )
        .await;
        unsafe_reason(&r);
        let (r, _) = attack(
            RawTar::new()
                .pax(&[("path", b"../outside/marker.txt")])
                .file(b"placeholder", b"pwned")
                .finish(),
            limits,
        )
        .await;
        unsafe_reason(&r);
    }

    #[tokio::test]
    async fn refuses_escaping_symlinks_and_never_writes_through_one() {
        let limits = UnpackLimits::default();
        // A symlink pointing outside, then a file written through it.
        for target in [&b"../outside"[..], b"a/../../outside", b"../../"] {
            let (r, fx) = attack(
                RawTar::new()
                    .symlink(b"evil", target)
                    .file(b"evil/marker.txt", b"pwned")
                    .finish(),
                limits,
            )
            .await;
            let (entry, _) = unsafe_reason(&r);
            assert_eq!(entry, "evil");
            assert!(names(&fx.dest).is_empty());
        }
        let fx = Fx::new();
        let abs = fx.outside.clone().into_os_string().into_vec();
        let (r, _) = attack_in(
            RawTar::new()
                .symlink(b"evil", &abs)
                .file(b"evil/marker.txt", b"pwned")
                .finish(),
            limits,
            fx,
        )
        .await;
        assert!(unsafe_reason(&r).1.contains("absolute"));

        // `..` after a link that itself climbs: lexically inside, really out.
        let (r, _) = attack(
            RawTar::new()
                .dir(b"a/b")
                .symlink(b"a/b/s", b"../..")
                .symlink(b"a/b/t", b"s/..")
                .finish(),
            limits,
        )
        .await;
        assert_eq!(unsafe_reason(&r).0, "a/b/t");

        // A symlink inside the archive is never written through.
        let (r, fx) = attack(
            RawTar::new()
                .dir(b"sub")
                .symlink(b"in", b"sub")
                .file(b"in/x", b"x")
                .finish(),
            limits,
        )
        .await;
        let (entry, reason) = unsafe_reason(&r);
        assert_eq!(entry, "in/x");
        assert!(reason.contains("symlink"), "{reason}");
        assert!(names(&fx.dest.join("sub")).is_empty());

        // Symlinks already in the destination are never followed either.
        let fx = Fx::new();
        symlink("../outside", fx.dest.join("evil")).unwrap();
        let (r, fx) = attack_unpack_only(
            RawTar::new().file(b"evil/marker.txt", b"pwned").finish(),
            fx,
        )
        .await;
        assert!(unsafe_reason(&r).1.contains("symlink"));
        // A file replacing such a symlink removes the link, writes nothing
        // through it.
        symlink("../outside/marker.txt", fx.dest.join("f")).unwrap();
        let (r, fx) = attack_unpack_only(
            RawTar::new()
                .file(b"evil", b"replaced")
                .file(b"f", b"replaced too")
                .finish(),
            fx,
        )
        .await;
        r.unwrap();
        for name in ["evil", "f"] {
            let m = fs::symlink_metadata(fx.dest.join(name)).unwrap();
            assert!(m.file_type().is_file(), "{name}");
        }
        assert_eq!(fs::read(fx.dest.join("f")).unwrap(), b"replaced too");
    }

    #[tokio::test]
    async fn rootfs_images_may_hold_absolute_symlinks_that_are_never_followed() {
        let image = UnpackLimits {
            allow_absolute_symlinks: true,
            ..UnpackLimits::default()
        };
        let fx = Fx::new();
        let abs = fx.outside.clone().into_os_string().into_vec();
        let (r, fx) = attack_in(
            RawTar::new()
                .dir(b"bin")
                .symlink(b"bin/sh", b"/bin/busybox")
                .symlink(b"up", b"../../..")
                .symlink(b"evil", &abs)
                .finish(),
            image,
            fx,
        )
        .await;
        assert_eq!(r.unwrap().entries, 4);
        assert_eq!(
            fs::read_link(fx.dest.join("bin/sh")).unwrap(),
            PathBuf::from("/bin/busybox")
        );
        // Writing through such a link is still refused.
        let fx = Fx::new();
        let (r, _) = attack_in(
            RawTar::new()
                .symlink(b"evil", &abs)
                .file(b"evil/marker.txt", b"pwned")
                .finish(),
            image,
            fx,
        )
        .await;
        let (entry, reason) = unsafe_reason(&r);
        assert_eq!(entry, "evil/marker.txt");
        assert!(reason.contains("symlink"), "{reason}");
    }

    /// Like [`attack_in`] for a destination with content of its own (so no
    /// comparison with validation, which assumes an empty destination).
    async fn attack_unpack_only(archive: Vec<u8>, fx: Fx) -> (Result<UnpackSummary, TarError>, Fx) {
        let r = unpack(
            stream_of(archive),
            Encoding::Raw,
            fx.dest.clone(),
            UnpackLimits::default(),
        )
        .await;
        fx.assert_outside_untouched();
        (r, fx)
    }

    #[tokio::test]
    async fn hardlinks_only_to_earlier_files_inside() {
        let limits = UnpackLimits::default();
        let fx = Fx::new();
        let abs = fx.marker().into_os_string().into_vec();
        let (r, _) = attack_in(RawTar::new().hardlink(b"h", &abs).finish(), limits, fx).await;
        unsafe_reason(&r);
        for target in [&b"../outside/marker.txt"[..], b"never-seen", b"h"] {
            let (r, _) = attack(RawTar::new().hardlink(b"h", target).finish(), limits).await;
            let (entry, reason) = unsafe_reason(&r);
            assert_eq!(entry, "h");
            assert!(reason.contains("hardlink"), "{reason}");
        }
        // To a symlink (even one inside): refused.
        let (r, _) = attack(
            RawTar::new()
                .file(b"f", b"x")
                .symlink(b"s", b"f")
                .hardlink(b"h", b"s")
                .finish(),
            limits,
        )
        .await;
        unsafe_reason(&r);
        // To an earlier file: fine, and a later duplicate of the target does
        // not change the link.
        let (r, fx) = attack(
            RawTar::new()
                .file(b"f", b"old")
                .hardlink(b"d/g", b"./f")
                .file(b"f", b"new")
                .finish(),
            limits,
        )
        .await;
        assert_eq!(
            r.unwrap(),
            UnpackSummary {
                entries: 3,
                bytes: 6
            }
        );
        assert_eq!(fs::read(fx.dest.join("d/g")).unwrap(), b"old");
        assert_eq!(fs::read(fx.dest.join("f")).unwrap(), b"new");
    }

    #[tokio::test]
    async fn refuses_devices_and_fifos() {
        for (kind, word) in [
            (EntryType::Char, "device"),
            (EntryType::Block, "device"),
            (EntryType::Fifo, "fifo"),
        ] {
            let (r, fx) = attack(
                RawTar::new().special(b"dev", kind, 1, 3).finish(),
                UnpackLimits::default(),
            )
            .await;
            let (entry, reason) = unsafe_reason(&r);
            assert_eq!(entry, "dev");
            assert!(reason.contains(word), "{reason}");
            assert!(names(&fx.dest).is_empty());
        }
    }

    /// A GNU sparse file of `real` bytes with one 512-byte block at the end.
    fn sparse_archive(real: u64) -> Vec<u8> {
        let mut h = RawTar::header(b"sparse", EntryType::GNUSparse, b"", 512);
        {
            let gnu = h.as_gnu_mut().unwrap();
            let octal = |v: u64| {
                let s = format!("{v:011o}\0");
                let mut f = [0u8; 12];
                f.copy_from_slice(s.as_bytes());
                f
            };
            gnu.sparse[0].offset = octal(real - 512);
            gnu.sparse[0].numbytes = octal(512);
            gnu.realsize = octal(real);
        }
        h.set_cksum();
        RawTar::new().raw(&h, &[b'z'; 512]).finish()
    }

    #[tokio::test]
    async fn enforces_size_limits() {
        let small = UnpackLimits {
            max_bytes: 1024 * 1024,
            ..UnpackLimits::default()
        };
        // A sparse file of 1 GiB: tiny archive, huge file.
        let (r, fx) = attack(sparse_archive(1 << 30), small).await;
        assert!(
            matches!(r, Err(TarError::TooLarge { limit }) if limit == 1024 * 1024),
            "{r:?}"
        );
        assert!(names(&fx.dest).is_empty());
        // Declared huge, no data behind it.
        let h = RawTar::header(b"huge", EntryType::Regular, b"", 2 << 30);
        let (r, _) = attack(RawTar::new().raw(&h, b"").finish(), small).await;
        assert!(matches!(r, Err(TarError::TooLarge { .. })), "{r:?}");
        // Many files adding up.
        let mut t = RawTar::new();
        for i in 0..5 {
            t = t.file(format!("f{i}").as_bytes(), &[1u8; 300 * 1024]);
        }
        let (r, _) = attack(t.finish(), small).await;
        assert!(matches!(r, Err(TarError::TooLarge { .. })), "{r:?}");
        // A sparse file within the limit is extracted with its holes.
        let (r, fx) = attack(sparse_archive(1024 * 1024), small).await;
        assert_eq!(r.unwrap().bytes, 1024 * 1024);
        let data = fs::read(fx.dest.join("sparse")).unwrap();
        assert_eq!(data.len(), 1024 * 1024);
        assert!(data[..1024 * 1024 - 512].iter().all(|b| *b == 0));
        assert!(data[1024 * 1024 - 512..].iter().all(|b| *b == b'z'));

        // Entries.
        let few = UnpackLimits {
            max_entries: 3,
            ..UnpackLimits::default()
        };
        let mut t = RawTar::new();
        for i in 0..5 {
            t = t.file(format!("f{i}").as_bytes(), b"x");
        }
        let (r, _) = attack(t.finish(), few).await;
        assert_eq!(unsafe_reason(&r).0, "f3");

        // Extended headers are bounded in memory.
        let (r, _) = attack(
            RawTar::new()
                .long_name(&vec![b'n'; 2 * 1024 * 1024])
                .file(b"x", b"x")
                .finish(),
            UnpackLimits::default(),
        )
        .await;
        assert!(matches!(r, Err(TarError::Corrupt(_))), "{r:?}");
    }

    #[tokio::test]
    async fn refuses_deep_nesting() {
        let limits = UnpackLimits::default();
        let deep = |levels: usize| {
            let path = vec!["d"; levels].join("/");
            let mut b = tar::Builder::new(Vec::new());
            let mut h = Header::new_gnu();
            h.set_size(1);
            h.set_mode(0o644);
            b.append_data(&mut h, &path, &b"x"[..]).unwrap();
            b.into_inner().unwrap()
        };
        let (r, fx) = attack(deep(300), limits).await;
        let (entry, reason) = unsafe_reason(&r);
        assert!(entry.starts_with("d/d/d"));
        assert!(reason.contains("256"), "{reason}");
        assert!(names(&fx.dest).is_empty());
        let (r, _) = attack(deep(256), limits).await;
        r.unwrap();
    }

    #[tokio::test]
    async fn duplicates_replace_files_not_directories() {
        let limits = UnpackLimits::default();
        let (r, fx) = attack(
            RawTar::new()
                .file(b"dup", b"one")
                .file(b"./dup", b"two!")
                .symlink(b"l", b"dup")
                .file(b"l", b"now a file")
                .file(b"x", b"file first")
                .dir(b"x")
                .finish(),
            limits,
        )
        .await;
        assert_eq!(r.unwrap().entries, 6);
        assert_eq!(fs::read(fx.dest.join("dup")).unwrap(), b"two!");
        assert!(fs::symlink_metadata(fx.dest.join("l")).unwrap().is_file());
        assert!(fx.dest.join("x").is_dir());

        let (r, fx) = attack(
            RawTar::new()
                .dir(b"d")
                .file(b"d/keep", b"k")
                .symlink(b"d", b"elsewhere")
                .finish(),
            limits,
        )
        .await;
        assert!(unsafe_reason(&r).1.contains("replace a directory"));
        assert_eq!(fs::read(fx.dest.join("d/keep")).unwrap(), b"k");
    }

    #[tokio::test]
    async fn symlink_loops_are_contained() {
        let limits = UnpackLimits::default();
        let (r, fx) = attack(
            RawTar::new()
                .symlink(b"a", b"b")
                .symlink(b"b", b"a")
                .symlink(b"self", b"self")
                .finish(),
            limits,
        )
        .await;
        r.unwrap();
        assert_eq!(fs::read_link(fx.dest.join("a")).unwrap(), Path::new("b"));
        assert_eq!(
            fs::read_link(fx.dest.join("self")).unwrap(),
            Path::new("self")
        );
        let (r, _) = attack(
            RawTar::new()
                .symlink(b"a", b"b")
                .symlink(b"b", b"a")
                .file(b"a/x", b"x")
                .finish(),
            limits,
        )
        .await;
        assert_eq!(unsafe_reason(&r).0, "a/x");
    }

    #[tokio::test]
    async fn refuses_nul_bytes() {
        let limits = UnpackLimits::default();
        let (r, fx) = attack(
            RawTar::new()
                .long_name(b"ok\0/../../outside/marker.txt")
                .file(b"placeholder", b"pwned")
                .finish(),
            limits,
        )
        .await;
        let (entry, reason) = unsafe_reason(&r);
        assert!(entry.starts_with("ok\0"));
        assert!(reason.contains("NUL"));
        assert!(r.unwrap_err().to_string().contains(r"ok\0/"));
        assert!(names(&fx.dest).is_empty());
        let (r, _) = attack(
            RawTar::new()
                .pax(&[("path", b"a\0b")])
                .file(b"placeholder", b"x")
                .finish(),
            limits,
        )
        .await;
        assert!(unsafe_reason(&r).1.contains("NUL"));
        let (r, _) = attack(
            RawTar::new()
                .pax(&[("linkpath", b"ok\0/../../etc")])
                .symlink(b"l", b"placeholder")
                .finish(),
            limits,
        )
        .await;
        assert!(unsafe_reason(&r).1.contains("NUL"));
    }

    #[tokio::test]
    async fn keeps_modes_and_mtimes_from_headers() {
        let mut exe = RawTar::header(b"bin/tool", EntryType::Regular, b"", 2);
        exe.set_mode(0o755);
        exe.set_mtime(1_234_567_890);
        exe.set_uid(4321);
        exe.set_gid(8765);
        exe.set_cksum();
        let mut dir = RawTar::header(b"bin", EntryType::Directory, b"", 0);
        dir.set_mode(0o555);
        dir.set_mtime(1_111_111_111);
        dir.set_cksum();
        let (r, fx) = attack(
            RawTar::new()
                .dir(b"./")
                .raw(&dir, b"")
                .raw(&exe, b"hi")
                .finish(),
            UnpackLimits::default(),
        )
        .await;
        r.unwrap();
        let m = fs::metadata(fx.dest.join("bin/tool")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
        assert_eq!(m.mtime(), 1_234_567_890);
        if is_root() {
            assert_eq!((m.uid(), m.gid()), (4321, 8765));
        }
        let m = fs::metadata(fx.dest.join("bin")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o555);
        assert_eq!(m.mtime(), 1_111_111_111);
        fs::set_permissions(fx.dest.join("bin"), Permissions::from_mode(0o755)).unwrap();
    }
}
