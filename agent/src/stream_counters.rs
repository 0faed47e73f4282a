//! How many tar streams the agent sends and receives now, and at most at
//! once (`streams` in `GET /health`).
//!
//! A stream counts from the moment it starts until its [`StreamGuard`] is
//! dropped: an outgoing stream's guard is moved into the response body
//! ([`StreamCounters::guard_out`]), so it is released when the body ends, fails
//! or the client goes away; an incoming stream's guard lives while it is
//! extracted.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use gantry_wire::runtime::ByteStream;

use super::api::StreamCounts;

/// Which way a stream flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by this agent.
    Out,
    /// Received and extracted by this agent.
    In,
}

/// One direction's counters.
#[derive(Debug, Default)]
struct Gauge {
    /// Streams now.
    now: AtomicU64,
    /// Most streams at once.
    max: AtomicU64,
}

/// The agent's stream counters.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Outgoing streams.
    out: Gauge,
    /// Incoming streams.
    incoming: Gauge,
}

impl StreamCounters {
    /// New counters at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The gauge of one direction.
    fn gauge(&self, direction: Direction) -> &Gauge {
        match direction {
            Direction::Out => &self.out,
            Direction::In => &self.incoming,
        }
    }

    /// Counts one stream in `direction` until the guard is dropped.
    pub fn start(self: &Arc<Self>, direction: Direction) -> StreamGuard {
        let gauge = self.gauge(direction);
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.max.fetch_max(now, Ordering::SeqCst);
        StreamGuard {
            counters: self.clone(),
            direction,
        }
    }

    /// Wraps an outgoing body so that it counts as one outgoing stream until
    /// it ends, fails or is dropped (the client went away).
    pub fn guard_out(self: &Arc<Self>, body: ByteStream) -> ByteStream {
        Box::pin(Guarded {
            inner: body,
            guard: Some(self.start(Direction::Out)),
        })
    }

    /// The counters now.
    pub fn snapshot(&self) -> StreamCounts {
        StreamCounts {
            out_now: self.out.now.load(Ordering::SeqCst),
            out_max: self.out.max.load(Ordering::SeqCst),
            in_now: self.incoming.now.load(Ordering::SeqCst),
            in_max: self.incoming.max.load(Ordering::SeqCst),
        }
    }
}

/// One counted stream; dropping it stops counting it.
#[derive(Debug)]
pub struct StreamGuard {
    /// The counters it counts in.
    counters: Arc<StreamCounters>,
    /// Which of them.
    direction: Direction,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.counters
            .gauge(self.direction)
            .now
            .fetch_sub(1, Ordering::SeqCst);
    }
}

/// A body holding its guard until its last chunk or first error.
struct Guarded {
    /// The body.
    inner: ByteStream,
    /// Released at the end of the body.
    guard: Option<StreamGuard>,
}

impl Stream for Guarded {
    type Item = std::io::Result<bytes::Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.guard = None;
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn streams_count_while_they_flow_and_the_most_at_once_is_kept() {
        let counters = StreamCounters::new();
        let a = counters.start(Direction::In);
        let b = counters.start(Direction::In);
        drop(a);
        let counts = counters.snapshot();
        assert_eq!((counts.in_now, counts.in_max), (1, 2));
        drop(b);

        let chunks = (0..2).map(|_| Ok(bytes::Bytes::from_static(b"x")));
        let mut body = counters.guard_out(Box::pin(futures::stream::iter(chunks)));
        let abandoned = counters.guard_out(Box::pin(futures::stream::pending()));
        assert_eq!(counters.snapshot().out_now, 2);
        body.next().await.unwrap().unwrap();
        assert_eq!(counters.snapshot().out_now, 2, "still sending");
        body.next().await.unwrap().unwrap();
        assert!(body.next().await.is_none());
        assert_eq!(counters.snapshot().out_now, 1, "ended");
        drop(abandoned);
        assert_eq!(
            counters.snapshot(),
            StreamCounts {
                out_now: 0,
                out_max: 2,
                in_now: 0,
                in_max: 2
            }
        );
    }
}
