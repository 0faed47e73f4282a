//! Tests of the Registry: registration, heartbeats, stalls, probes and
//! the lifecycle, against fake worker connections.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::time::sleep_until;

use super::*;
use crate::scheduler::PlacementConfig;
use crate::testing::clock::{eventually, held, run_paused};
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{Container, Volume, WorkerHandles};
use gantry_wire::spec::{ContainerSpec, VolumeSpec};

/// The waits before the first probe after each restart of a connection.
const RESTART_BACKOFFS: [u64; 7] = [1, 2, 4, 8, 16, 30, 30];

/// A worker agent held in memory: it answers probes or not, as told, and
/// records when it was probed.
#[derive(Default)]
struct FakeAgent {
    /// Whether probes succeed.
    answers: AtomicBool,
    /// When each probe came.
    pings: Mutex<Vec<Instant>>,
}

impl FakeAgent {
    fn refuse(&self) -> RuntimeError {
        RuntimeError::Unreachable {
            worker: "fake".into(),
            reason: "connection refused".into(),
        }
    }
}

#[async_trait]
impl Worker for FakeAgent {
    fn name(&self) -> &str {
        "fake"
    }
    async fn create_volume(&self, _: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        Err(self.refuse())
    }
    async fn lookup_volume(&self, _: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        Ok(None)
    }
    async fn destroy_volume(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn find_or_create_container(
        &self,
        _: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        Err(self.refuse())
    }
    async fn lookup_container(&self, _: &str) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        Ok(None)
    }
    async fn destroy_container(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        Ok(WorkerHandles::default())
    }
    async fn ping(&self) -> Result<(), RuntimeError> {
        self.pings.lock().unwrap().push(Instant::now());
        if self.answers.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(self.refuse())
        }
    }
}

/// Connects every worker to the one fake agent.
struct FakeConnector(Arc<FakeAgent>);

impl WorkerConnector for FakeConnector {
    fn connect(&self, _: &WorkerRegistration) -> Arc<dyn Worker> {
        self.0.clone()
    }
}

/// A Registry on a real SQLite database and a real Scheduler, with a fake agent.
struct Fleet {
    registry: Addr<Registry>,
    jobs: Jobs,
    db: Db,
    agent: Arc<FakeAgent>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// Starts it; the clock is held while the database is set up.
    async fn start(lifecycle: LifecycleConfig, agent_answers: bool) -> Fleet {
        let (db, dir) = held(crate::db::test_db()).await;
        let scheduler = Scheduler::new(PlacementConfig::default()).start();
        let agent = Arc::new(FakeAgent::default());
        agent.answers.store(agent_answers, Ordering::SeqCst);
        let jobs = Jobs::default();
        let registry = Registry::new(
            db.clone(),
            Arc::new(FakeConnector(agent.clone())),
            scheduler,
            WorkerStates::default(),
            lifecycle,
            jobs.clone(),
        )
        .start();
        // Answered once the stored workers are loaded.
        held(registry.send(ListWorkers)).await.unwrap();
        Fleet {
            registry,
            jobs,
            db,
            agent,
            _dir: dir,
        }
    }

    /// Registers `name` (incarnation `1`) heartbeating every `interval_secs`;
    /// returns the instant its connection started.
    async fn register(&self, name: &str, interval_secs: u64) -> Instant {
        let reg = WorkerRegistration {
            incarnation: "1".into(),
            heartbeat_interval_secs: interval_secs,
            ..crate::testing::registration(name)
        };
        held(self.registry.send(RegisterWorker(reg)))
            .await
            .unwrap()
            .unwrap();
        Instant::now()
    }

    /// The Registry's view of `name` (answered from memory: no clock hold needed).
    async fn view(&self, name: &str) -> Option<WorkerView> {
        let all = self.registry.send(ListWorkers).await.unwrap();
        all.into_iter().find(|w| w.name == name)
    }

    async fn state(&self, name: &str) -> Option<WorkerState> {
        self.view(name).await.map(|w| w.state)
    }

    /// Waits until `name`'s stored state is `state`. The Registry stores
    /// states in the background; a test waits for each before it moves
    /// the clock on, so writes seconds apart are not reordered when those
    /// seconds take no wall time.
    async fn stored(&self, name: &str, state: WorkerState) {
        eventually(&format!("{name} to be stored {state:?}"), async || {
            let row = self.db.workers().get_worker(name).await.unwrap();
            row.is_some_and(|r| r.state == state)
        })
        .await;
    }

    /// Closes the database once the writes in flight have finished, so
    /// none is cut off when the test's runtime goes away.
    async fn stop(self) {
        held(self.db.pool().close()).await;
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_worker_without_heartbeats_stalls_when_its_ttl_lapses_and_a_heartbeat_brings_it_back() {
    run_paused(|| async {
        let fleet = Fleet::start(LifecycleConfig::default(), true).await;
        let t0 = fleet.register("w1", 5).await;

        sleep_until(t0 + ms(9_999)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Running));
        sleep_until(t0 + ms(10_001)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Stalled));
        fleet.stored("w1", WorkerState::Stalled).await;

        let heartbeat = WorkerHeartbeat {
            name: "w1".into(),
            heartbeat: Heartbeat {
                incarnation: "1".into(),
                containers: 2,
                volumes: 3,
            },
        };
        let answer = held(fleet.registry.send(heartbeat)).await.unwrap();
        assert_eq!(answer.unwrap(), WorkerState::Running);
        let view = fleet.view("w1").await.unwrap();
        assert_eq!(
            (view.state, view.containers, view.volumes),
            (WorkerState::Running, 2, 3)
        );
        fleet.stored("w1", WorkerState::Running).await;

        // The TTL counts again from the heartbeat.
        sleep_until(t0 + ms(20_000)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Running));
        sleep_until(t0 + ms(20_002)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Stalled));

        let watch = fleet.jobs.get(&heartbeat_job_name("w1")).unwrap();
        assert_eq!((watch.runs, watch.errors), (3, 2), "{watch:?}");
        assert!(watch
            .last_error
            .unwrap()
            .contains("no heartbeat within 10s"));
        let probes = fleet.jobs.get(&probe_job_name("w1")).unwrap();
        assert_eq!((probes.runs, probes.errors), (4, 0), "{probes:?}");
        fleet.stored("w1", WorkerState::Stalled).await;
        fleet.stop().await;
    });
}

#[test]
fn an_agent_failing_three_probes_in_a_row_has_its_connection_restarted_with_backoff() {
    run_paused(|| async {
        let fleet = Fleet::start(LifecycleConfig::default(), false).await;
        let t0 = fleet.register("w1", 1).await;
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // Without heartbeats it stalls (at 2 s); its probes go on. The
        // write is awaited before the clock moves on past the pool's
        // acquire timeout.
        sleep_until(at(2) + ms(1)).await;
        fleet.stored("w1", WorkerState::Stalled).await;
        // Probes every second; the third failure in a row restarts the
        // connection, whose first probe comes after the backoff.
        let mut pings = vec![1, 2, 3];
        let mut restarts = vec![3];
        for backoff in RESTART_BACKOFFS {
            let restart = restarts.last().unwrap();
            pings.extend([
                restart + backoff,
                restart + backoff + 1,
                restart + backoff + 2,
            ]);
            restarts.push(restart + backoff + 2);
        }
        for (count, &restart) in restarts.iter().enumerate() {
            sleep_until(at(restart) - ms(1)).await;
            assert_eq!(fleet.view("w1").await.unwrap().restarts, count as u32);
            sleep_until(at(restart) + ms(1)).await;
            assert_eq!(fleet.view("w1").await.unwrap().restarts, count as u32 + 1);
            let probes = fleet.jobs.get(&probe_job_name("w1")).unwrap();
            assert_eq!(probes.state, JobState::BackingOff, "{probes:?}");
        }
        let seen: Vec<Duration> = fleet
            .agent
            .pings
            .lock()
            .unwrap()
            .iter()
            .map(|p| *p - t0)
            .collect();
        let expected: Vec<Duration> = pings.iter().map(|s| Duration::from_secs(*s)).collect();
        assert_eq!(seen, expected);
        let probes = fleet.jobs.get(&probe_job_name("w1")).unwrap();
        let failed = pings.len() as u64;
        assert_eq!((probes.runs, probes.errors), (failed, failed), "{probes:?}");
        assert!(probes.last_error.unwrap().contains("connection refused"));

        // An answer resets the backoff (not the count of restarts).
        let last = *restarts.last().unwrap();
        let answered = last + RESTART_BACKOFFS[RESTART_BACKOFFS.len() - 1];
        fleet.agent.answers.store(true, Ordering::SeqCst);
        sleep_until(at(answered) + ms(1)).await;
        fleet.agent.answers.store(false, Ordering::SeqCst);
        let probes = fleet.jobs.get(&probe_job_name("w1")).unwrap();
        assert_eq!(
            (probes.state, probes.consecutive_errors),
            (JobState::Idle, 0)
        );
        sleep_until(at(answered + 3) + ms(1)).await;
        assert_eq!(
            fleet.view("w1").await.unwrap().restarts,
            restarts.len() as u32 + 1
        );
        sleep_until(at(answered + 3 + RESTART_BACKOFFS[0]) + ms(1)).await;
        let last_ping = *fleet.agent.pings.lock().unwrap().last().unwrap();
        assert_eq!(
            last_ping - t0,
            Duration::from_secs(answered + 3 + RESTART_BACKOFFS[0])
        );
        fleet.stop().await;
    });
}

#[test]
fn a_worker_stalled_longer_than_the_timeout_is_pruned_then_and_not_before() {
    run_paused(|| async {
        let lifecycle = LifecycleConfig {
            stalled_worker_timeout: Some(Duration::from_secs(30)),
        };
        let fleet = Fleet::start(lifecycle, true).await;
        let t0 = fleet.register("w1", 5).await;
        sleep_until(t0 + ms(10_001)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Stalled));
        fleet.stored("w1", WorkerState::Stalled).await;
        let prune = fleet.jobs.get(STALLED_PRUNE_JOB).unwrap();
        assert_eq!((prune.state, prune.runs), (JobState::Idle, 0));
        assert!(prune.next_run.is_some(), "{prune:?}");

        sleep_until(t0 + ms(39_999)).await;
        assert_eq!(fleet.state("w1").await, Some(WorkerState::Stalled));
        sleep_until(t0 + ms(40_001)).await;
        assert_eq!(fleet.state("w1").await, None);
        assert_eq!(fleet.jobs.get(&probe_job_name("w1")), None);
        assert_eq!(fleet.jobs.get(&heartbeat_job_name("w1")), None);
        eventually("the prune to be recorded", async || {
            fleet.jobs.get(STALLED_PRUNE_JOB).unwrap().runs == 1
        })
        .await;
        assert!(held(fleet.db.workers().get_worker("w1"))
            .await
            .unwrap()
            .is_none());
        let prune = fleet.jobs.get(STALLED_PRUNE_JOB).unwrap();
        assert_eq!(
            (prune.runs, prune.errors, prune.next_run),
            (1, 0, None),
            "{prune:?}"
        );
        fleet.stop().await;
    });
}
