//! A build whose plan needs the credential manager: its stored plan (a
//! job build's or a check's), from which its plan is made again, with the
//! vars the manager gives, when the build starts (and when another web
//! node takes it over), never stored with them.

use std::collections::BTreeSet;

use super::needs::{needed, Focus};
use super::{Credentials, Resolved, SecretScope, SourceContext};
use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::plan::{CheckPlan, JobPlan, Plan, StepDef};

/// A stored plan that fills vars from the credential manager.
#[derive(Debug, Clone)]
pub(crate) enum NeedsCredentials {
    /// A job build's.
    Job(JobPlan),
    /// A check build's.
    Check(CheckPlan),
}

impl NeedsCredentials {
    /// A job build's plan, unless its pipeline has no var at all (a cheap
    /// first look; which vars it needs is read when the build starts).
    pub(crate) fn of_job(plan: &JobPlan) -> Option<NeedsCredentials> {
        plan.pipeline
            .contains("((")
            .then(|| NeedsCredentials::Job(plan.clone()))
    }

    /// A check's plan, unless its pipeline has no var at all.
    pub(crate) fn of_check(plan: &CheckPlan) -> Option<NeedsCredentials> {
        plan.pipeline
            .contains("((")
            .then(|| NeedsCredentials::Check(plan.clone()))
    }

    /// The stored plan `json`, when it is a job build's or a check's whose
    /// pipeline has vars (a build taken over).
    pub(crate) fn of_stored(json: &serde_json::Value) -> Option<NeedsCredentials> {
        if let Ok(job) = serde_json::from_value::<JobPlan>(json.clone()) {
            return NeedsCredentials::of_job(&job);
        }
        serde_json::from_value::<CheckPlan>(json.clone())
            .ok()
            .and_then(|c| NeedsCredentials::of_check(&c))
    }

    fn needed(&self) -> BTreeSet<String> {
        match self {
            NeedsCredentials::Job(j) => needed(&j.pipeline, &j.vars, Focus::Job(&j.job)),
            NeedsCredentials::Check(c) => {
                let focus = if c.resource_type {
                    Focus::ResourceType(&c.check)
                } else {
                    Focus::Resource(&c.check)
                };
                needed(&c.pipeline, &c.vars, focus)
            }
        }
    }

    fn text_and_vars(&self) -> (&str, &crate::pipeline::Vars) {
        match self {
            NeedsCredentials::Job(j) => (&j.pipeline, &j.vars),
            NeedsCredentials::Check(c) => (&c.pipeline, &c.vars),
        }
    }

    fn pipeline_name(&self) -> Option<&str> {
        match self {
            NeedsCredentials::Job(j) => Some(&j.pipeline_name),
            NeedsCredentials::Check(c) => c.pipeline_name.as_deref(),
        }
    }

    fn plan_with(&self, resolved: &Resolved) -> Result<Plan<StepDef>, EngineError> {
        match self {
            NeedsCredentials::Job(j) => j.plan_with(&resolved.vars),
            NeedsCredentials::Check(c) => c.plan_with(&resolved.vars),
        }
    }

    /// The vars the build needs, resolved for `team`, and its plan made
    /// with them (none: it needs none, its plan stands); a var not found
    /// (or the manager failing) is an error naming each var and the paths
    /// tried.
    pub(crate) async fn resolve(
        &self,
        credentials: &Credentials,
        team: &str,
    ) -> Result<Option<(Plan<StepDef>, Resolved)>, EngineError> {
        let me = self.clone();
        let (needed, sources) =
            off_thread("reading the pipeline's vars", PIPELINE_BUDGET, move |_| {
                let needed = me.needed();
                // Its var sources, when a var names one.
                let sources = if needed.iter().any(|v| v.contains(':')) {
                    let (text, vars) = me.text_and_vars();
                    crate::pipeline::Pipeline::load_leaving(text, vars)
                        .map(|(p, _, _)| p.var_sources)
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                Ok((needed, sources))
            })
            .await?;
        if needed.is_empty() {
            return Ok(None);
        }
        let scope = SecretScope {
            team,
            pipeline: self.pipeline_name(),
        };
        let sourced = SourceContext {
            sources,
            job: match self {
                NeedsCredentials::Job(j) => Some(j.job.clone()),
                NeedsCredentials::Check(_) => None,
            },
        };
        let resolved = credentials.resolve(scope, &needed, &sourced).await?;
        let (me, with) = (self.clone(), resolved.clone());
        let plan = off_thread("reading the pipeline", PIPELINE_BUDGET, move |_| {
            me.plan_with(&with)
        })
        .await?;
        Ok(Some((plan, resolved)))
    }
}
