//! Comments on resources' pins by hand (`pin-resource --comment`,
//! Concourse's `pin_comment`): kept while a pin stands, gone with an
//! unpin ([`Pipelines::pin_resource`]).

use std::collections::HashMap;

use super::Versions;
use crate::error::EngineError;

impl Versions<'_> {
    /// Sets the comment of the pin of resource `resource` of pipeline
    /// `id`; false when it is not pinned by hand.
    pub(crate) async fn set_pin_comment(
        &self,
        id: i64,
        resource: &str,
        comment: &str,
    ) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE pipeline_resources SET pin_comment = $1 \
             WHERE pipeline_id = $2 AND name = $3 AND pinned IS NOT NULL",
        )
        .bind(comment)
        .bind(id)
        .bind(resource)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The comments of the pins of pipeline `id`'s resources, by resource.
    pub(crate) async fn pin_comments(
        &self,
        id: i64,
    ) -> Result<HashMap<String, String>, EngineError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT name, pin_comment FROM pipeline_resources \
             WHERE pipeline_id = $1 AND pin_comment IS NOT NULL",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::db::Db;

    /// A comment needs a pin, stays while pinned again, and goes with an
    /// unpin.
    #[tokio::test]
    async fn a_pin_comment_needs_a_pin_and_goes_with_an_unpin_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        comments(&db).await;
    }

    #[tokio::test]
    async fn a_pin_comment_needs_a_pin_and_goes_with_an_unpin_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        comments(&pg.db).await;
        pg.drop().await;
    }

    async fn comments(db: &Db) {
        let r = crate::db::ResourceRow {
            name: "r".into(),
            scope: "main".into(),
            config: "c".into(),
            check_every_ms: None,
            pinned: None,
        };
        let (row, _) = db
            .pipelines()
            .set_pipeline(
                "main",
                "p",
                ("jobs: []", "{}"),
                None,
                &[],
                (std::slice::from_ref(&r), &[]),
            )
            .await
            .unwrap();
        assert!(!db
            .versions()
            .set_pin_comment(row.id, "r", "why")
            .await
            .unwrap());
        assert!(db.versions().pin_comments(row.id).await.unwrap().is_empty());
        assert!(db
            .pipelines()
            .pin_resource(row.id, "r", Some("{\"v\":\"1\"}"))
            .await
            .unwrap());
        assert!(db
            .versions()
            .set_pin_comment(row.id, "r", "broken after 1")
            .await
            .unwrap());
        assert!(db
            .pipelines()
            .pin_resource(row.id, "r", Some("{\"v\":\"2\"}"))
            .await
            .unwrap());
        let comments = db.versions().pin_comments(row.id).await.unwrap();
        assert_eq!(
            comments.get("r").map(String::as_str),
            Some("broken after 1")
        );
        assert!(db
            .pipelines()
            .pin_resource(row.id, "r", None)
            .await
            .unwrap());
        assert!(db.versions().pin_comments(row.id).await.unwrap().is_empty());
        assert!(!db
            .versions()
            .set_pin_comment(row.id, "nope", "x")
            .await
            .unwrap());
    }
}
