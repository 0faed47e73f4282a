//! Builds triggered by hand whose inputs cannot be satisfied yet: pending,
//! with why (`builds.waiting`), no plan yet, and no web node running or
//! taking them over. Each scheduling round tries their inputs again; once
//! they resolve, the build is filled (its plan, turns and inputs, in one
//! transaction, and only while it still waits) and started. An abort ends
//! it where it waits.

use super::job_builds::{insert_build_details, NewJobBuild};
use super::{now_ms, Builds};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// A build waiting for its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingBuild {
    /// Its id.
    pub id: i64,
    /// Its team.
    pub team: String,
    /// Its pipeline's name.
    pub pipeline: String,
    /// Its job.
    pub job: String,
    /// Why it waits.
    pub waiting: String,
    /// When it was created (unix ms): the checks it waits for are those
    /// that finished since.
    pub created_at: i64,
    /// Whether it found the checks of its inputs done (then it waits for
    /// no check again).
    pub inputs_checked: bool,
    /// The build it reruns (its inputs are that build's), for a rerun.
    pub rerun_of: Option<i64>,
}

impl Builds<'_> {
    /// Creates a pending build of job `job` of pipeline `pipeline_id`
    /// (named `pipeline`, of `team`) that waits, for `why`; answers its id
    /// and its number within the job.
    pub(crate) async fn create_waiting_build(
        &self,
        (team, pipeline_id, pipeline): (&str, i64, &str),
        job: &str,
        why: &str,
    ) -> Result<(i64, i64), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        let (number,): (i64,) = sqlx::query_as(
            "UPDATE pipeline_jobs SET next_build_number = next_build_number + 1 \
             WHERE pipeline_id = $1 AND name = $2 RETURNING next_build_number - 1",
        )
        .bind(pipeline_id)
        .bind(job)
        .fetch_one(&mut *tx)
        .await?;
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO builds (team, status, plan, created_at, pipeline, job, build_number, waiting) \
             VALUES ($1, $2, 'null', $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(team)
        .bind(BuildStatus::Pending.as_str())
        .bind(now_ms())
        .bind(pipeline)
        .bind(job)
        .bind(number)
        .bind(why)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((id, number))
    }

    /// Every build waiting for its inputs, oldest first.
    pub(crate) async fn waiting_builds(&self) -> Result<Vec<WaitingBuild>, EngineError> {
        // Only a waiting build's own insert writes `waiting`, always with
        // its pipeline and job.
        type Row = (
            i64,
            String,
            String,
            String,
            String,
            i64,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, team, pipeline, job, waiting, created_at, inputs_checked_at, rerun_of FROM builds \
             WHERE waiting IS NOT NULL AND status = $1 ORDER BY id",
        )
        .bind(BuildStatus::Pending.as_str())
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(id, team, pipeline, job, waiting, created_at, checked, rerun_of)| WaitingBuild {
                    id,
                    team,
                    pipeline,
                    job,
                    waiting,
                    created_at,
                    inputs_checked: checked.is_some(),
                    rerun_of,
                },
            )
            .collect())
    }

    /// Records that waiting build `id` found the checks of its inputs
    /// done: it waits for no check again.
    pub(crate) async fn set_inputs_checked(&self, id: i64) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE builds SET inputs_checked_at = $1 \
             WHERE id = $2 AND waiting IS NOT NULL AND inputs_checked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Says why build `id` still waits; false when it no longer does.
    pub(crate) async fn set_waiting(&self, id: i64, why: &str) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE builds SET waiting = $1 WHERE id = $2 AND waiting IS NOT NULL AND status = $3",
        )
        .bind(why)
        .bind(id)
        .bind(BuildStatus::Pending.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Fills waiting build `id` with `build`'s plan, turns and inputs, run
    /// by `web_node` from now on; false (and nothing written) when it no
    /// longer waits (aborted, or filled by another round).
    pub(crate) async fn fill_waiting_build(
        &self,
        id: i64,
        build: &NewJobBuild,
        web_node: &str,
    ) -> Result<bool, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        self.lock_turn_keys(&mut tx, std::slice::from_ref(build))
            .await?;
        let done = sqlx::query(
            "UPDATE builds SET plan = $1, web_node = $2, waiting = NULL \
             WHERE id = $3 AND waiting IS NOT NULL AND status = $4",
        )
        .bind(
            self.db
                .seal_at_rest(super::at_rest::PLAN, &build.plan.to_string()),
        )
        .bind(web_node)
        .bind(id)
        .bind(BuildStatus::Pending.as_str())
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        insert_build_details(&mut tx, id, build).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Ends waiting build `id` aborted; false when it no longer waits.
    pub(crate) async fn abort_waiting_build(&self, id: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE builds SET status = $1, waiting = NULL, finished_at = $2 \
             WHERE id = $3 AND waiting IS NOT NULL AND status = $4",
        )
        .bind(BuildStatus::Aborted.as_str())
        .bind(now_ms())
        .bind(id)
        .bind(BuildStatus::Pending.as_str())
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    /// A waiting build is listed, is no node's to take over, is filled
    /// once (a second fill or an abort after it does nothing), and an
    /// abort ends one that still waits.
    #[tokio::test]
    async fn a_waiting_build_is_filled_or_aborted_once_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        filled_or_aborted_once(&db).await;
    }

    #[tokio::test]
    async fn a_waiting_build_is_filled_or_aborted_once_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        filled_or_aborted_once(&pg.db).await;
        pg.drop().await;
    }

    async fn filled_or_aborted_once(db: &Db) {
        let (row, _) = db
            .pipelines()
            .set_pipeline(
                "main",
                "p",
                ("jobs: []", "{}"),
                None,
                &["j".to_string()],
                (&[], &[]),
            )
            .await
            .unwrap();
        let at = ("main", row.id, "p");
        let (a, n) = db
            .builds()
            .create_waiting_build(at, "j", "input x: no version")
            .await
            .unwrap();
        let (b, m) = db
            .builds()
            .create_waiting_build(at, "j", "input x: no version")
            .await
            .unwrap();
        assert_eq!((n, m), (1, 2));
        let waiting = db.builds().waiting_builds().await.unwrap();
        assert_eq!(waiting.iter().map(|w| w.id).collect::<Vec<_>>(), [a, b]);
        assert!(waiting.iter().all(|w| !w.inputs_checked));
        db.builds().set_inputs_checked(b).await.unwrap();
        let checked: Vec<bool> = db
            .builds()
            .waiting_builds()
            .await
            .unwrap()
            .iter()
            .map(|w| w.inputs_checked)
            .collect();
        assert_eq!(checked, [false, true]);
        assert!(db
            .builds()
            .unfinished_builds("any")
            .await
            .unwrap()
            .is_empty());
        assert!(db
            .builds()
            .set_waiting(a, "input x: disabled")
            .await
            .unwrap());
        assert_eq!(
            db.builds()
                .get_build(a)
                .await
                .unwrap()
                .unwrap()
                .waiting
                .as_deref(),
            Some("input x: disabled")
        );
        let build = NewJobBuild {
            team: "main".into(),
            pipeline_id: row.id,
            pipeline: "p".into(),
            job: "j".into(),
            plan: serde_json::json!({"a": 1}),
            turns: vec![("main/p/j".into(), 1)],
            inputs: vec![("x".into(), "x".into(), serde_json::json!({"v": "1"}))],
        };
        assert!(db
            .builds()
            .fill_waiting_build(a, &build, "node")
            .await
            .unwrap());
        assert!(!db
            .builds()
            .fill_waiting_build(a, &build, "node")
            .await
            .unwrap());
        assert!(!db.builds().abort_waiting_build(a).await.unwrap());
        let filled = db.builds().get_build(a).await.unwrap().unwrap();
        assert_eq!(filled.waiting, None);
        assert_eq!(filled.plan, serde_json::json!({"a": 1}));
        assert_eq!(db.builds().unfinished_builds("node").await.unwrap(), [a]);
        assert!(db.builds().abort_waiting_build(b).await.unwrap());
        assert!(!db.builds().set_waiting(b, "again").await.unwrap());
        assert_eq!(
            db.builds().get_build(b).await.unwrap().unwrap().status,
            BuildStatus::Aborted
        );
        assert!(db.builds().waiting_builds().await.unwrap().is_empty());
    }
}
