//! Resolving a job's inputs to versions, with Concourse's rules:
//! - a pinned input (the step's `version: {...}`, a pin by hand, the
//!   resource's `version:`) takes that version alone;
//! - `version: latest` (the default) takes the newest version, `every` the
//!   oldest one newer than the last its job used (else that last one);
//! - with `passed: [J, ...]` and `latest`, candidates come by upstream
//!   build, as Concourse's resolver takes them: the succeeded builds of the
//!   first J newest first, within each its outputs (puts) before its
//!   inputs (gets), each version once;
//! - disabled versions are never taken;
//! - `passed: [J, ...]`: the version went through a succeeded build of
//!   each J (as an input or an output), and inputs that share a job J must
//!   have gone through the *same* build of J (the consistency rule).
//!
//! Versions are read a page at a time, newest (or, for `every`, oldest;
//! for `passed`, by upstream build) first, and candidates are tried in that
//! order with backtracking: the first combination found is the newest that
//! satisfies every input. The
//! work is bounded ([`BUDGET`] candidates per resolution), so a job whose
//! inputs cannot agree never holds the scheduler: it is unsatisfied,
//! saying so.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use futures::future::LocalBoxFuture;
use futures::FutureExt;

use super::inputs::JobInput;
use crate::db::{Bound, BuildCursor, Db, JobAt, OrderedVersion, VersionsAt};
use crate::error::EngineError;

/// Versions read per page.
const PAGE: i64 = 50;

/// Candidates tried per resolution at most.
pub(super) const BUDGET: usize = 5_000;

/// How a job's inputs resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Every input has a version: step name → version (JSON text).
    Resolved(BTreeMap<String, String>),
    /// No combination satisfies the inputs: (input, why) for the inputs
    /// that could not be satisfied.
    Unsatisfied(Vec<(String, String)>),
}

/// What scheduling decided for a job, kept for `gantry why`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decision {
    /// When it was decided (unix ms).
    pub at: i64,
    /// The versions chosen, by input (none when unsatisfied).
    pub inputs: BTreeMap<String, serde_json::Value>,
    /// Why each unsatisfied input could not be satisfied.
    pub unsatisfied: BTreeMap<String, String>,
    /// What was done: `triggered build N`, `no new version of a trigger
    /// input`, `paused`, ...
    pub outcome: String,
}

/// The job being resolved and where its pipeline is.
struct Job<'a> {
    db: &'a Db,
    at: JobAt<'a>,
    pipeline_id: i64,
}

/// Resolves the `inputs` of job `at` of pipeline `pipeline_id`.
pub(crate) async fn resolve(
    db: &Db,
    at: JobAt<'_>,
    pipeline_id: i64,
    inputs: &[JobInput],
) -> Result<Resolution, EngineError> {
    let job = Job {
        db,
        at,
        pipeline_id,
    };
    let mut search = Search {
        chosen: BTreeMap::new(),
        budget: BUDGET,
        why: BTreeMap::new(),
    };
    if search.run(&job, inputs, 0, HashMap::new()).await? {
        return Ok(Resolution::Resolved(search.chosen));
    }
    let mut why: Vec<(String, String)> = search.why.into_iter().collect();
    if why.is_empty() {
        why.push((
            String::new(),
            format!("gave up after trying {BUDGET} combinations of versions"),
        ));
    }
    Ok(Resolution::Unsatisfied(why))
}

/// The state of one backtracking search.
struct Search {
    chosen: BTreeMap<String, String>,
    budget: usize,
    /// Why inputs found no version, by input.
    why: BTreeMap<String, String>,
}

impl Search {
    /// Finds versions for `inputs[i..]` given the builds each upstream job
    /// is held to by the versions chosen so far (`held`); true when found
    /// (then `chosen` holds them).
    fn run<'a>(
        &'a mut self,
        job: &'a Job<'a>,
        inputs: &'a [JobInput],
        i: usize,
        held: HashMap<String, HashSet<i64>>,
    ) -> LocalBoxFuture<'a, Result<bool, EngineError>> {
        async move {
            let Some(input) = inputs.get(i) else {
                return Ok(true);
            };
            let mut candidates = Candidates::new(job, input, &held).await?;
            let mut any = false;
            let mut through_all = false;
            while let Some(c) = candidates.next(job).await? {
                any = true;
                if self.budget == 0 {
                    return Ok(false);
                }
                self.budget -= 1;
                let Some(next) = hold(job, input, &c.version, &held).await? else {
                    continue;
                };
                through_all = true;
                self.chosen.insert(input.name.clone(), c.version.clone());
                if self.run(job, inputs, i + 1, next).await? {
                    return Ok(true);
                }
                self.chosen.remove(&input.name);
            }
            let why = if !any {
                candidates.none_why(input)
            } else if !through_all {
                format!(
                    "no version of {:?} went through the same builds of {} as the other inputs' versions",
                    input.resource,
                    names(&input.passed)
                )
            } else {
                return Ok(false);
            };
            self.why.entry(input.name.clone()).or_insert(why);
            Ok(false)
        }
        .boxed_local()
    }
}

/// The builds each upstream job is held to once `version` is chosen for
/// `input`: the builds of each of its `passed` jobs that had it, within
/// those already `held`; none when some job has no such build.
async fn hold(
    job: &Job<'_>,
    input: &JobInput,
    version: &str,
    held: &HashMap<String, HashSet<i64>>,
) -> Result<Option<HashMap<String, HashSet<i64>>>, EngineError> {
    let mut next = held.clone();
    for upstream in &input.passed {
        let at = JobAt {
            job: upstream,
            ..job.at
        };
        let mut builds: HashSet<i64> = job
            .db
            .versions()
            .passed_builds(at, &input.resource, version)
            .await?
            .into_iter()
            .collect();
        if let Some(before) = held.get(upstream) {
            builds.retain(|b| before.contains(b));
        }
        if builds.is_empty() {
            return Ok(None);
        }
        next.insert(upstream.clone(), builds);
    }
    Ok(Some(next))
}

/// `"a", "b"` for the jobs named.
fn names(jobs: &[String]) -> String {
    jobs.iter()
        .map(|j| format!("{j:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate versions of one input, in the order they are tried, read
/// a page at a time.
struct Candidates<'a> {
    input: &'a JobInput,
    /// A pinned version, tried alone.
    pinned: Option<Option<OrderedVersion>>,
    buffer: VecDeque<OrderedVersion>,
    bound: Bound,
    /// Set once no page is left.
    done: bool,
    /// For `every`: the last version its job used, tried when none is newer.
    fallback: Option<i64>,
    /// For `passed` with `latest`: where the walk of the upstream job's
    /// builds is (none: not begun), and the versions already given.
    walk: Option<BuildCursor>,
    seen: HashSet<String>,
    /// The builds of the first upstream job the inputs chosen before hold
    /// this one to: the walk takes only theirs (Concourse's resolver
    /// takes a version from one build).
    held: Option<HashSet<i64>>,
}

impl<'a> Candidates<'a> {
    async fn new(
        job: &Job<'_>,
        input: &'a JobInput,
        held: &HashMap<String, HashSet<i64>>,
    ) -> Result<Candidates<'a>, EngineError> {
        let versions = VersionsAt {
            scope: &input.scope,
            config: &input.config,
        };
        let pinned = match &input.pin {
            Some(pin) => {
                let v = pin.version();
                let disabled = job
                    .db
                    .versions()
                    .version_disabled(job.pipeline_id, &input.resource, v)
                    .await?;
                let order = job
                    .db
                    .versions()
                    .version_order(versions, v)
                    .await?
                    .unwrap_or(0);
                Some((!disabled).then(|| OrderedVersion {
                    version: v.to_string(),
                    check_order: order,
                }))
            }
            None => None,
        };
        let (bound, fallback) = if input.every && pinned.is_none() {
            let last = job
                .db
                .versions()
                .last_used_order(job.at, &input.name, versions)
                .await?;
            (Bound::After(last.unwrap_or(0)), last)
        } else {
            (Bound::Before(None), None)
        };
        Ok(Candidates {
            input,
            pinned,
            buffer: VecDeque::new(),
            bound,
            done: false,
            fallback,
            walk: None,
            seen: HashSet::new(),
            held: input.passed.first().and_then(|j| held.get(j)).cloned(),
        })
    }

    /// The next candidate, if any.
    async fn next(&mut self, job: &Job<'_>) -> Result<Option<OrderedVersion>, EngineError> {
        if let Some(pinned) = &mut self.pinned {
            return Ok(pinned.take());
        }
        // A page of builds may hold only versions already given.
        while self.buffer.is_empty() && !self.done {
            self.fill(job).await?;
        }
        Ok(self.buffer.pop_front())
    }

    async fn fill(&mut self, job: &Job<'_>) -> Result<(), EngineError> {
        let input = self.input;
        let versions = VersionsAt {
            scope: &input.scope,
            config: &input.config,
        };
        let of = (job.pipeline_id, input.resource.as_str());
        if let (Some(upstream), Bound::Before(_)) = (input.passed.first(), self.bound) {
            let at = JobAt {
                job: upstream,
                ..job.at
            };
            let page = job
                .db
                .versions()
                .passed_by_build_page(at, versions, of, self.walk.as_ref(), PAGE)
                .await?;
            self.done = (page.len() as i64) < PAGE;
            for (version, at) in page {
                let build = at.build;
                self.walk = Some(at);
                if self.held.as_ref().is_some_and(|h| !h.contains(&build)) {
                    continue;
                }
                if self.seen.insert(version.version.clone()) {
                    self.buffer.push_back(version);
                }
            }
            return Ok(());
        }
        let page = match input.passed.first() {
            Some(upstream) => {
                let at = JobAt {
                    job: upstream,
                    ..job.at
                };
                job.db
                    .versions()
                    .passed_versions_page(at, versions, of, self.bound, PAGE)
                    .await?
            }
            None => {
                job.db
                    .versions()
                    .versions_page(versions, of, self.bound, PAGE)
                    .await?
            }
        };
        if let Some(last) = page.last() {
            self.bound = match self.bound {
                Bound::Before(_) => Bound::Before(Some(last.check_order)),
                Bound::After(_) => Bound::After(last.check_order),
            };
        }
        if (page.len() as i64) < PAGE {
            // `every` with nothing newer: the versions it used, newest first.
            match (self.bound, self.fallback.take()) {
                (Bound::After(_), Some(last)) if page.is_empty() => {
                    self.bound = Bound::Before(Some(last + 1));
                    return Box::pin(self.fill(job)).await;
                }
                _ => self.done = true,
            }
        }
        self.buffer.extend(page);
        Ok(())
    }

    /// Why an input had no candidate at all.
    fn none_why(&self, input: &JobInput) -> String {
        match (&input.pin, input.passed.is_empty()) {
            (Some(pin), _) => format!("its pinned version {} is disabled", pin.version()),
            (None, false) => format!(
                "no version of {:?} has gone through a succeeded build of {}",
                input.resource,
                names(&input.passed)
            ),
            (None, true) => format!(
                "no version of {:?} has been found by a check yet",
                input.resource
            ),
        }
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
