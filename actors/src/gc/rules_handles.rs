//! The Collector's rules for containers and volumes: those of ended builds
//! (`ended-builds`), rows missing from their worker for longer than a grace
//! period (`missing`), creations that never finished (`failed-creations`)
//! and rows of workers that are gone (`removed-workers`). Each only changes
//! rows; `now_ms` is passed in so tests control the clock.

use std::collections::HashSet;
use std::time::Duration;

use crate::db::{Closing, Db, HandleKind};
use crate::error::EngineError;
use crate::intercept::Intercepts;

/// A duration in milliseconds, saturating.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `ended-builds`: marks `destroying` the `created` and `failed`
/// containers and volumes of ended builds, except those of a failed or
/// errored build that is the latest ended build of its job (kept until a
/// newer build of the job ends), and a container with an open intercept
/// session together with every volume of its build on its worker. Rows of
/// no build (images, task caches) are not touched. Answers how many rows
/// it marked.
pub(crate) async fn ended_builds(db: &Db, intercepts: &Intercepts) -> Result<u64, EngineError> {
    let mut marked = 0;
    let mut kept: HashSet<(i64, String)> = HashSet::new();
    for c in db
        .gc()
        .released_build_handles(HandleKind::Container)
        .await?
    {
        // Marked only if no session is open (through any web node),
        // atomically against a session entering, which then finds the
        // container `destroying` and is refused.
        match intercepts.close(&c.handle).await? {
            Closing::Marked => marked += 1,
            Closing::Intercepted => {
                kept.insert((c.build_id, c.worker));
            }
            Closing::Unchanged => {}
        }
    }
    for v in db.gc().released_build_handles(HandleKind::Volume).await? {
        if kept.contains(&(v.build_id, v.worker)) {
            continue;
        }
        marked += u64::from(
            db.gc()
                .mark_destroying(HandleKind::Volume, &v.handle)
                .await?,
        );
    }
    Ok(marked)
}

/// `missing`: deletes containers and volumes missing from their worker's
/// reports for longer than `grace` at `now_ms`. Answers how many.
pub(crate) async fn missing(db: &Db, now_ms: i64, grace: Duration) -> Result<u64, EngineError> {
    let before = now_ms.saturating_sub(ms(grace));
    let mut n = 0;
    for kind in [HandleKind::Container, HandleKind::Volume] {
        n += db.gc().delete_missing_handles(kind, before).await?;
    }
    Ok(n)
}

/// `failed-creations`: marks `destroying` the rows still `creating` for
/// longer than `limit` at `now_ms` whose build has ended (or that have
/// none), and `failed` rows of no build as old. Answers how many.
pub(crate) async fn failed_creations(
    db: &Db,
    now_ms: i64,
    limit: Duration,
) -> Result<u64, EngineError> {
    let before = now_ms.saturating_sub(ms(limit));
    let mut n = 0;
    for kind in [HandleKind::Container, HandleKind::Volume] {
        n += db.gc().mark_stale_creations(kind, before).await?;
    }
    Ok(n)
}

/// `removed-workers`: deletes the containers, volumes and task caches of
/// workers no longer registered (pruned or retired). Answers how many.
pub(crate) async fn removed_workers(db: &Db) -> Result<u64, EngineError> {
    db.gc().delete_rows_of_removed_workers().await
}
