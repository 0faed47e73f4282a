//! The Scheduler's hard filters: which workers a step may ever run on.

use std::collections::HashMap;

use super::{Candidate, StepRequest, WEB_VERSION};
use crate::error::EngineError;
use gantry_wire::worker_info::{versions_compatible, WorkerState};

/// Applies the hard filters; when none passes, the error names every
/// constraint and how many workers each excluded.
pub(crate) fn filter<'a>(
    c: &StepRequest,
    all: &[&'a Candidate],
) -> Result<Vec<&'a Candidate>, EngineError> {
    let mut not_running: HashMap<WorkerState, usize> = HashMap::new();
    let mut wrong_platform = 0;
    let mut missing_tags = 0;
    let mut tagged_only = 0;
    let mut other_team = 0;
    let mut no_resource_type = 0;
    let mut unprivileged = 0;
    let mut incompatible = 0;
    let mut lost_earlier = 0;
    let mut build_steps_only = 0;
    let mut passing = Vec::new();
    for w in all {
        let r = &w.registration;
        if w.state != WorkerState::Running {
            *not_running.entry(w.state).or_default() += 1;
        } else if c.avoid.contains(&r.name) {
            lost_earlier += 1;
        } else if r.version != WEB_VERSION && !versions_compatible(&r.version, WEB_VERSION) {
            incompatible += 1;
        } else if r.identity.platform != c.platform {
            wrong_platform += 1;
        } else if !c.tags.iter().all(|t| r.identity.tags.contains(t)) {
            missing_tags += 1;
        } else if c.tags.is_empty() && !r.identity.tags.is_empty() {
            tagged_only += 1;
        } else if r.identity.team.as_deref().is_some_and(|t| t != c.team) {
            other_team += 1;
        } else if c.resource_type.as_ref().is_some_and(|t| {
            // A task's image type is also met by a worker that pulls such images.
            let pulled = c.image && w.client.pulls_images(t);
            !(r.resource_types.contains(t) || pulled)
        }) {
            no_resource_type += 1;
        } else if c.privileged && !r.identity.allow_privileged {
            unprivileged += 1;
        } else if r.identity.ephemeral && c.build_id.is_none() {
            build_steps_only += 1;
        } else {
            passing.push(*w);
        }
    }
    // A team with compatible workers of its own does not use the general pool.
    if passing
        .iter()
        .any(|w| w.registration.identity.team.is_some())
    {
        passing.retain(|w| w.registration.identity.team.is_some());
    }
    // A build that has a one-build worker of its own keeps to it.
    if c.build_id.is_some() && passing.iter().any(|w| w.bound_build == c.build_id) {
        passing.retain(|w| w.bound_build == c.build_id);
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
    if c.privileged {
        wanted.push("privileged".to_string());
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
            unprivileged,
            "not allowing privileged containers (start one with --allow-privileged)".to_string(),
        ),
        (
            lost_earlier,
            "lost during an earlier attempt of this step".to_string(),
        ),
        (
            build_steps_only,
            "one-build (--ephemeral): they take only build steps".to_string(),
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
