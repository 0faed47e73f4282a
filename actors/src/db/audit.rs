//! The audit log (table `audit_log`): who changed what through the API.

use crate::db::Teams;
use crate::error::EngineError;
use crate::views::AuditEntry;

type AuditTuple = (i64, i64, Option<String>, String, String, String, i64);

fn entry(t: AuditTuple) -> AuditEntry {
    AuditEntry {
        id: t.0,
        at: t.1,
        team: t.2,
        actor: t.3,
        action: t.4,
        target: t.5,
        status: t.6,
    }
}

impl Teams<'_> {
    /// Appends one entry (its `id` is given by the database).
    pub(crate) async fn record_audit(&self, e: &AuditEntry) -> Result<(), EngineError> {
        sqlx::query(
            "INSERT INTO audit_log (at, team, actor, action, target, status) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(e.at)
        .bind(&e.team)
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(e.status)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// One page of entries in the order they were made (of `team` only,
    /// when given): at most `limit` with ids above `after`.
    pub(crate) async fn audit_page(
        &self,
        team: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, EngineError> {
        let rows: Vec<AuditTuple> = match team {
            Some(team) => {
                sqlx::query_as(&format!(
                    "SELECT id, at, team, actor, action, target, status FROM audit_log \
                     WHERE team = $1 AND id > $2 ORDER BY id LIMIT {}",
                    limit.max(0)
                ))
                .bind(team)
                .bind(after)
                .fetch_all(self.db.pool())
                .await?
            }
            None => {
                sqlx::query_as(&format!(
                    "SELECT id, at, team, actor, action, target, status FROM audit_log \
                     WHERE id > $1 ORDER BY id LIMIT {}",
                    limit.max(0)
                ))
                .bind(after)
                .fetch_all(self.db.pool())
                .await?
            }
        };
        Ok(rows.into_iter().map(entry).collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::views::AuditEntry;

    #[tokio::test]
    async fn entries_read_back_in_order_by_team_and_in_pages() {
        let (db, _dir) = crate::db::test_db().await;
        for (i, team) in ["red", "blue", "red", "red"].into_iter().enumerate() {
            db.teams()
                .record_audit(&AuditEntry {
                    id: 0,
                    at: 100 + i as i64,
                    team: Some(team.into()),
                    actor: format!("token:{i}"),
                    action: "pausePipeline".into(),
                    target: format!("/api/v1/teams/{team}/pipelines/p/pause"),
                    status: 200,
                })
                .await
                .unwrap();
        }
        let red = db.teams().audit_page(Some("red"), 0, 10).await.unwrap();
        let actors: Vec<&str> = red.iter().map(|e| e.actor.as_str()).collect();
        assert_eq!(actors, ["token:0", "token:2", "token:3"]);
        let rest = db
            .teams()
            .audit_page(Some("red"), red[0].id, 1)
            .await
            .unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].actor, "token:2");
        assert_eq!(db.teams().audit_page(None, 0, 10).await.unwrap().len(), 4);
    }
}
