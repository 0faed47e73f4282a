//! Placement strategies: pure functions over candidate workers, chained in
//! the configured order. Limit strategies remove workers at their limits;
//! ordering strategies rank the rest, the first one being the primary key and
//! later ones breaking ties. Candidates are shuffled first, so equal workers
//! share the work.

use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use gantry_wire::worker_info::WorkerLimits;

/// One placement strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Prefer the worker already holding most of the step's inputs.
    VolumeLocality,
    /// Prefer the worker with the fewest containers placed on it.
    FewestBuildContainers,
    /// Pick at random.
    Random,
    /// Exclude workers at their `max_active_tasks` (task steps only).
    LimitActiveTasks,
    /// Exclude workers at their `max_containers`.
    LimitActiveContainers,
    /// Exclude workers that would go over their `max_volumes`.
    LimitActiveVolumes,
}

impl Strategy {
    /// Every strategy, for metrics and help texts.
    pub const ALL: [Strategy; 6] = [
        Strategy::VolumeLocality,
        Strategy::FewestBuildContainers,
        Strategy::Random,
        Strategy::LimitActiveTasks,
        Strategy::LimitActiveContainers,
        Strategy::LimitActiveVolumes,
    ];

    /// The configured name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::VolumeLocality => "volume-locality",
            Strategy::FewestBuildContainers => "fewest-build-containers",
            Strategy::Random => "random",
            Strategy::LimitActiveTasks => "limit-active-tasks",
            Strategy::LimitActiveContainers => "limit-active-containers",
            Strategy::LimitActiveVolumes => "limit-active-volumes",
        }
    }

    fn is_limit(&self) -> bool {
        matches!(
            self,
            Strategy::LimitActiveTasks
                | Strategy::LimitActiveContainers
                | Strategy::LimitActiveVolumes
        )
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Strategy::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Strategy::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown placement strategy {s:?} (known: {})",
                    names.join(", ")
                )
            })
    }
}

/// What is placed on a worker and not yet released, as the Scheduler counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Task steps.
    pub tasks: u32,
    /// Containers.
    pub containers: u32,
    /// Volumes.
    pub volumes: u32,
}

impl Load {
    /// Adds another load.
    pub fn add(&mut self, o: &Load) {
        self.tasks += o.tasks;
        self.containers += o.containers;
        self.volumes += o.volumes;
    }

    /// Removes another load (never below zero).
    pub fn sub(&mut self, o: &Load) {
        self.tasks = self.tasks.saturating_sub(o.tasks);
        self.containers = self.containers.saturating_sub(o.containers);
        self.volumes = self.volumes.saturating_sub(o.volumes);
    }

    /// Whether nothing is placed.
    pub fn is_zero(&self) -> bool {
        *self == Load::default()
    }
}

/// A worker as the strategies see it.
#[derive(Debug, Clone)]
pub(crate) struct Choice<'a> {
    /// Its limits.
    pub limits: &'a WorkerLimits,
    /// What is placed on it now.
    pub load: Load,
    /// How many of the step's inputs it already holds.
    pub local_inputs: u32,
}

/// Why every candidate was excluded by a limit strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllAtLimit(pub String);

/// Chooses among candidates; returns the index of the chosen one, or why
/// they are all at their limits. `need` is what the step would add.
pub(crate) fn choose<R: Rng>(
    chain: &[Strategy],
    candidates: &[Choice<'_>],
    need: &Load,
    rng: &mut R,
) -> Result<usize, AllAtLimit> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.shuffle(rng);
    let mut excluded: Vec<String> = Vec::new();
    for s in chain.iter().filter(|s| s.is_limit()) {
        let before = order.len();
        order.retain(|&i| fits(*s, &candidates[i], need));
        if order.len() < before {
            excluded.push(format!(
                "{} at their {}",
                before - order.len(),
                limit_name(*s)
            ));
        }
    }
    if order.is_empty() {
        return Err(AllAtLimit(format!(
            "all {} compatible workers are at their limits ({})",
            candidates.len(),
            excluded.join(", ")
        )));
    }
    let ordering: Vec<Strategy> = chain.iter().copied().filter(|s| !s.is_limit()).collect();
    let mut best: Option<(usize, [u64; MAX_KEYS])> = None;
    for i in order {
        let c = &candidates[i];
        let mut key = [0u64; MAX_KEYS];
        for (k, s) in key.iter_mut().zip(&ordering) {
            *k = match s {
                // Higher locality is better: invert.
                Strategy::VolumeLocality => u64::from(u32::MAX - c.local_inputs),
                Strategy::FewestBuildContainers => u64::from(c.load.containers),
                Strategy::Random => rng.gen(),
                _ => 0,
            };
        }
        // Strictly smaller only: the first of equal keys (in shuffled order) wins ties.
        if best.as_ref().is_none_or(|(_, b)| key < *b) {
            best = Some((i, key));
        }
    }
    Ok(best.map(|(i, _)| i).expect("at least one candidate"))
}

/// Most ordering strategies a chain can hold (every strategy once).
const MAX_KEYS: usize = Strategy::ALL.len();

fn limit_name(s: Strategy) -> &'static str {
    match s {
        Strategy::LimitActiveTasks => "max_active_tasks",
        Strategy::LimitActiveContainers => "max_containers",
        _ => "max_volumes",
    }
}

fn fits(s: Strategy, c: &Choice<'_>, need: &Load) -> bool {
    let within =
        |max: Option<u32>, now: u32, add: u32| max.is_none_or(|m| add == 0 || now + add <= m);
    match s {
        Strategy::LimitActiveTasks => within(c.limits.max_active_tasks, c.load.tasks, need.tasks),
        Strategy::LimitActiveContainers => {
            within(c.limits.max_containers, c.load.containers, need.containers)
        }
        Strategy::LimitActiveVolumes => within(c.limits.max_volumes, c.load.volumes, need.volumes),
        _ => true,
    }
}

/// Whether a step could ever be placed on a worker with these limits (on an
/// idle worker), for the limits the chain enforces; `Err` names the limit it
/// can never fit under.
pub(crate) fn could_ever_fit(
    chain: &[Strategy],
    limits: &WorkerLimits,
    need: &Load,
) -> Result<(), String> {
    let idle = Choice {
        limits,
        load: Load::default(),
        local_inputs: 0,
    };
    for s in chain.iter().filter(|s| s.is_limit()) {
        if !fits(*s, &idle, need) {
            let (wanted, max) = match s {
                Strategy::LimitActiveTasks => (need.tasks, limits.max_active_tasks),
                Strategy::LimitActiveContainers => (need.containers, limits.max_containers),
                _ => (need.volumes, limits.max_volumes),
            };
            return Err(format!(
                "it needs {wanted} where {} is {}",
                limit_name(*s),
                max.unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// Parses a comma-separated chain (`volume-locality,fewest-build-containers`).
pub fn parse_chain(s: &str) -> Result<Vec<Strategy>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Strategy::from_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn limits(tasks: Option<u32>, containers: Option<u32>, volumes: Option<u32>) -> WorkerLimits {
        WorkerLimits {
            max_active_tasks: tasks,
            max_containers: containers,
            max_volumes: volumes,
        }
    }

    fn cand<'a>(_name: &'a str, l: &'a WorkerLimits, load: Load, local: u32) -> Choice<'a> {
        Choice {
            limits: l,
            load,
            local_inputs: local,
        }
    }

    fn load(tasks: u32, containers: u32, volumes: u32) -> Load {
        Load {
            tasks,
            containers,
            volumes,
        }
    }

    const TASK: Load = Load {
        tasks: 1,
        containers: 1,
        volumes: 2,
    };

    #[test]
    fn volume_locality_prefers_the_worker_with_most_inputs() {
        let l = WorkerLimits::default();
        let c = [
            cand("a", &l, load(0, 0, 0), 1),
            cand("b", &l, load(0, 9, 0), 3),
            cand("c", &l, load(0, 0, 0), 0),
        ];
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..20 {
            assert_eq!(
                choose(&[Strategy::VolumeLocality], &c, &TASK, &mut rng),
                Ok(1)
            );
        }
    }

    #[test]
    fn fewest_build_containers_prefers_the_emptiest_worker() {
        let l = WorkerLimits::default();
        let c = [
            cand("a", &l, load(0, 5, 0), 0),
            cand("b", &l, load(0, 2, 0), 0),
            cand("c", &l, load(0, 7, 0), 0),
        ];
        let mut rng = StdRng::seed_from_u64(2);
        assert_eq!(
            choose(&[Strategy::FewestBuildContainers], &c, &TASK, &mut rng),
            Ok(1)
        );
    }

    #[test]
    fn later_strategies_break_ties_of_earlier_ones() {
        let l = WorkerLimits::default();
        // a and b tie on locality; b has fewer containers.
        let c = [
            cand("a", &l, load(0, 4, 0), 2),
            cand("b", &l, load(0, 1, 0), 2),
            cand("c", &l, load(0, 0, 0), 1),
        ];
        let chain = [Strategy::VolumeLocality, Strategy::FewestBuildContainers];
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..20 {
            assert_eq!(choose(&chain, &c, &TASK, &mut rng), Ok(1));
        }
        // Reversed chain: containers first, so c wins.
        let chain = [Strategy::FewestBuildContainers, Strategy::VolumeLocality];
        assert_eq!(choose(&chain, &c, &TASK, &mut rng), Ok(2));
    }

    #[test]
    fn full_ties_are_broken_by_the_shuffle_so_every_worker_gets_work() {
        let l = WorkerLimits::default();
        let c = [
            cand("a", &l, load(0, 1, 0), 0),
            cand("b", &l, load(0, 1, 0), 0),
            cand("c", &l, load(0, 1, 0), 0),
        ];
        let mut rng = StdRng::seed_from_u64(4);
        let mut seen = [0u32; 3];
        for _ in 0..300 {
            seen[choose(&[Strategy::FewestBuildContainers], &c, &TASK, &mut rng).unwrap()] += 1;
        }
        assert!(
            seen.iter().all(|&n| n > 60),
            "uneven tie-breaking: {seen:?}"
        );
    }

    #[test]
    fn random_spreads_over_all_candidates() {
        let l = WorkerLimits::default();
        let c = [
            cand("a", &l, load(0, 0, 0), 0),
            cand("b", &l, load(0, 50, 0), 9),
        ];
        let mut rng = StdRng::seed_from_u64(5);
        let mut seen = [0u32; 2];
        for _ in 0..200 {
            seen[choose(
                &[Strategy::Random, Strategy::VolumeLocality],
                &c,
                &TASK,
                &mut rng,
            )
            .unwrap()] += 1;
        }
        assert!(seen[0] > 50 && seen[1] > 50, "{seen:?}");
    }

    #[test]
    fn limit_active_tasks_excludes_workers_at_their_limit() {
        let full = limits(Some(2), None, None);
        let free = limits(Some(2), None, None);
        let c = [
            cand("a", &full, load(2, 2, 0), 0),
            cand("b", &free, load(1, 1, 0), 0),
        ];
        let mut rng = StdRng::seed_from_u64(6);
        assert_eq!(
            choose(&[Strategy::LimitActiveTasks], &c, &TASK, &mut rng),
            Ok(1)
        );
        let c = [
            cand("a", &full, load(2, 2, 0), 0),
            cand("b", &free, load(2, 1, 0), 0),
        ];
        let err = choose(&[Strategy::LimitActiveTasks], &c, &TASK, &mut rng).unwrap_err();
        assert!(err.0.contains("2 at their max_active_tasks"), "{}", err.0);
        // A check step needs no task slot.
        let check = Load {
            tasks: 0,
            containers: 1,
            volumes: 0,
        };
        assert!(choose(&[Strategy::LimitActiveTasks], &c, &check, &mut rng).is_ok());
    }

    #[test]
    fn limit_active_containers_and_volumes_count_what_the_step_adds() {
        let l = limits(None, Some(3), Some(4));
        let c = [
            cand("a", &l, load(0, 3, 0), 0),
            cand("b", &l, load(0, 2, 3), 0),
            cand("c", &l, load(0, 2, 2), 0),
        ];
        let mut rng = StdRng::seed_from_u64(7);
        // a has no container slot; b has one volume slot but the step needs two.
        let chain = [
            Strategy::LimitActiveContainers,
            Strategy::LimitActiveVolumes,
        ];
        for _ in 0..10 {
            assert_eq!(choose(&chain, &c, &TASK, &mut rng), Ok(2));
        }
        // Without the limit strategies, limits are not enforced.
        assert!(choose(&[Strategy::FewestBuildContainers], &c, &TASK, &mut rng).is_ok());
    }

    #[test]
    fn chains_parse_and_unknown_names_are_named() {
        assert_eq!(
            parse_chain("volume-locality, fewest-build-containers").unwrap(),
            vec![Strategy::VolumeLocality, Strategy::FewestBuildContainers]
        );
        assert!(parse_chain("nearest").unwrap_err().contains("\"nearest\""));
    }
}
