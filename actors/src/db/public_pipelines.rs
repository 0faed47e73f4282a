//! Public pipelines (Concourse's `expose-pipeline`): the `public` flag of
//! a pipeline (set by hand, kept across sets) and of its jobs and
//! resources (the config's `public: true`, written each time it is set),
//! and what a reader outside the team may see by them.

use sqlx::{Any, Transaction};

use crate::db::Pipelines;
use crate::error::EngineError;
use crate::views::Publicity;

/// The jobs and resources a config marks `public: true`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PublicParts<'a> {
    /// Public jobs: anyone who may read the pipeline reads their builds'
    /// plans and logs.
    pub jobs: &'a [String],
    /// Public resources: anyone who may read the pipeline reads their
    /// versions' metadata.
    pub resources: &'a [String],
}

/// Writes which of pipeline `id`'s jobs and resources are public, in the
/// transaction that sets it (after its jobs and resources are written).
pub(super) async fn write_public_parts(
    tx: &mut Transaction<'_, Any>,
    id: i64,
    parts: &PublicParts<'_>,
) -> Result<(), EngineError> {
    for (table, names) in [
        ("pipeline_jobs", parts.jobs),
        ("pipeline_resources", parts.resources),
    ] {
        sqlx::query(&format!(
            "UPDATE {table} SET public = 0 WHERE pipeline_id = $1 AND public <> 0"
        ))
        .bind(id)
        .execute(&mut **tx)
        .await?;
        for name in names {
            sqlx::query(&format!(
                "UPDATE {table} SET public = 1 WHERE pipeline_id = $1 AND name = $2"
            ))
            .bind(id)
            .bind(name)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

impl Pipelines<'_> {
    /// Exposes (`true`) or hides pipeline `id`.
    pub(crate) async fn set_pipeline_public(
        &self,
        id: i64,
        public: bool,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE pipelines SET public = $1 WHERE id = $2")
            .bind(i64::from(public))
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Whether pipeline `pipeline` of `team` is exposed, and whether its
    /// job `job` and resource `resource` (when asked) are public; none
    /// when there is no such pipeline. One statement, no config opened:
    /// what every read by someone outside the team asks first.
    pub(crate) async fn publicity(
        &self,
        team: &str,
        pipeline: &str,
        job: Option<&str>,
        resource: Option<&str>,
    ) -> Result<Option<Publicity>, EngineError> {
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT p.public, \
             COALESCE((SELECT j.public FROM pipeline_jobs j WHERE j.pipeline_id = p.id AND j.name = $3), 0), \
             COALESCE((SELECT r.public FROM pipeline_resources r WHERE r.pipeline_id = p.id AND r.name = $4), 0) \
             FROM pipelines p WHERE p.team = $1 AND p.name = $2",
        )
        .bind(team)
        .bind(pipeline)
        .bind(job.unwrap_or_default())
        .bind(resource.unwrap_or_default())
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(pipeline, job, resource)| Publicity {
            pipeline: pipeline != 0,
            job: job != 0,
            resource: resource != 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::PublicParts;
    use crate::db::test_pg::PgDb;
    use crate::db::{test_db, Db, ResourceRow, SetBy, PIPELINE_ID};
    use crate::views::Publicity;

    fn resource(name: &str) -> ResourceRow {
        ResourceRow {
            name: name.into(),
            scope: format!("pipeline:{PIPELINE_ID}/{name}"),
            config: "c".into(),
            check_every_ms: None,
            pinned: None,
        }
    }

    /// Sets pipeline `p` (jobs a and b, resources r and s) with `public`
    /// jobs and resources; answers its id.
    async fn set(db: &Db, public_jobs: &[&str], public_resources: &[&str]) -> i64 {
        let jobs = vec!["a".to_string(), "b".to_string()];
        let public_jobs: Vec<String> = public_jobs.iter().map(|j| j.to_string()).collect();
        let public_resources: Vec<String> =
            public_resources.iter().map(|r| r.to_string()).collect();
        let by = SetBy {
            public: PublicParts {
                jobs: &public_jobs,
                resources: &public_resources,
            },
            ..SetBy::default()
        };
        let (row, _) = db
            .pipelines()
            .set_pipeline_by(
                "main",
                "p",
                ("jobs: []", "{}"),
                None,
                &jobs,
                (&[resource("r"), resource("s")], &[]),
                by,
            )
            .await
            .unwrap();
        row.id
    }

    async fn publicity(db: &Db, job: &str, resource: &str) -> Option<Publicity> {
        db.pipelines()
            .publicity("main", "p", Some(job), Some(resource))
            .await
            .unwrap()
    }

    async fn public_flags_follow_the_config_and_exposing_survives_a_set(db: &Db) {
        assert_eq!(
            db.pipelines()
                .publicity("main", "p", None, None)
                .await
                .unwrap(),
            None,
            "no such pipeline"
        );
        let id = set(db, &["a"], &["s"]).await;
        let hidden = publicity(db, "a", "s").await.unwrap();
        assert_eq!(
            hidden,
            Publicity {
                pipeline: false,
                job: true,
                resource: true
            }
        );
        db.pipelines().set_pipeline_public(id, true).await.unwrap();
        let shown = publicity(db, "b", "r").await.unwrap();
        assert_eq!(
            shown,
            Publicity {
                pipeline: true,
                job: false,
                resource: false
            }
        );
        // Set again: job a is no longer public, b is; the pipeline stays
        // exposed (the flag is the pipeline's, not its config's).
        set(db, &["b"], &[]).await;
        assert_eq!(
            publicity(db, "a", "s").await.unwrap(),
            Publicity {
                pipeline: true,
                job: false,
                resource: false
            }
        );
        assert!(publicity(db, "b", "r").await.unwrap().job);
        assert!(
            db.pipelines()
                .pipeline("main", "p")
                .await
                .unwrap()
                .unwrap()
                .public
        );
        assert!(
            !publicity(db, "no-such-job", "r").await.unwrap().job,
            "an unknown job is not public"
        );
        db.pipelines().set_pipeline_public(id, false).await.unwrap();
        assert!(!publicity(db, "b", "r").await.unwrap().pipeline);
    }

    #[tokio::test]
    async fn public_flags_follow_the_config_and_exposing_survives_a_set_on_sqlite() {
        let (db, _dir) = test_db().await;
        public_flags_follow_the_config_and_exposing_survives_a_set(&db).await;
    }

    #[tokio::test]
    async fn public_flags_follow_the_config_and_exposing_survives_a_set_on_postgres() {
        let pg = PgDb::new().await;
        public_flags_follow_the_config_and_exposing_survives_a_set(&pg.db).await;
        pg.drop().await;
    }
}
