//! `gantry bench gc`: the web side of the GC sweep protocol at scale. One
//! worker with `handles` rows (half containers, half volumes, `created`,
//! inserted in bulk by the database layer's bench helper) reports all of them; the reconciliation (the worker's
//! rows loaded in one query and judged in memory, its writes batched in one
//! transaction) is timed over several reports, on SQLite and on a fresh
//! PostgreSQL database. The baseline, measured in the same run: only
//! loading the worker's rows (both tables at once, as a report does). Also
//! timed: a report missing a tenth of the volumes (rows marked missing in
//! batches).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_actors::api::bench::{BenchStore, Sweeps};
use gantry_wire::sweep::SweepReport;
use gantry_wire::worker_info::WorkerRegistration;

/// Options of the benchmark.
pub struct GcBench {
    /// Rows of the one worker (half containers, half volumes).
    pub handles: usize,
    /// Reports timed per database.
    pub reports: usize,
    /// The PostgreSQL server on which a fresh database is created and dropped.
    pub postgres_url: String,
}

const WORKER: &str = "bench-worker";
const INCARNATION: &str = "bench";

fn registration() -> WorkerRegistration {
    WorkerRegistration {
        backend: "simulated".into(),
        incarnation: INCARNATION.into(),
        heartbeat_interval_secs: 3600,
        ..gantry_actors::api::bench::registration(WORKER)
    }
}

/// Figures of one database.
struct Figures {
    ms_per_report: f64,
    baseline_select_ms: f64,
    ms_report_10pct_missing: f64,
    peak_rss_mib: f64,
}

/// The process's peak resident set since the last [`reset_peak_rss`], in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Resets the peak resident set to the current one (Linux `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn measure(db: &BenchStore, opts: &GcBench) -> anyhow::Result<Figures> {
    reset_peak_rss();
    db.bench().register_worker(&registration()).await?;
    let half = opts.handles / 2;
    let containers: Vec<String> = (0..half).map(|i| format!("c-{i:08}")).collect();
    let volumes: Vec<String> = (0..opts.handles - half)
        .map(|i| format!("v-{i:08}"))
        .collect();
    db.bench()
        .insert_created_handles(WORKER, "main", &containers, &volumes)
        .await?;
    let sweeps = Sweeps::default();
    let report = |epoch: i64, volumes: Vec<String>| SweepReport {
        worker: WORKER.into(),
        incarnation: INCARNATION.into(),
        epoch,
        containers: containers.clone(),
        volumes,
        volume_store: None,
        destroy_failures: 0,
    };
    // The first report of the incarnation, untimed (warms the caches).
    let epoch = db.sweep_begin(&sweeps, WORKER, INCARNATION).await?;
    let answer = db
        .sweep_report(&sweeps, report(epoch, volumes.clone()))
        .await?;
    anyhow::ensure!(
        answer.destroy_containers.is_empty() && answer.destroy_volumes.is_empty(),
        "a report listing every row answered destroys"
    );
    let mut select = Duration::ZERO;
    for _ in 0..opts.reports {
        let t = Instant::now();
        // As a report loads them: both tables at once.
        let rows = db.bench().sweep_row_count(WORKER).await?;
        select += t.elapsed();
        anyhow::ensure!(rows == opts.handles, "rows lost");
    }
    let mut reports = Duration::ZERO;
    for _ in 0..opts.reports {
        let r = report(
            db.sweep_begin(&sweeps, WORKER, INCARNATION).await?,
            volumes.clone(),
        );
        let t = Instant::now();
        db.sweep_report(&sweeps, r).await?;
        reports += t.elapsed();
    }
    let kept: Vec<String> = volumes
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 != 0)
        .map(|(_, h)| h.clone())
        .collect();
    let r = report(db.sweep_begin(&sweeps, WORKER, INCARNATION).await?, kept);
    let t = Instant::now();
    db.sweep_report(&sweeps, r).await?;
    let missing_ms = t.elapsed().as_secs_f64() * 1000.0;
    let marked = sweeps.stats().snapshot().marked_missing as usize;
    anyhow::ensure!(
        marked == volumes.len().div_ceil(10),
        "{marked} rows marked missing"
    );
    let n = opts.reports.max(1) as f64;
    Ok(Figures {
        ms_per_report: reports.as_secs_f64() * 1000.0 / n,
        baseline_select_ms: select.as_secs_f64() * 1000.0 / n,
        ms_report_10pct_missing: missing_ms,
        peak_rss_mib: peak_rss_mib(),
    })
}

fn print(prefix: &str, f: &Figures) {
    println!("{prefix}_ms_per_report: {:.2}", f.ms_per_report);
    println!("{prefix}_baseline_select_ms: {:.2}", f.baseline_select_ms);
    println!(
        "{prefix}_report_vs_select_ratio: {:.2}",
        f.ms_per_report / f.baseline_select_ms.max(1e-6)
    );
    println!(
        "{prefix}_ms_report_10pct_missing: {:.2}",
        f.ms_report_10pct_missing
    );
    println!("{prefix}_peak_rss_mib: {:.1}", f.peak_rss_mib);
}

/// Runs the benchmark and prints its figures as `name: value` lines.
pub async fn bench(opts: GcBench) -> anyhow::Result<()> {
    anyhow::ensure!(opts.handles >= 2, "--handles must be at least 2");
    println!("handles: {}", opts.handles);
    println!("reports: {}", opts.reports);

    let dir = tempfile::tempdir().context("temporary directory")?;
    let url = format!("sqlite://{}/bench.db?mode=rwc", dir.path().display());
    let db = BenchStore::connect(&url, super::sealer())
        .await
        .context("opening SQLite")?;
    let sqlite = measure(&db, &opts).await.context("SQLite")?;
    db.close().await;
    print("sqlite", &sqlite);

    let base = opts.postgres_url.trim_end_matches('/');
    let name = format!("gantry_bench_gc_{}", uuid::Uuid::new_v4().simple());
    BenchStore::create_database(base, &name)
        .await
        .with_context(|| format!("creating the benchmark's PostgreSQL database at {base}"))?;
    let result = async {
        let db = BenchStore::connect(&format!("{base}/{name}"), super::sealer()).await?;
        let figures = measure(&db, &opts).await;
        db.close().await;
        figures
    }
    .await;
    let dropped = BenchStore::drop_database(base, &name).await;
    let postgres = result.context("PostgreSQL")?;
    dropped.context("dropping the benchmark's PostgreSQL database")?;
    print("postgres", &postgres);
    Ok(())
}
