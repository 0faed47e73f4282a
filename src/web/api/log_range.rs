//! Byte ranges of a build's log: `GET /api/v1/builds/{id}/log` with
//! `Range: bytes=A-B`, `bytes=A-` or `bytes=-N` answers `206` with that
//! part of the text (`Content-Range: bytes A-B/TOTAL`), read up to the
//! events stored when asked (or `?upto=`), never followed. The dashboard's
//! log view reads a huge log this way: its tail first, then the part the
//! reader scrolls or jumps to, never the whole text. The events are read
//! from the start (the stored object of a finished build is compressed as
//! one stream), holding at most the range asked in memory; a closed span
//! stops once its bytes are read, answering the length as unknown
//! (`Content-Range: bytes A-B/*`), so a range near the start costs what
//! it holds, not a pass over the whole log.

use actix_web::http::header;
use actix_web::HttpResponse;

use crate::web::api::log_text::text_of;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The most bytes one range answers (a longer one is cut to this; its
/// `Content-Range` says what was sent).
pub const MAX_RANGE: u64 = 16 << 20;

/// A range of the log's bytes, as `Range: bytes=...` asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// From byte `first` to byte `last` (inclusive; none: to the end).
    Span {
        /// The first byte.
        first: u64,
        /// The last byte, inclusive.
        last: Option<u64>,
    },
    /// The last this many bytes.
    Suffix(u64),
}

impl ByteRange {
    /// Reads a `Range` header: one range of `bytes`.
    pub fn parse(header: &str) -> Result<Self, ApiError> {
        let bad = || {
            ApiError::bad_request(format!(
                "Range {header:?}: give one range of bytes (bytes=A-B, bytes=A- or bytes=-N)"
            ))
        };
        let spec = header.trim().strip_prefix("bytes=").ok_or_else(bad)?;
        let (first, last) = spec.split_once('-').ok_or_else(bad)?;
        let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
        match (first.trim(), last.trim()) {
            ("", "") => Err(bad()),
            ("", n) => Ok(ByteRange::Suffix(number(n)?)),
            (a, "") => Ok(ByteRange::Span {
                first: number(a)?,
                last: None,
            }),
            (a, b) => {
                let (first, last) = (number(a)?, number(b)?);
                if last < first {
                    return Err(bad());
                }
                Ok(ByteRange::Span {
                    first,
                    last: Some(last),
                })
            }
        }
    }
}

/// The bytes of a range, gathered as the log's text goes by.
#[derive(Debug)]
pub struct Gather {
    range: ByteRange,
    /// Bytes of text seen so far.
    total: u64,
    /// The range's bytes kept (a suffix: the last ones, at most twice
    /// the range between trims).
    body: Vec<u8>,
}

/// A range answered: where its bytes start, and the text's whole length.
#[derive(Debug, PartialEq, Eq)]
pub struct Slice {
    /// Offset of the first byte.
    pub start: u64,
    /// The bytes.
    pub body: Vec<u8>,
    /// The text's length up to the events read (none: not read to its
    /// end, the span being complete first).
    pub total: Option<u64>,
}

impl Gather {
    /// Gathers `range`.
    pub fn new(range: ByteRange) -> Self {
        Self {
            range,
            total: 0,
            body: Vec::new(),
        }
    }

    /// The next bytes of the text.
    pub fn push(&mut self, text: &[u8]) {
        let len = text.len() as u64;
        match self.range {
            ByteRange::Span { first, last } => {
                let end = last
                    .map_or(u64::MAX, |l| l.saturating_add(1))
                    .min(first.saturating_add(MAX_RANGE));
                let lo = first.max(self.total);
                let hi = end.min(self.total + len);
                if lo < hi {
                    self.body.extend_from_slice(
                        &text[(lo - self.total) as usize..(hi - self.total) as usize],
                    );
                }
            }
            ByteRange::Suffix(n) => {
                let keep = n.min(MAX_RANGE) as usize;
                self.body.extend_from_slice(text);
                if self.body.len() > keep.max(1 << 16) * 2 {
                    self.body.drain(..self.body.len() - keep);
                }
            }
        }
        self.total += len;
    }

    /// Whether every byte of a closed span has been read (what follows
    /// cannot change the answer but its length).
    pub fn complete(&self) -> bool {
        match self.range {
            ByteRange::Span {
                first,
                last: Some(last),
            } => self.total > last.min(first.saturating_add(MAX_RANGE - 1)),
            _ => false,
        }
    }

    /// The range, or none when the text holds none of it. `read_all`:
    /// whether the text was read to its end (its length is known).
    pub fn finish(mut self, read_all: bool) -> Result<Slice, u64> {
        let total = self.total;
        let known = read_all.then_some(total);
        match self.range {
            ByteRange::Span { first, .. } if first < total => Ok(Slice {
                start: first,
                body: self.body,
                total: known,
            }),
            ByteRange::Suffix(n) if total > 0 && n > 0 => {
                let keep = (n.min(MAX_RANGE) as usize).min(self.body.len());
                self.body.drain(..self.body.len() - keep);
                Ok(Slice {
                    start: total - keep as u64,
                    body: self.body,
                    total: known,
                })
            }
            _ => Err(total),
        }
    }
}

/// Answers `range` of build `id`'s log (of `step`, if given), read up to
/// its event `until`: `206` with the bytes, or `416` naming the length
/// when the text holds none of the range.
pub async fn answer(
    state: &AppState,
    id: i64,
    step: Option<&str>,
    until: i64,
    range: ByteRange,
) -> Result<HttpResponse, ApiError> {
    let mut gather = Gather::new(range);
    let mut read_all = true;
    if until > 0 {
        let mut events = state.engine.follow_build_events(id, 0);
        while let Some(next) = events.recv().await {
            let event = next?;
            if event.seq > until {
                break;
            }
            if let Some(text) = text_of(&event.json, step) {
                gather.push(text.as_bytes());
                if gather.complete() {
                    read_all = false;
                    break;
                }
            }
            if event.seq >= until || event.is_final {
                break;
            }
        }
    }
    match gather.finish(read_all) {
        Ok(slice) => {
            let end = slice.start + slice.body.len() as u64;
            let last = end.saturating_sub(1).max(slice.start);
            Ok(HttpResponse::PartialContent()
                .content_type("text/plain; charset=utf-8")
                .insert_header((header::ACCEPT_RANGES, "bytes"))
                .insert_header((
                    header::CONTENT_RANGE,
                    format!(
                        "bytes {}-{last}/{}",
                        slice.start,
                        slice
                            .total
                            .map_or_else(|| "*".to_string(), |t| t.to_string())
                    ),
                ))
                .body(slice.body))
        }
        Err(total) => Ok(HttpResponse::RangeNotSatisfiable()
            .insert_header((header::CONTENT_RANGE, format!("bytes */{total}")))
            .json(serde_json::json!({
                "error": format!("the log holds {total} bytes: the range asked is past its end")
            }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered(range: ByteRange, parts: &[&str]) -> Result<Slice, u64> {
        let mut g = Gather::new(range);
        for p in parts {
            g.push(p.as_bytes());
        }
        g.finish(true)
    }

    #[test]
    fn a_range_header_reads_as_one_range_of_bytes_or_is_refused() {
        assert_eq!(
            ByteRange::parse("bytes=0-99").unwrap(),
            ByteRange::Span {
                first: 0,
                last: Some(99)
            }
        );
        assert_eq!(
            ByteRange::parse("bytes=10-").unwrap(),
            ByteRange::Span {
                first: 10,
                last: None
            }
        );
        assert_eq!(
            ByteRange::parse("bytes=-500").unwrap(),
            ByteRange::Suffix(500)
        );
        for bad in [
            "bytes=5-1",
            "bytes=-",
            "lines=0-1",
            "bytes=0-1,4-5",
            "bytes=a-b",
        ] {
            let e = ByteRange::parse(bad).unwrap_err();
            assert_eq!(e.status, actix_web::http::StatusCode::BAD_REQUEST, "{bad}");
            assert!(
                e.message.contains("one range of bytes"),
                "{bad}: {}",
                e.message
            );
        }
    }

    #[test]
    fn spans_and_suffixes_cut_across_the_chunks_they_span() {
        let parts = ["abc\n", "defg\n", "h\n"];
        let s = gathered(
            ByteRange::Span {
                first: 2,
                last: Some(6),
            },
            &parts,
        )
        .unwrap();
        assert_eq!(
            (s.start, s.body.as_slice(), s.total),
            (2, &b"c\ndef"[..], Some(11))
        );
        // A closed span is complete once its last byte is read: the rest
        // need not be, and its length is then unknown.
        let mut g = Gather::new(ByteRange::Span {
            first: 2,
            last: Some(6),
        });
        g.push(b"abc\n");
        assert!(!g.complete());
        g.push(b"defg\n");
        assert!(g.complete());
        let s = g.finish(false).unwrap();
        assert_eq!((s.body.as_slice(), s.total), (&b"c\ndef"[..], None));
        let s = gathered(
            ByteRange::Span {
                first: 9,
                last: None,
            },
            &parts,
        )
        .unwrap();
        assert_eq!((s.start, s.body.as_slice()), (9, &b"h\n"[..]));
        let s = gathered(ByteRange::Suffix(4), &parts).unwrap();
        assert_eq!((s.start, s.body.as_slice()), (7, &b"g\nh\n"[..]));
        // A suffix longer than the text is the whole text.
        let s = gathered(ByteRange::Suffix(100), &parts).unwrap();
        assert_eq!((s.start, s.body.len()), (0, 11));
        // Past the end, or of an empty log: unsatisfiable, with the length.
        assert_eq!(
            gathered(
                ByteRange::Span {
                    first: 11,
                    last: None
                },
                &parts
            ),
            Err(11)
        );
        assert_eq!(gathered(ByteRange::Suffix(10), &[]), Err(0));
    }

    #[test]
    fn a_suffix_of_a_long_text_holds_a_bounded_buffer() {
        let mut g = Gather::new(ByteRange::Suffix(10));
        let chunk = vec![b'x'; 1000];
        for _ in 0..10_000 {
            g.push(&chunk);
            assert!(g.body.len() <= 2 * (1 << 16) + chunk.len());
        }
        let s = g.finish(true).unwrap();
        assert_eq!(
            (s.start, s.body.len(), s.total),
            (10_000_000 - 10, 10, Some(10_000_000))
        );
    }
}
