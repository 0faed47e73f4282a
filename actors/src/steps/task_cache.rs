//! Task caches of job builds, after Concourse's `task_caches` and
//! `worker_task_caches`: a cache belongs to (team, pipeline, job, step,
//! path, worker). The first build of the job that runs the step on a worker
//! gets an empty volume there, recorded as the cache's; the next build of
//! the job that runs the step on that worker mounts the same volume.
//!
//! The volume's row in `volumes` has no build (role `task-cache:PATH`), so
//! no build's cleanup — nor the take-over of a build after a restart of the
//! web node, which only looks at a build's own volumes — destroys it.
//!
//! The volume is mounted read-write as it is: two builds of the job running
//! the step on the same worker at once share it. (Concourse mounts a
//! copy-on-write child and makes it the cache when the task ends; here
//! writes land in the cache as they happen, whatever the task's exit
//! status.) A cache with a `ttl` that was not used for longer than it is
//! replaced by a fresh empty volume, and the old volume is destroyed once
//! no running build may still mount it (see `db/gc_pressure.rs`). A build
//! marks a cache used before it mounts it, and only while the cache's row
//! still names the volume: one the garbage collector dropped meanwhile is
//! not mounted, and a fresh empty volume replaces it.
//! One-off builds get no cache volume from here: theirs are the build's own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::db::{now_ms, HandleKind, TaskCacheKey, TaskCacheRow};
use crate::error::EngineError;
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::Volume;

use crate::steps::{JobRef, StepContext};
use crate::task_config::TaskCache;
use gantry_wire::state::HandleState;

/// The stream of the build's log lines written by Gantry itself (not by a
/// process): the CLI shows them on stderr.
pub(crate) const GANTRY_STREAM: &str = "gantry";

/// Where a mounted cache came from, as told in the build's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CacheOrigin {
    /// An earlier build's cache, still on the worker.
    Reused,
    /// None was recorded: a new empty volume.
    CreatedEmpty,
    /// The recorded one was unused for longer than its ttl: a new empty
    /// volume, the old one destroyed.
    Expired,
    /// The recorded one is gone from the worker: a new empty volume.
    Lost,
    /// The recorded one was cleared or collected while this build looked
    /// it up: a new empty volume.
    Dropped,
}

impl CacheOrigin {
    /// The log line telling it, for the cache at `path` on `worker`.
    pub(crate) fn message(&self, path: &str, worker: &str) -> String {
        let head = format!("cache {path:?}: ");
        match self {
            CacheOrigin::Reused => format!("{head}reused from an earlier build on {worker}"),
            CacheOrigin::CreatedEmpty => format!("{head}created empty on {worker}"),
            CacheOrigin::Expired => format!(
                "{head}created empty on {worker} (the earlier one was unused for longer than its ttl)"
            ),
            CacheOrigin::Lost => format!(
                "{head}created empty on {worker} (the earlier one is gone from the worker)"
            ),
            CacheOrigin::Dropped => format!(
                "{head}created empty on {worker} (the earlier one was cleared or collected)"
            ),
        }
    }
}

/// The key of the cache at `path` of step `step` of `job` on `worker`.
pub(crate) fn cache_key(
    team: &str,
    job: &JobRef,
    step: &str,
    path: &str,
    worker: &str,
) -> TaskCacheKey {
    TaskCacheKey {
        team: team.to_string(),
        pipeline: job.pipeline.clone(),
        job: job.job.clone(),
        step: step.to_string(),
        path: path.to_string(),
        worker: worker.to_string(),
    }
}

/// Whether a cache last used at `last_used_at` (unix ms) has outlived its
/// `ttl` at `now`: unused for strictly longer than the ttl. No ttl: never.
pub(crate) fn cache_expired(last_used_at: i64, ttl: Option<Duration>, now: i64) -> bool {
    match ttl {
        None => false,
        Some(ttl) => {
            let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            now.saturating_sub(last_used_at) > ttl_ms
        }
    }
}

/// The role stored with a cache volume's row.
pub(crate) fn cache_role(path: &str) -> String {
    format!("task-cache:{path}")
}

impl StepContext {
    /// The volume of the job's cache `cache` of this step on the step's
    /// worker: the recorded one when it is still there (and within its
    /// ttl), else a new empty one recorded as the cache's. Tells which in
    /// the build's log.
    pub async fn task_cache_volume(
        &self,
        job: &JobRef,
        cache: &TaskCache,
    ) -> Result<Arc<dyn Volume>, EngineError> {
        let key = cache_key(
            &self.scope.team,
            job,
            self.step(),
            &cache.path,
            self.worker.name(),
        );
        // Twice at most: a build that loses the race to record a new cache
        // uses the winner's.
        let mut origin = CacheOrigin::CreatedEmpty;
        for _ in 0..2 {
            if let Some(row) = self.scope.db.handles().find_task_cache(&key).await? {
                match self.recorded_cache(&row, cache.ttl()).await? {
                    Ok(volume) => {
                        self.record_ttl(&key, cache).await?;
                        self.tell_cache(&cache.path, &CacheOrigin::Reused).await?;
                        return Ok(volume);
                    }
                    Err(why) => origin = why,
                }
            }
            let volume = self.create_cache_volume(&key).await?;
            if self
                .scope
                .db
                .handles()
                .insert_task_cache(&key, volume.handle())
                .await?
            {
                self.record_ttl(&key, cache).await?;
                self.tell_cache(&cache.path, &origin).await?;
                return Ok(volume);
            }
            self.destroy_cache_volume(volume.handle()).await;
        }
        Err(EngineError::Invalid(format!(
            "cache {:?}: other builds kept replacing it on worker {}",
            cache.path,
            self.worker.name()
        )))
    }

    /// The recorded cache's volume, or why it cannot be used (it is then
    /// forgotten; an expired one's volume is destroyed once no running
    /// build may mount it).
    async fn recorded_cache(
        &self,
        row: &TaskCacheRow,
        ttl: Option<Duration>,
    ) -> Result<Result<Arc<dyn Volume>, CacheOrigin>, EngineError> {
        let db = &self.scope.db;
        let now = now_ms();
        if cache_expired(row.last_used_at, ttl, now) {
            db.gc().forget_task_cache(row, now).await?;
            return Ok(Err(CacheOrigin::Expired));
        }
        // Marked used first: the garbage collector keeps a cache used by a
        // running build, and one it dropped before is not mounted.
        if !db.gc().use_task_cache(row, now).await? {
            return Ok(Err(CacheOrigin::Dropped));
        }
        match self.worker.lookup_volume(&row.volume).await? {
            Some(volume) => Ok(Ok(volume)),
            None => {
                if db
                    .handles()
                    .delete_task_cache(&row.key, &row.volume)
                    .await?
                {
                    db.handles()
                        .delete_handle(HandleKind::Volume, &row.volume)
                        .await?;
                }
                Ok(Err(CacheOrigin::Lost))
            }
        }
    }

    /// A new empty volume for the cache of `key`: its row (written
    /// `creating` before the worker is asked) has no build, so the build's
    /// cleanup leaves it.
    async fn create_cache_volume(
        &self,
        key: &TaskCacheKey,
    ) -> Result<Arc<dyn Volume>, EngineError> {
        let properties = BTreeMap::from([(
            "task-cache".to_string(),
            format!("{}/{}/{}/{}", key.pipeline, key.job, key.step, key.path),
        )]);
        let volume = self
            .create_unowned_volume(Some(&cache_role(&key.path)), properties)
            .await?;
        self.scope
            .db
            .handles()
            .set_handle_state(HandleKind::Volume, volume.handle(), HandleState::Created)
            .await?;
        Ok(volume)
    }

    /// Leaves a cache volume no longer recorded as a cache to the garbage
    /// collector: its row becomes `destroying`, and the worker's sweeper
    /// destroys it.
    async fn destroy_cache_volume(&self, handle: &str) {
        if let Err(e) = self
            .scope
            .db
            .handles()
            .set_handle_state(HandleKind::Volume, handle, HandleState::Destroying)
            .await
        {
            tracing::warn!(
                volume = handle,
                "marking an old task cache for destruction: {e}"
            );
        }
    }

    /// Records the cache's ttl as the step's config says now (the
    /// Collector's `task-caches` rule reads it).
    async fn record_ttl(&self, key: &TaskCacheKey, cache: &TaskCache) -> Result<(), EngineError> {
        let ttl_ms = cache
            .ttl()
            .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
        self.scope.db.gc().set_task_cache_ttl(key, ttl_ms).await
    }

    /// Tells in the build's log where the cache at `path` came from.
    async fn tell_cache(&self, path: &str, origin: &CacheOrigin) -> Result<(), EngineError> {
        self.emit(&BuildEvent::Log {
            step: self.step().to_string(),
            stream: GANTRY_STREAM.to_string(),
            data: format!("{}\n", origin.message(path, self.worker.name())),
            time: now_ms(),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_expires_only_when_unused_for_longer_than_its_ttl() {
        let hour = Some(Duration::from_secs(3600));
        let t0 = 1_000_000;
        assert!(!cache_expired(t0, None, t0 + 10 * 86_400_000));
        assert!(!cache_expired(t0, hour, t0));
        assert!(!cache_expired(t0, hour, t0 + 3_600_000));
        assert!(cache_expired(t0, hour, t0 + 3_600_001));
        // A clock that went back does not expire it.
        assert!(!cache_expired(t0, hour, t0 - 5_000_000));
        // A huge ttl does not overflow.
        assert!(!cache_expired(t0, Some(Duration::MAX), i64::MAX));
    }

    #[test]
    fn a_cache_is_keyed_by_team_pipeline_job_step_path_and_worker() {
        let job = JobRef::new("my-pipeline", "unit").unwrap();
        let k = cache_key("main", &job, "test", "./cache/go", "w1");
        assert_eq!(
            (
                k.team.as_str(),
                k.pipeline.as_str(),
                k.job.as_str(),
                k.step.as_str(),
                k.path.as_str(),
                k.worker.as_str()
            ),
            ("main", "my-pipeline", "unit", "test", "./cache/go", "w1")
        );
        assert_ne!(k, cache_key("main", &job, "test", "./cache/go", "w2"));
        let other = JobRef::new("my-pipeline", "lint").unwrap();
        assert_ne!(k, cache_key("main", &other, "test", "./cache/go", "w1"));
        assert_eq!(cache_role("./cache/go"), "task-cache:./cache/go");
    }

    #[test]
    fn the_log_says_whether_a_cache_was_reused_or_created() {
        assert_eq!(
            CacheOrigin::Reused.message("cache", "w1"),
            "cache \"cache\": reused from an earlier build on w1"
        );
        assert_eq!(
            CacheOrigin::CreatedEmpty.message("cache", "w1"),
            "cache \"cache\": created empty on w1"
        );
        assert!(CacheOrigin::Expired
            .message("c", "w")
            .contains("longer than its ttl"));
    }

    #[test]
    fn pipeline_names_are_checked() {
        assert!(JobRef::new("main", "j").is_ok());
        assert!(JobRef::new("ci.v2_x-1", "j").is_ok());
        // An instance's name holds its instance vars, canonical.
        let instance = JobRef::new("ci/z:1,a:x", "j").unwrap();
        assert_eq!(instance.pipeline, "ci/a:x,z:1");
        let e = JobRef::new("a/b", "j").unwrap_err().to_string();
        assert!(e.contains("KEY:VALUE"), "{e}");
        for (bad, why) in [
            ("", "empty"),
            ("a b/k:v", "' ' is not allowed"),
            ("a b", "' ' is not allowed"),
            ("-x", "start with a letter or a digit"),
        ] {
            let e = JobRef::new(bad, "j").unwrap_err().to_string();
            assert!(
                e.contains("pipeline name") && e.contains(why),
                "{bad:?}: {e}"
            );
        }
        assert!(JobRef::new(&"a".repeat(129), "j").is_err());
    }
}
