//! Receiving an untrusted tar stream in one pass: while its bytes arrive
//! they are written to a copy, always zstd (the received bytes as they are
//! when they are zstd already, re-encoded otherwise), and decoded and checked
//! entry by entry as [`unpack`](super::unpack) would, without ever being
//! written plain or read back. See [`copy_checked`].

use std::io::{self, BufReader, Read, Write};

use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;
use sha2::{Digest, Sha256};

use super::encoding::{decoder, ZSTD_LEVEL};
use super::extract::validate_reader;
use super::plumbing::{reader_job, ChanReader, CHUNK};
use super::read_state::Shared;
use super::{TarError, UnpackLimits, UnpackSummary};

/// Most encoded bytes accepted after the decoder has read the end of its
/// stream.
const TRAILING_LIMIT: u64 = 1024 * 1024;

/// What [`copy_checked`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedCopy {
    /// The entries and contents of the tar stream.
    pub summary: UnpackSummary,
    /// Bytes of the decoded tar stream (with whatever followed its
    /// end-of-archive marker).
    pub tar_bytes: u64,
    /// Bytes written to the copy (zstd).
    pub stored_bytes: u64,
    /// `sha256:<hex>` of the decoded tar stream, when asked for: the same
    /// for the same tar whatever the encoding it was sent in.
    pub digest: Option<String>,
}

/// Why [`copy_checked`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The stream is refused, too large, corrupt, or could not be read.
    #[error(transparent)]
    Tar(#[from] TarError),
    /// Writing the copy failed.
    #[error("writing the stored copy: {0}")]
    Write(io::Error),
}

/// Reads `body` (a tar stream encoded with `encoding`) once: every byte is
/// written to `out` as zstd — unchanged when `encoding` is zstd, encoded at
/// [`ZSTD_LEVEL`] with a checksum otherwise — while the decoded stream is
/// checked against `limits` as [`unpack`](super::unpack) would check it
/// (same rules, same error texts) and, with `hash`, hashed. The decoded
/// stream, trailing bytes included, may not exceed `limits.max_bytes`
/// ([`TarError::TooLarge`]).
///
/// Runs on a blocking thread fed through a bounded channel (bounded memory
/// whatever the size); dropping the future stops it. On success `out` is
/// flushed and given back; on failure what was written to it is garbage,
/// for the caller to discard.
pub async fn copy_checked<W: Write + Send + 'static>(
    body: ByteStream,
    encoding: Encoding,
    limits: UnpackLimits,
    hash: bool,
    out: W,
) -> Result<(CheckedCopy, W), CopyError> {
    let job = reader_job(body, move |reader, state| {
        copy_blocking(reader, state, encoding, limits, hash, out)
    });
    match job.await {
        Some(result) => result,
        None => Err(TarError::Io("the upload check stopped unexpectedly".into()).into()),
    }
}

/// [`copy_checked`], on the blocking thread.
fn copy_blocking<W: Write>(
    reader: ChanReader,
    state: Shared,
    encoding: Encoding,
    limits: UnpackLimits,
    hash: bool,
    out: W,
) -> Result<(CheckedCopy, W), CopyError> {
    let out = Counted { inner: out, n: 0 };
    let (raw_out, encoder) = if encoding == Encoding::Zstd {
        (Some(out), None)
    } else {
        let mut enc =
            zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).map_err(CopyError::Write)?;
        enc.include_checksum(true).map_err(CopyError::Write)?;
        (None, Some(enc))
    };
    let mut raw = RawTee {
        inner: reader,
        out: raw_out,
        bytes: 0,
        write_error: None,
    };
    let (checked, plain) = {
        let decoded = decoder(&mut raw, encoding).map_err(|e| TarError::Io(e.to_string()))?;
        let mut plain = PlainTee {
            inner: decoded,
            encoder,
            hasher: hash.then(Sha256::new),
            bytes: 0,
            limit: limits.max_bytes,
            over: false,
            write_error: None,
            read_error: None,
        };
        let checked = {
            let mut buffered = BufReader::with_capacity(4 * CHUNK, &mut plain);
            validate_reader(&mut buffered, &limits, state.clone())
                .and_then(|summary| drain(&mut buffered).map(|()| summary))
        };
        (checked, plain.done())
    };
    let transport_failed = state.borrow().transport_error.is_some();
    let fail = |e: TarError, raw_write: Option<io::Error>, plain: PlainDone<W>| -> CopyError {
        if let Some(w) = raw_write.or(plain.write_error) {
            return CopyError::Write(w);
        }
        if plain.over {
            return TarError::TooLarge {
                limit: limits.max_bytes,
            }
            .into();
        }
        match plain.read_error {
            Some(r) if !transport_failed && encoding != Encoding::Raw => {
                let enc = encoding.as_str();
                TarError::Corrupt(if plain.bytes == 0 {
                    format!("not a {enc} stream: {r}")
                } else {
                    format!(
                        "corrupt {enc} stream after {} decoded bytes: {r}",
                        plain.bytes
                    )
                })
                .into()
            }
            _ => e.into(),
        }
    };
    let summary = match checked {
        Ok(summary) => summary,
        Err(e) => return Err(fail(e, raw.write_error.take(), plain)),
    };
    // What the decoder left unread (nothing, for a well-formed stream).
    let at_end = raw.bytes;
    let mut rest = (&mut raw).take(TRAILING_LIMIT + 1);
    if let Err(e) = io::copy(&mut rest, &mut io::sink()) {
        let e = TarError::Io(format!("reading the tar stream: {e}"));
        return Err(fail(e, raw.write_error.take(), plain));
    }
    if raw.bytes - at_end > TRAILING_LIMIT {
        return Err(TarError::Corrupt(format!(
            "more than {TRAILING_LIMIT} bytes follow the end of the {} stream",
            encoding.as_str()
        ))
        .into());
    }
    let out = match (raw.out, plain.encoder) {
        (Some(out), _) => out,
        (None, Some(enc)) => enc.finish().map_err(CopyError::Write)?,
        (None, None) => unreachable!("the copy is written by one of the tees"),
    };
    let Counted { mut inner, n } = out;
    inner.flush().map_err(CopyError::Write)?;
    let digest = plain.hasher.map(|h| format!("sha256:{:x}", h.finalize()));
    Ok((
        CheckedCopy {
            summary,
            tar_bytes: plain.bytes,
            stored_bytes: n,
            digest,
        },
        inner,
    ))
}

/// Reads `r` to its end, discarding what it reads.
fn drain(r: &mut impl Read) -> Result<(), TarError> {
    io::copy(r, &mut io::sink())
        .map(drop)
        .map_err(|e| TarError::Io(format!("reading the tar stream: {e}")))
}

/// A writer counting the bytes written through it.
struct Counted<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The received (encoded) bytes, written to the copy as they are read when
/// they are zstd already.
struct RawTee<W> {
    inner: ChanReader,
    out: Option<Counted<W>>,
    /// Encoded bytes read.
    bytes: u64,
    write_error: Option<io::Error>,
}

impl<W: Write> Read for RawTee<W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        if let Some(out) = &mut self.out {
            if let Err(e) = out.write_all(&buf[..n]) {
                let failed = io::Error::other(format!("writing the stored copy: {e}"));
                self.write_error = Some(e);
                self.out = None;
                return Err(failed);
            }
        }
        Ok(n)
    }
}

/// The decoded bytes: counted against the limit, hashed, and encoded into
/// the copy when the received ones are not zstd.
struct PlainTee<R, W: Write> {
    /// The decoder.
    inner: R,
    /// The copy, when the received bytes are not zstd.
    encoder: Option<zstd::stream::write::Encoder<'static, Counted<W>>>,
    hasher: Option<Sha256>,
    /// Decoded bytes read.
    bytes: u64,
    /// Most decoded bytes accepted.
    limit: u64,
    /// The decoded stream went over `limit`.
    over: bool,
    write_error: Option<io::Error>,
    /// The decoder failed (or the transport below it).
    read_error: Option<String>,
}

/// What is left of a [`PlainTee`] once its decoder is dropped.
struct PlainDone<W: Write> {
    encoder: Option<zstd::stream::write::Encoder<'static, Counted<W>>>,
    hasher: Option<Sha256>,
    bytes: u64,
    over: bool,
    write_error: Option<io::Error>,
    read_error: Option<String>,
}

impl<R, W: Write> PlainTee<R, W> {
    /// Drops the decoder, keeping the rest.
    fn done(self) -> PlainDone<W> {
        PlainDone {
            encoder: self.encoder,
            hasher: self.hasher,
            bytes: self.bytes,
            over: self.over,
            write_error: self.write_error,
            read_error: self.read_error,
        }
    }
}

impl<R: Read, W: Write> Read for PlainTee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted && self.read_error.is_none() {
                    self.read_error = Some(e.to_string());
                }
                return Err(e);
            }
        };
        self.bytes += n as u64;
        if self.bytes > self.limit {
            self.over = true;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("tar stream exceeds the size limit of {} bytes", self.limit),
            ));
        }
        let data = &buf[..n];
        if let Some(h) = &mut self.hasher {
            h.update(data);
        }
        if let Some(enc) = &mut self.encoder {
            if let Err(e) = enc.write_all(data) {
                let failed = io::Error::other(format!("writing the stored copy: {e}"));
                self.write_error = Some(e);
                self.encoder = None;
                return Err(failed);
            }
        }
        Ok(n)
    }
}
