//! `gantry bench secrets`: what reading vars from the credential manager
//! costs a build as it starts, against the planning every build does.

use std::sync::Arc;
use std::time::Instant;

use super::{BuiltIn, CacheConfig, Credentials, NeedsCredentials};
use crate::db::Db;
use crate::error::EngineError;
use crate::pipeline::Vars;
use crate::plan::JobPlan;

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct SecretsFigures {
    /// Builds started.
    pub builds: usize,
    /// Vars each reads from the built-in manager.
    pub vars: usize,
    /// Lookups that reached the manager (the cache answered the rest).
    pub manager_calls: u64,
    /// Per build, ms: the vars found (through the cache) and the plan made
    /// again with them.
    pub with_vars_ms: f64,
    /// Per build, ms: the same job planned with every var given as a
    /// static var (what a build of a pipeline without credentials does).
    pub without_vars_ms: f64,
}

/// A job whose task's params read `vars` vars.
fn pipeline(vars: usize) -> String {
    let params: Vec<String> = (0..vars).map(|i| format!("V{i}: ((secret-{i}))")).collect();
    format!(
        "jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n      params: {{{}}}\n      run: {{path: 'true'}}\n",
        params.join(", ")
    )
}

/// Stores `vars` secrets of team `main` in `db` (sealed: `db` must have a
/// key), then starts `builds` builds of a job reading them all, one after
/// another as a node's builds start, and as many plans of the same job
/// with the vars given statically (the baseline).
pub(crate) async fn secrets(
    db: Db,
    builds: usize,
    vars: usize,
) -> Result<SecretsFigures, EngineError> {
    for i in 0..vars {
        db.secrets()
            .set(
                "main",
                None,
                &format!("secret-{i}"),
                &format!("value-{i}-{}", uuid::Uuid::new_v4().simple()),
            )
            .await?;
    }
    let credentials = Credentials::new(Arc::new(BuiltIn::new(db.clone())), CacheConfig::default());
    let stored = JobPlan {
        pipeline: pipeline(vars),
        pipeline_name: "p".into(),
        job: "j".into(),
        vars: Vars::new(),
        inputs: Default::default(),
    };
    let needs = NeedsCredentials::Job(stored.clone());
    let t0 = Instant::now();
    for _ in 0..builds {
        needs
            .resolve(&credentials, "main")
            .await?
            .ok_or_else(|| EngineError::Invalid("the job read no var".into()))?;
    }
    let with_vars = t0.elapsed();
    let mut given = stored;
    for i in 0..vars {
        given
            .vars
            .set_flag(&format!("secret-{i}=value-{i}"))
            .map_err(EngineError::Invalid)?;
    }
    let t0 = Instant::now();
    for _ in 0..builds {
        let plan = given.clone();
        crate::off_thread::off_thread("planning", crate::off_thread::PIPELINE_BUDGET, move |_| {
            plan.plan()
        })
        .await?;
    }
    let without_vars = t0.elapsed();
    let per = |d: std::time::Duration| d.as_secs_f64() * 1000.0 / builds.max(1) as f64;
    Ok(SecretsFigures {
        builds,
        vars,
        manager_calls: credentials.manager_calls(),
        with_vars_ms: per(with_vars),
        without_vars_ms: per(without_vars),
    })
}
