//! Finished builds' logs leave the database: a finished build's events are
//! written to the artifact store (its directory, or S3) as one object,
//! zstd-compressed, streamed page by page (a page of 4 MiB at most, never
//! the whole log in memory); the
//! build's row then records where the object is, and the rows go. Readers
//! ([`read`], the followers of `event_follow`) read a build's events from
//! the database while they are there and from the object once its row
//! names one, so a log moved while it is followed is read on without a gap
//! or a repeat.
//!
//! The object holds one line per event: `SEQ TAB FINAL TAB JSON` (`FINAL`
//! is 1 for the build's last event, else 0; an event's JSON holds no raw
//! newline).
//!
//! **Departure:** the issue asks the rows to go in the transaction that
//! records the object. The row records it in one statement (from then on
//! no reader reads the rows), and the rows go after, a batch per
//! statement, newest first, so that a log of millions of events holds no
//! lock for long; rows left by a node stopped in between are deleted by
//! the next pass ([`archive_finished`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use async_compression::tokio::bufread::{ZstdDecoder, ZstdEncoder};
use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, TryStreamExt};
use tokio::io::AsyncBufReadExt;
use tokio_util::io::{ReaderStream, StreamReader};

use crate::artifact_store::ArtifactStore;
use crate::db::{Db, Moved};
use crate::error::EngineError;
use crate::events::{StoredEvent, EVENTS_PAGE, PAGE_BYTES};
use gantry_wire::runtime::ByteStream;

/// How long after a build ended its log moves even with no final event
/// stored (its node died before storing it, and no takeover did): a
/// build's row is marked ended just before its final event is stored, so
/// a log is moved at once only when its last event is the final one.
const UNTOLD_END_MS: i64 = 10 * 60 * 1000;

/// Bytes of events deleted per statement once a log is in the store (the
/// pages a statement frees are what it costs).
const DELETE_BYTES: u64 = 1 << 20;

/// Rows deleted per statement at most once a log is in the store.
const DELETE_BATCH: i64 = 1000;

/// Moves the logs of up to `limit` finished builds to `store`, deletes
/// the rows a pass cut short left of logs moved before, and the objects
/// of logs reaped while they moved; answers the builds moved. A store
/// that fails leaves every log where it is (it is tried again at the next
/// pass).
pub(crate) async fn archive_finished(
    db: &Db,
    store: &dyn ArtifactStore,
    limit: i64,
    now_ms: i64,
) -> Result<u64, EngineError> {
    for (build, per_event) in db.builds().archived_with_rows(limit).await? {
        delete_rows(db, build, per_event).await?;
    }
    // A log reaped while it was moved keeps its object named: delete it.
    for (build, name) in db.builds().reaped_in_store(limit).await? {
        if !name.is_empty() {
            store.delete_log(&name).await?;
        }
        db.builds().forget_log_key(build, &name).await?;
    }
    let mut moved = 0;
    for build in db
        .builds()
        .unarchived_finished(limit, now_ms - UNTOLD_END_MS)
        .await?
    {
        if archive(db, store, build).await?.is_some() {
            moved += 1;
        }
    }
    Ok(moved)
}

/// Moves finished build `build`'s log to `store`: none when another node
/// moved it, or its log was reaped, meanwhile.
pub(crate) async fn archive(
    db: &Db,
    store: &dyn ArtifactStore,
    build: i64,
) -> Result<Option<Moved>, EngineError> {
    let events = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicI64::new(0));
    if db.builds().last_event_seq(build).await? == 0 {
        // No event: nothing to store, the row says so (an empty name).
        let recorded = db
            .builds()
            .record_archived_log(build, "", Moved::default(), 0)
            .await?;
        return Ok(recorded.then_some(Moved::default()));
    }
    // A name of its own per attempt: two nodes moving one log never
    // overwrite each other's object, and the loser deletes its own.
    let name = format!("{build}-{}", uuid::Uuid::new_v4().simple());
    let lines = event_lines(
        db.clone(),
        build,
        events.clone(),
        bytes.clone(),
        last.clone(),
    );
    let compressed: ByteStream = Box::pin(ReaderStream::new(ZstdEncoder::new(StreamReader::new(
        lines,
    ))));
    let stored = store.put_log(&name, compressed).await?;
    let moved = Moved {
        events: events.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        stored,
    };
    // Recorded only if no event came after the last one written out.
    let written = last.load(Ordering::Relaxed);
    if !db
        .builds()
        .record_archived_log(build, &name, moved, written)
        .await?
    {
        store.delete_log(&name).await?;
        return Ok(None);
    }
    metrics::counter!("gantry_build_logs_moved_total").increment(1);
    delete_rows(db, build, moved.bytes / moved.events.max(1)).await?;
    Ok(Some(moved))
}

/// Deletes the rows of a build whose log is in the store, newest first, a
/// batch per statement (a reader between two batches finds the rows it
/// wants whole, or none, and then reads the object): about
/// [`DELETE_BYTES`] of events (`per_event` bytes each) per statement, 16
/// to [`DELETE_BATCH`] rows.
async fn delete_rows(db: &Db, build: i64, per_event: u64) -> Result<(), EngineError> {
    let batch = (DELETE_BYTES / per_event.max(1)).clamp(16, DELETE_BATCH as u64) as i64;
    while db.builds().delete_newest_events(build, batch).await? > 0 {
        db.let_writers_in().await;
    }
    db.builds().rows_deleted(build).await
}

/// The build's events from the database as the object's lines, a page at
/// a time, counting them and their bytes, and keeping the last one's seq.
fn event_lines(
    db: Db,
    build: i64,
    events: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    last_seq: Arc<AtomicI64>,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    futures::stream::try_unfold(Some(0i64), move |after| {
        let (db, events, bytes, last_seq) =
            (db.clone(), events.clone(), bytes.clone(), last_seq.clone());
        async move {
            let Some(after) = after else {
                return Ok(None);
            };
            let (page, more) = db
                .builds()
                .build_events_bounded(build, after, EVENTS_PAGE, PAGE_BYTES)
                .await
                .map_err(std::io::Error::other)?;
            let Some(last) = page.last().map(|e| e.0) else {
                return Ok(None);
            };
            let mut out = BytesMut::with_capacity(page.iter().map(|e| e.1.len() + 24).sum());
            for (seq, json, is_final) in &page {
                out.put_slice(format!("{seq}\t{}\t", u8::from(*is_final)).as_bytes());
                out.put_slice(json.as_bytes());
                out.put_u8(b'\n');
                bytes.fetch_add(json.len() as u64, Ordering::Relaxed);
            }
            events.fetch_add(page.len() as u64, Ordering::Relaxed);
            last_seq.store(last, Ordering::Relaxed);
            Ok(Some((out.freeze(), more.then_some(last))))
        }
    })
}

/// The events after `after` of a log stored as object `name`, in order.
pub(crate) async fn read(
    store: &dyn ArtifactStore,
    name: &str,
    after: i64,
) -> Result<impl Stream<Item = Result<StoredEvent, EngineError>> + Send + 'static, EngineError> {
    let object = store.open_log(name).await?;
    let lines = tokio::io::BufReader::new(ZstdDecoder::new(StreamReader::new(object))).lines();
    let what = format!("reading build log {name}");
    let events = tokio_stream_lines(lines)
        .map_err(move |e| EngineError::Unavailable(format!("{what}: {e}")))
        .and_then(|line| async move { parse_line(&line) })
        .try_filter(move |e| futures::future::ready(e.seq > after));
    Ok(events)
}

/// `lines` as a stream.
fn tokio_stream_lines<R>(
    lines: tokio::io::Lines<R>,
) -> impl Stream<Item = std::io::Result<String>> + Send + 'static
where
    R: tokio::io::AsyncBufRead + Unpin + Send + 'static,
{
    futures::stream::try_unfold(lines, |mut lines| async move {
        Ok(lines.next_line().await?.map(|line| (line, lines)))
    })
}

/// One line of a stored log.
fn parse_line(line: &str) -> Result<StoredEvent, EngineError> {
    let bad = || {
        EngineError::Invalid(format!(
            "a stored build log's line is malformed: {:.80}",
            line
        ))
    };
    let mut parts = line.splitn(3, '\t');
    let seq = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let is_final = match parts.next() {
        Some("1") => true,
        Some("0") => false,
        _ => return Err(bad()),
    };
    let json = parts.next().ok_or_else(bad)?.to_string();
    Ok(StoredEvent {
        seq,
        json,
        is_final,
    })
}

/// When the bytes of logs in the database were last measured (unix ms).
static MEASURED_AT: AtomicI64 = AtomicI64::new(i64::MIN);

/// How often the bytes in the database are measured: summing the events'
/// bytes reads their whole table.
const MEASURE_EVERY_MS: i64 = 5 * 60 * 1000;

/// Sets the gauges `gantry_build_log_bytes{place="store"}` (the moved
/// logs' objects; when `changed`, or first) and `{place="database"}` (the
/// events' JSON still in the database; at most every five minutes).
pub(crate) async fn measure(db: &Db, now_ms: i64, changed: bool) -> Result<(), EngineError> {
    let last = MEASURED_AT.load(Ordering::Relaxed);
    let first = last == i64::MIN;
    if changed || first {
        let in_store = db.builds().log_bytes_in_store().await?;
        metrics::gauge!("gantry_build_log_bytes", "place" => "store").set(in_store as f64);
    }
    if first || now_ms - last >= MEASURE_EVERY_MS {
        MEASURED_AT.store(now_ms, Ordering::Relaxed);
        let in_db = db.builds().log_bytes_in_database().await?;
        metrics::gauge!("gantry_build_log_bytes", "place" => "database").set(in_db as f64);
    }
    Ok(())
}

#[cfg(test)]
#[path = "log_store_tests.rs"]
mod tests;
