//! The driver of periodic jobs: a [`Periodic`] runner ticks its [`Job`]
//! on a [`Schedule`], backs off exponentially after errors, reports into
//! [`Jobs`], and stops when told to.

use std::time::Duration;

use rand::Rng;

use crate::job::{Job, Outcome};
use crate::status::{JobReport, JobState, Jobs, RunningGuard};

/// How long to wait after failures in a row: `first`, then twice as long
/// after each further failure, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after one failure.
    pub first: Duration,
    /// The longest wait, however many failures.
    pub max: Duration,
}

impl Backoff {
    /// Doubling from `first`, capped at `max`.
    pub fn doubling(first: Duration, max: Duration) -> Self {
        Backoff { first, max }
    }

    /// The wait after `failures` failures in a row (1 or more).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

/// When a [`Periodic`] runner ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The wait between the end of a successful tick and the next one.
    pub interval: Duration,
    /// Each wait (the first tick's too) is lengthened by a random amount up
    /// to this, so that many runners (a fleet's Sweepers) do not tick in
    /// step. None by default.
    pub jitter: Duration,
    /// The wait after failed ticks.
    pub backoff: Backoff,
}

impl Schedule {
    /// Ticks at once, then every `interval`, without jitter; after failures
    /// it waits the interval, doubling, at most sixteen intervals.
    pub fn every(interval: Duration) -> Self {
        Schedule {
            interval,
            jitter: Duration::ZERO,
            backoff: Backoff::doubling(interval, interval.saturating_mul(16)),
        }
    }

    /// The same with random jitter up to `jitter` on every wait.
    pub fn with_jitter(self, jitter: Duration) -> Self {
        Schedule { jitter, ..self }
    }

    /// The same with another backoff.
    pub fn with_backoff(self, backoff: Backoff) -> Self {
        Schedule { backoff, ..self }
    }

    /// `base`, plus the jitter.
    fn wait(&self, base: Duration) -> Duration {
        if self.jitter.is_zero() {
            base
        } else {
            base + rand::thread_rng().gen_range(Duration::ZERO..=self.jitter)
        }
    }
}

impl From<Duration> for Schedule {
    /// [`Schedule::every`] `interval`.
    fn from(interval: Duration) -> Self {
        Schedule::every(interval)
    }
}

/// The runner of one [`Job`]: it ticks it on its schedule, turns errors
/// into backoff (they never stop it), records everything in its row of
/// [`Jobs`], and stops on [`Jobs::stop_all`] (or [`Jobs::drain`]) once its
/// current tick has finished, or when the job says it is done. It runs as
/// an owned task of the table's [`Tasks`](crate::Tasks), so shutdown counts
/// it.
pub struct Periodic<J: Job> {
    /// The job.
    job: J,
    /// When to tick.
    schedule: Schedule,
    /// Where its stop signal comes from.
    jobs: Jobs,
    /// Its row in the status table.
    report: JobReport,
    /// Keeps [`Jobs::stopped`] waiting until this runner is gone.
    running: RunningGuard,
    /// Whether this node leads the job's role; none: it always runs.
    leader: Option<tokio::sync::watch::Receiver<bool>>,
}

impl<J: Job> Periodic<J> {
    /// A runner for `job`, reporting into `jobs` under the job's name
    /// (counted by [`Jobs::stopped`] from now on; start it with
    /// [`start`](Periodic::start)).
    pub fn new(job: J, schedule: Schedule, jobs: &Jobs) -> Self {
        Periodic {
            report: jobs.report(job.name()),
            job,
            schedule,
            jobs: jobs.clone(),
            running: jobs.running(),
            leader: None,
        }
    }

    /// The same runner, ticking only while `leader` reads `true` (on
    /// standby otherwise, looking again every interval).
    pub fn led_by(self, leader: tokio::sync::watch::Receiver<bool>) -> Self {
        Periodic {
            leader: Some(leader),
            ..self
        }
    }

    /// Starts it as an owned task of the table. Must be called inside a
    /// `LocalSet` (an actix System is one): a job's tick need not be `Send`.
    pub fn start(self) {
        let tasks = self.jobs.tasks().clone();
        tasks.spawn_local_graceful(move |cancel| self.run(cancel));
    }

    /// Ticks until told to stop or done.
    async fn run(mut self, cancel: tokio_util::sync::CancellationToken) {
        let mut stop = self.jobs.stop_signal();
        let mut failures: u32 = 0;
        let mut delay = self.schedule.wait(Duration::ZERO);
        let mut state = JobState::Idle;
        loop {
            if *stop.borrow() || cancel.is_cancelled() {
                break;
            }
            self.report.waiting(state, Some(delay));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stop.wait_for(|stop| *stop) => break,
                () = cancel.cancelled() => break,
            }
            if self.leader.as_ref().is_some_and(|l| !*l.borrow()) {
                delay = self.schedule.interval;
                state = JobState::Standby;
                continue;
            }
            self.report.busy();
            // A running tick is not cut short: shutdown waits for it.
            let next = match self.job.tick().await {
                Ok(outcome) => {
                    failures = 0;
                    self.report.succeeded();
                    match outcome {
                        Outcome::Idle => Some((self.schedule.interval, JobState::Idle)),
                        Outcome::IdleFor(wait) => Some((wait, JobState::Idle)),
                        Outcome::Busy => Some((Duration::ZERO, JobState::Busy)),
                        Outcome::Done => None,
                    }
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(
                        job = self.report.name(),
                        failures,
                        "background job failed: {e}"
                    );
                    self.report.failed(&e);
                    Some((self.schedule.backoff.delay(failures), JobState::BackingOff))
                }
            };
            let Some((base, next_state)) = next else {
                break;
            };
            delay = if base.is_zero() {
                base
            } else {
                self.schedule.wait(base)
            };
            state = next_state;
        }
        tracing::info!(job = self.report.name(), "background job stopped");
        self.report.stopped();
        drop(self.running);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::future::Future;
    use std::rc::Rc;

    use tokio::time::{sleep, sleep_until, Instant};

    use super::*;
    use crate::{JobError, JobStatus};

    /// Runs `test` on a current-thread runtime with a paused clock, inside
    /// a `LocalSet` (as in an actix System).
    fn run_paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        tokio::task::LocalSet::new().block_on(&rt, test());
    }

    /// What a scripted tick does.
    #[derive(Clone, Copy)]
    enum Step {
        Ok(Outcome),
        Err(&'static str),
        /// Takes this long, then succeeds.
        Slow(Duration),
    }

    /// A job that follows a script (then succeeds) and records when it ticked.
    struct Scripted {
        name: &'static str,
        script: VecDeque<Step>,
        ticks: Rc<RefCell<Vec<Duration>>>,
        start: Instant,
    }

    impl Job for Scripted {
        fn name(&self) -> String {
            self.name.into()
        }
        fn tick(&mut self) -> impl Future<Output = Result<Outcome, JobError>> {
            self.ticks.borrow_mut().push(self.start.elapsed());
            let step = self.script.pop_front().unwrap_or(Step::Ok(Outcome::Idle));
            async move {
                match step {
                    Step::Ok(outcome) => Ok(outcome),
                    Step::Err(message) => Err(JobError::Failed(message.into())),
                    Step::Slow(d) => {
                        sleep(d).await;
                        Ok(Outcome::Idle)
                    }
                }
            }
        }
    }

    /// Starts `script` as job `name` every `schedule`; returns its tick times.
    fn start(
        name: &'static str,
        script: &[Step],
        schedule: Schedule,
        jobs: &Jobs,
    ) -> Rc<RefCell<Vec<Duration>>> {
        let ticks = Rc::new(RefCell::new(Vec::new()));
        let job = Scripted {
            name,
            script: script.iter().copied().collect(),
            ticks: ticks.clone(),
            start: Instant::now(),
        };
        Periodic::new(job, schedule, jobs).start();
        ticks
    }

    fn secs(list: &[f64]) -> Vec<Duration> {
        list.iter().map(|s| Duration::from_secs_f64(*s)).collect()
    }

    #[test]
    fn backoff_grows_on_consecutive_errors_and_resets_after_a_success() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let schedule = Schedule::every(Duration::from_secs(10)).with_backoff(
                Backoff::doubling(Duration::from_secs(1), Duration::from_secs(4)),
            );
            let e = Step::Err("boom");
            let ok = Step::Ok(Outcome::Idle);
            let ticks = start("j", &[e, e, e, e, ok, e, ok], schedule, &jobs);
            sleep(Duration::from_millis(32_500)).await;
            // Waits 1, 2, 4, 4 (capped) after errors; 10 after a success; 1 again after the next error.
            assert_eq!(*ticks.borrow(), secs(&[0., 1., 3., 7., 11., 21., 22., 32.]));
        });
    }

    #[test]
    fn errors_are_counted_with_the_last_one_and_the_state_shows_backing_off_then_idle() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let schedule = Schedule::every(Duration::from_secs(10)).with_backoff(
                Backoff::doubling(Duration::from_secs(2), Duration::from_secs(60)),
            );
            let script = [
                Step::Err("disk full"),
                Step::Err("disk on fire"),
                Step::Ok(Outcome::Idle),
            ];
            start("gc", &script, schedule, &jobs);
            let t0 = Instant::now();
            let wait_ms = |s: &JobStatus| s.next_run.unwrap() - s.last_run.unwrap();

            sleep_until(t0 + Duration::from_millis(500)).await;
            let s = jobs.get("gc").unwrap();
            assert_eq!(
                (s.state, s.runs, s.errors, s.consecutive_errors),
                (JobState::BackingOff, 1, 1, 1)
            );
            assert_eq!(s.last_error.as_deref(), Some("disk full"));
            assert!((2000..2050).contains(&wait_ms(&s)), "{s:?}");

            sleep_until(t0 + Duration::from_millis(2500)).await;
            let s = jobs.get("gc").unwrap();
            assert_eq!(
                (s.state, s.runs, s.errors, s.consecutive_errors),
                (JobState::BackingOff, 2, 2, 2)
            );
            assert_eq!(s.last_error.as_deref(), Some("disk on fire"));
            assert!((4000..4050).contains(&wait_ms(&s)), "{s:?}");

            sleep_until(t0 + Duration::from_millis(6500)).await;
            let s = jobs.get("gc").unwrap();
            assert_eq!(
                (s.state, s.runs, s.errors, s.consecutive_errors),
                (JobState::Idle, 3, 2, 0)
            );
            assert_eq!(
                s.last_error.as_deref(),
                Some("disk on fire"),
                "the last error stays visible"
            );
            assert!((10_000..10_050).contains(&wait_ms(&s)), "{s:?}");
            assert_eq!(jobs.list(), vec![s]);
        });
    }

    #[test]
    fn a_job_led_elsewhere_stands_by_and_runs_once_this_node_leads() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let (lead, leader) = tokio::sync::watch::channel(false);
            let ticks = Rc::new(RefCell::new(Vec::new()));
            let job = Scripted {
                name: "gc",
                script: VecDeque::new(),
                ticks: ticks.clone(),
                start: Instant::now(),
            };
            let every = Schedule::every(Duration::from_secs(10));
            Periodic::new(job, every, &jobs).led_by(leader).start();
            sleep(Duration::from_secs(25)).await;
            let s = jobs.get("gc").unwrap();
            assert_eq!((s.state, s.runs), (JobState::Standby, 0));
            assert!(ticks.borrow().is_empty());
            // This node leads from now: the next look runs the job.
            lead.send_replace(true);
            sleep(Duration::from_secs(10)).await;
            assert_eq!(*ticks.borrow(), secs(&[30.]));
            assert_eq!(jobs.get("gc").unwrap().state, JobState::Idle);
            // It loses the lead: it stands by again after its run.
            lead.send_replace(false);
            sleep(Duration::from_secs(20)).await;
            assert_eq!(ticks.borrow().len(), 1);
            assert_eq!(jobs.get("gc").unwrap().state, JobState::Standby);
        });
    }

    #[test]
    fn a_running_tick_shows_busy() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let slow = [Step::Slow(Duration::from_secs(5))];
            start(
                "slow",
                &slow,
                Schedule::every(Duration::from_secs(10)),
                &jobs,
            );
            sleep(Duration::from_secs(1)).await;
            let s = jobs.get("slow").unwrap();
            assert_eq!((s.state, s.runs, s.next_run), (JobState::Busy, 0, None));
            sleep(Duration::from_secs(5)).await;
            let s = jobs.get("slow").unwrap();
            assert_eq!((s.state, s.runs), (JobState::Idle, 1));
        });
    }

    #[test]
    fn a_stopped_job_stops_ticking_and_shutdown_waits_for_its_running_tick() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let every = Schedule::every(Duration::from_secs(10));
            let quick = start("quick", &[], every, &jobs);
            let slow = [Step::Slow(Duration::from_secs(5))];
            let slow = start("slow", &slow, every, &jobs);
            let t0 = Instant::now();
            sleep(Duration::from_secs(1)).await;
            jobs.shutdown().await;
            assert_eq!(
                t0.elapsed(),
                Duration::from_secs(5),
                "shutdown waits for the running tick"
            );
            for s in jobs.list() {
                assert_eq!(
                    (s.state, s.runs, s.next_run),
                    (JobState::Stopped, 1, None),
                    "{s:?}"
                );
            }
            sleep(Duration::from_secs(60)).await;
            assert_eq!(quick.borrow().len(), 1);
            assert_eq!(slow.borrow().len(), 1);
        });
    }

    #[test]
    fn a_drain_counts_the_runners_and_reports_one_whose_tick_hangs_as_left() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let every = Schedule::every(Duration::from_secs(10));
            start("quick", &[], every, &jobs);
            let hangs = [Step::Slow(Duration::from_secs(3600))];
            start("hangs", &hangs, every, &jobs);
            sleep(Duration::from_secs(1)).await;
            let t0 = Instant::now();
            let report = jobs.drain(Duration::from_secs(5)).await;
            assert_eq!(
                t0.elapsed(),
                Duration::from_secs(5),
                "waits the bound, no more"
            );
            assert_eq!(
                report,
                crate::Drained {
                    drained: 1,
                    left: 1
                }
            );
            assert_eq!(jobs.get("quick").unwrap().state, JobState::Stopped);
            assert_eq!(jobs.get("hangs").unwrap().state, JobState::Busy);
        });
    }

    #[test]
    fn busy_runs_again_at_once_and_done_stops_the_runner() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let script = [
                Step::Ok(Outcome::Busy),
                Step::Ok(Outcome::Busy),
                Step::Ok(Outcome::Idle),
                Step::Ok(Outcome::Done),
            ];
            let ticks = start(
                "drain",
                &script,
                Schedule::every(Duration::from_secs(10)),
                &jobs,
            );
            sleep(Duration::from_secs(11)).await;
            assert_eq!(*ticks.borrow(), secs(&[0., 0., 0., 10.]));
            let s = jobs.get("drain").unwrap();
            assert_eq!((s.state, s.runs), (JobState::Stopped, 4));
            let t = Instant::now();
            jobs.stopped().await;
            assert_eq!(
                t.elapsed(),
                Duration::ZERO,
                "a finished job is no longer running"
            );
        });
    }

    #[test]
    fn idle_for_waits_its_own_time_instead_of_the_interval() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let script = [
                Step::Ok(Outcome::IdleFor(Duration::from_secs(1))),
                Step::Ok(Outcome::IdleFor(Duration::from_secs(2))),
            ];
            let ticks = start(
                "sweeper",
                &script,
                Schedule::every(Duration::from_secs(10)),
                &jobs,
            );
            sleep(Duration::from_millis(1500)).await;
            let s = jobs.get("sweeper").unwrap();
            assert_eq!((s.state, s.runs), (JobState::Idle, 2), "{s:?}");
            sleep(Duration::from_secs(20)).await;
            // Waits 1 s, 2 s, then the interval once the script says Idle.
            assert_eq!(*ticks.borrow(), secs(&[0., 1., 3., 13.]));
        });
    }

    #[test]
    fn jitter_lengthens_each_wait_by_at_most_its_amount() {
        run_paused(|| async {
            let jobs = Jobs::default();
            let schedule =
                Schedule::every(Duration::from_secs(10)).with_jitter(Duration::from_secs(5));
            let ticks = start("sweeper", &[], schedule, &jobs);
            sleep(Duration::from_secs(200)).await;
            let ticks = ticks.borrow();
            assert!(ticks[0] <= Duration::from_secs(5), "{ticks:?}");
            for gap in ticks.windows(2).map(|w| w[1] - w[0]) {
                assert!(
                    (Duration::from_secs(10)..=Duration::from_secs(15)).contains(&gap),
                    "{ticks:?}"
                );
            }
            assert!(ticks.len() >= 13, "{ticks:?}");
        });
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (1..=8).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(b.delay(1000), Duration::from_secs(30));
    }
}
