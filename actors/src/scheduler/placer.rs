//! Where placements are decided and held: the [`Scheduler`] alone (one web
//! node, SQLite), or the Scheduler under the database's placement ledger
//! (PostgreSQL, where several web nodes may share the fleet).
//!
//! With the ledger, each decision runs in a [`crate::db::LedgerTx`]: the
//! node takes the ledger's lock, reads every worker's load as all nodes
//! left it, lets its Scheduler choose with those loads (filters, strategy
//! chain, limits: the same code as one node), records the placement and
//! commits. A step that must wait does so on a task of its own, trying again
//! whenever a release is announced (by this node, or by another through
//! PostgreSQL `NOTIFY`), and at the latest every [`RETRY`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use tokio::sync::{oneshot, watch};

use crate::db::Db;
use crate::error::EngineError;
use crate::placement::Load;
use gantry_jobs::{Jobs, Tasks};

use super::{
    abandon_ticket, DecideWith, Placement, ReleasePlacement, RestorePlacement, Scheduler,
    SelectWorker, Selection, StepRequest,
};

/// The longest a waiting step goes without trying again (a notification
/// lost while the listener reconnected costs no more than this).
const RETRY: Duration = Duration::from_secs(2);

/// Decides, holds and releases placements.
#[derive(Clone)]
pub(crate) struct Placer {
    /// This node's Scheduler: filters and strategies, and its own view of
    /// the load.
    scheduler: Addr<Scheduler>,
    /// The shared ledger, when several nodes may place.
    ledger: Option<Arc<Ledger>>,
    /// Where its tasks (waits for capacity, releases, queue rows' removal)
    /// run: the engine's owned tasks, drained at shutdown.
    tasks: Tasks,
}

/// The shared ledger of one node.
struct Ledger {
    /// The database holding it.
    db: Db,
    /// This node's name, recorded on its rows.
    node: String,
    /// Bumped at every release heard of; waiting steps watch it.
    released: watch::Sender<u64>,
    /// Steps of this node waiting for capacity now.
    waiting: Arc<AtomicUsize>,
}

/// Counts one waiting step while it lives.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn count(n: &Arc<AtomicUsize>) -> Waiting {
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Placer {
    /// Whether placements go through the shared ledger.
    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        self.ledger.is_some()
    }

    /// Placements decided by `scheduler` alone, its tasks owned by `tasks`.
    pub(crate) fn local(scheduler: Addr<Scheduler>, tasks: Tasks) -> Placer {
        Placer {
            scheduler,
            ledger: None,
            tasks,
        }
    }

    /// The owned tasks its work runs on (the engine's).
    pub(crate) fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Placements through the ledger of `db` when it may be shared
    /// (PostgreSQL), else by `scheduler` alone. Starts the listener for
    /// other nodes' releases, a job of `jobs` (inside the actix System).
    pub(crate) fn for_database(
        scheduler: Addr<Scheduler>,
        db: &Db,
        node: &str,
        jobs: &Jobs,
    ) -> Placer {
        if !db.is_shared() {
            return Placer::local(scheduler, jobs.tasks().clone());
        }
        let (released, _) = watch::channel(0);
        let ledger = Arc::new(Ledger {
            db: db.clone(),
            node: node.to_string(),
            released,
            waiting: Arc::default(),
        });
        // Every release (and a reconnection, after which anything may have
        // been released) wakes the waiting steps, while the ledger lives.
        let weak = Arc::downgrade(&ledger);
        crate::background::listen(
            jobs,
            RELEASES_JOB,
            db.url(),
            crate::db::RELEASES_CHANNEL,
            move |_| {
                let Some(ledger) = weak.upgrade() else {
                    return false;
                };
                ledger.released.send_modify(|n| *n += 1);
                true
            },
        );
        Placer {
            scheduler,
            tasks: jobs.tasks().clone(),
            ledger: Some(ledger),
        }
    }

    /// The Scheduler behind it.
    pub(crate) fn scheduler(&self) -> &Addr<Scheduler> {
        &self.scheduler
    }

    /// Asks for a worker for a step: placed now, or queued.
    pub(crate) async fn select(&self, request: StepRequest) -> Result<Selection, EngineError> {
        let Some(ledger) = &self.ledger else {
            return self.scheduler.send(SelectWorker(request)).await?;
        };
        let mut released = ledger.released.subscribe();
        let reason = match self.decide(ledger, &request).await? {
            Ok(p) => return Ok(Selection::Placed(p)),
            Err(reason) => reason,
        };
        let (tx, ticket) = oneshot::channel();
        let placer = self.clone();
        let ledger = ledger.clone();
        self.tasks.spawn(async move {
            let _waiting = Waiting::count(&ledger.waiting);
            let since = Instant::now();
            let mut tx = tx;
            loop {
                tokio::select! {
                    _ = tokio::time::timeout(RETRY, released.changed()) => {}
                    _ = tx.closed() => return,
                }
                released.borrow_and_update();
                match placer.decide(&ledger, &request).await {
                    Ok(Ok(p)) => {
                        crate::histograms::step_waited(since.elapsed());
                        if let Err(p) = tx.send(p) {
                            placer.release(p);
                        }
                        return;
                    }
                    Ok(Err(_)) => {}
                    Err(e) => {
                        // A database failure is retried; no worker left is
                        // told by dropping the ticket (the step asks again
                        // and gets the reason).
                        if matches!(e, EngineError::NoWorkers(_)) {
                            return;
                        }
                        tracing::warn!("placing a waiting step: {e}");
                    }
                }
            }
        });
        Ok(Selection::Queued { ticket, reason })
    }

    /// One decision under the ledger's lock: placed and recorded, or why it
    /// must wait.
    async fn decide(
        &self,
        ledger: &Ledger,
        request: &StepRequest,
    ) -> Result<Result<Placement, String>, EngineError> {
        let mut tx = ledger.db.workers().lock_ledger().await?;
        let loads = tx.loads().await?;
        let bindings = tx.bindings().await?;
        let decided = self
            .scheduler
            .send(DecideWith {
                request: request.clone(),
                loads,
                bindings,
            })
            .await??;
        let mut placement = match decided {
            Ok(p) => p,
            Err(reason) => return Ok(Err(reason)),
        };
        let recorded = async {
            // A one-build worker is bound under the same lock it was chosen
            // under, so no other node binds it to another build meanwhile.
            if let (true, Some(build)) = (placement.binds, request.build_id) {
                if !tx.bind(&placement.worker, build).await? {
                    return Err(EngineError::Invalid(format!(
                        "worker {} is bound to another build",
                        placement.worker
                    )));
                }
            }
            tx.record(
                &placement.worker,
                request.build_id,
                &ledger.node,
                &placement.reserved,
            )
            .await
        }
        .await;
        let committed = match recorded {
            Ok(id) => tx.commit().await.map(|()| id),
            Err(e) => Err(e),
        };
        match committed {
            Ok(id) => {
                placement.ledger = Some(id);
                Ok(Ok(placement))
            }
            Err(e) => {
                // Not recorded: this node's own view gives it back.
                self.scheduler.do_send(ReleasePlacement(placement));
                Err(e)
            }
        }
    }

    /// Gives a placement's capacity back.
    pub(crate) fn release(&self, placement: Placement) {
        if let (Some(ledger), Some(id)) = (&self.ledger, placement.ledger) {
            let ledger = ledger.clone();
            // Not cut short at shutdown: the release is written first.
            self.tasks.spawn_graceful(|_| async move {
                match ledger.db.workers().release_placement(id).await {
                    Ok(()) => {
                        ledger.released.send_modify(|n| *n += 1);
                    }
                    Err(e) => {
                        tracing::error!(placement = id, "releasing a placement: {e}");
                    }
                }
            });
        }
        self.scheduler.do_send(ReleasePlacement(placement));
    }

    /// Holds again a placement made before this node took its build over
    /// (a restart, or another node's death), so limits count it.
    pub(crate) async fn restore(
        &self,
        mut placement: Placement,
        build_id: i64,
    ) -> Result<Placement, EngineError> {
        if let (Some(ledger), None) = (&self.ledger, placement.ledger) {
            placement.ledger = Some(
                ledger
                    .db
                    .workers()
                    .record_build_placement(
                        build_id,
                        &placement.worker,
                        &ledger.node,
                        &placement.reserved,
                    )
                    .await?,
            );
        }
        self.scheduler
            .send(RestorePlacement(placement.clone()))
            .await?;
        Ok(placement)
    }

    /// Gives up a queued ticket without leaking capacity.
    pub(crate) async fn abandon(&self, mut ticket: oneshot::Receiver<Placement>) {
        if self.ledger.is_none() {
            return abandon_ticket(ticket, &self.scheduler).await;
        }
        ticket.close();
        if let Ok(p) = ticket.try_recv() {
            self.release(p);
        }
    }

    /// With the shared ledger, every worker's load (all nodes) and this
    /// node's steps waiting for capacity; `None` when the Scheduler's own
    /// figures are the whole truth.
    pub(crate) async fn shared_loads(
        &self,
    ) -> Result<Option<(HashMap<String, Load>, usize)>, EngineError> {
        match &self.ledger {
            Some(l) => Ok(Some((
                l.db.workers().ledger_loads().await?,
                l.waiting.load(Ordering::Relaxed),
            ))),
            None => Ok(None),
        }
    }

    /// Deletes the ledger rows `node` recorded before `before` that no build
    /// took again (a node taken over, or this node's previous run).
    pub(crate) async fn purge(&self, node: &str, before: i64) -> Result<(), EngineError> {
        if let Some(ledger) = &self.ledger {
            let n = ledger.db.workers().purge_placements(node, before).await?;
            if n > 0 {
                tracing::info!(node, placements = n, "released placements no build holds");
                ledger.released.send_modify(|n| *n += 1);
            }
        }
        Ok(())
    }
}

/// Name of the release listener's row in the jobs table.
pub(super) const RELEASES_JOB: &str = "placement-releases";
