//! Slow request bodies are cut off, as slow headers are (actix-web's
//! `client_request_timeout` covers only the head). A body may take
//! [`BodyPace::timeout`] whatever its size; after that it must have arrived
//! at [`BodyPace::min_bytes_per_sec`] on average since the request began,
//! or the request is answered `408` and its connection closed. So a
//! client trickling a JSON body a byte at a time is cut off at the
//! timeout, while a large upload at any sane speed goes on. WebSocket
//! sessions (a hijacked process's input) are not request bodies and are
//! left alone.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage as _};
use bytes::Bytes;
use futures::Stream;
use tokio::time::{Instant, Sleep};

use crate::web::AppState;

/// How fast a request body must arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPace {
    /// Time any body may take (`web.request_body_timeout_secs`).
    pub timeout: Duration,
    /// Average rate a body must keep once it took longer than `timeout`
    /// (`web.request_body_min_bytes_per_sec`).
    pub min_bytes_per_sec: u64,
}

/// The message of the error a cut-off body yields (an `io::Error` of kind
/// `TimedOut` inside [`PayloadError::Io`], which the error answer turns
/// into 408).
pub const TOO_SLOW: &str = "the request body arrived too slowly";

/// Whether a request declares a body (HTTP/1.1: a non-zero
/// `Content-Length`, or `Transfer-Encoding`); one without has nothing to
/// pace, and costs no timer.
fn declares_body(req: &ServiceRequest) -> bool {
    use actix_web::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = req.headers();
    headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// Middleware: paces every request body but a WebSocket upgrade's (a
/// request declaring none is left as it is).
pub async fn pace(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    // A WebSocket session's input is no request body.
    let unpaced =
        req.headers().contains_key(actix_web::http::header::UPGRADE) || !declares_body(&req);
    let pace = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.limits.body_pace);
    if let (Some(pace), false) = (pace, unpaced) {
        let body = req.take_payload();
        let paced: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> =
            Box::pin(Paced::new(body, pace));
        req.set_payload(Payload::from(paced));
    }
    next.call(req).await
}

/// A body stream that fails with [`TOO_SLOW`] when it falls behind its pace.
struct Paced<S> {
    /// The request's own body.
    inner: S,
    /// The pace to keep.
    pace: BodyPace,
    /// When the request began (the middleware saw it).
    started: Instant,
    /// Bytes received so far.
    received: u64,
    /// Fires at the moment the body falls behind, unless more arrives.
    deadline: Pin<Box<Sleep>>,
    /// Whether it failed already (it yields nothing after the error).
    failed: bool,
}

impl<S> Paced<S> {
    fn new(inner: S, pace: BodyPace) -> Self {
        let started = Instant::now();
        Paced {
            inner,
            pace,
            started,
            received: 0,
            deadline: Box::pin(tokio::time::sleep_until(started + pace.timeout)),
            failed: false,
        }
    }

    /// When a body of `received` bytes falls behind: at the timeout, or
    /// when its average rate since the start would drop below the minimum.
    fn due(&self) -> Instant {
        let rate = self.pace.min_bytes_per_sec.max(1);
        let earned = Duration::from_secs_f64(self.received as f64 / rate as f64);
        self.started + self.pace.timeout.max(earned)
    }
}

impl<S> Stream for Paced<S>
where
    S: Stream<Item = Result<Bytes, PayloadError>> + Unpin,
{
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.received += chunk.len() as u64;
                let due = self.due();
                self.deadline.as_mut().reset(due);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.failed = true;
                    let e = std::io::Error::new(std::io::ErrorKind::TimedOut, TOO_SLOW);
                    Poll::Ready(Some(Err(PayloadError::Io(e))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// Whether an error is a body cut off by its pace.
pub fn is_too_slow(e: &actix_web::Error) -> bool {
    fn slow(p: &PayloadError) -> bool {
        matches!(p, PayloadError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
    }
    if let Some(p) = e.as_error::<PayloadError>() {
        return slow(p);
    }
    if let Some(actix_web::error::JsonPayloadError::Payload(p)) =
        e.as_error::<actix_web::error::JsonPayloadError>()
    {
        return slow(p);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    fn pace() -> BodyPace {
        BodyPace {
            timeout: Duration::from_secs(10),
            min_bytes_per_sec: 100,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_is_cut_off_at_the_timeout() {
        // One byte a second, forever.
        let trickle = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, PayloadError>(Bytes::from_static(b"x")), ()))
        });
        let start = Instant::now();
        let mut body = Paced::new(Box::pin(trickle), pace());
        let mut got = 0;
        let err = loop {
            match body.next().await {
                Some(Ok(c)) => got += c.len(),
                Some(Err(e)) => break e,
                None => panic!("the body ended"),
            }
        };
        assert!(err.to_string().contains(TOO_SLOW), "{err}");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        // The byte due at the very deadline may or may not get in first.
        assert!((9..=10).contains(&got), "{got}");
        assert!(body.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_body_at_its_pace_goes_on_past_the_timeout() {
        // 200 bytes a second for 30 s: twice the minimum rate.
        let steady = futures::stream::iter(0..30).then(|_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, PayloadError>(Bytes::from(vec![0u8; 200]))
        });
        let mut body = Paced::new(Box::pin(steady), pace());
        let mut got = 0;
        while let Some(chunk) = body.next().await {
            got += chunk.expect("no cut-off").len();
        }
        assert_eq!(got, 6000);
    }
}
