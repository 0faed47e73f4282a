//! The Sweeper: the worker's half of garbage collection.
//!
//! Soon after the worker registers, then every interval (± 20 % at
//! random), it sweeps: asks the web node for an epoch, lists every
//! container and volume the worker has ([`Holdings::list`]: for the agent,
//! its stores and any directory on disk they do not know), reports them
//! with the epoch and its volume store's fill, and destroys what the
//! answer names: containers first, then volumes, a few at once. Failed
//! destroys are counted and sent with the next report; what failed is
//! named again by the next answer.
//!
//! One sweep ([`Sweeper::sweep`]) is generic over whom it reports to
//! ([`WebLink`]) and what it lists and destroys ([`Holdings`]); it runs as
//! a [`SweeperJob`] on the shared background runner (`gantry-jobs`), in the
//! worker process (`sweeper`) and in the web node for its Kubernetes
//! cluster worker.

use std::time::Duration;

use futures::StreamExt as _;
use gantry_jobs::{Job, JobError, Outcome, Schedule};
use gantry_wire::sweep::{SweepAnswer, SweepReport};
use rand::Rng as _;
use tokio::sync::watch;

use crate::beacon::BeaconStatus;
use crate::holdings::{Holdings, Kind};
use crate::web_link::WebLink;

/// Settings and connections of one worker's Sweeper.
pub struct Sweeper<L, H> {
    /// The web node it reports to.
    pub link: L,
    /// What the worker holds.
    pub holdings: H,
    /// The worker's name.
    pub worker: String,
    /// This run's incarnation.
    pub incarnation: String,
    /// Time between sweeps, before jitter.
    pub interval: Duration,
    /// Most destroys at once.
    pub max_parallel_destroys: usize,
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepOutcome {
    /// The epoch it reported at.
    pub epoch: i64,
    /// Containers and volumes listed.
    pub listed: (usize, usize),
    /// Containers and volumes destroyed.
    pub destroyed: (usize, usize),
    /// Destroys that failed.
    pub failures: u64,
}

/// How often the sweeper looks whether the beacon has registered yet: the
/// first sweep comes this soon after registering.
pub const FIRST_SWEEP: Duration = Duration::from_secs(1);

/// The sweeper as a job of the shared background runner: one sweep a tick
/// once the beacon has registered; done once the worker is retired.
pub struct SweeperJob<L, H> {
    /// The sweeper.
    pub sweeper: Sweeper<L, H>,
    /// What the beacon last learned.
    pub status: watch::Receiver<BeaconStatus>,
    /// The name it is listed under (`sweeper`, `kubernetes-sweeper/{worker}`).
    pub name: String,
    /// Destroys that failed since the last report, sent with the next.
    pub failures: u64,
}

impl<L: WebLink + 'static, H: Holdings + 'static> SweeperJob<L, H> {
    /// Every interval ± 20 % at random (a fleet's sweepers do not sweep in
    /// step).
    pub fn schedule(&self) -> Schedule {
        let interval = self.sweeper.interval;
        Schedule::every(interval.mul_f64(0.8)).with_jitter(interval.mul_f64(0.4))
    }
}

impl<L: WebLink + 'static, H: Holdings + 'static> Job for SweeperJob<L, H> {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let status = *self.status.borrow();
        match status {
            BeaconStatus::Retired => Ok(Outcome::Done),
            BeaconStatus::Unregistered => Ok(Outcome::IdleFor(FIRST_SWEEP)),
            BeaconStatus::Registered(_) => {
                let outcome = self
                    .sweeper
                    .sweep(self.failures)
                    .await
                    .map_err(|e| JobError::Failed(format!("sweep: {e:#}")))?;
                self.failures = outcome.failures;
                Ok(Outcome::Idle)
            }
        }
    }
}

/// `interval` scaled by a random factor in [0.8, 1.2].
pub fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::thread_rng().gen_range(0.8..=1.2))
}

impl<L: WebLink, H: Holdings> Sweeper<L, H> {
    /// One sweep: epoch, listing, report (with `failures`, the destroys that
    /// failed since the last report), destroys.
    pub async fn sweep(&self, failures: u64) -> anyhow::Result<SweepOutcome> {
        let epoch = self
            .link
            .begin_sweep(&self.worker, &self.incarnation)
            .await?;
        let listing = self.holdings.list().await.map_err(anyhow::Error::msg)?;
        let listed = (listing.containers.len(), listing.volumes.len());
        let report = SweepReport {
            worker: self.worker.clone(),
            incarnation: self.incarnation.clone(),
            epoch,
            containers: listing.containers,
            volumes: listing.volumes,
            volume_store: listing.volume_store,
            destroy_failures: failures,
        };
        let answer = self.link.report_sweep(&report).await?;
        let (destroyed, failures) = self.destroy(&answer).await;
        if let Err(e) = self.holdings.tidy().await {
            tracing::warn!(worker = %self.worker, "{e}");
        }
        let outcome = SweepOutcome {
            epoch,
            listed,
            destroyed,
            failures,
        };
        tracing::debug!(
            worker = %self.worker,
            epoch = outcome.epoch,
            containers = outcome.listed.0,
            volumes = outcome.listed.1,
            destroyed_containers = outcome.destroyed.0,
            destroyed_volumes = outcome.destroyed.1,
            failures = outcome.failures,
            "swept"
        );
        Ok(outcome)
    }

    /// Destroys what the answer names, containers first; answers how many
    /// of each went and how many destroys failed.
    async fn destroy(&self, answer: &SweepAnswer) -> ((usize, usize), u64) {
        let failed_containers = self.each(Kind::Container, &answer.destroy_containers).await;
        // A parent volume goes only after its copy-on-write children: what
        // failed for that is tried once more after the others.
        let mut failed_volumes = self.each(Kind::Volume, &answer.destroy_volumes).await;
        if !failed_volumes.is_empty() && failed_volumes.len() < answer.destroy_volumes.len() {
            failed_volumes = self.each(Kind::Volume, &failed_volumes).await;
        }
        let destroyed = (
            answer.destroy_containers.len() - failed_containers.len(),
            answer.destroy_volumes.len() - failed_volumes.len(),
        );
        (
            destroyed,
            (failed_containers.len() + failed_volumes.len()) as u64,
        )
    }

    /// Destroys each handle, at most `max_parallel_destroys` at once;
    /// answers the handles whose destroy failed.
    async fn each(&self, kind: Kind, handles: &[String]) -> Vec<String> {
        let destroys: Vec<_> = handles
            .iter()
            .map(|h| async move { (h, self.holdings.destroy(kind, h).await) })
            .collect();
        let results: Vec<(&String, Result<(), String>)> = futures::stream::iter(destroys)
            .buffer_unordered(self.max_parallel_destroys.max(1))
            .collect()
            .await;
        results
            .into_iter()
            .filter_map(|(h, r)| match r {
                Ok(()) => {
                    tracing::info!(handle = %h, kind = kind.as_str(), "sweep: destroyed");
                    None
                }
                Err(e) => {
                    tracing::warn!(handle = %h, kind = kind.as_str(), error = %e, "sweep: destroy failed");
                    Some(h.clone())
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerState};

    use super::*;
    use crate::holdings::Listing;
    use crate::web_link::Refusal;

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let base = Duration::from_secs(30);
        for _ in 0..200 {
            let d = jittered(base);
            assert!(
                d >= Duration::from_secs(24) && d <= Duration::from_secs(36),
                "{d:?}"
            );
        }
    }

    /// A web node that answers every sweep with the same handles to
    /// destroy, and keeps the reports.
    struct Web {
        answer: SweepAnswer,
        reports: Mutex<Vec<SweepReport>>,
    }

    #[async_trait]
    impl WebLink for Web {
        fn describe(&self) -> String {
            "test".into()
        }
        async fn register(
            &self,
            _: &WorkerRegistration,
            _: Option<&str>,
        ) -> Result<Option<String>, Refusal> {
            Ok(None)
        }
        async fn heartbeat(&self, _: &str, _: &Heartbeat) -> Result<Option<WorkerState>, Refusal> {
            Ok(None)
        }
        async fn begin_sweep(&self, _: &str, _: &str) -> Result<i64, Refusal> {
            Ok(7)
        }
        async fn report_sweep(&self, report: &SweepReport) -> Result<SweepAnswer, Refusal> {
            self.reports.lock().unwrap().push(report.clone());
            Ok(self.answer.clone())
        }
    }

    /// Holdings whose destroys of `stuck` fail, and of `parent` fail until
    /// `child` is gone; records the destroys in order.
    #[derive(Default)]
    struct Held {
        destroyed: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Holdings for Held {
        async fn counts(&self) -> Result<(u32, u32), String> {
            Ok((0, 0))
        }
        async fn list(&self) -> Result<Listing, String> {
            Ok(Listing {
                containers: vec!["c".into()],
                volumes: vec!["parent".into(), "child".into(), "stuck".into()],
                volume_store: None,
            })
        }
        async fn destroy(&self, _: Kind, handle: &str) -> Result<(), String> {
            let mut done = self.destroyed.lock().unwrap();
            let blocked =
                handle == "stuck" || (handle == "parent" && !done.contains(&"child".to_string()));
            if blocked {
                return Err(format!("{handle} is busy"));
            }
            done.push(handle.to_string());
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_sweep_reports_its_listing_destroys_containers_first_and_retries_parents_once() {
        let sweeper = Sweeper {
            link: Web {
                answer: SweepAnswer {
                    destroy_containers: vec!["c".into()],
                    destroy_volumes: vec!["parent".into(), "child".into(), "stuck".into()],
                },
                reports: Mutex::default(),
            },
            holdings: Held::default(),
            worker: "w1".into(),
            incarnation: "i1".into(),
            interval: Duration::from_secs(30),
            // One at a time: the parent is tried before its child.
            max_parallel_destroys: 1,
        };
        let outcome = sweeper.sweep(3).await.unwrap();
        assert_eq!(
            outcome,
            SweepOutcome {
                epoch: 7,
                listed: (1, 3),
                destroyed: (1, 2),
                failures: 1,
            }
        );
        assert_eq!(
            *sweeper.holdings.destroyed.lock().unwrap(),
            ["c", "child", "parent"]
        );
        let reports = sweeper.link.reports.lock().unwrap();
        assert_eq!(
            (reports[0].epoch, reports[0].destroy_failures),
            (7, 3),
            "{reports:?}"
        );
        assert_eq!(reports[0].incarnation, "i1");
    }
}
