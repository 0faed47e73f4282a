//! `gantry bench placement`: a real engine (Registry, Scheduler actor,
//! database) placing steps on simulated in-process workers registered
//! through it, each placement followed by the database write it needs (the
//! container row, `creating`, with its per-worker sequence number, written
//! by the engine), then released. Measures placements per second and the
//! p99 decision latency for each strategy chain, against a baseline of the
//! same database writes with no scheduling.
//!
//! With `--nodes 2` (PostgreSQL), each chain also runs on two engines
//! sharing the database, as two web nodes do (placements through the shared
//! ledger, the workers registered through the first and known to the second
//! from the workers table), their lanes alternating between the nodes; the
//! figures are printed with their ratio to one node on the same database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use gantry_actors::api::bench::DetachedConnector;
use gantry_actors::api::{
    parse_chain, HandleKind, HandleOwner, Load, PlacementConfig, Selection, StepRequest,
};
use gantry_actors::{Engine, EngineConfig, EngineSetup};
use gantry_wire::worker_info::{WorkerLimits, WorkerRegistration};
use rand::Rng;

use gantry_artifacts::ArtifactFiles;

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
    /// Web nodes sharing the database (1 or 2; 2 needs PostgreSQL).
    pub nodes: usize,
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
        ..gantry_actors::api::bench::registration(name)
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
#[derive(Clone)]
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
    engines: &[Engine],
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
    let lanes = (0..concurrency).map(|lane| {
        let next = next.clone();
        // Lanes alternate between the nodes.
        let engine = &engines[lane % engines.len()];
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
    node: &str,
) -> anyhow::Result<Engine> {
    let strategies = parse_chain(chain).map_err(anyhow::Error::msg)?;
    let config = EngineConfig {
        placement: PlacementConfig {
            with_inputs: strategies.clone(),
            without_inputs: strategies.clone(),
            checks: strategies,
            wait_for_workers: None,
        },
        node_name: node.into(),
        ..Default::default()
    };
    let artifacts = ArtifactFiles::open(store.to_path_buf()).context("artifact store")?;
    // The nodes share one database: they share its key.
    let engine = Engine::open(EngineSetup {
        sealer: crate::bench::sealer(),
        old_sealer: None,
        credential_manager: None,
        var_source_types: None,
        database_url: url.to_string(),
        teams: vec![],
        connector: Arc::new(DetachedConnector),
        artifacts: Arc::new(artifacts),
        config,
    })
    .await?;
    for w in workers {
        engine.register_worker(registration(w)).await?;
    }
    Ok(engine)
}

/// `n` engines sharing `url`, as `n` web nodes: the workers registered
/// through the first; the others wait until they know them all (from the
/// workers table).
async fn start_nodes(
    n: usize,
    url: &str,
    store: &std::path::Path,
    chain: &str,
    workers: &[String],
) -> anyhow::Result<Vec<Engine>> {
    let mut engines = vec![start_engine(url, store, chain, workers, "bench-1").await?];
    for i in 2..=n {
        let engine = start_engine(url, store, chain, &[], &format!("bench-{i}")).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while engine.worker_views().await?.len() < workers.len() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "node bench-{i} did not learn of the workers within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        engines.push(engine);
    }
    let mut rng = rand::thread_rng();
    for a in 0..ARTIFACTS {
        for _ in 0..rng.gen_range(1..=3) {
            let worker = &workers[rng.gen_range(0..workers.len())];
            for engine in &engines {
                engine.record_artifact_location(&format!("artifact-{a}"), worker);
            }
        }
    }
    Ok(engines)
}

/// Places the steps of one chain on `n` nodes; shuts them down.
async fn run_nodes(
    n: usize,
    url: &str,
    store: &std::path::Path,
    chain: &str,
    workers: &[String],
    opts: &PlacementBench,
) -> anyhow::Result<Figures> {
    let engines = start_nodes(n, url, store, chain, workers).await?;
    let f = run(&engines, true, workers, opts.steps, opts.concurrency).await;
    for engine in &engines {
        engine.shutdown().await;
    }
    f
}

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: PlacementBench) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/bench.db?mode=rwc", tmp.path().display()));
    let postgres = !url.starts_with("sqlite");
    anyhow::ensure!(
        (1..=2).contains(&opts.nodes),
        "--nodes {}: 1 or 2 web nodes",
        opts.nodes
    );
    anyhow::ensure!(
        opts.nodes == 1 || postgres,
        "--nodes 2 needs --database-url postgres://...: web nodes share a PostgreSQL database"
    );
    let store = tmp.path().join("artifacts");
    let workers: Vec<String> = (0..opts.workers).map(|i| format!("sim-{i:05}")).collect();
    println!("workers: {}", opts.workers);
    println!("steps: {}", opts.steps);
    println!("concurrency: {}", opts.concurrency);
    println!("database: {}", if postgres { "postgres" } else { "sqlite" });
    println!("nodes: {}", opts.nodes);

    let engine = start_engine(&url, &store, "random", &workers, "bench-1").await?;
    let base = run(
        std::slice::from_ref(&engine),
        false,
        &workers,
        opts.steps,
        opts.concurrency,
    )
    .await?;
    engine.shutdown().await;
    println!("baseline_db_only_per_sec: {:.0}", base.per_sec);

    for chain in [
        "volume-locality,fewest-build-containers",
        "limit-active-tasks",
    ] {
        let prefix = chain.replace([',', '-'], "_");
        let one = run_nodes(1, &url, &store, chain, &workers, &opts).await?;
        let f = match opts.nodes {
            1 => one.clone(),
            n => {
                println!("{prefix}_one_node_placements_per_sec: {:.0}", one.per_sec);
                println!("{prefix}_one_node_p99_ms: {:.3}", one.p99_ms);
                run_nodes(n, &url, &store, chain, &workers, &opts).await?
            }
        };
        println!("{prefix}_placements_per_sec: {:.0}", f.per_sec);
        println!("{prefix}_p50_ms: {:.3}", f.p50_ms);
        println!("{prefix}_p99_ms: {:.3}", f.p99_ms);
        println!("{prefix}_vs_db_only_ratio: {:.2}", f.per_sec / base.per_sec);
        if opts.nodes > 1 {
            println!("{prefix}_vs_one_node_ratio: {:.2}", f.per_sec / one.per_sec);
            println!(
                "{prefix}_p99_vs_one_node_ratio: {:.2}",
                f.p99_ms / one.p99_ms
            );
        }
    }
    Ok(())
}
