//! Taking over a step that began before its build was taken over (a
//! restart of the web node, or another node's death): the walker reaches
//! it with the journal saying it began and did not end. What the step
//! created is found by its node in the plan (rows store it), and then:
//! - nothing stands on a worker yet: the step runs;
//! - its container stands: the step reattaches to its process, whose
//!   output the worker kept, and goes on without repeating what is stored
//!   (a process that never started runs the step afresh; a `put` follows
//!   its `out`, so it never pushes twice); a step whose work can simply be
//!   done again (`get`, `check`) runs again;
//! - its worker is gone: the step runs elsewhere when
//!   `rerun_when_worker_disappears` is on, as a step whose worker is lost
//!   while it runs does.
//!
//! A worker restarted together with the web node (the embedded worker of
//! `quickstart`) registers again a moment after the build is taken over,
//! on a new port and with a new token: until then the stored registration
//! points at an agent that is gone. So before anything asks the worker, the
//! step waits for it to answer, until `worker_return` (60 s by default)
//! after the takeover, and only then errors, naming the worker and the
//! wait. A step that had not begun (or begins after the takeover) and
//! finds its worker unreachable before any container of it was made waits
//! the same way, then is placed again (`placement.rs`).

use crate::builds::journal::{Began, Journal};
use crate::builds::placement::HeldPlacement;
use crate::builds::run::{BuildRun, Left, Scope, PROBE_INTERVAL};
use crate::db::HandleKind;
use crate::error::EngineError;
use crate::placement::Load;
use crate::scheduler::Placement;
use crate::steps::{Created, OnTakeover, Reattach, Step, StepEnd, WorkerWatch};
use crate::views::Handle as HandleRow;
use gantry_wire::error::RuntimeError;
use gantry_wire::events::BuildEvent;
use gantry_wire::state::HandleState;

impl BuildRun {
    /// Takes over `step`, which began at `began` (its node's start) before
    /// the build was taken over, and follows it to its end.
    pub(super) async fn resume_step(
        &self,
        step: &dyn Step,
        scope: &Scope,
        began: Began,
    ) -> Result<StepEnd, EngineError> {
        let node = scope.origin().key();
        let containers = self
            .deps
            .db
            .handles()
            .node_handles(HandleKind::Container, self.id, &node)
            .await?;
        // Its last container is its process's (a get's or put's first ones
        // ran its resource type's check or image).
        let Some(container) = containers.last() else {
            return self
                .afresh(step, scope, "it had not reached a worker")
                .await;
        };
        // Only a container that stood (or was being made) is asked about.
        if matches!(
            container.state,
            HandleState::Created | HandleState::Creating
        ) {
            self.await_worker(step.name(), &container.worker, Some(&container.handle))
                .await?;
        }
        if step.on_takeover() == OnTakeover::Rerun {
            return self
                .afresh(step, scope, "its work is safe to do again")
                .await;
        }
        let stands = match container.state {
            HandleState::Created => true,
            // Its node stopped between asking the worker and recording the
            // answer: the worker says whether it stands.
            HandleState::Creating => self.container_stands(container).await,
            _ => false,
        };
        if !stands && container.state == HandleState::Creating {
            return self
                .afresh(step, scope, "its container was never made")
                .await;
        }
        if !stands && scope.stop.reason().is_none() {
            return Err(EngineError::Invalid(format!(
                "the step's container {} was already {} when the build was taken over",
                container.handle,
                container.state.as_str()
            )));
        }
        if !stands {
            return Ok(StepEnd::Stopped);
        }
        tracing::info!(build = self.id, step = step.name(), worker = %container.worker, "resuming a build: reattaching to its step");
        let result = self
            .reattach(step, scope, &containers, &self.journal, began.seq)
            .await;
        if never_started(&result) && self.journal.stored_output(step.name(), began.seq) == [0, 0] {
            // Its node stopped between creating the container and starting
            // the process: nothing ran. The container goes first, so a start
            // still on its way to the worker cannot run beside the new one.
            self.discard_container(container).await;
            return self.afresh(step, scope, "its process never started").await;
        }
        // Its worker's connection dropped while it was followed: it waits
        // for the worker to come back, as any step does (`reconnect.rs`).
        let result = match result {
            Err(why @ EngineError::WorkerLost { .. }) => {
                let worker = &container.worker;
                match self.reconnect(step, scope, worker, &containers, why).await {
                    (_, Left::RunAgain) => {
                        return self
                            .afresh(step, scope, "its worker came back, and it is to run again")
                            .await
                    }
                    (result, _) => result,
                }
            }
            other => other,
        };
        match result {
            Err(EngineError::WorkerLost { worker, reason })
                if self.deps.rerun_when_worker_disappears =>
            {
                self.emit_quietly(&BuildEvent::Error {
                    message: format!(
                        "worker {worker} {reason}; running the step again on another worker"
                    ),
                    time: crate::db::now_ms(),
                })
                .await;
                self.run_step(step, scope).await
            }
            other => other,
        }
    }

    /// Runs a step taken over from its start (`why` says why that is
    /// safe), unless its build was stopped meanwhile (aborted while no web
    /// node ran it): then it does not start again.
    async fn afresh(
        &self,
        step: &dyn Step,
        scope: &Scope,
        why: &str,
    ) -> Result<StepEnd, EngineError> {
        if scope.stop.reason().is_some() {
            return Ok(StepEnd::Stopped);
        }
        tracing::info!(
            build = self.id,
            step = step.name(),
            "taking a step over: {why}; running it from its start"
        );
        self.run_step(step, scope).await
    }

    /// The instant until which a step of this build waits for its worker
    /// to register again: `worker_return` after the takeover (none: a
    /// build this web node began).
    pub(super) fn worker_return_deadline(&self) -> Option<tokio::time::Instant> {
        self.taken_over.map(|at| at + self.deps.worker_return)
    }

    /// Waits until `worker` answers (asked about its container `handle`,
    /// or pinged when the step has none there yet; `step` is told in the
    /// build's events while it waits) through its registration as stored
    /// now, which changes when it registers again, until `worker_return`
    /// after the takeover. A worker removed meanwhile, or silent for the
    /// whole wait, is lost.
    pub(super) async fn await_worker(
        &self,
        step: &str,
        worker: &str,
        handle: Option<&str>,
    ) -> Result<(), EngineError> {
        let wait = self.deps.worker_return;
        let deadline = self
            .worker_return_deadline()
            .unwrap_or_else(|| tokio::time::Instant::now() + wait);
        let mut told = false;
        loop {
            let Some(row) = self.deps.db.workers().get_worker(worker).await? else {
                return Err(EngineError::WorkerLost {
                    worker: worker.to_string(),
                    reason: "was removed while the build had no web node".into(),
                });
            };
            let client = self.deps.connector.connect(&row.registration);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let probe = async {
                match handle {
                    Some(handle) => client.lookup_container(handle).await.map(|_| ()),
                    None => client.ping().await,
                }
            };
            // Even past the deadline, one try gets a moment to answer.
            let limit = left.min(PROBE_TIMEOUT).max(PROBE_INTERVAL);
            let why = match tokio::time::timeout(limit, probe).await {
                Ok(Ok(())) => {
                    if told {
                        tracing::info!(
                            build = self.id,
                            worker,
                            "the worker answers again: resuming"
                        );
                    }
                    return Ok(());
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
            };
            if tokio::time::Instant::now() + PROBE_INTERVAL >= deadline {
                return Err(EngineError::WorkerLost {
                    worker: worker.to_string(),
                    reason: format!(
                        "did not come back within {}s of the build being taken over \
                         (worker_return_timeout_secs; last try: {why})",
                        wait.as_secs()
                    ),
                });
            }
            if !told {
                told = true;
                let message = format!(
                    "waiting up to {}s for worker {worker} to come back (the build was taken over): {why}",
                    wait.as_secs()
                );
                self.announce_waiting_for(step, worker, message).await;
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Whether container `row` stands on its worker (false when unsure).
    async fn container_stands(&self, row: &HandleRow) -> bool {
        let Ok(Some(worker)) = self.deps.db.workers().get_worker(&row.worker).await else {
            return false;
        };
        let client = self.deps.connector.connect(&worker.registration);
        matches!(client.lookup_container(&row.handle).await, Ok(Some(_)))
    }

    /// Reattaches `step` to its process in the last of `containers` (the
    /// step's, oldest first), holding the step's capacity on its worker
    /// again first (the Scheduler of this node did not place it). What
    /// `journal` holds after event `after` (the step's start, or its
    /// latest placement) is what the step stored and told already.
    pub(super) async fn reattach(
        &self,
        step: &dyn Step,
        scope: &Scope,
        containers: &[HandleRow],
        journal: &Journal,
        after: i64,
    ) -> Result<StepEnd, EngineError> {
        let container = containers
            .last()
            .expect("a step taken over at its container");
        let db = &self.deps.db;
        let removed = || EngineError::WorkerLost {
            worker: container.worker.clone(),
            reason: "was removed while the build had no web node".into(),
        };
        let row = db
            .workers()
            .get_worker(&container.worker)
            .await?
            .ok_or_else(removed)?;
        let worker = self.deps.connector.connect(&row.registration);
        let watch = WorkerWatch::subscribe(&self.deps.worker_states, &container.worker)
            .ok_or_else(removed)?;
        let node = scope.origin().key();
        let volumes = db
            .handles()
            .node_handles(HandleKind::Volume, self.id, &node)
            .await?;
        let created = Created {
            containers: containers.iter().map(|r| r.handle.clone()).collect(),
            volumes: volumes.iter().map(|r| r.handle.clone()).collect(),
        };
        let placement = Placement {
            worker: container.worker.clone(),
            client: worker.clone(),
            reserved: Load {
                tasks: 1,
                containers: created.containers.len() as u32,
                volumes: created.volumes.len() as u32,
            },
            ledger: None,
            decision: Default::default(),
            binds: false,
        };
        let placement = self.deps.placer.restore(placement, self.id).await?;
        let held = HeldPlacement::new(placement, self.deps.placer.clone());
        let mut ctx = self.step_context(step.name(), worker, watch, created, scope);
        let at = Reattach {
            volumes: newest_per_role(
                volumes
                    .iter()
                    .filter_map(|r| Some((r.step.clone()?, r.handle.clone()))),
            ),
            already_stored: journal.stored_output(step.name(), after),
            containers: containers.iter().map(|r| r.handle.clone()).collect(),
            told: journal.told(step.name(), after),
        };
        let result = step
            .reattach(&mut ctx, at)
            .await
            .map_err(EngineError::lost_if_unreachable);
        let lost = matches!(result, Err(EngineError::WorkerLost { .. }));
        self.left_to_gc(&container.worker, &ctx.take_created(), lost);
        drop(held);
        result
    }

    /// Destroys the container of a step that never started, now, and marks
    /// its row `destroying` (the worker's sweeper finishes the row).
    pub(super) async fn discard_container(&self, row: &HandleRow) {
        let destroyed = match self.deps.db.workers().get_worker(&row.worker).await {
            Ok(Some(worker)) => {
                let client = self.deps.connector.connect(&worker.registration);
                client.destroy_container(&row.handle).await
            }
            _ => Ok(()),
        };
        if let Err(e) = destroyed {
            tracing::warn!(build = self.id, container = %row.handle, "destroying the container of a step that never started: {e}");
        }
        if let Err(e) = self
            .deps
            .db
            .gc()
            .mark_destroying(HandleKind::Container, &row.handle)
            .await
        {
            tracing::warn!(build = self.id, "marking a container destroying: {e}");
        }
    }
}

/// How long one such question may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether reattaching found no process.
pub(super) fn never_started(result: &Result<StepEnd, EngineError>) -> bool {
    matches!(
        result,
        Err(EngineError::Runtime(RuntimeError::NotFound {
            kind: "process",
            ..
        }))
    )
}

/// The volumes a step is reattached with: of each role, the newest. A
/// step run afresh after one takeover records its volumes again under the
/// same roles (the earlier attempt's stay on the worker until collected),
/// so at a second takeover the live attempt's are the last of each role,
/// as its container is the last (`volumes` oldest first).
fn newest_per_role(volumes: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (role, handle) in volumes {
        out.retain(|(r, _)| *r != role);
        out.push((role, handle));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::newest_per_role;

    #[test]
    fn a_step_run_afresh_is_reattached_to_its_newest_volumes() {
        let v = |r: &str, h: &str| (r.to_string(), h.to_string());
        // Attempt 1 (killed before its process ran), then attempt 2.
        let recorded = vec![
            v("input:l", "l1"),
            v("output:pushed", "empty"),
            v("input:l", "l2"),
            v("output:pushed", "full"),
            v("output:other", "o2"),
        ];
        assert_eq!(
            newest_per_role(recorded.into_iter()),
            vec![
                v("input:l", "l2"),
                v("output:pushed", "full"),
                v("output:other", "o2")
            ]
        );
    }
}
