//! `gantry bench follow`: how late a follower of a build sees each event.
//! Two engines share one PostgreSQL database, as two web nodes do; a build
//! owned by node a stores events at a steady pace, and followers read them
//! through node b (told by PostgreSQL `NOTIFY`) and, as the baseline,
//! through node a itself (its live channel). Each event's latency runs from
//! just before it is stored (so it includes the insert) to its arrival at
//! the follower.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_actors::api::bench::DetachedConnector;
use gantry_actors::api::StoredEvent;
use gantry_actors::{Engine, EngineConfig, EngineError, EngineSetup};
use gantry_wire::events::BuildEvent;
use gantry_wire::state::BuildStatus;
use tokio::sync::mpsc;

use gantry_artifacts::ArtifactFiles;

/// Options of the benchmark.
pub struct FollowBench {
    /// Events stored.
    pub events: usize,
    /// Time between two events.
    pub interval: Duration,
    /// The PostgreSQL database the two nodes share.
    pub database_url: String,
}

/// One node on the shared database.
async fn start_node(url: &str, store: &std::path::Path, node: &str) -> anyhow::Result<Engine> {
    let artifacts = ArtifactFiles::open(store.to_path_buf()).context("artifact store")?;
    Ok(Engine::open(EngineSetup {
        sealer: crate::bench::sealer(),
        old_sealer: None,
        credential_manager: None,
        var_source_types: None,
        database_url: url.to_string(),
        teams: vec!["main".into()],
        connector: Arc::new(DetachedConnector),
        artifacts: Arc::new(artifacts),
        config: EngineConfig {
            node_name: node.into(),
            ..Default::default()
        },
    })
    .await?)
}

/// Reads a follower until the final event; answers when each event (by
/// sequence number) arrived.
pub(crate) async fn arrivals(
    mut rx: mpsc::Receiver<Result<StoredEvent, EngineError>>,
) -> anyhow::Result<HashMap<i64, Instant>> {
    let mut seen = HashMap::new();
    let mut last = 0;
    while let Some(event) = rx.recv().await {
        let event = event?;
        anyhow::ensure!(
            event.seq == last + 1,
            "event {} came after {last}",
            event.seq
        );
        last = event.seq;
        seen.insert(event.seq, Instant::now());
        if event.is_final {
            break;
        }
    }
    Ok(seen)
}

/// Milliseconds at quantile `q` of `sorted`.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: FollowBench) -> anyhow::Result<()> {
    anyhow::ensure!(
        opts.database_url.starts_with("postgres"),
        "--database-url {}: the nodes share a PostgreSQL database (postgres://...)",
        opts.database_url
    );
    anyhow::ensure!(opts.events >= 2, "--events {}: at least 2", opts.events);
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let store = tmp.path().join("artifacts");
    let a = start_node(&opts.database_url, &store, "bench-a").await?;
    let b = start_node(&opts.database_url, &store, "bench-b").await?;
    let (id, mut sink) = a.bench_event_sink("main").await?;
    let elsewhere = tokio::spawn(arrivals(b.follow_build_events(id, 0)));
    let here = tokio::spawn(arrivals(a.follow_build_events(id, 0)));
    // Both followers are reading before the first event.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut stored = Vec::with_capacity(opts.events);
    for i in 1..=opts.events {
        let event = match i == opts.events {
            true => BuildEvent::status_at(
                BuildStatus::Succeeded,
                Some(0),
                gantry_actors::api::now_ms(),
            ),
            false => BuildEvent::Log {
                step: "bench".into(),
                stream: "stdout".into(),
                data: format!("line {i}\n"),
                time: 0,
            },
        };
        stored.push(Instant::now());
        sink.emit(&event).await?;
        tokio::time::sleep(opts.interval).await;
    }
    let deadline = Duration::from_secs(30);
    let elsewhere = tokio::time::timeout(deadline, elsewhere)
        .await
        .context("node b's follower did not see the final event within 30 s")???;
    let here = tokio::time::timeout(deadline, here)
        .await
        .context("node a's follower did not see the final event within 30 s")???;
    a.shutdown().await;
    b.shutdown().await;
    let latencies = |seen: &HashMap<i64, Instant>| -> anyhow::Result<Vec<f64>> {
        let mut ms = Vec::with_capacity(stored.len());
        for (i, at) in stored.iter().enumerate() {
            let got = seen
                .get(&(i as i64 + 1))
                .with_context(|| format!("event {} never arrived", i + 1))?;
            ms.push(got.saturating_duration_since(*at).as_secs_f64() * 1000.0);
        }
        ms.sort_by(f64::total_cmp);
        Ok(ms)
    };
    let other = latencies(&elsewhere)?;
    let same = latencies(&here)?;
    println!("events: {}", opts.events);
    println!("interval_ms: {}", opts.interval.as_millis());
    println!("follow_p50_ms: {:.2}", quantile(&other, 0.5));
    println!("follow_p99_ms: {:.2}", quantile(&other, 0.99));
    println!("follow_max_ms: {:.2}", quantile(&other, 1.0));
    println!("same_node_p99_ms: {:.2}", quantile(&same, 0.99));
    println!(
        "follow_p99_vs_same_node_ratio: {:.2}",
        quantile(&other, 0.99) / quantile(&same, 0.99).max(0.001)
    );
    Ok(())
}
