//! What the readers below the tar parser saw: the transport, the decoder or
//! the file failing, how many bytes were read, whether the last read hit the
//! end, and how many bytes of extended headers one entry used. The
//! [`Tracker`] right below the parser records it; extraction reads it to
//! explain a failure precisely.

use std::cell::RefCell;
use std::io::{self, Read};
use std::rc::Rc;

/// Most bytes of extended headers (GNU long names, PAX records) accepted
/// before one entry; the `tar` crate holds them in memory.
pub(super) const META_LIMIT: u64 = 1024 * 1024;

/// What the readers below the tar parser saw (shared on one thread).
#[derive(Default)]
pub(super) struct ReadState {
    /// The input stream failed (or was cancelled).
    pub(super) transport_error: Option<String>,
    /// A reader below the tar parser (decoder, file, transport) failed.
    pub(super) source_error: Option<String>,
    /// Decoded bytes read so far.
    pub(super) total: u64,
    /// The last read returned end of file.
    pub(super) last_read_eof: bool,
    /// Counting extended-header bytes (while the tar parser looks for the
    /// next entry).
    pub(super) meta_armed: bool,
    /// Extended-header bytes read for the entry being looked for.
    pub(super) meta_used: u64,
    /// The extended headers of one entry went over [`META_LIMIT`].
    pub(super) meta_exceeded: bool,
}

/// The [`ReadState`] shared by the readers of one job (one thread).
pub(super) type Shared = Rc<RefCell<ReadState>>;

impl ReadState {
    /// A fresh state, to share between the readers of one job.
    pub(super) fn shared() -> Shared {
        Rc::new(RefCell::new(ReadState::default()))
    }
}

/// The reader right below the tar parser: counts bytes, notes errors and end
/// of file, and bounds extended headers.
pub(super) struct Tracker<R> {
    /// The decoder (or file) below.
    pub(super) inner: R,
    /// Where what was read is recorded.
    pub(super) state: Shared,
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
