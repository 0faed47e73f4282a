//! A job's finished build and its next build, as Concourse answers them
//! (`atc/db/build.go`: `latest_completed_build_id` and `next_build_id`,
//! kept by `updateLatestCompletedBuildForJob` / `updateNextBuildForJob`).
//!
//! The finished build is the newest finished rerun of the job's newest
//! finished build that is not a rerun (builds ordered by number, reruns by
//! their rerun number), else that build itself: rerunning build 1 of a job
//! that has a build 2 leaves build 2 the job's finished build, however late
//! the rerun ends. The next build is the oldest pending or started build
//! that is not a rerun, or is a rerun of that newest finished build.

use crate::db::states::sql_list;
use crate::db::Builds;
use crate::error::EngineError;
use crate::views::Build;

use gantry_wire::state::BuildStatus;

impl Builds<'_> {
    /// Job `job` of pipeline `pipeline` of `team`: its finished build and
    /// its next build (see the module's documentation).
    pub(crate) async fn finished_and_next(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<(Option<Build>, Option<Build>), EngineError> {
        let unfinished = sql_list(&BuildStatus::UNFINISHED);
        let newest: Option<(i64,)> = sqlx::query_as(&format!(
            "SELECT id FROM builds WHERE team = $1 AND pipeline = $2 AND job = $3 \
             AND rerun_of IS NULL AND build_number IS NOT NULL AND status NOT IN {unfinished} \
             ORDER BY build_number DESC LIMIT 1"
        ))
        .bind(team)
        .bind(pipeline)
        .bind(job)
        .fetch_optional(self.db.pool())
        .await?;
        let newest = newest.map(|(id,)| id);
        let finished = match newest {
            Some(id) => {
                let rerun: Option<(i64,)> = sqlx::query_as(&format!(
                    "SELECT id FROM builds WHERE rerun_of = $1 AND status NOT IN {unfinished} \
                     ORDER BY rerun_number DESC LIMIT 1"
                ))
                .bind(id)
                .fetch_optional(self.db.pool())
                .await?;
                Some(rerun.map_or(id, |(r,)| r))
            }
            None => None,
        };
        let next: Option<(i64,)> = sqlx::query_as(&format!(
            "SELECT id FROM builds WHERE team = $1 AND pipeline = $2 AND job = $3 \
             AND status IN {unfinished} AND (rerun_of IS NULL OR rerun_of = $4) \
             ORDER BY id LIMIT 1"
        ))
        .bind(team)
        .bind(pipeline)
        .bind(job)
        .bind(newest.unwrap_or(0))
        .fetch_optional(self.db.pool())
        .await?;
        let finished = match finished {
            Some(id) => self.get_build(id).await?,
            None => None,
        };
        let next = match next {
            Some((id,)) => self.get_build(id).await?,
            None => None,
        };
        Ok((finished, next))
    }
}

#[cfg(test)]
mod tests {
    use crate::db::Db;
    use gantry_wire::state::BuildStatus;
    use serde_json::json;

    /// A finished job build `n` of `p/j` (a rerun of `rerun_of` when given).
    async fn job_build(db: &Db, n: i64, rerun_of: Option<(i64, i64)>, status: BuildStatus) -> i64 {
        let id = db
            .builds()
            .create_build("main", &json!({}), "node")
            .await
            .unwrap();
        sqlx::query(
            "UPDATE builds SET pipeline = 'p', job = 'j', build_number = $1, rerun_of = $2, rerun_number = $3 WHERE id = $4",
        )
        .bind(n)
        .bind(rerun_of.map(|(of, _)| of))
        .bind(rerun_of.map(|(_, m)| m))
        .bind(id)
        .execute(db.pool())
        .await
        .unwrap();
        if status != BuildStatus::Pending {
            db.builds()
                .finish_build(id, status, None, None)
                .await
                .unwrap();
        }
        id
    }

    #[tokio::test]
    async fn a_rerun_of_an_older_build_is_not_the_jobs_finished_build_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        reruns_and_finished(&db).await;
    }

    #[tokio::test]
    async fn a_rerun_of_an_older_build_is_not_the_jobs_finished_build_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        reruns_and_finished(&pg.db).await;
        pg.drop().await;
    }

    async fn reruns_and_finished(db: &Db) {
        let db = db.clone();
        let one = job_build(&db, 1, None, BuildStatus::Succeeded).await;
        let two = job_build(&db, 2, None, BuildStatus::Succeeded).await;
        // Build 1.1 ends after build 2.
        let rerun = job_build(&db, 1, Some((one, 1)), BuildStatus::Failed).await;
        let (finished, next) = db
            .builds()
            .finished_and_next("main", "p", "j")
            .await
            .unwrap();
        assert_eq!(finished.map(|b| b.id), Some(two));
        assert!(next.is_none());

        // A rerun of build 2 is its finished build once it ends; while it
        // runs it is the next build, as is a new build 3.
        let two_one = job_build(&db, 2, Some((two, 1)), BuildStatus::Pending).await;
        let (finished, next) = db
            .builds()
            .finished_and_next("main", "p", "j")
            .await
            .unwrap();
        assert_eq!(finished.map(|b| b.id), Some(two));
        assert_eq!(next.map(|b| b.id), Some(two_one));
        db.builds()
            .finish_build(two_one, BuildStatus::Succeeded, Some(0), None)
            .await
            .unwrap();
        let three = job_build(&db, 3, None, BuildStatus::Pending).await;
        let (finished, next) = db
            .builds()
            .finished_and_next("main", "p", "j")
            .await
            .unwrap();
        let finished = finished.unwrap();
        assert_eq!(
            (finished.id, Some(finished.name.as_str())),
            (two_one, Some("2.1"))
        );
        assert_eq!(next.map(|b| b.id), Some(three));
        assert_ne!(rerun, two_one);
    }
}
