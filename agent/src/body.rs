//! Request bodies handed across threads: actix-web ties a request's body to
//! the thread that received it, while extraction, relaying and process input
//! run elsewhere. [`bridge`] moves the body through a small bounded channel,
//! so memory stays bounded and the reader sets the pace.

use std::future::Future;

use actix_web::web;
use bytes::Bytes;
use futures::StreamExt;
use gantry_wire::runtime::{channel_stream, ByteStream};
use tokio::sync::mpsc;

/// Chunks in flight between the request's thread and the consumer.
const IN_FLIGHT: usize = 8;

/// Splits a request body into a `Send` stream and the pump that feeds it.
/// The pump must run on the request's thread (await or join it in the
/// handler, or `actix_web::rt::spawn` it); it stops at the first error,
/// which the stream yields, or when the stream is dropped.
pub fn bridge(mut payload: web::Payload) -> (ByteStream, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(IN_FLIGHT);
    let pump = async move {
        while let Some(chunk) = payload.next().await {
            let chunk =
                chunk.map_err(|e| std::io::Error::other(format!("reading the request body: {e}")));
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                break;
            }
        }
    };
    (channel_stream(rx), pump)
}
