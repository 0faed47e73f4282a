//! `gantry bench logs`: a build's log of `--size` bytes stored through the
//! engine's event sink as a task's output is (chunks of 64 KiB of lines,
//! then one long line with no newline), with `--followers` followers
//! reading it live, then moved to the artifact store. The baseline is
//! writing the same bytes to a file (`cat > file`). Figures:
//!
//! - `log_ingest_mb_s` against `cat_mb_s` (and their ratio);
//! - `web_rss_growth_mib`: the process's peak RSS, to the end of the move,
//!   over its RSS at the start (the engine, the followers and the move are
//!   in this process, as on a web node);
//! - `db_bytes_per_log_byte` while the build runs (its events' JSON in
//!   the database) and after the move (none), `store_bytes_per_log_byte`
//!   (the zstd object);
//! - `follower_lag_p99_ms`: from an event stored to each follower reading
//!   it, over every follower;
//! - `other_build_p99_ms`: storing a small event of another build while
//!   the log is written (a writer the log must not slow);
//! - with `--reap-builds N`: N ended builds with small logs are reaped as
//!   the `build-logs` rule reaps them (200 builds per transaction) and the
//!   space given back (SQLite incremental vacuum), while a writer stores an
//!   event every 5 ms: `reap_writer_p99_ms` and `reap_writer_max_ms` (no
//!   statement of the reaping holds the database long), and the
//!   database's size before and after.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_actors::api::bench::DetachedConnector;
use gantry_actors::{Engine, EngineConfig, EngineSetup};

use super::follow::{arrivals, quantile};
use gantry_artifacts::ArtifactFiles;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;
use tokio::io::AsyncWriteExt as _;

/// Options of the benchmark.
pub struct LogsBench {
    /// Bytes printed.
    pub size: u64,
    /// Followers reading the log live.
    pub followers: usize,
    /// Database URL (default: SQLite in a temporary directory).
    pub database_url: Option<String>,
    /// Ended builds whose small logs are then reaped (0: none).
    pub reap_builds: usize,
}

/// Bytes per event, as a task's output arrives.
const CHUNK: usize = 64 * 1024;

/// The long line at the end (no newline), at most.
const LONG_LINE: u64 = 8 * 1024 * 1024;

/// The text of chunk `i` of the lines part: numbered lines of about 100
/// bytes, `CHUNK` bytes in all.
fn lines_chunk(i: u64) -> String {
    let mut out = String::with_capacity(CHUNK);
    let mut n = 0;
    while out.len() + 100 < CHUNK {
        out.push_str(&format!(
            "chunk {i} line {n}: the quick brown fox jumps over the lazy dog {:016x}\n",
            i.wrapping_mul(2_654_435_761) ^ n
        ));
        n += 1;
    }
    while out.len() < CHUNK - 1 {
        out.push('.');
    }
    out.push('\n');
    out
}

/// The chunks printed: lines, then one long line with no newline.
fn chunks(size: u64) -> impl Iterator<Item = String> {
    let long = size.min(LONG_LINE) / 4;
    let lines = (size - long) / CHUNK as u64;
    let long_chunks = long / CHUNK as u64;
    (0..lines)
        .map(lines_chunk)
        .chain((0..long_chunks).map(|_| "x".repeat(CHUNK)))
}

/// This process's resident set and its peak, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Stores a line of another build through `sink` every `every` until
/// `stop`; answers how long each store took (ms), sorted.
fn timed_writer(
    mut sink: gantry_actors::api::bench::EventSink,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<f64>> {
    tokio::spawn(async move {
        let mut ms = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let t = Instant::now();
            let e = BuildEvent::Log {
                step: "writer".into(),
                stream: "stdout".into(),
                data: "a line of another build\n".into(),
                time: 0,
            };
            if sink.emit(&e).await.is_err() {
                break;
            }
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            tokio::time::sleep(every).await;
        }
        ms.sort_by(f64::total_cmp);
        ms
    })
}

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: LogsBench) -> anyhow::Result<()> {
    anyhow::ensure!(
        opts.size >= 2 * CHUNK as u64,
        "--size {}: at least 128KiB",
        opts.size
    );
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let (rss_before, _) = rss();

    // The baseline: the same bytes written to a file.
    let started = Instant::now();
    let mut file = tokio::fs::File::create(tmp.path().join("cat.out")).await?;
    let mut printed = 0u64;
    for chunk in chunks(opts.size) {
        file.write_all(chunk.as_bytes()).await?;
        printed += chunk.len() as u64;
    }
    file.flush().await?;
    drop(file);
    let cat_secs = started.elapsed().as_secs_f64();
    std::fs::remove_file(tmp.path().join("cat.out"))?;

    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/gantry.db?mode=rwc", tmp.path().display()));
    let store = ArtifactFiles::open(tmp.path().join("artifacts")).context("artifact store")?;
    let engine = Engine::open(EngineSetup {
        sealer: crate::bench::sealer(),
        old_sealer: None,
        credential_manager: None,
        var_source_types: None,
        database_url: url.clone(),
        teams: vec!["main".into()],
        connector: Arc::new(DetachedConnector),
        artifacts: Arc::new(store),
        config: EngineConfig {
            node_name: "bench-logs".into(),
            ..Default::default()
        },
    })
    .await?;
    let (id, mut sink) = engine.bench_event_sink("main").await?;
    let (_, other_sink) = engine.bench_event_sink("main").await?;
    let followers: Vec<_> = (0..opts.followers)
        .map(|_| tokio::spawn(arrivals(engine.follow_build_events(id, 0))))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Another build's small events, stored while the log is written.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other_times = timed_writer(other_sink, Duration::from_millis(20), stop.clone());

    let stored: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let started = Instant::now();
    for chunk in chunks(opts.size) {
        stored.lock().unwrap().push(Instant::now());
        sink.emit(&BuildEvent::Log {
            step: "print".into(),
            stream: "stdout".into(),
            data: chunk,
            time: 0,
        })
        .await?;
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    stored.lock().unwrap().push(Instant::now());
    sink.emit(&BuildEvent::status_at(
        BuildStatus::Succeeded,
        Some(0),
        gantry_actors::api::now_ms(),
    ))
    .await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (_, peak_ingest) = rss();
    let (in_db_running, _) = engine.bench_log_bytes().await?;

    let mut lags = Vec::new();
    for f in followers {
        let seen = tokio::time::timeout(Duration::from_secs(600), f)
            .await
            .context("a follower did not read the final event within 10 minutes")???;
        let stored = stored.lock().unwrap();
        for (i, at) in stored.iter().enumerate() {
            let got = seen
                .get(&(i as i64 + 1))
                .with_context(|| format!("a follower never read event {}", i + 1))?;
            lags.push(got.saturating_duration_since(*at).as_secs_f64() * 1000.0);
        }
    }
    lags.sort_by(f64::total_cmp);
    let other_ms = other_times.await.unwrap_or_default();

    let (events, bytes, object) = engine.bench_move_log(id).await?;
    let (in_db_after, _) = engine.bench_log_bytes().await?;
    let (_, rss_peak) = rss();
    let reaped = match opts.reap_builds {
        0 => None,
        n => Some(reap(&engine, &url, n).await),
    };
    engine.shutdown().await;
    let reaped = reaped.transpose()?;

    let mb = printed as f64 / 1e6;
    let per = |b: f64| b / printed as f64;
    println!("printed_bytes: {printed}");
    println!("events: {events}");
    println!("followers: {}", opts.followers);
    println!("log_ingest_mb_s: {:.1}", mb / ingest_secs);
    println!("cat_mb_s: {:.1}", mb / cat_secs);
    println!(
        "ingest_vs_cat_ratio: {:.3}",
        (mb / ingest_secs) / (mb / cat_secs)
    );
    println!(
        "web_rss_growth_mib: {:.1}",
        rss_peak.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0)
    );
    println!(
        "web_rss_growth_ingest_mib: {:.1}",
        peak_ingest.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0)
    );
    println!(
        "db_bytes_per_log_byte_running: {:.3}",
        per(in_db_running as f64)
    );
    println!(
        "db_bytes_per_log_byte_after_move: {:.3}",
        per(in_db_after as f64)
    );
    println!("stored_event_bytes: {bytes}");
    println!("store_bytes_per_log_byte: {:.4}", per(object as f64));
    println!("follower_lag_p50_ms: {:.2}", quantile(&lags, 0.5));
    println!("follower_lag_p99_ms: {:.2}", quantile(&lags, 0.99));
    println!("other_build_p99_ms: {:.2}", quantile(&other_ms, 0.99));
    if let Some(r) = reaped {
        r.print();
    }
    Ok(())
}

/// What reaping many builds' logs did.
struct Reaped {
    builds: usize,
    secs: f64,
    writer_ms: Vec<f64>,
    before: i64,
    after: i64,
}

impl Reaped {
    fn print(&self) {
        let mib = |b: i64| b as f64 / (1024.0 * 1024.0);
        println!("reap_builds: {}", self.builds);
        println!("reap_secs: {:.2}", self.secs);
        println!("reap_writer_writes: {}", self.writer_ms.len());
        println!("reap_writer_p99_ms: {:.2}", quantile(&self.writer_ms, 0.99));
        println!("reap_writer_max_ms: {:.2}", quantile(&self.writer_ms, 1.0));
        println!("db_mib_before_reap: {:.1}", mib(self.before));
        println!("db_mib_after_reap: {:.1}", mib(self.after));
    }
}

/// Makes `builds` ended builds with small logs, then reaps every log as
/// the `build-logs` rule does and gives the space back, while a writer
/// stores another build's events every 5 ms and times each.
async fn reap(engine: &Engine, url: &str, builds: usize) -> anyhow::Result<Reaped> {
    let db = gantry_actors::api::bench::BenchStore::connect(url, crate::bench::sealer()).await?;
    let ids = db.bench().logged_builds("main", builds, 4, 512).await?;
    let before = db.bench().database_bytes().await?;
    let (_, sink) = engine.bench_event_sink("main").await?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = timed_writer(sink, Duration::from_millis(5), stop.clone());
    let started = Instant::now();
    for batch in ids.chunks(200) {
        db.bench().reap_logs(batch).await?;
    }
    while db.bench().reclaim(65_536).await? > 0 {}
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writer_ms = writer.await.unwrap_or_default();
    let after = db.bench().database_bytes().await?;
    Ok(Reaped {
        builds,
        secs,
        writer_ms,
        before,
        after,
    })
}
