//! The queries of the Collector (garbage collection on the web node): which
//! rows the ownership rules release, and the statements that mark them
//! `destroying` or delete them. Nothing here calls a worker: the workers'
//! sweepers destroy what is `destroying` and report it gone.

use crate::db::{Collection, TaskCacheKey, TaskCacheRow};
use crate::error::EngineError;

use super::states::{sql_list, sql_literal};
use super::task_caches::BindKey;
use gantry_wire::state::{ArtifactKind, BuildStatus, HandleState};

use super::handles::HandleKind;

/// The table of a kind of handle.
fn table(kind: HandleKind) -> &'static str {
    match kind {
        HandleKind::Container => "containers",
        HandleKind::Volume => "volumes",
    }
}

/// Build statuses of an ended build, as an SQL list (made from the enum).
pub(super) fn ended() -> String {
    sql_list(&BuildStatus::ENDED)
}

/// The condition (on builds aliased `b`) of a build whose containers,
/// volumes and artifacts may go: it has ended, and it is not a failed or
/// errored build of a job that no newer build of the same job has ended
/// after (that one keeps them, for intercepting).
fn released(b: &str) -> String {
    let ended = ended();
    let kept = sql_list(&[BuildStatus::Failed, BuildStatus::Errored]);
    format!(
        "{b}.status IN {ended} AND NOT ({b}.status IN {kept} AND {b}.job IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM builds n WHERE n.team = {b}.team AND n.pipeline = {b}.pipeline \
         AND n.job = {b}.job AND n.id > {b}.id AND n.status IN {ended}))"
    )
}

/// A container or volume of an ended build that the `ended-builds` rule
/// may release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReleasedHandle {
    /// Its handle.
    pub handle: String,
    /// The worker holding it.
    pub worker: String,
    /// The build it belongs to.
    pub build_id: i64,
}

/// An artifact a rule releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReleasedArtifact {
    /// Its id.
    pub id: String,
    /// Whether the web node's store holds its data.
    pub in_store: bool,
}

/// A resource cache unused for too long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaleResourceCache {
    /// Its team.
    pub team: String,
    /// Its key.
    pub key: String,
    /// The artifact holding what `in` fetched.
    pub artifact_id: String,
}

/// Ages (unix ms cut-offs: rows older than them go) for the artifact rules.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactCutoffs {
    /// Artifacts of builds that ended before this go.
    pub build_ended_before: i64,
    /// Artifacts owned by nothing, made before this, go.
    pub unowned_before: i64,
    /// Resource caches (files) last used before this go.
    pub resource_cache_used_before: i64,
    /// Images (and resource caches holding one) last used before this go.
    pub image_used_before: i64,
}

impl Collection<'_> {
    /// Records the pipeline and job of a job build (what the
    /// `ended-builds` rule's exception for a job's latest build looks at).
    pub(crate) async fn set_build_job(
        &self,
        id: i64,
        pipeline: &str,
        job: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE builds SET pipeline = $1, job = $2 WHERE id = $3")
            .bind(pipeline)
            .bind(job)
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// `created` and `failed` rows of builds whose rows may go (see
    /// [`released`]), oldest first.
    pub(crate) async fn released_build_handles(
        &self,
        kind: HandleKind,
    ) -> Result<Vec<ReleasedHandle>, EngineError> {
        let sql = format!(
            "SELECT h.handle, h.worker, h.build_id FROM {} h JOIN builds b ON b.id = h.build_id \
             WHERE h.state IN ($1, $2) AND {} ORDER BY h.created_at, h.handle",
            table(kind),
            released("b")
        );
        let rows: Vec<(String, String, i64)> = sqlx::query_as(&sql)
            .bind(HandleState::Created.as_str())
            .bind(HandleState::Failed.as_str())
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(handle, worker, build_id)| ReleasedHandle {
                handle,
                worker,
                build_id,
            })
            .collect())
    }

    /// Marks a `created` or `failed` row `destroying`; answers whether it
    /// did (a row in another state, or gone, is left as it is).
    pub(crate) async fn mark_destroying(
        &self,
        kind: HandleKind,
        handle: &str,
    ) -> Result<bool, EngineError> {
        let done = sqlx::query(&format!(
            "UPDATE {} SET state = $1 WHERE handle = $2 AND state IN ($3, $4)",
            table(kind)
        ))
        .bind(HandleState::Destroying.as_str())
        .bind(handle)
        .bind(HandleState::Created.as_str())
        .bind(HandleState::Failed.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes rows missing from their worker's reports since before
    /// `missing_before` (unix ms); answers how many.
    pub(crate) async fn delete_missing_handles(
        &self,
        kind: HandleKind,
        missing_before: i64,
    ) -> Result<u64, EngineError> {
        let done = sqlx::query(&format!(
            "DELETE FROM {} WHERE missing_since IS NOT NULL AND missing_since < $1",
            table(kind)
        ))
        .bind(missing_before)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Marks `destroying` the creations that never finished: rows still
    /// `creating` since before `created_before` (unix ms) whose build has
    /// ended or that belong to no build, and `failed` rows of no build.
    /// Answers how many.
    pub(crate) async fn mark_stale_creations(
        &self,
        kind: HandleKind,
        created_before: i64,
    ) -> Result<u64, EngineError> {
        let done = sqlx::query(&format!(
            "UPDATE {t} SET state = $1 WHERE created_at < $2 AND ( \
               (state = $3 AND (build_id IS NULL OR build_id IN (SELECT id FROM builds WHERE status IN {ended}))) \
               OR (state = $4 AND build_id IS NULL))",
            t = table(kind),
            ended = ended()
        ))
        .bind(HandleState::Destroying.as_str())
        .bind(created_before)
        .bind(HandleState::Creating.as_str())
        .bind(HandleState::Failed.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes the rows (containers, volumes, task caches and their
    /// leftovers) of workers that are no longer registered (pruned or
    /// retired); answers how many.
    pub(crate) async fn delete_rows_of_removed_workers(&self) -> Result<u64, EngineError> {
        let mut n = 0;
        for table in [
            "containers",
            "volumes",
            "task_caches",
            "task_cache_leftovers",
        ] {
            let done = sqlx::query(&format!(
                "DELETE FROM {table} WHERE worker NOT IN (SELECT name FROM workers)"
            ))
            .execute(self.db.pool())
            .await?;
            n += done.rows_affected();
        }
        Ok(n)
    }
}

impl Collection<'_> {
    /// Records the ttl (in ms; none: kept however long unused) of the task
    /// cache `key`, as the step's config says now.
    pub(crate) async fn set_task_cache_ttl(
        &self,
        key: &TaskCacheKey,
        ttl_ms: Option<i64>,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE task_caches SET ttl_ms = $1 WHERE team = $2 AND pipeline = $3 AND job = $4 \
             AND step = $5 AND path = $6 AND worker = $7",
        )
        .bind(ttl_ms)
        .bind_key(key)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Task caches with a ttl unused for longer than it at `now` (unix
    /// ms), oldest used first.
    pub(crate) async fn expired_task_caches(
        &self,
        now: i64,
    ) -> Result<Vec<TaskCacheRow>, EngineError> {
        let rows: Vec<super::task_caches::Raw> = sqlx::query_as(&format!(
            "SELECT {} FROM task_caches WHERE ttl_ms IS NOT NULL AND $1 - last_used_at > ttl_ms \
             ORDER BY last_used_at, volume",
            super::task_caches::COLUMNS
        ))
        .bind(now)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(super::task_caches::decode).collect())
    }

    /// The task caches of a job (of one step, or of all), oldest first.
    pub(crate) async fn job_task_caches(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        step: Option<&str>,
    ) -> Result<Vec<TaskCacheRow>, EngineError> {
        Ok(self
            .db
            .handles()
            .list_task_caches(Some(team))
            .await?
            .into_iter()
            .filter(|r| {
                r.key.pipeline == pipeline
                    && r.key.job == job
                    && step.is_none_or(|s| r.key.step == s)
            })
            .collect())
    }

    /// Forgets the task cache `row` and marks its volume `destroying`, in
    /// one transaction; only while it is still `row.volume`, no running
    /// build may mount it (see `gc_pressure.rs`) and, with `used_before`,
    /// it is still unused since then (a build that used it meanwhile keeps
    /// it). Answers whether it did.
    pub(crate) async fn drop_task_cache(
        &self,
        row: &TaskCacheRow,
        used_before: Option<i64>,
    ) -> Result<bool, EngineError> {
        let k = &row.key;
        let mut tx = self.db.pool().begin().await?;
        let done = sqlx::query(&format!(
            "DELETE FROM task_caches WHERE team = $1 AND pipeline = $2 AND job = $3 AND step = $4 \
             AND path = $5 AND worker = $6 AND volume = $7 AND last_used_at < $8 AND NOT {}",
            super::gc_pressure::in_use("task_caches")
        ))
        .bind_key(k)
        .bind(&row.volume)
        .bind(used_before.unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("UPDATE volumes SET state = $1 WHERE handle = $2 AND state <> $1")
            .bind(HandleState::Destroying.as_str())
            .bind(&row.volume)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}

impl Collection<'_> {
    /// Marks the resource cache `key` used at `at` (unix ms).
    pub(crate) async fn touch_resource_cache(
        &self,
        team: &str,
        key: &str,
        at: i64,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE resource_caches SET last_used_at = $1 WHERE team = $2 AND key = $3")
            .bind(at)
            .bind(team)
            .bind(key)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Marks artifact `id` (an image) used at `at` (unix ms).
    pub(crate) async fn touch_artifact(&self, id: &str, at: i64) -> Result<(), EngineError> {
        sqlx::query("UPDATE artifacts SET last_used_at = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Resource caches unused since before the cut-offs (an image's
    /// against `image_used_before`), oldest used first.
    pub(crate) async fn stale_resource_caches(
        &self,
        cut: &ArtifactCutoffs,
    ) -> Result<Vec<StaleResourceCache>, EngineError> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT r.team, r.key, r.artifact_id FROM resource_caches r \
             LEFT JOIN artifacts a ON a.id = r.artifact_id \
             WHERE COALESCE(r.last_used_at, r.created_at) < \
               CASE WHEN a.kind = $3 THEN $2 ELSE $1 END \
             ORDER BY COALESCE(r.last_used_at, r.created_at), r.key",
        )
        .bind(cut.resource_cache_used_before)
        .bind(cut.image_used_before)
        .bind(ArtifactKind::Image.as_str())
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(team, key, artifact_id)| StaleResourceCache {
                team,
                key,
                artifact_id,
            })
            .collect())
    }

    /// Forgets resource cache `c` if it is still unused since before
    /// `used_before` (a build that used it meanwhile keeps it); answers
    /// whether it did.
    pub(crate) async fn drop_resource_cache(
        &self,
        c: &StaleResourceCache,
        used_before: i64,
    ) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "DELETE FROM resource_caches WHERE team = $1 AND key = $2 \
             AND COALESCE(last_used_at, created_at) < $3",
        )
        .bind(&c.team)
        .bind(&c.key)
        .bind(used_before)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Artifacts that may go: those of released builds that ended before
    /// the cut-off, those owned by nothing (no build, no resource cache)
    /// made before theirs, and images of no build nor resource cache
    /// unused since before theirs. Oldest first.
    pub(crate) async fn collectable_artifacts(
        &self,
        cut: &ArtifactCutoffs,
    ) -> Result<Vec<ReleasedArtifact>, EngineError> {
        let no_cache = "NOT EXISTS (SELECT 1 FROM resource_caches r WHERE r.artifact_id = a.id)";
        let sql = format!(
            "SELECT a.id, a.in_store FROM artifacts a LEFT JOIN builds b ON b.id = a.build_id WHERE {no_cache} AND ( \
               (a.build_id IS NOT NULL AND b.finished_at IS NOT NULL AND b.finished_at < $1 AND {rel}) \
               OR (a.build_id IS NULL AND a.kind <> {image} AND a.created_at < $2) \
               OR (a.build_id IS NULL AND a.kind = {image} AND COALESCE(a.last_used_at, a.created_at) < $3)) \
             ORDER BY a.created_at, a.id",
            rel = released("b"),
            image = sql_literal(ArtifactKind::Image)
        );
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql)
            .bind(cut.build_ended_before)
            .bind(cut.unowned_before)
            .bind(cut.image_used_before)
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, in_store)| ReleasedArtifact {
                id,
                in_store: in_store != 0,
            })
            .collect())
    }

    /// Whether artifact `id` is still owned: by a resource cache, or by a
    /// build (of any status).
    pub(crate) async fn artifact_owned(&self, id: &str) -> Result<bool, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM artifacts a WHERE a.id = $1 AND (a.build_id IS NOT NULL \
             OR EXISTS (SELECT 1 FROM resource_caches r WHERE r.artifact_id = a.id))",
        )
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.is_some())
    }

    /// Forgets artifact `id` (its data already deleted from the store) and
    /// marks the volumes holding it `destroying`, in one transaction;
    /// answers how many volumes it marked.
    pub(crate) async fn forget_artifact(&self, id: &str) -> Result<u64, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        let marked = sqlx::query(
            "UPDATE volumes SET state = $1 WHERE artifact_id = $2 AND state IN ($3, $4)",
        )
        .bind(HandleState::Destroying.as_str())
        .bind(id)
        .bind(HandleState::Created.as_str())
        .bind(HandleState::Failed.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("DELETE FROM artifacts WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(marked)
    }
}
