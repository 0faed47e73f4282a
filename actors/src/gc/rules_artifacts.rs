//! The Collector's rules for what outlives builds: task caches unused for
//! longer than their ttl (`task-caches`, and `gantry clear-task-cache` at
//! once), and artifacts (`artifacts`): those of ended builds, those owned by
//! nothing, resource caches and images unused for too long. An artifact
//! that goes loses its row, its data in the web node's store, and its
//! volumes on workers (marked `destroying`). `now_ms` is passed in so tests
//! control the clock.

use std::time::Duration;

use crate::artifact_store::ArtifactStore;
use crate::db::{ArtifactCutoffs, Db};
use crate::error::EngineError;

use super::rules_handles::ms;

/// How long artifacts are kept (see [`artifacts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactAges {
    /// An ended build's artifacts are kept this long after it ended (a
    /// one-off build's outputs are downloaded then). Default 10 min.
    pub build_ended: Duration,
    /// An artifact owned by nothing (an upload no build took) is kept this
    /// long after it was made. Default 12 h.
    pub unowned: Duration,
    /// A resource cache unused for longer than this goes. Default 24 h.
    pub resource_cache_unused: Duration,
    /// An image (uploaded, or a resource cache holding one) no build used
    /// for longer than this goes. Default 7 days.
    pub image_unused: Duration,
}

impl Default for ArtifactAges {
    fn default() -> Self {
        ArtifactAges {
            build_ended: Duration::from_secs(10 * 60),
            unowned: Duration::from_secs(12 * 3600),
            resource_cache_unused: Duration::from_secs(24 * 3600),
            image_unused: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl ArtifactAges {
    /// The cut-offs at `now_ms`: what is older goes.
    pub fn cutoffs(&self, now_ms: i64) -> ArtifactCutoffs {
        let before = |d: Duration| now_ms.saturating_sub(ms(d));
        ArtifactCutoffs {
            build_ended_before: before(self.build_ended),
            unowned_before: before(self.unowned),
            resource_cache_used_before: before(self.resource_cache_unused),
            image_used_before: before(self.image_unused),
        }
    }
}

/// `task-caches`: forgets each task cache with a ttl unused for longer than
/// it at `now_ms`, and marks its volume `destroying`. A cache a build used
/// meanwhile is kept, and so is one a running build may still mount (a
/// long build can outlive the ttl; see `db/gc_pressure.rs`). Then marks
/// `destroying` the volumes of forgotten caches (leftovers of
/// [`clear_task_caches`]) that no running build may mount any more.
/// Answers how many caches and leftovers went.
pub(crate) async fn task_caches(db: &Db, now_ms: i64) -> Result<u64, EngineError> {
    let mut n = 0;
    for row in db.gc().expired_task_caches(now_ms).await? {
        // Only while unused since it was listed: a build that used it
        // meanwhile keeps it.
        let used_before = row.last_used_at.saturating_add(1);
        n += u64::from(db.gc().drop_task_cache(&row, Some(used_before)).await?);
    }
    n += db.gc().release_task_cache_leftovers().await?;
    Ok(n)
}

/// `gantry clear-task-cache`: forgets at once the task caches of job `job`
/// of `pipeline` of `team` (of step `step` only, when given) on every
/// worker, so the job's next build starts with empty ones. A cache's volume
/// is marked `destroying` at once unless a running build may still mount
/// it; such a volume is kept as a leftover until that build has ended, and
/// the `task-caches` rule then marks it. Answers how many caches went.
pub(crate) async fn clear_task_caches(
    db: &Db,
    team: &str,
    pipeline: &str,
    job: &str,
    step: Option<&str>,
) -> Result<u64, EngineError> {
    let mut n = 0;
    for row in db.gc().job_task_caches(team, pipeline, job, step).await? {
        n += u64::from(db.gc().forget_task_cache(&row, crate::db::now_ms()).await?);
    }
    Ok(n)
}

/// `artifacts`: at `now_ms`, forgets resource caches unused for longer than
/// their age, then deletes every artifact nothing owns any more (see
/// [`Collection::collectable_artifacts`]): its data from `store`, then its row, its
/// volumes marked `destroying`. Answers how many artifacts and caches went.
pub(crate) async fn artifacts(
    db: &Db,
    store: &dyn ArtifactStore,
    now_ms: i64,
    ages: &ArtifactAges,
) -> Result<u64, EngineError> {
    let cut = ages.cutoffs(now_ms);
    let mut n = 0;
    for cache in db.gc().stale_resource_caches(&cut).await? {
        // A build that used it since it was listed moved its last use to
        // now, past both cut-offs: it is kept.
        let used_before = cut.resource_cache_used_before.max(cut.image_used_before);
        if db.gc().drop_resource_cache(&cache, used_before).await? {
            n += 1;
            if !db.gc().artifact_owned(&cache.artifact_id).await?
                && db
                    .artifact_index()
                    .get_artifact_any_team(&cache.artifact_id)
                    .await?
                    .is_some()
            {
                delete_artifact(db, store, &cache.artifact_id).await?;
                n += 1;
            }
        }
    }
    for a in db.gc().collectable_artifacts(&cut).await? {
        if a.in_store {
            store.delete(&a.id).await?;
        }
        db.gc().forget_artifact(&a.id).await?;
        n += 1;
    }
    Ok(n)
}

/// Deletes an artifact's data from the store (when it is there), then its
/// row, marking its volumes `destroying`.
async fn delete_artifact(db: &Db, store: &dyn ArtifactStore, id: &str) -> Result<(), EngineError> {
    if db.artifact_index().artifact_in_store(id).await? {
        store.delete(id).await?;
    }
    db.gc().forget_artifact(id).await?;
    Ok(())
}

/// The least age of store data no row records before it is deleted: an
/// artifact being kept is stored, then recorded, and its record may wait
/// on a busy database for a while.
const ORPHAN_FLOOR: Duration = Duration::from_secs(60);

impl ArtifactAges {
    /// How old store data no row records must be to go: the unowned age,
    /// at least a minute.
    pub(crate) fn orphan_age(&self) -> Duration {
        self.unowned.max(ORPHAN_FLOOR)
    }
}

/// Deletes the store's data that no artifact row records and that was
/// last written more than `ages.orphan_age()` before `now`: what a web
/// node killed between storing an artifact and recording it left. The
/// store is listed before the rows are read, so data stored (and then
/// recorded) meanwhile is not taken for an orphan.
pub(crate) async fn store_orphans(
    db: &Db,
    store: &dyn ArtifactStore,
    now: std::time::SystemTime,
    ages: &ArtifactAges,
) -> Result<u64, EngineError> {
    let Some(cut) = now.checked_sub(ages.orphan_age()) else {
        return Ok(0);
    };
    let old: Vec<String> = store
        .list()
        .await?
        .into_iter()
        .filter(|(_, written)| *written < cut)
        .map(|(id, _)| id)
        .collect();
    if old.is_empty() {
        return Ok(0);
    }
    let recorded = db.artifact_index().all_ids().await?;
    let mut n = 0;
    for id in old.iter().filter(|id| !recorded.contains(*id)) {
        tracing::warn!(artifact = %id, store = %store.location(), "deleting artifact data no row records (left by a node stopped while keeping it)");
        store.delete(id).await?;
        n += 1;
    }
    Ok(n)
}
