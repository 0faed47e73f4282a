//! The owned tasks of a process: every long-lived task is spawned here
//! rather than fire-and-forget, so that shutdown can stop it and wait for
//! it, with a bound, and say how many were left.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The tasks a process owns: a tracker that counts them and a token that
/// tells them to stop. Cheap to clone; clones share both.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    /// Counts the live tasks; [`Tasks::drain`] waits on it.
    tracker: TaskTracker,
    /// Cancelled once, at shutdown.
    stop: CancellationToken,
    /// What the shutdown report counts.
    counts: Arc<Counts>,
}

/// Counts behind the shutdown report.
#[derive(Debug, Default)]
struct Counts {
    /// Tasks spawned since the start.
    spawned: AtomicUsize,
    /// Tasks that had ended when shutdown began (set once, then).
    ended_before: OnceLock<usize>,
}

/// What a shutdown's drain found: logged as the shutdown report, and read
/// by the tests that count what a SIGTERM leaves running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Tasks (and job runners) that ended within the bound.
    pub drained: usize,
    /// Tasks still running when the bound passed: each is a defect (a task
    /// that ignores the stop signal, or one that hangs).
    pub left: usize,
}

impl std::fmt::Display for Drained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tasks drained, {} left", self.drained, self.left)
    }
}

impl Tasks {
    /// Runs `task` until it ends or shutdown comes, whichever is first: at
    /// shutdown it is dropped at its next await point. For work that may
    /// stop anywhere (a relay, a listener, a follower).
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.counted();
        self.tracker.spawn(async move {
            tokio::select! {
                () = task => {}
                () = stop.cancelled() => {}
            }
        });
    }

    /// The same for a task that is not `Send` (it must be spawned inside a
    /// `LocalSet`, such as an actix System).
    pub fn spawn_local<F>(&self, task: F)
    where
        F: Future<Output = ()> + 'static,
    {
        let stop = self.stop.clone();
        self.counted();
        self.tracker.spawn_local(async move {
            tokio::select! {
                () = task => {}
                () = stop.cancelled() => {}
            }
        });
    }

    /// Runs a task that watches the stop signal itself (given to it), to
    /// finish its current unit of work first (a copy, a job's tick). It
    /// must end soon after the signal: shutdown waits for it only up to
    /// its bound, and reports it as left otherwise.
    pub fn spawn_graceful<F>(&self, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.counted();
        self.tracker.spawn(task(self.stop.clone()));
    }

    /// The same for a task that is not `Send`.
    pub fn spawn_local_graceful<F>(&self, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + 'static,
    {
        self.counted();
        self.tracker.spawn_local(task(self.stop.clone()));
    }

    /// Counts one more spawned task.
    fn counted(&self) {
        self.counts.spawned.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks the start of shutdown (once; later calls change nothing):
    /// every task running from now on, or spawned later, is counted by the
    /// report of [`Tasks::drain`], even one that ends before the drain
    /// (a job's runner told to stop first, a server stopped first).
    pub fn begin_shutdown(&self) {
        self.counts.ended_before.get_or_init(|| {
            let spawned = self.counts.spawned.load(Ordering::Relaxed);
            spawned.saturating_sub(self.tracker.len())
        });
    }

    /// How many owned tasks are running now.
    pub fn live(&self) -> usize {
        self.tracker.len()
    }

    /// Whether shutdown has begun.
    pub fn stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The stop signal: cancelled when shutdown begins.
    pub fn stop_signal(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Tells every task to stop and waits for them, at most `bound`.
    /// Tasks spawned after this are told at once (and counted if they are
    /// still running when the bound passes).
    /// The report counts every task running since shutdown began (see
    /// [`Tasks::begin_shutdown`]; at the latest, now).
    pub async fn drain(&self, bound: Duration) -> Drained {
        self.begin_shutdown();
        self.stop.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(bound, self.tracker.wait()).await;
        let left = self.tracker.len();
        let spawned = self.counts.spawned.load(Ordering::Relaxed);
        let ended_before = self.counts.ended_before.get().copied().unwrap_or(0);
        Drained {
            drained: spawned.saturating_sub(ended_before).saturating_sub(left),
            left,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn drain_stops_every_task_and_counts_them() {
        let tasks = Tasks::default();
        tasks.spawn(std::future::pending());
        tasks.spawn(std::future::pending());
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        // A graceful task finishes its unit of work, then stops.
        tasks.spawn_graceful(|stop| async move {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            done.store(true, Ordering::SeqCst);
        });
        tokio::task::yield_now().await;
        assert_eq!(tasks.live(), 3);
        let report = tasks.drain(Duration::from_secs(5)).await;
        assert_eq!(
            report,
            Drained {
                drained: 3,
                left: 0
            }
        );
        assert!(finished.load(Ordering::SeqCst));
        assert_eq!(tasks.live(), 0);
        assert_eq!(report.to_string(), "3 tasks drained, 0 left");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ignores_the_stop_signal_is_reported_left_after_the_bound() {
        let tasks = Tasks::default();
        tasks.spawn(std::future::pending());
        // Ignores its token: shutdown cannot stop it.
        tasks.spawn_graceful(|_stop| std::future::pending());
        tokio::task::yield_now().await;
        let t0 = tokio::time::Instant::now();
        let report = tasks.drain(Duration::from_secs(3)).await;
        assert_eq!(
            report,
            Drained {
                drained: 1,
                left: 1
            }
        );
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(3),
            "waits the bound, no more"
        );
        assert!(tasks.stopping());
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_that_end_after_shutdown_began_but_before_the_drain_are_counted_drained() {
        let tasks = Tasks::default();
        // Ended before shutdown: not counted.
        tasks.spawn(async {});
        tokio::task::yield_now().await;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = rx.await;
        });
        tasks.spawn(std::future::pending());
        tokio::task::yield_now().await;
        tasks.begin_shutdown();
        // Stopped by its owner first (a server stopped before the drain).
        drop(tx);
        tokio::task::yield_now().await;
        assert_eq!(tasks.live(), 1);
        let report = tasks.drain(Duration::from_secs(1)).await;
        assert_eq!(
            report,
            Drained {
                drained: 2,
                left: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_spawned_after_the_drain_began_is_stopped_at_once() {
        let tasks = Tasks::default();
        let report = tasks.drain(Duration::from_secs(1)).await;
        assert_eq!(
            report,
            Drained {
                drained: 0,
                left: 0
            }
        );
        tasks.spawn(std::future::pending());
        let report = tasks.drain(Duration::from_secs(1)).await;
        assert_eq!(report.left, 0);
    }
}
