//! Async <-> blocking plumbing: the work on files and on compression runs on
//! blocking threads (tokio's blocking pool, or threads of their own outside a
//! runtime) and talks to the async side through bounded channels.
//!
//! An input [`ByteStream`] is polled by a forwarding task into a channel that
//! a [`ChanReader`] reads from (blocking); a blocking job writes its output
//! into a [`ChanWriter`], whose chunks become the items of the stream that
//! [`job_stream`] returns. Dropping either end stops the other.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use gantry_wire::runtime::ByteStream;
use tokio::sync::{mpsc, oneshot};

use super::read_state::{ReadState, Shared};

/// Size of the chunks produced by the streams of this module.
pub(super) const CHUNK: usize = 64 * 1024;

/// How many chunks may wait in a channel between two stages.
const CHANNEL_DEPTH: usize = 16;

/// A message from the task that polls an input stream to a blocking reader.
pub(super) enum Msg {
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

/// Runs `job` on a blocking thread with a [`ChanReader`] over `body` (and the
/// [`ReadState`] its readers share), and returns what it returns: `None` if
/// it stopped without an answer. Dropping the future stops forwarding `body`.
pub(super) async fn reader_job<T: Send + 'static>(
    body: ByteStream,
    job: impl FnOnce(ChanReader, Shared) -> T + Send + 'static,
) -> Option<T> {
    let (in_tx, in_rx) = mpsc::channel(CHANNEL_DEPTH);
    let _forwarder = AbortOnDrop(spawn_forwarder(body, in_tx));
    let (res_tx, res_rx) = oneshot::channel();
    spawn_blocking_job(move || {
        let state = ReadState::shared();
        let reader = ChanReader::new(in_rx, state.clone());
        let _ = res_tx.send(job(reader, state));
    });
    res_rx.await.ok()
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
pub(super) struct ChanReader {
    /// The chunks forwarded from the input stream.
    rx: mpsc::Receiver<Msg>,
    /// What is left of the current chunk.
    cur: Bytes,
    /// The input stream ended.
    done: bool,
    /// The input stream failed: every later read fails the same way.
    failed: Option<(io::ErrorKind, String)>,
    /// Where a transport failure is recorded for the error messages.
    state: Shared,
}

impl ChanReader {
    pub(super) fn new(rx: mpsc::Receiver<Msg>, state: Shared) -> Self {
        ChanReader {
            rx,
            cur: Bytes::new(),
            done: false,
            failed: None,
            state,
        }
    }

    /// Records a failure of the input stream and returns it as an error.
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
pub(super) struct ChanWriter {
    /// Into the output stream.
    tx: mpsc::Sender<Out>,
    /// Bytes written but not sent yet (less than a chunk).
    buf: BytesMut,
    /// The output stream was dropped: writing is pointless.
    closed: bool,
}

impl ChanWriter {
    /// Sends one message to the output stream (blocking while it is full).
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

    /// Sends what is buffered as one chunk.
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

/// A blocking job: given the receiver of its input stream (if it has one),
/// it writes its output into the [`ChanWriter`].
pub(super) type Job =
    Box<dyn FnOnce(Option<mpsc::Receiver<Msg>>, &mut ChanWriter) -> io::Result<()> + Send>;

/// The output stream of `job`, run on a blocking thread (once the stream is
/// first polled) with a [`ChanReader`] over `input` and the [`ReadState`]
/// its readers share.
pub(super) fn reader_stream(
    input: ByteStream,
    job: impl FnOnce(ChanReader, Shared, &mut ChanWriter) -> io::Result<()> + Send + 'static,
) -> ByteStream {
    job_stream(
        Some(input),
        Box::new(move |rx, out| {
            let state = ReadState::shared();
            let rx = rx.expect("a job stream given an input gets its receiver");
            job(ChanReader::new(rx, state.clone()), state, out)
        }),
    )
}

/// The output stream of a blocking job, started when first polled.
struct JobStream {
    /// The job, its output channel and its input, until the first poll.
    pending: Option<(Job, mpsc::Sender<Out>, Option<ByteStream>)>,
    /// The job's output.
    rx: mpsc::Receiver<Out>,
    /// Stops forwarding the input when the stream is dropped.
    forwarder: AbortOnDrop,
    /// The job ended (or failed): nothing more to yield.
    finished: bool,
}

/// The output stream of `job`, run on a blocking thread (with `input`
/// forwarded to it) once the stream is first polled.
pub(super) fn job_stream(input: Option<ByteStream>, job: Job) -> ByteStream {
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

#[cfg(test)]
mod tests {
    use super::super::pack_dir;
    use super::super::test_support::collect;
    use gantry_wire::spec::Encoding;
    use std::fs;
    use tempfile::TempDir;

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
}
