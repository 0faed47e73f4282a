//! `gantry bench placement`: the real Scheduler actor placing steps on
//! simulated in-process workers, each placement followed by the database
//! write it needs (the container row, `creating`, with its per-worker
//! sequence number), then released. Measures placements per second and the
//! p99 decision latency for each strategy chain, against a baseline of the
//! same database writes with no scheduling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::Context as _;
use gantry_actors::db::{Db, HandleKind};
use gantry_actors::testing::DetachedWorker;
use gantry_actors::placement::{parse_chain, Load};
use gantry_actors::scheduler::{
    ArtifactLocality, PlacementConfig, ReleasePlacement, Scheduler, SelectWorker, Selection,
    StepRequest, WorkerUpdated,
};
use gantry_actors::worker_info::{WorkerLimits, WorkerRegistration, WorkerState};
use rand::Rng;

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
        name: name.into(),
        agent_url: "http://127.0.0.1:1".into(),
        agent_token: String::new(),
        platform: "linux".into(),
        tags: vec![],
        team: None,
        resource_types: vec![],
        limits: WorkerLimits {
            max_active_tasks: Some(4),
            max_containers: Some(50),
            max_volumes: Some(200),
        },
        version: env!("CARGO_PKG_VERSION").into(),
        backend: "simulated".into(),
        incarnation: "bench".into(),
        heartbeat_interval_secs: 30,
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

/// Places `steps` steps with `concurrency` in flight; with `scheduler` None,
/// only the database writes run (the baseline).
async fn run(
    db: &Db,
    scheduler: Option<&Addr<Scheduler>>,
    workers: &[String],
    steps: usize,
    concurrency: usize,
) -> anyhow::Result<Figures> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let lanes = (0..concurrency).map(|_| {
        let next = next.clone();
        let db = db.clone();
        let scheduler = scheduler.cloned();
        async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= steps {
                    return anyhow::Ok(latencies);
                }
                let req = request(&mut rand::thread_rng());
                let t = Instant::now();
                let (worker, placement) = match &scheduler {
                    Some(s) => match s.send(SelectWorker(req)).await?? {
                        Selection::Placed(p) => (p.worker.clone(), Some(p)),
                        Selection::Queued { ticket, .. } => {
                            let p = ticket.await.context("waiting placement dropped")?;
                            (p.worker.clone(), Some(p))
                        }
                    },
                    None => (workers[i % workers.len()].clone(), None),
                };
                latencies.push(t.elapsed());
                let handle = uuid::Uuid::new_v4().to_string();
                db.insert_handle(
                    HandleKind::Container,
                    &handle,
                    &worker,
                    None,
                    Some("bench"),
                    "main",
                )
                .await?;
                if let (Some(s), Some(p)) = (&scheduler, placement) {
                    s.do_send(ReleasePlacement(p));
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

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: PlacementBench) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir().context("temporary directory")?;
    let url = opts
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/bench.db?mode=rwc", tmp.path().display()));
    let db = Db::connect(&url).await?;
    let workers: Vec<String> = (0..opts.workers).map(|i| format!("sim-{i:05}")).collect();
    for w in &workers {
        db.upsert_worker(&registration(w)).await?;
    }
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

    let base = run(&db, None, &workers, opts.steps, opts.concurrency).await?;
    println!("baseline_db_only_per_sec: {:.0}", base.per_sec);

    for chain in [
        "volume-locality,fewest-build-containers",
        "limit-active-tasks",
    ] {
        let strategies = parse_chain(chain).map_err(anyhow::Error::msg)?;
        let scheduler = Scheduler::start_on_own_thread(PlacementConfig {
            with_inputs: strategies.clone(),
            without_inputs: strategies.clone(),
            checks: strategies,
        });
        let mut rng = rand::thread_rng();
        for w in &workers {
            scheduler
                .send(WorkerUpdated(gantry_actors::scheduler::Candidate {
                    registration: registration(w),
                    state: WorkerState::Running,
                    client: Arc::new(DetachedWorker(w.clone())),
                }))
                .await?;
        }
        for a in 0..ARTIFACTS {
            for _ in 0..rng.gen_range(1..=3) {
                scheduler.do_send(ArtifactLocality {
                    artifact: format!("artifact-{a}"),
                    worker: workers[rng.gen_range(0..workers.len())].clone(),
                    present: true,
                });
            }
        }
        let f = run(
            &db,
            Some(&scheduler),
            &workers,
            opts.steps,
            opts.concurrency,
        )
        .await?;
        let prefix = chain.replace([',', '-'], "_");
        println!("{prefix}_placements_per_sec: {:.0}", f.per_sec);
        println!("{prefix}_p50_ms: {:.3}", f.p50_ms);
        println!("{prefix}_p99_ms: {:.3}", f.p99_ms);
        println!("{prefix}_vs_db_only_ratio: {:.2}", f.per_sec / base.per_sec);
    }
    Ok(())
}
