//! Placing a step: selecting a worker through the Scheduler, waiting for a
//! ticket when every compatible worker is full ("waiting for worker" in the
//! build log) until placed or stopped, holding the placement while the step
//! runs and releasing it on every path, and running the step again on
//! another worker when its worker is lost. A step whose connection to its
//! worker drops once its container was made waits for the worker to come
//! back and reattaches (`reconnect.rs`). In a build taken over, a step
//! whose worker is unreachable before any container of it was made waits
//! for the worker to register again (a restarted quickstart's embedded
//! worker comes back on a new port), then is placed again.

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::builds::run::{BuildRun, Left, Scope, PROBE_INTERVAL};
use crate::db::{HandleKind, WaitingStep};
use crate::error::EngineError;
use crate::scheduler::{Placement, Placer, Selection, StepRequest, WAITING_FOR_WORKERS};
use crate::steps::{Created, Step, StepEnd, Stop, WorkerWatch};
use crate::views::Handle as HandleRow;
use gantry_wire::error::RuntimeError;
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::Worker;
use gantry_wire::state::HandleState;

/// How often a step is run when its workers keep disappearing.
const MAX_RERUNS: u32 = 3;

/// Holds a placement's reservation and releases it when dropped, so no error
/// path can leak capacity.
pub(super) struct HeldPlacement {
    /// The placement, until released.
    placement: Option<Placement>,
    /// Where it is released.
    placer: Placer,
}

impl HeldPlacement {
    /// Holds `placement` until dropped.
    pub(super) fn new(placement: Placement, placer: Placer) -> Self {
        HeldPlacement {
            placement: Some(placement),
            placer,
        }
    }
}

impl Drop for HeldPlacement {
    fn drop(&mut self) {
        if let Some(p) = self.placement.take() {
            self.placer.release(p);
        }
    }
}

/// A step's row in the fleet's queue, deleted when dropped (placed,
/// stopped, or the wait given up on any path).
struct Queued {
    db: crate::db::Db,
    id: String,
    /// The engine's owned tasks: the row's removal runs there (not cut
    /// short at shutdown, which waits for it).
    tasks: gantry_jobs::Tasks,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let (db, id) = (self.db.clone(), std::mem::take(&mut self.id));
        self.tasks.spawn_graceful(|_| async move {
            if let Err(e) = db.builds().delete_waiting_step(&id).await {
                tracing::warn!("a placed step stays in the queue: {e}");
            }
        });
    }
}

/// How waiting on a ticket ended.
enum Ticket {
    /// Placed.
    Placed(Placement),
    /// The build was stopped first; the ticket was given up.
    Stopped,
    /// The Scheduler dropped the request (the workers it waited for changed).
    Dropped,
    /// The wait for a worker to register ran out; the ticket was given up.
    TimedOut,
}

impl BuildRun {
    /// Places `step` and runs it under `stop` (its scope's stop signal);
    /// when its worker is lost and reruns are on, runs it again on another
    /// worker (at most [`MAX_RERUNS`] times). Placement, what the step
    /// creates and its cleanup are the step's own, so steps of one build
    /// run at once on different workers.
    pub(super) async fn run_step(
        &self,
        step: &dyn Step,
        scope: &Scope,
    ) -> Result<StepEnd, EngineError> {
        let mut attempt = 1;
        let mut lost: Vec<String> = Vec::new();
        let mut awaited = false;
        loop {
            let (mut result, left) = self.place_and_run(step, &lost, scope).await;
            if left == Left::RunAgain {
                continue;
            }
            let untouched = left == Left::Untouched;
            // Taken over, its worker's registration may be the one before
            // the restart: nothing of the step was made there, so it waits
            // for the worker to answer again and is placed again (at most
            // until `worker_return` after the takeover). A worker that
            // never answers is lost.
            if let (Err(EngineError::WorkerLost { worker, .. }), true) =
                (&result, untouched && self.may_await_return())
            {
                if awaited {
                    // It answered, yet was placed through its old
                    // registration: the Scheduler hears of the new one
                    // shortly.
                    tokio::time::sleep(PROBE_INTERVAL).await;
                }
                awaited = true;
                let mut stop = scope.stop.clone();
                let back = tokio::select! {
                    back = self.await_worker(step.name(), worker, None) => back,
                    _ = stop.requested() => return Ok(StepEnd::Stopped),
                };
                match back {
                    Ok(()) => continue,
                    Err(e) => result = Err(e),
                }
            }
            match result {
                Err(EngineError::WorkerLost { worker, reason })
                    if self.deps.rerun_when_worker_disappears && attempt < MAX_RERUNS =>
                {
                    attempt += 1;
                    lost.push(worker.clone());
                    self.emit_quietly(&BuildEvent::Error {
                        message: format!(
                            "worker {worker} {reason}; running the step again on another worker (attempt {attempt})"
                        ),
                        time: crate::db::now_ms(),
                    })
                    .await;
                }
                other => return other,
            }
        }
    }

    /// Whether a step whose worker is unreachable waits for it to come
    /// back: the build was taken over less than `worker_return` ago.
    fn may_await_return(&self) -> bool {
        self.worker_return_deadline()
            .is_some_and(|deadline| tokio::time::Instant::now() < deadline)
    }

    /// Waits for a placement (or a stop), runs the step there, cleans up
    /// what it created and releases the placement. Also answers what is
    /// left to do: the step failed on its worker being unreachable before
    /// any container of it was made there (nothing of it ran), or its
    /// worker came back after its connection dropped and the step is to
    /// run again from its start.
    async fn place_and_run(
        &self,
        step: &dyn Step,
        lost: &[String],
        scope: &Scope,
    ) -> (Result<StepEnd, EngineError>, Left) {
        match self.place_and_run_once(step, lost, scope).await {
            Ok(ran) => ran,
            Err(e) => (Err(e), Left::Nothing),
        }
    }

    /// [`Self::place_and_run`], its errors before the step runs apart.
    async fn place_and_run_once(
        &self,
        step: &dyn Step,
        lost: &[String],
        scope: &Scope,
    ) -> Result<(Result<StepEnd, EngineError>, Left), EngineError> {
        let stop = &scope.stop;
        let mut request = StepRequest {
            team: self.team.clone(),
            avoid: lost.to_vec(),
            build_id: Some(self.id),
            ..step.worker_request()
        };
        // Inputs found by name in the build (a job's earlier outputs).
        for name in step.named_inputs() {
            if let Some(id) = self.named.get(&name) {
                if !request.inputs.contains(&id) {
                    request.inputs.push(id);
                }
            }
        }
        // The placement's span: the strategies' decision, or why it waited.
        let span = tracing::info_span!(
            "placement",
            placement.chain = request.chain_kind().as_str(),
            placement.strategies = tracing::field::Empty,
            placement.candidates = tracing::field::Empty,
            placement.worker = tracing::field::Empty,
            placement.inputs = request.inputs.len(),
            placement.avoid = %request.avoid.join(","),
            placement.waited = false,
            placement.reason = tracing::field::Empty,
        );
        let placed = self.place(step.name(), request, stop);
        let Some(placement) = placed.instrument(span.clone()).await? else {
            return Ok((Ok(StepEnd::Stopped), Left::Nothing));
        };
        span.record("placement.worker", placement.worker.as_str());
        span.record(
            "placement.strategies",
            placement.decision.strategies.as_str(),
        );
        span.record("placement.candidates", placement.decision.candidates);
        drop(span);
        // Released when this function returns, on every path.
        let held = HeldPlacement::new(placement.clone(), self.deps.placer.clone());
        let worker = placement.worker.clone();
        // A one-build worker's binding is recorded before it takes the step,
        // so a restarted web node (or another one) keeps it to this build.
        if placement.binds && !self.deps.db.workers().bind_worker(&worker, self.id).await? {
            return Err(EngineError::WorkerLost {
                worker,
                reason: "is a one-build worker bound to another build".into(),
            });
        }
        self.deps.db.builds().start_build(self.id, &worker).await?;
        self.events
            .emit(&BuildEvent::SelectedWorker {
                step: step.name().into(),
                worker,
                time: crate::db::now_ms(),
            })
            .await?;
        let (result, created) = self.run_on(step, placement.client.clone(), scope).await;
        let untouched = matches!(
            result,
            Err(EngineError::Runtime(RuntimeError::Unreachable { .. }))
        ) && self.none_made(&created).await;
        let result = match result.map_err(EngineError::lost_if_unreachable) {
            // Its connection dropped while its process may run on under
            // its keeper: it waits for the worker to come back and
            // reattaches (`reconnect.rs`), holding its capacity again then.
            Err(why @ EngineError::WorkerLost { .. }) if !untouched => {
                match self.made_containers(scope, &created).await? {
                    Some(made) => {
                        drop(held);
                        let worker = &placement.worker;
                        return Ok(self.reconnect(step, scope, worker, &made, why).await);
                    }
                    None => Err(why),
                }
            }
            other => other,
        };
        let lost = matches!(result, Err(EngineError::WorkerLost { .. }));
        self.left_to_gc(&placement.worker, &created, lost);
        drop(held);
        let left = if untouched {
            Left::Untouched
        } else {
            Left::Nothing
        };
        Ok((result, left))
    }

    /// The rows of the containers of `created` (the step's at `scope`'s
    /// node, oldest first), when the last was made on its worker (its
    /// process may have started): what a step whose connection dropped
    /// reattaches through.
    async fn made_containers(
        &self,
        scope: &Scope,
        created: &Created,
    ) -> Result<Option<Vec<HandleRow>>, EngineError> {
        let rows = self
            .deps
            .db
            .handles()
            .node_handles(HandleKind::Container, self.id, &scope.origin().key())
            .await?;
        let mine: Vec<HandleRow> = rows
            .into_iter()
            .filter(|r| created.containers.contains(&r.handle))
            .collect();
        let made = mine
            .last()
            .is_some_and(|last| last.state == HandleState::Created);
        Ok(made.then_some(mine))
    }

    /// Whether no container of `created` was made on its worker: each row
    /// is still `creating` (the worker never answered that it made it).
    async fn none_made(&self, created: &Created) -> bool {
        for handle in &created.containers {
            match self
                .deps
                .db
                .handles()
                .get_handle(HandleKind::Container, handle)
                .await
            {
                Ok(Some(row)) if row.state == HandleState::Creating => {}
                Ok(None) => {}
                _ => return false,
            }
        }
        true
    }

    /// Runs `step` on `worker`; returns how it ended and what it created.
    async fn run_on(
        &self,
        step: &dyn Step,
        worker: Arc<dyn Worker>,
        scope: &Scope,
    ) -> (Result<StepEnd, EngineError>, Created) {
        // Watch the worker before creating anything on it.
        let Some(watch) = WorkerWatch::subscribe(&self.deps.worker_states, worker.name()) else {
            let lost = EngineError::WorkerLost {
                worker: worker.name().to_string(),
                reason: "was removed".into(),
            };
            return (Err(lost), Created::default());
        };
        let mut ctx = self.step_context(step.name(), worker, watch, Created::default(), scope);
        let result = step.run(&mut ctx).await;
        (result, ctx.take_created())
    }

    /// A worker for step `step`: placed at once, or after waiting in the
    /// Scheduler's queue; `None` when the build was stopped while waiting.
    async fn place(
        &self,
        step: &str,
        mut request: StepRequest,
        stop: &Stop,
    ) -> Result<Option<Placement>, EngineError> {
        let wait_for_workers = self.deps.wait_for_workers;
        request.may_wait_for_workers = wait_for_workers.is_some();
        let (ticket, reason) = match self.select(request.clone()).await? {
            Selection::Placed(p) => return Ok(Some(p)),
            Selection::Queued { ticket, reason } => (ticket, reason),
        };
        let span = tracing::Span::current();
        span.record("placement.waited", true);
        span.record("placement.reason", reason.as_str());
        // Only a wait for a worker to register is limited; one for
        // capacity lasts until the step is placed or stopped.
        let limit = wait_for_workers.filter(|_| reason.ends_with(WAITING_FOR_WORKERS));
        // In the fleet's queue while it waits (the row goes with `_queued`).
        let _queued = self.enqueue(step, &request, &reason).await;
        let waiting = BuildEvent::Waiting {
            step: step.into(),
            message: reason,
            time: crate::db::now_ms(),
        };
        if let Err(e) = self.events.emit(&waiting).await {
            self.deps.placer.abandon(ticket).await;
            return Err(e);
        }
        match self.wait_for_ticket(ticket, stop, limit).await {
            Ticket::Placed(p) => return Ok(Some(p)),
            Ticket::Stopped => return Ok(None),
            Ticket::Dropped | Ticket::TimedOut => {}
        }
        // The waiters' workers changed under them, or no worker registered
        // in time: ask again for the full answer (placed, queued for
        // capacity, or why not), no longer waiting for workers to register.
        request.may_wait_for_workers = false;
        let ticket = match self.select(request).await? {
            Selection::Placed(p) => return Ok(Some(p)),
            Selection::Queued { ticket, .. } => ticket,
        };
        match self.wait_for_ticket(ticket, stop, None).await {
            Ticket::Placed(p) => Ok(Some(p)),
            Ticket::Stopped => Ok(None),
            Ticket::Dropped | Ticket::TimedOut => Err(EngineError::NoWorkers(
                "the workers this step waited for are gone".into(),
            )),
        }
    }

    /// Records that `step` (asking `request`) waits, for `reason`: a row
    /// of the fleet's queue, removed when the answer is dropped. A queue
    /// row that cannot be written only goes unseen by autoscalers: the
    /// step waits all the same.
    async fn enqueue(&self, step: &str, request: &StepRequest, reason: &str) -> Option<Queued> {
        let row = WaitingStep {
            id: uuid::Uuid::new_v4().to_string(),
            web_node: self.deps.node_name.clone(),
            build_id: self.id,
            step: step.to_string(),
            team: request.team.clone(),
            platform: request.platform.clone(),
            tags: request.tags.clone(),
            resource_type: request.resource_type.clone(),
            privileged: request.privileged,
            reason: reason.to_string(),
            since: crate::db::now_ms(),
        };
        match self.deps.db.builds().insert_waiting_step(&row).await {
            Ok(()) => Some(Queued {
                db: self.deps.db.clone(),
                id: row.id,
                tasks: self.deps.placer.tasks().clone(),
            }),
            Err(e) => {
                tracing::warn!(
                    build = self.id,
                    step,
                    "the queue does not show a waiting step: {e}"
                );
                None
            }
        }
    }

    /// Asks the Scheduler for a worker.
    async fn select(&self, request: StepRequest) -> Result<Selection, EngineError> {
        self.deps.placer.select(request).await
    }

    /// Waits for a queued placement, giving the ticket up when the build is
    /// stopped first, or when `limit` (if any) runs out.
    async fn wait_for_ticket(
        &self,
        mut ticket: oneshot::Receiver<Placement>,
        stop: &Stop,
        limit: Option<std::time::Duration>,
    ) -> Ticket {
        let mut stop = stop.clone();
        let timeout = async {
            match limit {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = &mut ticket => match got {
                Ok(p) => Ticket::Placed(p),
                Err(_) => Ticket::Dropped,
            },
            _ = stop.requested() => {
                self.deps.placer.abandon(ticket).await;
                Ticket::Stopped
            }
            _ = timeout => {
                self.deps.placer.abandon(ticket).await;
                Ticket::TimedOut
            }
        }
    }
}
