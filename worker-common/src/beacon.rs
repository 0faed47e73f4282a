//! The beacon: registers the worker with the web node and heartbeats.
//!
//! One small loop: register (retrying with exponential backoff, capped at
//! 10 s, until the web node answers: it may start after the worker), then
//! heartbeat every interval with the live counts. A heartbeat answered 404,
//! 409 or 410 means the web node no longer knows this incarnation: register
//! again at once, except 410: the worker was retired, and the beacon stops
//! for good. Every other failure is logged; none stops the loop. The state
//! the web node answers (a [`WorkerState`]: running, landing, landed, ...) is
//! published on [`Beacon::status`] as a [`BeaconStatus`], so a stopping
//! worker can wait until it has landed (or was retired). It ends when
//! shutdown is announced.
//!
//! One step of it ([`Beacon::beat`]) is generic over whom it speaks to
//! ([`WebLink`]) and what it counts ([`Holdings`]); it runs as a
//! [`BeaconJob`] on the shared background runner (`gantry-jobs`), in the
//! worker process (`beacon`, listed by `gantry jobs --worker NAME`) and in
//! the web node for its Kubernetes cluster worker, with the same backoff
//! ([`BACKOFF_START`] to [`BACKOFF_CAP`]).

use std::time::Duration;

use gantry_jobs::{Backoff, Job, JobError, Outcome, Schedule};
use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerState};
use tokio::sync::watch;

use crate::holdings::Holdings;
use crate::web_link::{Refusal, WebLink};

/// First retry delay after a failure.
pub const BACKOFF_START: Duration = Duration::from_millis(250);
/// Longest retry delay.
pub const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// Where the worker stands with the web node, as the beacon last learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeaconStatus {
    /// Not registered yet: the web node has not answered.
    Unregistered,
    /// Registered; the lifecycle state the web node answered last.
    Registered(WorkerState),
    /// Retired: the web node answered a heartbeat with 410 Gone (the worker
    /// was deleted), and the beacon stopped.
    Retired,
}

/// Registration and heartbeats of one worker incarnation.
pub struct Beacon<L, H> {
    /// The web node it speaks to.
    pub link: L,
    /// What the worker holds: its counts go with each heartbeat.
    pub holdings: H,
    /// What is registered (its incarnation is fixed for this run).
    pub registration: WorkerRegistration,
    /// Time between heartbeats.
    pub interval: Duration,
    /// The worker's state as the web node last answered it
    /// ([`BeaconStatus::Retired`] after a 410).
    pub status: watch::Sender<BeaconStatus>,
    /// Whether the web node took the registration: heartbeats follow.
    registered: bool,
    /// The identity secret the web node issued at this worker's first
    /// registration, presented at every registration after it: the name
    /// is pinned to it until an admin prunes the worker.
    secret: Option<String>,
    /// Where the secret is kept across restarts (the work directory's
    /// [`IDENTITY_FILE`], mode 0600); none: in memory only.
    secret_file: Option<std::path::PathBuf>,
}

/// The file in a worker's work directory that keeps its identity secret.
pub const IDENTITY_FILE: &str = "worker-identity";

/// What one step of the beacon did, and so what comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// It registered: heartbeats follow every interval.
    Registered,
    /// A heartbeat was taken: the next one after the interval.
    Beaten,
    /// The web node no longer knows this incarnation: register again at once.
    Forgotten,
    /// The worker was retired: no more heartbeats.
    Retired,
}

impl<L: WebLink, H: Holdings> Beacon<L, H> {
    /// The beacon of `registration`, not registered yet.
    pub fn new(link: L, holdings: H, registration: WorkerRegistration, interval: Duration) -> Self {
        Beacon {
            link,
            holdings,
            registration,
            interval,
            status: watch::channel(BeaconStatus::Unregistered).0,
            registered: false,
            secret: None,
            secret_file: None,
        }
    }

    /// Keeps the worker's identity secret in `path` (read now if it is
    /// there; written, mode 0600, when the web node issues one), so a
    /// restarted worker with the same work directory keeps its name.
    pub fn with_identity_file(mut self, path: std::path::PathBuf) -> std::io::Result<Self> {
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => self.secret = Some(text.trim().to_string()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.secret_file = Some(path);
        Ok(self)
    }

    /// Keeps a secret the web node issued: in memory, and in the identity
    /// file (written whole under a temporary name, then renamed).
    async fn keep_secret(&mut self, secret: String) {
        if let Some(path) = &self.secret_file {
            let path = path.clone();
            let text = secret.clone();
            let written = tokio::task::spawn_blocking(move || write_private(&path, &text)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("keeping the worker's identity secret: {e} (a restart will need an admin to prune the worker)"),
                Err(e) => tracing::error!("keeping the worker's identity secret: {e}"),
            }
        }
        self.secret = Some(secret);
    }

    /// One step: registers when not registered, else heartbeats with the
    /// live counts. An error (a failure to retry after a backoff) says what
    /// failed.
    pub async fn beat(&mut self) -> Result<Beat, String> {
        if !self.registered {
            let issued = self
                .link
                .register(&self.registration, self.secret.as_deref())
                .await
                .map_err(|f| format!("registration failed: {f}"))?;
            if let Some(secret) = issued {
                self.keep_secret(secret).await;
            }
            let reg = &self.registration;
            self.status
                .send_replace(BeaconStatus::Registered(WorkerState::Running));
            tracing::info!(web = %self.link.describe(), worker = %reg.name,
                incarnation = %reg.incarnation, "registered with the web node");
            self.registered = true;
            return Ok(Beat::Registered);
        }
        let reg = &self.registration;
        let (containers, volumes) = self
            .holdings
            .counts()
            .await
            .map_err(|e| format!("no heartbeat: {e}"))?;
        let beat = Heartbeat {
            incarnation: reg.incarnation.clone(),
            containers,
            volumes,
        };
        match self.link.heartbeat(&reg.name, &beat).await {
            Ok(state) => {
                if let Some(state) = state {
                    self.status.send_replace(BeaconStatus::Registered(state));
                }
                Ok(Beat::Beaten)
            }
            Err(Refusal::Retired(_)) => {
                tracing::info!(worker = %reg.name, "the web node retired this worker; no more heartbeats");
                self.status.send_replace(BeaconStatus::Retired);
                Ok(Beat::Retired)
            }
            Err(Refusal::Unknown(answer)) => {
                tracing::info!(worker = %reg.name, %answer, "the web node does not know this worker; registering again");
                self.registered = false;
                Ok(Beat::Forgotten)
            }
            Err(Refusal::Failed(e)) => Err(format!("heartbeat failed: {e}")),
        }
    }

    /// Beats until `shutdown` becomes true or the worker is retired:
    /// every interval, at once after the web node forgot the worker,
    /// after a doubling backoff following failures. The tests' driver
    /// (`testing` feature): processes run the beacon as a [`BeaconJob`] on
    /// the shared runner.
    #[cfg(any(test, feature = "testing"))]
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = BACKOFF_START;
        loop {
            let wait = match self.beat().await {
                Ok(Beat::Registered | Beat::Beaten) => {
                    backoff = BACKOFF_START;
                    self.interval
                }
                Ok(Beat::Forgotten) => Duration::ZERO,
                Ok(Beat::Retired) => return,
                Err(e) => {
                    tracing::warn!(retry_in = ?backoff, "{e}");
                    next_backoff(&mut backoff)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// The beacon as a job of the shared background runner (`gantry-jobs`):
/// one step a tick (registering, or a heartbeat), listed with its state,
/// runs and last error; after a failure the runner backs off from
/// [`BACKOFF_START`] to [`BACKOFF_CAP`] (see [`BeaconJob::schedule`]). The
/// worker agent runs it as `beacon`, the web node for a Kubernetes cluster
/// worker as `kubernetes-beacon/{worker}`.
pub struct BeaconJob<L, H> {
    /// The beacon.
    pub beacon: Beacon<L, H>,
    /// The name it is listed under.
    pub name: String,
}

impl<L: WebLink + 'static, H: Holdings + 'static> BeaconJob<L, H> {
    /// When it beats: every interval, backing off after failures as the
    /// worker agent always has.
    pub fn schedule(&self) -> Schedule {
        Schedule::every(self.beacon.interval)
            .with_backoff(Backoff::doubling(BACKOFF_START, BACKOFF_CAP))
    }
}

impl<L: WebLink + 'static, H: Holdings + 'static> Job for BeaconJob<L, H> {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        match self.beacon.beat().await.map_err(JobError::Failed)? {
            Beat::Registered | Beat::Beaten => Ok(Outcome::Idle),
            Beat::Forgotten => Ok(Outcome::Busy),
            Beat::Retired => Ok(Outcome::Done),
        }
    }
}

/// Writes `text` to `path` readable by its owner only, whole or not at all.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(format!("{text}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Returns the current delay and doubles it up to the cap.
#[cfg(any(test, feature = "testing"))]
fn next_backoff(backoff: &mut Duration) -> Duration {
    let now = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_CAP);
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        let mut b = BACKOFF_START;
        let delays: Vec<Duration> = (0..8).map(|_| next_backoff(&mut b)).collect();
        assert_eq!(delays[0], BACKOFF_START);
        assert_eq!(delays[1], BACKOFF_START * 2);
        assert_eq!(*delays.last().unwrap(), BACKOFF_CAP);
    }
}
