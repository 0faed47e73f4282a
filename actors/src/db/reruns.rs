//! Reruns (`rerun-build`): job builds given the inputs another build of
//! the job was given, named `N.M` (the M-th rerun of build N).

use super::job_builds::{insert_build_details, NewJobBuild};
use super::{now_ms, Builds};
use crate::error::EngineError;
use crate::views::Build;
use gantry_wire::state::BuildStatus;

/// What a rerun is created as: started at once (its plan, turns and
/// inputs) or waiting (why: its job or pipeline is paused).
pub(crate) enum NewRerun<'a> {
    /// Runnable now.
    Ready(&'a NewJobBuild),
    /// Held pending, for this reason.
    Waiting(&'a str),
}

impl Builds<'_> {
    /// The build of job `job` of pipeline `pipeline` of `team` named
    /// `number` (`rerun` None) or `number.rerun`, if any.
    pub(crate) async fn job_build_named(
        &self,
        (team, pipeline, job): (&str, &str, &str),
        number: i64,
        rerun: Option<i64>,
    ) -> Result<Option<Build>, EngineError> {
        let (id,): (Option<i64>,) = sqlx::query_as(
            "SELECT MAX(id) FROM builds WHERE team = $1 AND pipeline = $2 AND job = $3 \
             AND build_number = $4 AND COALESCE(rerun_number, 0) = $5",
        )
        .bind(team)
        .bind(pipeline)
        .bind(job)
        .bind(number)
        .bind(rerun.unwrap_or(0))
        .fetch_one(self.db.pool())
        .await?;
        match id {
            Some(id) => self.get_build(id).await,
            None => Ok(None),
        }
    }

    /// Creates a rerun of build `of` (a job build: its pipeline `of.1`,
    /// number `of.2`), owned by `web_node` when ready; answers its id and
    /// its rerun number (one past the original's reruns so far).
    pub(crate) async fn create_rerun(
        &self,
        (of, pipeline_id, number): (&Build, i64, i64),
        new: NewRerun<'_>,
        web_node: &str,
    ) -> Result<(i64, i64), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        if let NewRerun::Ready(b) = &new {
            self.lock_turn_keys(&mut tx, std::slice::from_ref(*b))
                .await?;
        }
        // The job's row is written first, so two reruns at once take
        // turns for their numbers.
        sqlx::query("UPDATE pipeline_jobs SET next_build_number = next_build_number WHERE pipeline_id = $1 AND name = $2")
            .bind(pipeline_id)
            .bind(of.job.as_deref().unwrap_or_default())
            .execute(&mut *tx)
            .await?;
        let (rerun,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(MAX(rerun_number), 0) + 1 FROM builds WHERE rerun_of = $1",
        )
        .bind(of.id)
        .fetch_one(&mut *tx)
        .await?;
        let (plan, node, waiting) = match &new {
            NewRerun::Ready(b) => (
                self.db
                    .seal_at_rest(super::at_rest::PLAN, &b.plan.to_string()),
                Some(web_node),
                None,
            ),
            NewRerun::Waiting(why) => ("null".to_string(), None, Some(*why)),
        };
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO builds (team, status, plan, created_at, web_node, pipeline, job, build_number, waiting, rerun_of, rerun_number) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        )
        .bind(&of.team)
        .bind(BuildStatus::Pending.as_str())
        .bind(plan)
        .bind(now_ms())
        .bind(node)
        .bind(&of.pipeline)
        .bind(&of.job)
        .bind(number)
        .bind(waiting)
        .bind(of.id)
        .bind(rerun)
        .fetch_one(&mut *tx)
        .await?;
        if let NewRerun::Ready(b) = new {
            insert_build_details(&mut tx, id, b).await?;
        }
        tx.commit().await?;
        Ok((id, rerun))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    /// Reruns of build 1 are named 1.1 then 1.2 (a rerun of a rerun
    /// reruns the original), found by those names, and record the
    /// original; a held one waits, saying what it reruns.
    #[tokio::test]
    async fn reruns_are_named_n_dot_m_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        named(&db).await;
    }

    #[tokio::test]
    async fn reruns_are_named_n_dot_m_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        named(&pg.db).await;
        pg.drop().await;
    }

    async fn named(db: &Db) {
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
        let build = NewJobBuild {
            team: "main".into(),
            pipeline_id: row.id,
            pipeline: "p".into(),
            job: "j".into(),
            plan: serde_json::json!({"a": 1}),
            turns: vec![],
            inputs: vec![("x".into(), "x".into(), serde_json::json!({"v": "1"}))],
        };
        let created = db
            .builds()
            .create_job_builds(std::slice::from_ref(&build), "node")
            .await
            .unwrap();
        let (first, number) = created[0];
        let at = ("main", "p", "j");
        let original = db
            .builds()
            .job_build_named(at, 1, None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((original.id, number), (first, 1));
        assert_eq!(original.name, "1");
        let (a, m) = db
            .builds()
            .create_rerun((&original, row.id, 1), NewRerun::Ready(&build), "node")
            .await
            .unwrap();
        let (b, n) = db
            .builds()
            .create_rerun((&original, row.id, 1), NewRerun::Waiting("paused"), "node")
            .await
            .unwrap();
        assert_eq!((m, n), (1, 2));
        let one = db
            .builds()
            .job_build_named(at, 1, Some(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(one.id, a);
        assert_eq!(one.name, "1.1");
        assert_eq!(one.rerun_of.as_ref().map(|r| r.id), Some(first));
        assert_eq!(one.concourse.rerun_number, Some(1));
        assert_eq!(one.build_number, Some(1));
        let inputs = db.versions().build_versions(a).await.unwrap();
        assert_eq!(inputs.len(), 1);
        let two = db
            .builds()
            .job_build_named(at, 1, Some(2))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((two.id, two.name.as_str()), (b, "1.2"));
        let waiting = db.builds().waiting_builds().await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!((waiting[0].id, waiting[0].rerun_of), (b, Some(first)));
        assert!(db
            .builds()
            .job_build_named(at, 1, Some(3))
            .await
            .unwrap()
            .is_none());
        assert!(db
            .builds()
            .job_build_named(at, 2, None)
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            db.builds()
                .job_build_named(at, 1, None)
                .await
                .unwrap()
                .unwrap()
                .id,
            first
        );
    }
}
