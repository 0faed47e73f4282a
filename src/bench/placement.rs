//! `gantry bench placement`: a real engine (Registry, Scheduler actor,
//! database) placing steps on simulated in-process workers registered
//! through it, each placement followed by the database write it needs (the
//! container row, `creating`, with its per-worker sequence number, written
//! by the engine), then released. Measures placements per second and the
//! p99 decision latency for each strategy chain, against a baseline of the
//! same database writes with no scheduling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_actors::db::{Db, HandleKind};
use gantry_actors::engine::HandleOwner;
use gantry_actors::placement::{parse_chain, Load};
use gantry_actors::scheduler::{PlacementConfig, Selection, StepRequest};
use gantry_actors::testing::DetachedConnector;
use gantry_actors::worker_info::{WorkerLimits, WorkerRegistration};
use gantry_actors::{Engine, EngineConfig};
use rand::Rng;

use crate::web::artifact_files::ArtifactFiles;

/// Options of the benchmark.
pub struct PlacementBench {
    /// Simulated workers.
    pub workers: usize,
    /// Steps placed per strategy chain.
    pub steps: usize,
    /// Placements in flight at once.
    pub concurrency: usize,
    /// Database URL; default a fresh SQLite file in a temporary directory.
    pub database_url: Option<String>,
}

fn registration(name: &str) -> WorkerRegistration {
    WorkerRegistration {
        limits: WorkerLimits {
            max_active_tasks: Some(4),
            max_containers: Some(50),
            max_volumes: Some(200),
        },
        backend: "simulated".into(),
        incarnation: "bench".into(),
        // No heartbeats come: a TTL longer than any run keeps them running.
        heartbeat_interval_secs: 3600,
        ..gantry_actors::testing::registration(name)
    }
}

const ARTIFACTS: usize = 5000;

fn request(rng: &mut impl Rng) -> StepRequest {
    StepRequest {
        team: "main".into(),
        platform: "linux".into(),
        inputs: (0..2)
            .map(|_| format!("artifact-{}", rng.gen_range(0..ARTIFACTS)))
            .collect(),
        need: Load {
            tasks: 1,
            containers: 1,
            volumes: 3,
        },
        ..Default::default()
    }
}

/// Figures of one run.
struct Figures {
    per_sec: f64,
    p99_ms: f64,
    p50_ms: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// Places `steps` steps with `concurrency` in flight; with `schedule`
/// false, only the database writes run (the baseline).
async fn run(
    engine: &Engine,
    schedule: bool,
    workers: &[String],
    steps: usize,
    concurrency: usize,
) -> anyhow::Result<Figures> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let owner = HandleOwner {
        team: "main",
        build: None,
        step: Some("bench"),
    };
    let lanes = (0..concurrency).map(|_| {
        let next = next.clone();
        async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= steps {
                    return anyhow::Ok(latencies);
                }
                let req = request(&mut rand::thread_rng());
                let t = Instant::now();
                let placement = if schedule {
                    Some(match engine.select_worker(req).await? {
                        Selection::Placed(p) => p,
                        Selection::Queued { ticket, .. } => {
                            ticket.await.context("waiting placement dropped")?
                        }
                    })
                } else {
                    None
                };
                latencies.push(t.elapsed());
                let worker = placement
                    .as_ref()
                    .map_or(&workers[i % workers.len()], |p| &p.worker);
                let handle = uuid::Uuid::new_v4().to_string();
                engine
                    .record_handle(HandleKind::Container, &handle, worker, owner)
                    .await?;
                if let Some(p) = placement {
                    engine.release_placement(p);
                }
            }
        }
    });
    let mut all: Vec<Duration> = Vec::with_capacity(steps);
    for lane in futures::future::join_all(lanes).await {
        all.extend(lane?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    Ok(Figures {
        per_sec: steps as f64 / elapsed,
        p99_ms: percentile(&all, 0.99),
        p50_ms: percentile(&all, 0.50),
    })
}

/// An engine on `url` with the strategy chain `chain` for every kind of
/// step, and `workers` registered through it.
async fn start_engine(
    url: &str,
    store: &std::path::Path,
    chain: &str,
    workers: &[String],
) -> anyhow::Result<Engine> {
    let db = Db::connect(url).await?;
    let strategies = parse_chain(chain).map_err(anyhow::Error::msg)?;
    let config = EngineConfig {
        placement: PlacementConfig {
            with_inputs: strategies.clone(),
            without_inputs: strategies.clone(),
            checks: strategies,
        },
        node_name: "bench".into(),
        ..Default::default()
    };
    let artifacts = ArtifactFiles::open(store.to_path_buf()).context("artifact store")?;
    let engine =
        Engine::start(db, Arc::new(DetachedConnector), Arc::new(artifacts), config).await?;
    for w in workers {
        engine.register_worker(registration(w)).await?;
    }
    Ok(engine)
}

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: PlacementBench) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/bench.db?mode=rwc", tmp.path().display()));
    let store = tmp.path().join("artifacts");
    let workers: Vec<String> = (0..opts.workers).map(|i| format!("sim-{i:05}")).collect();
    println!("workers: {}", opts.workers);
    println!("steps: {}", opts.steps);
    println!("concurrency: {}", opts.concurrency);
    println!(
        "database: {}",
        if url.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        }
    );

    let engine = start_engine(&url, &store, "random", &workers).await?;
    let base = run(&engine, false, &workers, opts.steps, opts.concurrency).await?;
    engine.shutdown().await;
    println!("baseline_db_only_per_sec: {:.0}", base.per_sec);

    for chain in [
        "volume-locality,fewest-build-containers",
        "limit-active-tasks",
    ] {
        let engine = start_engine(&url, &store, chain, &workers).await?;
        let mut rng = rand::thread_rng();
        for a in 0..ARTIFACTS {
            for _ in 0..rng.gen_range(1..=3) {
                let worker = &workers[rng.gen_range(0..workers.len())];
                engine.record_artifact_location(&format!("artifact-{a}"), worker);
            }
        }
        let f = run(&engine, true, &workers, opts.steps, opts.concurrency).await?;
        engine.shutdown().await;
        let prefix = chain.replace([',', '-'], "_");
        println!("{prefix}_placements_per_sec: {:.0}", f.per_sec);
        println!("{prefix}_p50_ms: {:.3}", f.p50_ms);
        println!("{prefix}_p99_ms: {:.3}", f.p99_ms);
        println!("{prefix}_vs_db_only_ratio: {:.2}", f.per_sec / base.per_sec);
    }
    Ok(())
}
