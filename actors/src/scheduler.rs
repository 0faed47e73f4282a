//! The Scheduler actor: the pool of workers a step can be placed on.
//!
//! It filters workers by hard constraints, then chains the configured
//! placement strategies. It owns the live load of every worker (tasks,
//! containers, volumes placed and not yet released) and changes it in the
//! same handler that decides, so concurrent placements can never exceed a
//! limit. When compatible workers exist but all are at their limits, the
//! request waits in a FIFO queue and is woken by a release, not by polling.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::placement::{choose, could_ever_fit, Choice, Load, Strategy};
use crate::runtime::Worker;
use crate::worker_info::{versions_compatible, WorkerRegistration, WorkerState};

/// This web node's version; workers must run a compatible one.
const WEB_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the Scheduler knows of one worker.
#[derive(Clone)]
pub struct Candidate {
    /// The worker's registration (platform, tags, team, limits).
    pub registration: WorkerRegistration,
    /// Its state; only `running` workers take work.
    pub state: WorkerState,
    /// The client to reach it.
    pub client: Arc<dyn Worker>,
}

/// Strategy chains by kind of step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementConfig {
    /// Steps with inputs (tasks with inputs, puts).
    pub with_inputs: Vec<Strategy>,
    /// Steps without inputs.
    pub without_inputs: Vec<Strategy>,
    /// Check steps.
    pub checks: Vec<Strategy>,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            with_inputs: vec![Strategy::VolumeLocality, Strategy::FewestBuildContainers],
            without_inputs: vec![Strategy::FewestBuildContainers],
            checks: vec![Strategy::FewestBuildContainers],
        }
    }
}

/// Which chain a step uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainKind {
    /// `with_inputs`.
    WithInputs,
    /// `without_inputs`.
    WithoutInputs,
    /// `checks`.
    Checks,
}

impl ChainKind {
    /// Name used in metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ChainKind::WithInputs => "with_inputs",
            ChainKind::WithoutInputs => "without_inputs",
            ChainKind::Checks => "checks",
        }
    }
}

/// Constraints and needs of a step.
#[derive(Debug, Clone, Default)]
pub struct StepRequest {
    /// Team running the step.
    pub team: String,
    /// Platform the step needs.
    pub platform: String,
    /// Tags the worker must have (all of them).
    pub tags: Vec<String>,
    /// Artifact ids of the step's inputs (for volume locality).
    pub inputs: Vec<String>,
    /// Whether it is a check step.
    pub is_check: bool,
    /// Resource type the worker must provide (get, put and check steps).
    pub resource_type: Option<String>,
    /// Workers not to use: they were lost while an earlier attempt ran there.
    pub avoid: Vec<String>,
    /// What the step will hold on its worker until released.
    pub need: Load,
}

impl StepRequest {
    fn chain_kind(&self) -> ChainKind {
        if self.is_check {
            ChainKind::Checks
        } else if self.inputs.is_empty() {
            ChainKind::WithoutInputs
        } else {
            ChainKind::WithInputs
        }
    }
}

/// A step placed on a worker; hand it back with [`ReleasePlacement`].
#[derive(Clone)]
pub struct Placement {
    /// Worker name.
    pub worker: String,
    /// Client of that worker.
    pub client: Arc<dyn Worker>,
    /// What was reserved on the worker.
    pub reserved: Load,
}

/// The answer to [`SelectWorker`].
pub enum Selection {
    /// Placed now.
    Placed(Placement),
    /// Every compatible worker is at its limits: wait on `ticket`. Dropping
    /// the ticket gives up; see [`abandon_ticket`].
    Queued {
        /// Resolves with the placement once capacity is released.
        ticket: oneshot::Receiver<Placement>,
        /// What the step waits for, for the build log.
        reason: String,
    },
}

/// Asks for a worker for a step.
#[derive(Message)]
#[rtype(result = "Result<Selection, EngineError>")]
pub struct SelectWorker(pub StepRequest);

/// Releases what a placement reserved.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReleasePlacement(pub Placement);

/// Holds a placement made before this Scheduler started (a build that a
/// restarted web node took over), so limits count it again.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RestorePlacement(pub Placement);

/// The Registry tells the Scheduler a worker's registration or state changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerUpdated(pub Candidate);

/// The Registry tells the Scheduler a worker is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct WorkerRemoved(pub String);

/// An artifact now has (or no longer has) a volume on a worker.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ArtifactLocality {
    /// The artifact.
    pub artifact: String,
    /// The worker.
    pub worker: String,
    /// Whether the volume exists now.
    pub present: bool,
}

/// Resolves when nothing is placed on a worker (for landing and retiring).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WhenIdle(pub String);

/// Live load by worker and placement statistics, for the API and metrics.
#[derive(Message)]
#[rtype(result = "SchedulerStats")]
pub struct GetStats;

/// Answers at once: whether the Scheduler's mailbox is served (readiness).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ping;

/// What [`GetStats`] answers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerStats {
    /// Load by worker.
    pub load: HashMap<String, Load>,
    /// Steps waiting for capacity now.
    pub waiting: usize,
    /// Placements by chain kind.
    pub placements: HashMap<&'static str, u64>,
    /// Placements that had to wait.
    pub waited: u64,
    /// Total seconds spent waiting by placed steps.
    pub wait_seconds: f64,
    /// Steps that failed at once because no worker was compatible.
    pub unsatisfiable: u64,
}

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
        let all: Vec<&Candidate> = self.workers.values().collect();
        let mut compatible = filter(req, &all)?;
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
                    name,
                    limits: &c.registration.limits,
                    load: self.load.get(name).copied().unwrap_or_default(),
                    local_inputs: holders.iter().filter(|w| w.contains(name)).count() as u32,
                }
            })
            .collect();
        match choose(chain, &choices, &req.need, &mut rand::thread_rng()) {
            Err(at_limit) => Ok(Err(at_limit.0)),
            Ok(i) => {
                let c = compatible[i];
                let placement = Placement {
                    worker: c.registration.name.clone(),
                    client: c.client.clone(),
                    reserved: req.need,
                };
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
        self.workers.insert(msg.0.registration.name.clone(), msg.0);
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
pub async fn abandon_ticket(mut ticket: oneshot::Receiver<Placement>, scheduler: &Addr<Scheduler>) {
    ticket.close();
    if let Ok(p) = ticket.try_recv() {
        scheduler.do_send(ReleasePlacement(p));
    }
}

/// Applies the hard filters; when none passes, the error names every
/// constraint and how many workers each excluded.
pub fn filter<'a>(
    c: &StepRequest,
    all: &[&'a Candidate],
) -> Result<Vec<&'a Candidate>, EngineError> {
    let mut not_running: HashMap<WorkerState, usize> = HashMap::new();
    let mut wrong_platform = 0;
    let mut missing_tags = 0;
    let mut tagged_only = 0;
    let mut other_team = 0;
    let mut no_resource_type = 0;
    let mut incompatible = 0;
    let mut lost_earlier = 0;
    let mut passing = Vec::new();
    for w in all {
        let r = &w.registration;
        if w.state != WorkerState::Running {
            *not_running.entry(w.state).or_default() += 1;
        } else if c.avoid.contains(&r.name) {
            lost_earlier += 1;
        } else if r.version != WEB_VERSION && !versions_compatible(&r.version, WEB_VERSION) {
            incompatible += 1;
        } else if r.platform != c.platform {
            wrong_platform += 1;
        } else if !c.tags.iter().all(|t| r.tags.contains(t)) {
            missing_tags += 1;
        } else if c.tags.is_empty() && !r.tags.is_empty() {
            tagged_only += 1;
        } else if r.team.as_deref().is_some_and(|t| t != c.team) {
            other_team += 1;
        } else if c
            .resource_type
            .as_ref()
            .is_some_and(|t| !r.resource_types.contains(t))
        {
            no_resource_type += 1;
        } else {
            passing.push(*w);
        }
    }
    // A team with compatible workers of its own does not use the general pool.
    if passing.iter().any(|w| w.registration.team.is_some()) {
        passing.retain(|w| w.registration.team.is_some());
    }
    if !passing.is_empty() {
        return Ok(passing);
    }
    let mut wanted = vec![format!("platform {:?}", c.platform)];
    if !c.tags.is_empty() {
        wanted.push(format!("tags {:?}", c.tags));
    }
    wanted.push(format!("team {:?}", c.team));
    if let Some(t) = &c.resource_type {
        wanted.push(format!("resource type {t:?}"));
    }
    let mut why = vec![];
    let mut states: Vec<_> = not_running.into_iter().collect();
    states.sort_by_key(|(s, _)| s.as_str());
    for (state, n) in states {
        why.push(format!("{n} {}", state.as_str()));
    }
    for (n, reason) in [
        (
            wrong_platform,
            format!("with another platform than {:?}", c.platform),
        ),
        (missing_tags, format!("without tags {:?}", c.tags)),
        (
            tagged_only,
            "tagged (they take only tagged steps)".to_string(),
        ),
        (other_team, format!("of a team other than {:?}", c.team)),
        (
            no_resource_type,
            format!(
                "without resource type {:?}",
                c.resource_type.as_deref().unwrap_or_default()
            ),
        ),
        (
            lost_earlier,
            "lost during an earlier attempt of this step".to_string(),
        ),
        (
            incompatible,
            format!("running a version incompatible with the web node's {WEB_VERSION}"),
        ),
    ] {
        if n > 0 {
            why.push(format!("{n} {reason}"));
        }
    }
    let why = if all.is_empty() {
        "no workers are registered".to_string()
    } else {
        format!(
            "{} worker{} registered, excluded: {}",
            all.len(),
            if all.len() == 1 { "" } else { "s" },
            why.join(", ")
        )
    };
    Err(EngineError::NoWorkers(format!(
        "no workers satisfying: {}: {why}",
        wanted.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::DetachedWorker;
    use crate::worker_info::WorkerLimits;

    pub(crate) fn candidate(
        name: &str,
        platform: &str,
        tags: &[&str],
        team: Option<&str>,
        limits: WorkerLimits,
    ) -> Candidate {
        Candidate {
            registration: WorkerRegistration {
                platform: platform.into(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                team: team.map(str::to_string),
                limits,
                ..crate::testing::registration(name)
            },
            state: WorkerState::Running,
            client: Arc::new(DetachedWorker(name.into())),
        }
    }

    fn task(team: &str, platform: &str, tags: &[&str]) -> StepRequest {
        StepRequest {
            team: team.into(),
            platform: platform.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            need: Load {
                tasks: 1,
                containers: 1,
                volumes: 1,
            },
            ..Default::default()
        }
    }

    #[test]
    fn filters_name_every_constraint_and_what_each_excluded() {
        let mut stalled = candidate("s", "linux", &[], None, WorkerLimits::default());
        stalled.state = WorkerState::Stalled;
        let all = [
            candidate("a", "linux", &[], None, WorkerLimits::default()),
            candidate("b", "windows", &[], None, WorkerLimits::default()),
            candidate("c", "linux", &["db"], None, WorkerLimits::default()),
            stalled,
        ];
        let refs: Vec<&Candidate> = all.iter().collect();
        let err = filter(&task("main", "linux", &["gpu"]), &refs)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            "no workers satisfying: platform \"linux\", tags [\"gpu\"], team \"main\": 4 workers registered, excluded: 1 stalled, 1 with another platform than \"linux\", 2 without tags [\"gpu\"]"
        );
        // Untagged steps avoid tagged workers; tagged steps need every tag.
        let ok = filter(&task("main", "linux", &[]), &refs).unwrap();
        assert_eq!(
            ok.iter()
                .map(|c| c.registration.name.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        let ok = filter(&task("main", "linux", &["db"]), &refs).unwrap();
        assert_eq!(
            ok.iter()
                .map(|c| c.registration.name.as_str())
                .collect::<Vec<_>>(),
            ["c"]
        );
    }

    #[test]
    fn resource_types_and_versions_are_hard_constraints() {
        let mut git = candidate("git", "linux", &[], None, WorkerLimits::default());
        git.registration.resource_types = vec!["git".into()];
        let mut old = candidate("old", "linux", &[], None, WorkerLimits::default());
        old.registration.version = "0.0.1".into();
        old.registration.resource_types = vec!["git".into(), "s3".into()];
        let plain = candidate("plain", "linux", &[], None, WorkerLimits::default());
        let all = [git, old, plain];
        let refs: Vec<&Candidate> = all.iter().collect();
        let mut step = task("main", "linux", &[]);
        step.resource_type = Some("git".into());
        let ok = filter(&step, &refs).unwrap();
        assert_eq!(
            ok.iter()
                .map(|c| c.registration.name.as_str())
                .collect::<Vec<_>>(),
            ["git"]
        );
        step.resource_type = Some("s3".into());
        let err = filter(&step, &refs).err().unwrap().to_string();
        assert!(err.contains("resource type \"s3\""), "{err}");
        assert!(err.contains("2 without resource type \"s3\""), "{err}");
        assert!(err.contains("1 running a version incompatible"), "{err}");
    }

    #[test]
    fn team_workers_serve_only_their_team_and_replace_the_general_pool() {
        let all = [
            candidate("general", "linux", &[], None, WorkerLimits::default()),
            candidate("red", "linux", &[], Some("red"), WorkerLimits::default()),
        ];
        let refs: Vec<&Candidate> = all.iter().collect();
        let names = |r: Vec<&Candidate>| {
            r.iter()
                .map(|c| c.registration.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(filter(&task("red", "linux", &[]), &refs).unwrap()),
            ["red"]
        );
        assert_eq!(
            names(filter(&task("blue", "linux", &[]), &refs).unwrap()),
            ["general"]
        );
    }

    #[actix_rt::test]
    async fn limits_are_exact_and_waiters_wake_on_release() {
        let limits = WorkerLimits {
            max_active_tasks: Some(2),
            ..Default::default()
        };
        let scheduler = Scheduler::new(PlacementConfig {
            with_inputs: vec![Strategy::LimitActiveTasks, Strategy::FewestBuildContainers],
            without_inputs: vec![Strategy::LimitActiveTasks, Strategy::FewestBuildContainers],
            checks: vec![Strategy::Random],
        })
        .start();
        for n in ["w1", "w2"] {
            scheduler
                .send(WorkerUpdated(candidate(
                    n,
                    "linux",
                    &[],
                    None,
                    limits.clone(),
                )))
                .await
                .unwrap();
        }
        // 10 concurrent requests: 4 placed, 6 queued.
        let answers = futures::future::join_all(
            (0..10).map(|_| scheduler.send(SelectWorker(task("main", "linux", &[])))),
        )
        .await;
        let mut placed = Vec::new();
        let mut tickets = Vec::new();
        for a in answers {
            match a.unwrap().unwrap() {
                Selection::Placed(p) => placed.push(p),
                Selection::Queued { ticket, reason } => {
                    assert!(reason.contains("2 at their max_active_tasks"), "{reason}");
                    tickets.push(ticket);
                }
            }
        }
        assert_eq!((placed.len(), tickets.len()), (4, 6));
        let per = |p: &[Placement], w: &str| p.iter().filter(|p| p.worker == w).count();
        assert_eq!((per(&placed, "w1"), per(&placed, "w2")), (2, 2));
        let stats = scheduler.send(GetStats).await.unwrap();
        assert_eq!(stats.waiting, 6);
        // Releasing one wakes exactly the oldest waiter, on the freed worker.
        let freed = placed.remove(0);
        let worker = freed.worker.clone();
        scheduler.send(ReleasePlacement(freed)).await.unwrap();
        let first = tickets.remove(0).await.expect("oldest waiter placed");
        assert_eq!(first.worker, worker);
        assert_eq!(scheduler.send(GetStats).await.unwrap().waiting, 5);
        // An abandoned ticket gives back anything it was handed.
        let abandoned = tickets.remove(0);
        abandon_ticket(abandoned, &scheduler).await;
        scheduler.send(ReleasePlacement(first)).await.unwrap();
        let next = tickets
            .remove(0)
            .await
            .expect("next waiter placed, skipping the abandoned one");
        let stats = scheduler.send(GetStats).await.unwrap();
        assert_eq!(stats.load["w1"].tasks + stats.load["w2"].tasks, 4);
        assert!(stats.load.values().all(|l| l.tasks <= 2));
        drop(next);
    }

    #[actix_rt::test]
    async fn a_step_bigger_than_every_limit_fails_at_once_instead_of_waiting() {
        let limits = WorkerLimits {
            max_volumes: Some(2),
            ..Default::default()
        };
        let scheduler = Scheduler::new(PlacementConfig {
            with_inputs: vec![Strategy::LimitActiveVolumes],
            without_inputs: vec![Strategy::LimitActiveVolumes],
            checks: vec![Strategy::LimitActiveVolumes],
        })
        .start();
        scheduler
            .send(WorkerUpdated(candidate("w", "linux", &[], None, limits)))
            .await
            .unwrap();
        let mut big = task("main", "linux", &[]);
        big.need.volumes = 3;
        let err = match scheduler.send(SelectWorker(big)).await.unwrap() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a step needing 3 volumes was accepted by a worker with max_volumes 2"),
        };
        assert!(err.contains("it needs 3 where max_volumes is 2"), "{err}");
    }

    #[actix_rt::test]
    async fn when_idle_resolves_after_the_last_release() {
        let scheduler = Scheduler::new(PlacementConfig::default()).start();
        scheduler
            .send(WorkerUpdated(candidate(
                "w",
                "linux",
                &[],
                None,
                WorkerLimits::default(),
            )))
            .await
            .unwrap();
        let Selection::Placed(p) = scheduler
            .send(SelectWorker(task("main", "linux", &[])))
            .await
            .unwrap()
            .unwrap()
        else {
            panic!("expected a placement");
        };
        let idle = scheduler.send(WhenIdle("w".into()));
        let mut idle = Box::pin(idle);
        assert!(futures::poll!(&mut idle).is_pending());
        scheduler.send(ReleasePlacement(p)).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), idle)
            .await
            .unwrap()
            .unwrap();
    }
}
