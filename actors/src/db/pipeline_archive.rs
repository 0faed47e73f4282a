//! Archiving stored pipelines (Concourse's `atc/db/pipeline.go` `Archive`
//! and `pipeline_lifecycle.go` `ArchiveAbandonedPipelines`): an archived
//! pipeline is paused and kept, config and builds, until it is set again.

use crate::db::pipelines::{pipeline_row, PipelineRaw, PIPELINE_COLUMNS};
use crate::db::{now_ms, PipelineRow, Pipelines};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

use super::pipelines::Parent;

/// The pipelines (ids) a `set_pipeline` step set that are abandoned: their
/// parent pipeline or job is gone, their parent pipeline is archived, or
/// the job has a successful build newer than the one that set them (which
/// therefore no longer sets them).
const ABANDONED: &str = "SELECT p.id FROM pipelines p \
     LEFT JOIN pipelines parent ON parent.id = p.parent_pipeline_id \
     LEFT JOIN pipeline_jobs j ON j.pipeline_id = p.parent_pipeline_id AND j.name = p.parent_job \
     WHERE p.parent_pipeline_id IS NOT NULL AND p.archived = 0 AND ( \
       parent.id IS NULL OR parent.archived <> 0 OR j.name IS NULL OR EXISTS ( \
         SELECT 1 FROM builds b WHERE b.team = parent.team AND b.pipeline = parent.name \
         AND b.job = p.parent_job AND b.id > p.parent_build_id AND b.status = $1)) \
     ORDER BY p.id";

impl Pipelines<'_> {
    /// Archives pipeline `id`: paused, archived (its config, jobs and
    /// builds kept). False when it already was.
    pub(crate) async fn archive_pipeline(&self, id: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(&format!(
            "UPDATE pipelines SET archived = 1, archived_at = $1, paused = 1, updated_at = {} \
             WHERE id = $2 AND archived = 0",
            super::job_builds::NEXT_STAMP
        ))
        .bind(now_ms())
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records that `parent`'s step set pipeline `id` again without a
    /// change (Concourse's `SetParentIDs`): it stays that build's child.
    pub(crate) async fn set_pipeline_parent(
        &self,
        id: i64,
        parent: &Parent,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE pipelines SET parent_pipeline_id = $1, parent_job = $2, parent_build_id = $3 WHERE id = $4",
        )
        .bind(parent.pipeline_id)
        .bind(&parent.job)
        .bind(parent.build_id)
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// The pipelines archived before `cutoff` (unix ms).
    pub(crate) async fn archived_before(
        &self,
        cutoff: i64,
    ) -> Result<Vec<PipelineRow>, EngineError> {
        let rows: Vec<PipelineRaw> = sqlx::query_as(&format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE archived <> 0 AND archived_at < $1 ORDER BY id"
        ))
        .bind(cutoff)
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter().map(|r| pipeline_row(self.db, r)).collect()
    }

    /// Archives every abandoned child pipeline, then their children in
    /// turn (an archived parent abandons them); answers those archived.
    pub(crate) async fn archive_abandoned_pipelines(
        &self,
    ) -> Result<Vec<PipelineRow>, EngineError> {
        let mut archived = Vec::new();
        loop {
            let ids: Vec<(i64,)> = sqlx::query_as(ABANDONED)
                .bind(BuildStatus::Succeeded.as_str())
                .fetch_all(self.db.pool())
                .await?;
            if ids.is_empty() {
                return Ok(archived);
            }
            for (id,) in ids {
                if self.archive_pipeline(id).await? {
                    let row: Option<PipelineRaw> = sqlx::query_as(&format!(
                        "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE id = $1"
                    ))
                    .bind(id)
                    .fetch_optional(self.db.pool())
                    .await?;
                    if let Some(row) = row {
                        archived.push(pipeline_row(self.db, row)?);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::db::test_pg::PgDb;
    use crate::db::{test_db, Db, Parent, SetBy};

    /// A finished build of job `job` of pipeline `pipeline`.
    async fn build(db: &Db, pipeline: &str, job: &str, status: &str) -> i64 {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO builds (team, status, plan, created_at, pipeline, job) \
             VALUES ('main', $1, '{}', 0, $2, $3) RETURNING id",
        )
        .bind(status)
        .bind(pipeline)
        .bind(job)
        .fetch_one(db.pool())
        .await
        .unwrap();
        id
    }

    /// Sets `name` as build `build` of `parent`'s job `sp` does.
    async fn set_by(db: &Db, name: &str, parent: i64, build: i64) -> i64 {
        let p = Parent {
            pipeline_id: parent,
            job: "sp".into(),
            build_id: build,
        };
        let by = SetBy {
            parent: Some(&p),
            instance_vars: None,
            ..SetBy::default()
        };
        let jobs = ["j".to_string()];
        let texts = ("jobs: []", "{}");
        let (row, _) = db
            .pipelines()
            .set_pipeline_by("main", name, texts, None, &jobs, (&[], &[]), by)
            .await
            .unwrap();
        assert!(!row.paused, "set by a step: unpaused");
        row.id
    }

    async fn archived(db: &Db) -> Vec<String> {
        let mut names: Vec<String> = db
            .pipelines()
            .archive_abandoned_pipelines()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        names
    }

    /// Concourse's rules: a child is archived once its job has a newer
    /// successful build (not a failed one), recursively; set again, it is
    /// unarchived (by a step: unpaused; by hand: paused).
    async fn children_are_archived_when_no_longer_set(db: &Db) {
        let jobs = ["sp".to_string()];
        let (parent, _) = db
            .pipelines()
            .set_pipeline(
                "main",
                "parent",
                ("jobs: []", "{}"),
                None,
                &jobs,
                (&[], &[]),
            )
            .await
            .unwrap();
        let b1 = build(db, "parent", "sp", "succeeded").await;
        let child = set_by(db, "child", parent.id, b1).await;
        let kept = set_by(db, "kept", parent.id, b1).await;
        // The child's own job set a grandchild.
        let (grand, _) = {
            let p = Parent {
                pipeline_id: child,
                job: "j".into(),
                build_id: build(db, "child", "j", "succeeded").await,
            };
            let by = SetBy {
                parent: Some(&p),
                instance_vars: None,
                ..SetBy::default()
            };
            db.pipelines()
                .set_pipeline_by(
                    "main",
                    "grand",
                    ("jobs: []", "{}"),
                    None,
                    &[],
                    (&[], &[]),
                    by,
                )
                .await
                .unwrap()
        };
        assert_eq!(archived(db).await, Vec::<String>::new());
        // A newer build that failed says nothing; one that succeeded and
        // set only `kept` abandons `child`, and so `grand`.
        build(db, "parent", "sp", "failed").await;
        assert_eq!(archived(db).await, Vec::<String>::new());
        let b3 = build(db, "parent", "sp", "succeeded").await;
        db.pipelines()
            .set_pipeline_parent(
                kept,
                &Parent {
                    pipeline_id: parent.id,
                    job: "sp".into(),
                    build_id: b3,
                },
            )
            .await
            .unwrap();
        assert_eq!(archived(db).await, ["child", "grand"]);
        let row = db
            .pipelines()
            .pipeline_by_id(grand.id)
            .await
            .unwrap()
            .unwrap();
        assert!(row.archived && row.paused, "{row:?}");
        assert!(
            !db.pipelines()
                .pipeline_by_id(kept)
                .await
                .unwrap()
                .unwrap()
                .archived
        );
        // Set again by hand: unarchived, paused, nobody's child.
        let (row, _) = db
            .pipelines()
            .set_pipeline("main", "child", ("jobs: []", "{}"), None, &[], (&[], &[]))
            .await
            .unwrap();
        assert!(
            !row.archived && row.paused && row.parent_build_id.is_none(),
            "{row:?}"
        );
        assert_eq!(archived(db).await, Vec::<String>::new());
        // Archived by hand, set again by a step: unpaused.
        assert!(db.pipelines().archive_pipeline(kept).await.unwrap());
        assert!(
            !db.pipelines().archive_pipeline(kept).await.unwrap(),
            "once"
        );
        set_by(db, "kept", parent.id, b3).await;
        // The job that set it gone from its pipeline: abandoned.
        let texts = ("jobs: []", "{}");
        db.pipelines()
            .set_pipeline("main", "parent", texts, None, &[], (&[], &[]))
            .await
            .unwrap();
        assert_eq!(archived(db).await, ["kept"]);
        db.pipelines()
            .set_pipeline("main", "parent", texts, None, &jobs, (&[], &[]))
            .await
            .unwrap();
        set_by(db, "kept", parent.id, b3).await;
        assert_eq!(archived(db).await, Vec::<String>::new());
        // The parent destroyed: its children are abandoned.
        db.pipelines().destroy_pipeline(parent.id).await.unwrap();
        assert_eq!(archived(db).await, ["kept"]);
        // Those archived before a time, for the retention.
        let names = |rows: Vec<crate::db::PipelineRow>| -> Vec<String> {
            rows.into_iter().map(|r| r.name).collect()
        };
        let later = crate::db::now_ms() + 1;
        assert_eq!(
            names(db.pipelines().archived_before(later).await.unwrap()),
            ["kept", "grand"]
        );
        assert!(db.pipelines().archived_before(0).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn children_are_archived_when_no_longer_set_on_sqlite() {
        let (db, _dir) = test_db().await;
        children_are_archived_when_no_longer_set(&db).await;
    }

    #[tokio::test]
    async fn children_are_archived_when_no_longer_set_on_postgres() {
        let pg = PgDb::new().await;
        children_are_archived_when_no_longer_set(&pg.db).await;
        pg.drop().await;
    }
}
