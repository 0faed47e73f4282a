//! Encodings of tar streams: zstd, gzip or raw (none). Encoders for the
//! writers that pack, decoders for the readers that extract, and whole
//! streams re-encoded on a blocking thread ([`decode`], [`encode`]).

use std::io::{self, Read, Write};

use gantry_wire::runtime::ByteStream;
use gantry_wire::spec::Encoding;

use super::plumbing::{reader_stream, CHUNK};

/// zstd compression level used when encoding: the fastest. Measured on 2
/// cores, level 1 compresses about 45 % faster than level 3 (720 against
/// 500 MB/s on one core) for streams 2 to 8 % larger, so a transfer between
/// workers, which is CPU-bound on a LAN, is faster at level 1.
pub const ZSTD_LEVEL: i32 = 1;

/// gzip compression level used when encoding (the fastest).
pub const GZIP_LEVEL: u32 = 1;

/// Decodes a stream encoded with `encoding` into a plain stream (streaming,
/// on a blocking thread, bounded memory). `Raw` returns `body` unchanged.
/// Malformed input yields an `Err` item of kind `InvalidData`.
pub fn decode(body: ByteStream, encoding: Encoding) -> ByteStream {
    if encoding == Encoding::Raw {
        return body;
    }
    reader_stream(body, move |reader, state, out| {
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
    })
}

/// Encodes a plain stream with `encoding` (streaming, on a blocking thread,
/// bounded memory); zstd at level [`ZSTD_LEVEL`] with a checksum, gzip at
/// level [`GZIP_LEVEL`]. `Raw` returns `body` unchanged.
pub fn encode(body: ByteStream, encoding: Encoding) -> ByteStream {
    if encoding == Encoding::Raw {
        return body;
    }
    reader_stream(body, move |mut reader, _, out| {
        with_encoder(encoding, out, |w| io::copy(&mut reader, w)).map(drop)
    })
}

/// Runs `f` with a writer that encodes into `out`, then finishes the
/// encoding.
pub(super) fn with_encoder<W: Write, T>(
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

/// A reader that decodes `r`, encoded with `encoding`.
pub(super) fn decoder<'a, R: Read + 'a>(
    r: R,
    encoding: Encoding,
) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match encoding {
        Encoding::Raw => Box::new(r),
        Encoding::Zstd => Box::new(zstd::stream::read::Decoder::new(r)?),
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
    })
}
