//! The Scheduler actor: the pool of workers a step can be placed on.
//!
//! It filters workers by hard constraints, then chains the configured
//! placement strategies. It owns the live load of every worker (tasks,
//! containers, volumes placed and not yet released) and changes it in the
//! same handler that decides, so concurrent placements can never exceed a
//! limit. When compatible workers exist but all are at their limits, the
//! request waits in a FIFO queue and is woken by a release, not by polling.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::placement::{choose, could_ever_fit, Choice, Load};

mod filter;
mod messages;
mod placer;

pub(crate) use filter::filter;
pub use messages::*;
pub(crate) use placer::Placer;

/// How the reason of a step that waits for a worker to register ends
/// (see [`PlacementConfig::wait_for_workers`]).
pub(crate) const WAITING_FOR_WORKERS: &str = "(waiting for such a worker to register)";

/// A request waiting for capacity.
struct Waiter {
    /// The request.
    request: StepRequest,
    /// Where to send the placement.
    reply: oneshot::Sender<Placement>,
    /// When it started waiting.
    since: Instant,
}

/// The pool of workers.
pub struct Scheduler {
    /// Strategy chains.
    config: PlacementConfig,
    /// Every known worker by name.
    workers: HashMap<String, Candidate>,
    /// What is placed on each worker and not released.
    load: HashMap<String, Load>,
    /// Workers holding a volume of each artifact.
    locality: HashMap<String, HashSet<String>>,
    /// Requests waiting for capacity, oldest first.
    queue: VecDeque<Waiter>,
    /// Callers waiting for a worker to have nothing placed.
    idle_waiters: HashMap<String, Vec<oneshot::Sender<()>>>,
    /// Counters for metrics.
    stats: SchedulerStats,
}

impl Scheduler {
    /// A scheduler with the given strategy chains.
    pub fn new(config: PlacementConfig) -> Self {
        Scheduler {
            config,
            workers: HashMap::new(),
            load: HashMap::new(),
            locality: HashMap::new(),
            queue: VecDeque::new(),
            idle_waiters: HashMap::new(),
            stats: SchedulerStats::default(),
        }
    }

    /// Starts a Scheduler on a thread of its own, so placement decisions never
    /// wait behind HTTP handling or database I/O on the caller's thread.
    pub fn start_on_own_thread(config: PlacementConfig) -> Addr<Scheduler> {
        let arbiter = Arbiter::new();
        Scheduler::start_in_arbiter(&arbiter.handle(), move |_| Scheduler::new(config))
    }

    /// Tries to place a request: `Ok(Some)` placed, `Ok(None)` must wait
    /// (with the reason), `Err` no compatible worker.
    fn try_place(&mut self, req: &StepRequest) -> Result<Result<Placement, String>, EngineError> {
        self.try_place_with(req, None)
    }

    /// Takes the one-build workers' bindings as the shared ledger holds
    /// them (several web nodes bind workers).
    fn adopt_bindings(&mut self, bindings: &HashMap<String, i64>) {
        for (name, c) in self.workers.iter_mut() {
            if c.registration.identity.ephemeral {
                c.bound_build = bindings.get(name).copied();
            }
        }
    }

    /// [`Self::try_place`] against `loads` (the shared ledger's) instead of
    /// this Scheduler's own view when given.
    fn try_place_with(
        &mut self,
        req: &StepRequest,
        loads: Option<&HashMap<String, Load>>,
    ) -> Result<Result<Placement, String>, EngineError> {
        let loads = loads.unwrap_or(&self.load);
        let all: Vec<&Candidate> = self.workers.values().collect();
        let mut compatible = match filter(req, &all) {
            Ok(c) => c,
            // Scaling from zero: the step waits for such a worker.
            Err(e) if req.may_wait_for_workers && self.config.wait_for_workers.is_some() => {
                return Ok(Err(format!("{e} {WAITING_FOR_WORKERS}")));
            }
            Err(e) => return Err(e),
        };
        let chain = match req.chain_kind() {
            ChainKind::WithInputs => &self.config.with_inputs,
            ChainKind::WithoutInputs => &self.config.without_inputs,
            ChainKind::Checks => &self.config.checks,
        };
        // A step bigger than a worker's limits would wait forever: such
        // workers do not count, and if none is left the step fails now.
        let mut too_small = None;
        compatible.retain(
            |c| match could_ever_fit(chain, &c.registration.limits, &req.need) {
                Ok(()) => true,
                Err(why) => {
                    too_small = Some(why);
                    false
                }
            },
        );
        if compatible.is_empty() {
            return Err(EngineError::NoWorkers(format!(
                "no workers satisfying: platform {:?}, team {:?}: the step can never fit on any compatible worker: {}",
                req.platform,
                req.team,
                too_small.unwrap_or_default()
            )));
        }
        // A one-build worker bound to another build is busy for good: the
        // step waits for another worker (or for one to join).
        compatible.retain(|c| {
            !(c.registration.identity.ephemeral
                && c.bound_build.is_some_and(|b| Some(b) != req.build_id))
        });
        if compatible.is_empty() {
            return Ok(Err(
                "every compatible worker is a one-build worker bound to another build".into(),
            ));
        }
        // The worker sets of the step's inputs, looked up once per request.
        let holders: Vec<&HashSet<String>> = req
            .inputs
            .iter()
            .filter_map(|a| self.locality.get(a))
            .collect();
        let choices: Vec<Choice<'_>> = compatible
            .iter()
            .map(|c| {
                let name = c.registration.name.as_str();
                Choice {
                    limits: &c.registration.limits,
                    load: loads.get(name).copied().unwrap_or_default(),
                    local_inputs: holders.iter().filter(|w| w.contains(name)).count() as u32,
                }
            })
            .collect();
        match choose(chain, &choices, &req.need, &mut rand::thread_rng()) {
            Err(at_limit) => Ok(Err(at_limit.0)),
            Ok(i) => {
                let c = compatible[i];
                let binds = c.registration.identity.ephemeral;
                let placement = Placement {
                    worker: c.registration.name.clone(),
                    client: c.client.clone(),
                    reserved: req.need,
                    ledger: None,
                    decision: PlacementDecision {
                        strategies: chain
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                        candidates: compatible.len(),
                    },
                    binds,
                };
                if binds {
                    if let Some(w) = self.workers.get_mut(&placement.worker) {
                        w.bound_build = req.build_id;
                    }
                }
                self.load
                    .entry(placement.worker.clone())
                    .or_default()
                    .add(&req.need);
                *self
                    .stats
                    .placements
                    .entry(req.chain_kind().as_str())
                    .or_default() += 1;
                Ok(Ok(placement))
            }
        }
    }

    /// Places waiting requests that fit now, oldest first; drops abandoned ones
    /// and fails those that can no longer be satisfied at all.
    fn drain_queue(&mut self) {
        let mut still = VecDeque::new();
        while let Some(w) = self.queue.pop_front() {
            if w.reply.is_closed() {
                continue;
            }
            match self.try_place(&w.request) {
                Ok(Ok(p)) => {
                    let waited = w.since.elapsed();
                    self.stats.waited += 1;
                    self.stats.wait_seconds += waited.as_secs_f64();
                    crate::histograms::step_waited(waited);
                    if let Err(p) = w.reply.send(p) {
                        // Gave up at the last moment: hand the capacity back.
                        self.release(&p);
                    }
                }
                Ok(Err(_)) => still.push_back(w),
                // No longer satisfiable (workers gone): dropping the reply
                // tells the waiter, who asks again and gets the full reason.
                Err(_) => {}
            }
        }
        self.queue = still;
        self.stats.waiting = self.queue.len();
    }

    fn release(&mut self, p: &Placement) {
        let idle = match self.load.get_mut(&p.worker) {
            Some(l) => {
                l.sub(&p.reserved);
                l.is_zero()
            }
            None => true,
        };
        if idle {
            for tx in self.idle_waiters.remove(&p.worker).unwrap_or_default() {
                let _ = tx.send(());
            }
        }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Handler<WorkerUpdated> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: WorkerUpdated, _: &mut Context<Self>) {
        let mut update = msg.0;
        // A binding made here since the Registry last read the worker's row
        // stays (the same incarnation took a build's steps).
        if let Some(old) = self.workers.get(&update.registration.name) {
            if update.bound_build.is_none()
                && old.registration.incarnation == update.registration.incarnation
            {
                update.bound_build = old.bound_build;
            }
        }
        self.workers
            .insert(update.registration.name.clone(), update);
        self.drain_queue();
    }
}

impl Handler<WorkerRemoved> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: WorkerRemoved, _: &mut Context<Self>) {
        self.workers.remove(&msg.0);
        for set in self.locality.values_mut() {
            set.remove(&msg.0);
        }
        self.drain_queue();
    }
}

impl Handler<SelectWorker> for Scheduler {
    type Result = Result<Selection, EngineError>;
    fn handle(&mut self, msg: SelectWorker, _: &mut Context<Self>) -> Self::Result {
        let req = msg.0;
        // Waiters get released capacity first (every release drains the
        // queue), so capacity free now is capacity no waiter can use.
        match self.try_place(&req) {
            Err(e) => {
                self.stats.unsatisfiable += 1;
                Err(e)
            }
            Ok(Ok(p)) => Ok(Selection::Placed(p)),
            Ok(Err(reason)) => {
                let (tx, rx) = oneshot::channel();
                self.queue.push_back(Waiter {
                    request: req,
                    reply: tx,
                    since: Instant::now(),
                });
                self.stats.waiting = self.queue.len();
                Ok(Selection::Queued { ticket: rx, reason })
            }
        }
    }
}

impl Handler<DecideWith> for Scheduler {
    type Result = Result<Result<Placement, String>, EngineError>;
    fn handle(&mut self, msg: DecideWith, _: &mut Context<Self>) -> Self::Result {
        self.adopt_bindings(&msg.bindings);
        let decided = self.try_place_with(&msg.request, Some(&msg.loads));
        if decided.is_err() {
            self.stats.unsatisfiable += 1;
        }
        decided
    }
}

impl Handler<ReleasePlacement> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: ReleasePlacement, _: &mut Context<Self>) {
        self.release(&msg.0);
        self.drain_queue();
    }
}

impl Handler<RestorePlacement> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: RestorePlacement, _: &mut Context<Self>) {
        self.load
            .entry(msg.0.worker.clone())
            .or_default()
            .add(&msg.0.reserved);
    }
}

impl Handler<ArtifactLocality> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: ArtifactLocality, _: &mut Context<Self>) {
        if msg.present {
            self.locality
                .entry(msg.artifact)
                .or_default()
                .insert(msg.worker);
        } else if let Some(set) = self.locality.get_mut(&msg.artifact) {
            set.remove(&msg.worker);
            if set.is_empty() {
                self.locality.remove(&msg.artifact);
            }
        }
    }
}

impl Handler<WhenIdle> for Scheduler {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, msg: WhenIdle, _: &mut Context<Self>) -> Self::Result {
        if self.load.get(&msg.0).is_none_or(Load::is_zero) {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.idle_waiters.entry(msg.0).or_default().push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<GetStats> for Scheduler {
    type Result = MessageResult<GetStats>;
    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Self::Result {
        let mut stats = self.stats.clone();
        stats.load = self.load.clone();
        stats.waiting = self.queue.len();
        MessageResult(stats)
    }
}

impl Handler<Ping> for Scheduler {
    type Result = ();
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
}

/// Gives up a queued ticket without leaking capacity: a placement that
/// arrived meanwhile is released.
pub(crate) async fn abandon_ticket(
    mut ticket: oneshot::Receiver<Placement>,
    scheduler: &Addr<Scheduler>,
) {
    ticket.close();
    if let Ok(p) = ticket.try_recv() {
        scheduler.do_send(ReleasePlacement(p));
    }
}

#[cfg(test)]
mod tests;
