//! Checks across a whole pipeline, after its shape is read: names that must
//! be unique, names that must be declared (resources of get and put,
//! prototypes of run, jobs of `passed` and of groups), build-local vars
//! declared twice, unused resources and `passed` cycles — each reported with
//! its path, all of them at once.
//!
//! Paths follow the document: `jobs[build].plan[2].get`, with a job or
//! resource named by its `name`, a step by its index; `in_parallel[i]` is
//! the i-th step of an `in_parallel`, in either of its forms.

use std::collections::{BTreeMap, HashSet};

use super::identifier;
use super::model::Pipeline;
use super::read::join;
use super::step::{Step, StepKind};

/// `section[name]` for an entry whose name passes the identifier rule
/// ([`identifier::refusal`]), else `section[index]`: a problem's path
/// never carries a control or format character.
pub(crate) fn entry_at(section: &str, index: usize, name: &str) -> String {
    if identifier::refusal("", name).is_none() {
        format!("{section}[{name}]")
    } else {
        format!("{section}[{index}]")
    }
}

/// Var source types Concourse accepts in a pipeline.
const VAR_SOURCE_TYPES: &[&str] = &["vault", "dummy", "ssm", "secretsmanager", "idtoken"];

/// Every cross-reference problem of a pipeline, and the names Concourse
/// warns about (see [`identifier`]).
pub(crate) fn check_pipeline(p: &Pipeline, problems: &mut Vec<String>, warnings: &mut Vec<String>) {
    if p.jobs.is_empty() {
        problems.push("jobs: a pipeline must have at least one job".into());
    }
    unique(problems, "jobs", p.jobs.iter().map(|j| j.name.as_str()));
    unique(
        problems,
        "resources",
        p.resources.iter().map(|r| r.name.as_str()),
    );
    unique(
        problems,
        "resource_types",
        p.resource_types
            .iter()
            .chain(&p.prototypes)
            .map(|t| t.name.as_str()),
    );
    unique(problems, "groups", p.groups.iter().map(|g| g.name.as_str()));
    unique(
        problems,
        "var_sources",
        p.var_sources.iter().map(|v| v.name.as_str()),
    );
    let sections: [(&str, Vec<&str>); 6] = [
        ("jobs", p.jobs.iter().map(|j| j.name.as_str()).collect()),
        (
            "resources",
            p.resources.iter().map(|r| r.name.as_str()).collect(),
        ),
        (
            "resource_types",
            p.resource_types.iter().map(|t| t.name.as_str()).collect(),
        ),
        (
            "prototypes",
            p.prototypes.iter().map(|t| t.name.as_str()).collect(),
        ),
        ("groups", p.groups.iter().map(|g| g.name.as_str()).collect()),
        (
            "var_sources",
            p.var_sources.iter().map(|v| v.name.as_str()).collect(),
        ),
    ];
    for (section, names) in sections {
        for (i, name) in names.into_iter().enumerate() {
            identifier::check(
                &format!("{section}[{i}].name"),
                name,
                true,
                problems,
                warnings,
            );
        }
    }
    for (i, v) in p.var_sources.iter().enumerate() {
        if !VAR_SOURCE_TYPES.contains(&v.type_.as_str()) && !v.type_.is_empty() {
            problems.push(format!(
                "{}.type: unknown credential manager type {:?} (one of: {})",
                entry_at("var_sources", i, &v.name),
                v.type_,
                VAR_SOURCE_TYPES.join(", ")
            ));
        }
    }
    for (i, job) in p.jobs.iter().enumerate() {
        let at = entry_at("jobs", i, &job.name);
        let mut c = StepChecker::new(Some(p), problems, warnings);
        c.plan(&job.plan, &join(&at, "plan"));
        for (key, hook) in job.hooks.iter() {
            c.step(hook, &join(&at, key));
        }
    }
    check_groups(p, problems);
    check_unused_resources(p, problems);
    check_cycles(p, problems);
}

/// Every cross-reference problem of a bare plan (no resources to check),
/// and the names Concourse warns about.
pub(crate) fn check_plan(steps: &[Step], problems: &mut Vec<String>, warnings: &mut Vec<String>) {
    StepChecker::new(None, problems, warnings).plan(steps, "plan");
}

/// Reports names given to two entries of a section.
fn unique<'a>(problems: &mut Vec<String>, section: &str, names: impl Iterator<Item = &'a str>) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, name) in names.enumerate() {
        if name.is_empty() {
            continue;
        }
        if let Some(first) = seen.insert(name, i) {
            seen.insert(name, first);
            problems.push(format!(
                "{section}: {section}[{first}] and {section}[{i}] have the same name {name:?}"
            ));
        }
    }
}

/// Walks one job's steps with what the checks need to remember.
struct StepChecker<'a, 'p> {
    /// The pipeline whose names steps refer to (none for a bare plan).
    pipeline: Option<&'a Pipeline>,
    problems: &'p mut Vec<String>,
    /// Names Concourse warns about.
    warnings: &'p mut Vec<String>,
    /// Artifact names of the job's gets: a second get of a name is an error.
    seen_gets: HashSet<String>,
    /// Build-local vars declared, innermost scope last (`across` opens one).
    scopes: Vec<HashSet<String>>,
}

impl<'a, 'p> StepChecker<'a, 'p> {
    fn new(
        pipeline: Option<&'a Pipeline>,
        problems: &'p mut Vec<String>,
        warnings: &'p mut Vec<String>,
    ) -> Self {
        StepChecker {
            pipeline,
            problems,
            warnings,
            seen_gets: HashSet::new(),
            scopes: vec![HashSet::new()],
        }
    }

    fn problem(&mut self, at: &str, message: String) {
        self.problems.push(format!("{at}: {message}"));
    }

    fn plan(&mut self, steps: &[Step], at: &str) {
        for (i, s) in steps.iter().enumerate() {
            self.step(s, &format!("{at}[{i}]"));
        }
    }

    fn declare_local_var(&mut self, name: &str, at: &str) {
        let scope = self.scopes.last_mut().expect("a scope");
        if !scope.insert(name.to_string()) {
            self.problem(at, format!("repeated var name {name:?}"));
        }
    }

    fn step(&mut self, s: &Step, at: &str) {
        if let Some(across) = &s.across {
            self.scopes.push(HashSet::new());
            let scope = self.scopes.last_mut().expect("a scope");
            scope.extend(across.vars.iter().map(|v| v.var.clone()));
            for (i, v) in across.vars.iter().enumerate() {
                let at = format!("{}[{i}].var", join(at, "across"));
                identifier::check(&at, &v.var, false, self.problems, self.warnings);
            }
            self.kind(&s.kind, at);
            self.scopes.pop();
        } else {
            self.kind(&s.kind, at);
        }
        for (key, hook) in s.hooks.iter() {
            self.step(hook, &join(at, key));
        }
    }

    fn kind(&mut self, kind: &StepKind, at: &str) {
        let named = match kind {
            StepKind::Get(g) => Some(("get", &g.name)),
            StepKind::Put(put) => Some(("put", &put.name)),
            StepKind::Task(t) => Some(("task", &t.name)),
            StepKind::LoadVar(l) => Some(("load_var", &l.name)),
            StepKind::SetPipeline(s) => Some(("set_pipeline", &s.name)),
            _ => None,
        };
        if let Some((key, name)) = named {
            identifier::check(&join(at, key), name, true, self.problems, self.warnings);
        }
        match kind {
            StepKind::Get(g) => {
                if !self.seen_gets.insert(g.name.clone()) {
                    self.problem(
                        &join(at, "get"),
                        format!(
                            "repeated name {:?} (another get of this job fetches it)",
                            g.name
                        ),
                    );
                }
                let key = if g.resource != g.name {
                    "resource"
                } else {
                    "get"
                };
                let Some(p) = self.pipeline else { return };
                self.resource_declared(p, &g.resource, &join(at, key));
                for glob in &g.passed {
                    let matching = p.jobs_matching(glob);
                    if matching.is_empty() {
                        self.problem(&join(at, "passed"), format!("no job matches {glob:?}"));
                    }
                    for job in matching {
                        if !job_uses_resource(job, &g.resource) {
                            self.problem(
                                &join(at, "passed"),
                                format!(
                                    "job {:?} does not get or put resource {:?}",
                                    job.name, g.resource
                                ),
                            );
                        }
                    }
                }
            }
            StepKind::Put(put) => {
                let key = if put.resource != put.name {
                    "resource"
                } else {
                    "put"
                };
                if let Some(p) = self.pipeline {
                    self.resource_declared(p, &put.resource, &join(at, key));
                }
            }
            StepKind::Run(run) => {
                if let Some(p) = self.pipeline {
                    if !p.prototypes.iter().any(|t| t.name == run.prototype) {
                        self.problem(
                            &join(at, "type"),
                            format!("unknown prototype {:?}", run.prototype),
                        );
                    }
                }
            }
            StepKind::LoadVar(l) => self.declare_local_var(&l.name, &join(at, "load_var")),
            StepKind::Do(steps) => self.plan(steps, &join(at, "do")),
            StepKind::InParallel(par) => self.plan(&par.steps, &join(at, "in_parallel")),
            StepKind::Try(inner) => self.step(inner, &join(at, "try")),
            StepKind::Task(_) | StepKind::SetPipeline(_) => {}
        }
    }

    fn resource_declared(&mut self, p: &Pipeline, name: &str, at: &str) {
        if p.resource(name).is_none() {
            let declared: Vec<&str> = p.resources.iter().map(|r| r.name.as_str()).collect();
            let hint = if declared.is_empty() {
                "the pipeline declares no resources".to_string()
            } else {
                format!("declared: {}", declared.join(", "))
            };
            self.problem(at, format!("unknown resource {name:?} ({hint})"));
        }
    }
}

/// Whether a job's steps get or put a resource.
fn job_uses_resource(job: &super::model::Job, resource: &str) -> bool {
    let mut found = false;
    job.visit(&mut |s| match &s.kind {
        StepKind::Get(g) if g.resource == resource => found = true,
        StepKind::Put(p) if p.resource == resource => found = true,
        _ => {}
    });
    found
}

fn check_groups(p: &Pipeline, problems: &mut Vec<String>) {
    let mut grouped = HashSet::new();
    for (i, g) in p.groups.iter().enumerate() {
        let at = entry_at("groups", i, &g.name);
        for glob in &g.jobs {
            let mut any = false;
            for j in p.jobs_matching(glob) {
                grouped.insert(j.name.as_str());
                any = true;
            }
            if !any {
                problems.push(format!("{at}.jobs: no job matches {glob:?}"));
            }
        }
        for r in &g.resources {
            if p.resource(r).is_none() {
                problems.push(format!("{at}.resources: unknown resource {r:?}"));
            }
        }
    }
    if !p.groups.is_empty() {
        for (i, j) in p.jobs.iter().enumerate() {
            if !grouped.contains(j.name.as_str()) {
                let at = entry_at("jobs", i, &j.name);
                problems.push(format!("{at}: job belongs to no group"));
            }
        }
    }
}

fn check_unused_resources(p: &Pipeline, problems: &mut Vec<String>) {
    let mut used = HashSet::new();
    for j in &p.jobs {
        j.visit(&mut |s| match &s.kind {
            StepKind::Get(g) => {
                used.insert(g.resource.clone());
            }
            StepKind::Put(put) => {
                used.insert(put.resource.clone());
            }
            _ => {}
        });
    }
    for (i, r) in p.resources.iter().enumerate() {
        if !r.name.is_empty() && !used.contains(&r.name) {
            problems.push(format!(
                "{}: resource is not used by any job",
                entry_at("resources", i, &r.name)
            ));
        }
    }
}

/// Reports the first cycle of `passed` constraints, as Concourse does.
fn check_cycles(p: &Pipeline, problems: &mut Vec<String>) {
    let upstream: BTreeMap<&str, Vec<&str>> = p
        .jobs
        .iter()
        .map(|j| {
            let mut before = Vec::new();
            j.visit(&mut |s| {
                if let StepKind::Get(g) = &s.kind {
                    for glob in &g.passed {
                        before.extend(p.jobs_matching(glob).iter().map(|o| o.name.as_str()));
                    }
                }
            });
            (j.name.as_str(), before)
        })
        .collect();
    // A depth-first walk with a stack of its own (a chain of 10,000 jobs
    // is 10,000 deep): `false` while a job is on the path, `true` once
    // everything upstream of it is known to have no cycle.
    fn visit<'a>(
        start: &'a str,
        upstream: &BTreeMap<&'a str, Vec<&'a str>>,
        state: &mut BTreeMap<&'a str, bool>,
    ) -> Option<&'a str> {
        if state.contains_key(start) {
            return None;
        }
        let none: &[&str] = &[];
        let edges = |job: &str| upstream.get(job).map_or(none, Vec::as_slice);
        state.insert(start, false);
        let mut path: Vec<(&'a str, usize)> = vec![(start, 0)];
        while let Some((job, next)) = path.last_mut() {
            let Some(&up) = edges(job).get(*next) else {
                state.insert(*job, true);
                path.pop();
                continue;
            };
            *next += 1;
            match state.get(up) {
                Some(false) => return Some(up),
                Some(true) => {}
                None => {
                    state.insert(up, false);
                    path.push((up, 0));
                }
            }
        }
        None
    }
    let mut state = BTreeMap::new();
    for j in &p.jobs {
        if let Some(start) = visit(&j.name, &upstream, &mut state) {
            problems.push(format!(
                "jobs: the passed constraints form a cycle that starts at job {start:?}"
            ));
            return;
        }
    }
}
