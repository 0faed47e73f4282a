//! A step whose connection to its worker dropped while it ran: the worker
//! was killed or restarted (its connection refused or reset, the output
//! stream broken), or its heartbeat lapsed. The step's process runs on
//! under its keeper (`gantry keep`), which holds its output and end, and a
//! worker started again on the same work dir adopts it; so the build does
//! not error at once: it waits for the worker to come back, for at most
//! `worker_reconnect_grace` (2 minutes by default), telling so in its
//! events, then reattaches to the step's process as a build taken over
//! does (`resume.rs`), skipping the output it stored already. The step is
//! never started again on its worker: a process that never started (the
//! drop came between creating the container and starting it) and a step
//! whose work is safe to do again (`OnTakeover::Rerun`) are placed again
//! instead.
//!
//! The wait does not poll: the Registry publishes a worker's state when it
//! registers again (a new incarnation, on a new port and with a new token)
//! or comes back from stalled, and the wait then asks the worker about the
//! step's container through its registration as stored now. A worker that
//! does not come back in time loses the step, naming it (`worker w1 did not
//! come back within 2m0s after its connection dropped`), which then follows
//! `rerun_when_worker_disappears`. An abort or a timeout during the wait
//! stops the step; its container goes with the build, once its worker is
//! back. A worker that comes back without the step's container (its disk
//! was lost) errors the step, naming the container.

use std::time::Duration;

use tokio::time::Instant;

use crate::builds::journal::Journal;
use crate::builds::resume::never_started;
use crate::builds::run::{BuildRun, Left, Scope};
use crate::error::EngineError;
use crate::go_duration::format_go_duration;
use crate::steps::{OnTakeover, Step, StepEnd, Stop};
use crate::views::Handle as HandleRow;

/// How often the wait asks the worker even when the Registry tells it
/// nothing: a worker registered through another web node is heard of at
/// this node's next fleet sync, and one removed meanwhile and registered
/// again has a state of its own, which the wait did not watch.
const FALLBACK_PROBE: Duration = Duration::from_secs(5);

/// How long one question to the worker may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a wait for a worker to come back ended well.
enum Back {
    /// The worker answers about the step's container.
    Answers,
    /// The step's scope was stopped (abort, timeout) first.
    Stopped,
}

impl BuildRun {
    /// Waits for `worker`, whose connection dropped (`why`) while `step`
    /// ran its process in the last of `containers` (the step's, oldest
    /// first), to come back, and reattaches the step to that process; again
    /// after each drop. Answers how the step ended, and what is left to do.
    pub(super) async fn reconnect(
        &self,
        step: &dyn Step,
        scope: &Scope,
        worker: &str,
        containers: &[HandleRow],
        why: EngineError,
    ) -> (Result<StepEnd, EngineError>, Left) {
        let Some(container) = containers.last() else {
            return (Err(why), Left::Nothing);
        };
        let mut why = why;
        loop {
            let back = self
                .await_reconnect(step.name(), worker, &container.handle, &why, &scope.stop)
                .await;
            match back {
                Ok(Back::Answers) => {}
                Ok(Back::Stopped) => return (Ok(StepEnd::Stopped), Left::Nothing),
                Err(lost) => return (Err(lost), Left::Nothing),
            }
            if step.on_takeover() == OnTakeover::Rerun {
                tracing::info!(
                    build = self.id,
                    step = step.name(),
                    worker,
                    "the worker is back: running the step again, its work is safe to do again"
                );
                return (Err(why), Left::RunAgain);
            }
            // What the step stored and told so far, as its events say.
            let journal = match self.deps.db.builds().build_events_after(self.id, 0).await {
                Ok(events) => Journal::read(&events),
                Err(e) => return (Err(e), Left::Nothing),
            };
            // Its latest attempt's output follows its latest placement.
            let after = journal
                .began_at(&scope.origin())
                .map_or(0, |b| journal.last_placed(step.name(), b.seq));
            tracing::info!(
                build = self.id,
                step = step.name(),
                worker,
                "the worker is back: reattaching to the step's process"
            );
            let result = self
                .reattach(step, scope, containers, &journal, after)
                .await;
            if never_started(&result) && journal.stored_output(step.name(), after) == [0, 0] {
                // Its process never started: the container goes first, so
                // a start still on its way cannot run beside the new one.
                self.discard_container(container).await;
                return (result, Left::RunAgain);
            }
            match result {
                // Dropped again: wait again.
                Err(e @ EngineError::WorkerLost { .. }) => why = e,
                other => return (other, Left::Nothing),
            }
        }
    }

    /// Waits until `worker` answers about container `handle` through its
    /// registration as stored now, woken when the Registry tells the
    /// worker's state changed (registered again, back from stalled), for
    /// at most `worker_reconnect_grace`; `step` is told to wait in the
    /// build's events. A stop of the step's scope ends the wait.
    async fn await_reconnect(
        &self,
        step: &str,
        worker: &str,
        handle: &str,
        why: &EngineError,
        stop: &Stop,
    ) -> Result<Back, EngineError> {
        let grace = self.deps.worker_reconnect_grace;
        let deadline = Instant::now() + grace;
        let mut stop = stop.clone();
        let mut told = false;
        loop {
            // Watched before the question: a registration after it wakes
            // the wait.
            let mut state = self.deps.worker_states.get(worker).map(|tx| tx.subscribe());
            let last = match self.ask(worker, handle).await {
                Ok(()) => {
                    if told {
                        tracing::info!(build = self.id, worker, "the worker came back");
                    }
                    return Ok(Back::Answers);
                }
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(EngineError::WorkerLost {
                    worker: worker.to_string(),
                    reason: format!(
                        "did not come back within {} after its connection dropped \
                         (worker_reconnect_grace_secs; last try: {last})",
                        format_go_duration(grace)
                    ),
                });
            }
            if !told {
                told = true;
                let message = format!(
                    "waiting up to {} for worker {worker} to come back: {why}",
                    format_go_duration(grace)
                );
                self.announce_waiting_for(step, worker, message).await;
            }
            let told_of_change = async {
                let told = match state.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => false,
                };
                if !told {
                    // Removed: only the fallback asks again.
                    std::future::pending::<()>().await
                }
            };
            tokio::select! {
                _ = told_of_change => {}
                _ = tokio::time::sleep(FALLBACK_PROBE) => {}
                // One last question, then the step is lost.
                _ = tokio::time::sleep_until(deadline) => {}
                _ = stop.requested() => return Ok(Back::Stopped),
            }
        }
    }

    /// Asks `worker`, through its registration as stored now, whether
    /// container `handle` stands: an answer either way is the worker back
    /// (a container gone is the reattaching's to tell); what failed, if
    /// it did not answer.
    async fn ask(&self, worker: &str, handle: &str) -> Result<(), String> {
        let row = match self.deps.db.workers().get_worker(worker).await {
            Ok(Some(row)) => row,
            Ok(None) => return Err("it is not registered".into()),
            Err(e) => return Err(e.to_string()),
        };
        let client = self.deps.connector.connect(&row.registration);
        match tokio::time::timeout(PROBE_TIMEOUT, client.lookup_container(handle)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {}",
                format_go_duration(PROBE_TIMEOUT)
            )),
        }
    }
}
