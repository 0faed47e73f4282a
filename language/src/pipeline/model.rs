//! The typed pipeline: what a Concourse pipeline file declares (`jobs`,
//! `resources`, `resource_types`, and what means nothing to a runtime but is
//! accepted: `groups`, `var_sources`, `prototypes`, `display`, `user_data`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;
use thiserror::Error;

use super::read::Params;
use super::step::{Hooks, Step};

/// A pipeline file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// `jobs`: what builds run.
    pub jobs: Vec<Job>,
    /// `resources`: what get and put steps name.
    pub resources: Vec<Resource>,
    /// `resource_types`: types beyond the workers' base types.
    pub resource_types: Vec<ResourceType>,
    /// `groups`: how the web UI shows jobs (checked, otherwise unused).
    pub groups: Vec<Group>,
    /// `var_sources`: credential managers (checked, not read by Gantry).
    pub var_sources: Vec<VarSource>,
    /// `prototypes`: what `run` steps name (experimental in Concourse).
    pub prototypes: Vec<ResourceType>,
    /// `display`: the UI's background (unused by a runtime).
    pub display: Option<Display>,
    /// Top-level keys Concourse ignores (usually holders of YAML anchors).
    pub ignored_keys: Vec<String>,
    /// Where each job, resource and resource type is, by name: made at
    /// the first lookup (never stored or compared).
    #[serde(skip)]
    pub names: NameIndex,
    /// What the pipeline was as set, before the credential manager filled
    /// the vars its static vars left.
    #[serde(skip)]
    pub as_set: AsSet,
}

/// A pipeline as set: the vars its static vars left (the credential
/// manager's), and, once a build filled them, the config keys its
/// resources and resource types had before (see
/// [`crate::resource_config::ResourceConfig::key_as_set`]), by name.
#[derive(Clone, Default)]
pub struct AsSet(Option<Arc<AsSetParts>>);

#[derive(Default)]
struct AsSetParts {
    left: std::collections::BTreeSet<String>,
    resources: HashMap<String, String>,
    types: HashMap<String, String>,
}

impl AsSet {
    /// A pipeline as set whose static vars left `left`.
    pub fn leaving(left: std::collections::BTreeSet<String>) -> AsSet {
        if left.is_empty() {
            return AsSet(None);
        }
        AsSet(Some(Arc::new(AsSetParts {
            left,
            ..AsSetParts::default()
        })))
    }

    /// Whether vars were left for the credential manager.
    pub fn needs_credentials(&self) -> bool {
        self.0.as_ref().is_some_and(|p| !p.left.is_empty())
    }

    /// This pipeline as set, with the config keys of its resources and
    /// custom types' images by name (see
    /// `crate::resource_config::load_with_credentials`).
    pub fn with_keys(
        &self,
        resources: HashMap<String, String>,
        types: HashMap<String, String>,
    ) -> AsSet {
        let left = self.0.as_ref().map(|p| p.left.clone()).unwrap_or_default();
        AsSet(Some(Arc::new(AsSetParts {
            left,
            resources,
            types,
        })))
    }

    /// The key of resource `name`'s config as set.
    pub fn of_resource(&self, name: &str) -> Option<String> {
        self.0.as_ref()?.resources.get(name).cloned()
    }

    /// The key of resource type `name`'s image config as set.
    pub fn of_type(&self, name: &str) -> Option<String> {
        self.0.as_ref()?.types.get(name).cloned()
    }
}

impl PartialEq for AsSet {
    /// Derived from the pipeline: never a difference.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for AsSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("AsSet(no vars left)"),
            Some(p) => write!(
                f,
                "AsSet({} vars left, {} resources, {} types)",
                p.left.len(),
                p.resources.len(),
                p.types.len()
            ),
        }
    }
}

/// Positions of a pipeline's jobs, resources and resource types by name,
/// made at the first lookup: a pipeline of 10,000 jobs is looked up once
/// per job and per step, and a scan each would be quadratic. A lookup
/// checks the entry it finds still has the name (a pipeline changed after
/// its first lookup, or a clone changed after the index was made, which it
/// shares, is scanned instead), so it is never wrong, only slower.
#[derive(Clone, Default)]
pub struct NameIndex(Arc<OnceLock<Names>>);

/// The positions, first of each name first (as a scan finds them).
#[derive(Clone, Default)]
struct Names {
    jobs: HashMap<String, usize>,
    resources: HashMap<String, usize>,
    resource_types: HashMap<String, usize>,
}

impl PartialEq for NameIndex {
    /// An index is derived from its pipeline: never a difference.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameIndex")
    }
}

/// The positions of `names`, the first of each name kept.
fn positions<'a>(names: impl Iterator<Item = &'a str>) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for (i, name) in names.enumerate() {
        out.entry(name.to_string()).or_insert(i);
    }
    out
}

/// The entry `index` points at in `items` when it has `name`; else the
/// first with that name, scanned.
fn find<'a, T>(
    items: &'a [T],
    index: &HashMap<String, usize>,
    name: &str,
    name_of: impl Fn(&T) -> &str,
) -> Option<&'a T> {
    match index.get(name).and_then(|&i| items.get(i)) {
        Some(item) if name_of(item) == name => Some(item),
        _ => items.iter().find(|item| name_of(item) == name),
    }
}

/// Whether a job glob (`passed`, a group's `jobs`) is a plain name: one
/// without `*`, `?`, `[` or `\`, which only that job matches.
fn is_plain_name(glob: &str) -> bool {
    !glob.contains(['*', '?', '[', '\\'])
}

/// Why [`Pipeline::job`] found no job.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PipelineError {
    /// No job has the name.
    #[error("no job {name:?} in the pipeline (jobs: {})", known.join(", "))]
    NoSuchJob {
        /// The name asked for.
        name: String,
        /// The jobs the pipeline has.
        known: Vec<String>,
    },
}

impl Pipeline {
    fn names(&self) -> &Names {
        self.names.0.get_or_init(|| Names {
            jobs: positions(self.jobs.iter().map(|j| j.name.as_str())),
            resources: positions(self.resources.iter().map(|r| r.name.as_str())),
            resource_types: positions(self.resource_types.iter().map(|t| t.name.as_str())),
        })
    }

    /// The job of that name: what a build of it runs.
    pub fn job(&self, name: &str) -> Result<&Job, PipelineError> {
        find(&self.jobs, &self.names().jobs, name, |j| &j.name).ok_or_else(|| {
            PipelineError::NoSuchJob {
                name: name.to_string(),
                known: self.jobs.iter().map(|j| j.name.clone()).collect(),
            }
        })
    }

    /// The jobs a job glob (`passed`, a group's `jobs`) matches, in order:
    /// a plain name is looked up, a pattern matched against every job.
    pub fn jobs_matching(&self, glob: &str) -> Vec<&Job> {
        if is_plain_name(glob) {
            return self.job(glob).into_iter().collect();
        }
        self.jobs
            .iter()
            .filter(|j| glob_match(glob, &j.name))
            .collect()
    }

    /// The resource of that name.
    pub fn resource(&self, name: &str) -> Option<&Resource> {
        find(&self.resources, &self.names().resources, name, |r| &r.name)
    }

    /// The declared resource type of that name (none for a base type).
    pub fn resource_type(&self, name: &str) -> Option<&ResourceType> {
        find(
            &self.resource_types,
            &self.names().resource_types,
            name,
            |t| &t.name,
        )
    }
}

/// A job: a plan and its hooks, plus scheduling settings a runtime records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `name`, unique in the pipeline.
    pub name: String,
    /// `plan`: the steps run in order.
    pub plan: Vec<Step>,
    /// `on_success`, `on_failure`, `on_abort`, `on_error`, `ensure` of the job.
    pub hooks: Hooks,
    /// `old_name`: a former name whose history it keeps.
    pub old_name: Option<String>,
    /// `public`: anyone may see its builds.
    pub public: bool,
    /// `disable_manual_trigger`: builds only start from triggers.
    pub disable_manual_trigger: bool,
    /// `disable_reruns`: builds cannot be rerun.
    pub disable_reruns: bool,
    /// `serial`: one build at a time.
    pub serial: bool,
    /// `serial_groups`: one build at a time across jobs sharing a group.
    pub serial_groups: Vec<String>,
    /// `max_in_flight`: at most this many builds at once.
    pub max_in_flight: Option<u32>,
    /// `interruptible`: a worker may land without waiting for its builds.
    pub interruptible: bool,
    /// `tags` of the job.
    pub tags: Vec<String>,
    /// `build_logs_to_retain` (deprecated in Concourse for `build_log_retention`).
    pub build_logs_to_retain: Option<u32>,
    /// `build_log_retention`.
    pub build_log_retention: Option<BuildLogRetention>,
}

impl Job {
    /// Calls `f` on every step of the job, hooks included, parents first.
    pub fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Step)) {
        for s in &self.plan {
            s.visit(f);
        }
        for (_, hook) in self.hooks.iter() {
            hook.visit(f);
        }
    }

    /// How many builds may run at once (none: unlimited), as Concourse
    /// computes it: `serial` and `serial_groups` mean one.
    pub fn effective_max_in_flight(&self) -> Option<u32> {
        if self.serial || !self.serial_groups.is_empty() {
            Some(1)
        } else {
            self.max_in_flight.filter(|n| *n > 0)
        }
    }
}

/// `build_log_retention` of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildLogRetention {
    /// Keep the logs of this many builds.
    pub builds: Option<u32>,
    /// Keep at least this many succeeded builds' logs.
    pub minimum_succeeded_builds: Option<u32>,
    /// Keep logs this many days.
    pub days: Option<u32>,
}

/// A resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// `name`, what steps name.
    pub name: String,
    /// `type`: a base type of the workers or a declared resource type.
    pub type_: String,
    /// `source`: the resource's configuration, given to check/in/out.
    pub source: Params,
    /// `check_every` (`never` or a duration).
    pub check_every: Option<CheckEvery>,
    /// `check_timeout`.
    pub check_timeout: Option<Duration>,
    /// `tags`: checks run on workers with these tags.
    pub tags: Vec<String>,
    /// `version`: a pinned version.
    pub version: Option<Params>,
    /// `public`: the metadata of its versions is shown to anyone who may
    /// read its pipeline (an exposed pipeline's readers included), not
    /// only to the team.
    #[serde(default)]
    pub public: bool,
    /// `old_name` (a former name whose history it keeps, read by
    /// `pipeline/renames.rs`), `webhook_token`, `icon`,
    /// `expose_build_created_by` as written (UI and API settings).
    pub other: Params,
}

/// `check_every` of a resource or resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckEvery {
    /// `never`: no periodic checks.
    Never,
    /// Check at this interval.
    Interval(Duration),
}

/// A resource type (also the shape of a prototype).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceType {
    /// `name`, what resources' `type` names.
    pub name: String,
    /// `type`: the resource type of its image (usually `registry-image`).
    pub type_: String,
    /// `source` of the image resource.
    pub source: Params,
    /// `defaults`: source fields merged into every resource of this type.
    pub defaults: Params,
    /// `privileged`: run its containers privileged.
    pub privileged: bool,
    /// `check_every`.
    pub check_every: Option<CheckEvery>,
    /// `tags`.
    pub tags: Vec<String>,
    /// `params` of the image get.
    pub params: Params,
}

/// A group of the web UI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// `name`.
    pub name: String,
    /// `jobs`: job names or globs.
    pub jobs: Vec<String>,
    /// `resources`: resource names.
    pub resources: Vec<String>,
}

/// A var source: `((name:var))` reads it when a build needs the var
/// (the engine's credential managers; Gantry reads `idtoken` sources).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarSource {
    /// `name`, what `((name:var))` refers to.
    pub name: String,
    /// `type`: vault, dummy, ssm, secretsmanager or idtoken.
    pub type_: String,
    /// `config` of the credential manager.
    pub config: Value,
}

/// `display` of the pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Display {
    /// `background_image`: an http(s) or relative URL.
    pub background_image: Option<String>,
    /// `background_filter`: a CSS filter.
    pub background_filter: Option<String>,
}

/// Go's `path.Match` for job globs: `*` any run of characters, `?` one
/// character, `\x` a literal x; anything else matches itself. Time
/// linear in the product of the lengths, whatever the stars (the
/// classic walk that goes back only to the last star).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    /// One element of a pattern.
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Star,
        Any,
        Lit(char),
    }
    let mut toks = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        toks.push(match c {
            '*' => Tok::Star,
            '?' => Tok::Any,
            '\\' => Tok::Lit(chars.next().unwrap_or('\\')),
            c => Tok::Lit(c),
        });
    }
    let n: Vec<char> = name.chars().collect();
    let (mut t, mut i) = (0, 0);
    // The last star seen and where in the name it was tried to end.
    let mut star: Option<(usize, usize)> = None;
    while i < n.len() {
        match toks.get(t) {
            Some(Tok::Star) => {
                star = Some((t, i));
                t += 1;
            }
            Some(Tok::Any) => {
                t += 1;
                i += 1;
            }
            Some(Tok::Lit(c)) if *c == n[i] => {
                t += 1;
                i += 1;
            }
            _ => match star {
                // The star takes one more character.
                Some((st, si)) => {
                    star = Some((st, si + 1));
                    t = st + 1;
                    i = si + 1;
                }
                None => return false,
            },
        }
    }
    toks[t..].iter().all(|tok| *tok == Tok::Star)
}
