//! The turns job builds wait for (`build_turns`): Concourse's job `serial`,
//! `serial_groups` and `max_in_flight`. A build may start when, for each of
//! its keys, fewer than the key's `max_in_flight` builds created before it
//! are unfinished: a decision any web node reaches alike from the rows.

use super::{now_ms, Backend, Builds};
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// One key of a build's turns, and the unfinished builds ahead of it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnAhead {
    /// The key: a job, or a serial group, of a team's pipeline.
    pub key: String,
    /// How many builds of the key may run at once.
    pub max_in_flight: i64,
    /// The unfinished builds of the key created before this one, oldest
    /// first.
    pub ahead: Vec<i64>,
}

impl TurnAhead {
    /// Whether the builds ahead leave this build no room yet.
    pub(crate) fn blocks(&self) -> bool {
        self.ahead.len() as i64 >= self.max_in_flight
    }
}

impl Builds<'_> {
    /// Creates a pending build (as [`Builds::create_build`]) that takes turns
    /// on `turns` (key, `max_in_flight`), in one transaction. On PostgreSQL
    /// the transaction first takes a lock per key, so builds of one key
    /// become visible in the order of their ids: no build can see none
    /// ahead of it while an older one of its key is still being created.
    /// (SQLite has one writer at a time.)
    pub(crate) async fn create_build_taking_turns(
        &self,
        team: &str,
        plan: &serde_json::Value,
        web_node: &str,
        turns: &[(String, u32)],
    ) -> Result<i64, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        if self.db.backend() == Backend::Postgres {
            let mut keys: Vec<&str> = turns.iter().map(|(k, _)| k.as_str()).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                sqlx::query(
                    "SELECT 1 FROM (SELECT pg_advisory_xact_lock(7, hashtext($1))) AS locked",
                )
                .bind(key)
                .execute(&mut *tx)
                .await?;
            }
        }
        let (id,): (i64,) = sqlx::query_as(super::builds::INSERT_BUILD)
            .bind(team)
            .bind(
                self.db
                    .seal_at_rest(super::at_rest::PLAN, &plan.to_string()),
            )
            .bind(now_ms())
            .bind(web_node)
            .bind(BuildStatus::Pending.as_str())
            .fetch_one(&mut *tx)
            .await?;
        for (key, n) in turns {
            sqlx::query(
                "INSERT INTO build_turns (build_id, turn_key, max_in_flight) VALUES ($1, $2, $3)",
            )
            .bind(id)
            .bind(key)
            .bind(i64::from(*n))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// For each key build `id` takes turns on, the unfinished builds of
    /// that key created before it.
    pub(crate) async fn builds_ahead(&self, id: i64) -> Result<Vec<TurnAhead>, EngineError> {
        let keys: Vec<(String, i64)> = sqlx::query_as(
            "SELECT turn_key, max_in_flight FROM build_turns WHERE build_id = $1 ORDER BY turn_key",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await?;
        let mut out = Vec::new();
        for (key, max_in_flight) in keys {
            let ahead: Vec<(i64,)> = sqlx::query_as(
                "SELECT t.build_id FROM build_turns t JOIN builds b ON b.id = t.build_id \
                 WHERE t.turn_key = $1 AND t.build_id < $2 AND b.status IN ($3, $4) \
                 ORDER BY t.build_id",
            )
            .bind(&key)
            .bind(id)
            .bind(BuildStatus::Pending.as_str())
            .bind(BuildStatus::Started.as_str())
            .fetch_all(self.db.pool())
            .await?;
            out.push(TurnAhead {
                key,
                max_in_flight,
                ahead: ahead.into_iter().map(|r| r.0).collect(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::test_pg::PgDb;
    use crate::db::Db;
    use gantry_wire::state::BuildStatus;

    async fn turns_round_trip(db: &Db) {
        let build = |turns: Vec<(String, u32)>| async move {
            db.builds()
                .create_build_taking_turns("main", &serde_json::json!({}), "n", &turns)
                .await
                .unwrap()
        };
        let job = ("main/p/job:j".to_string(), 2u32);
        let group = ("main/p/group:g".to_string(), 1u32);
        let a = build(vec![job.clone()]).await;
        let b = build(vec![job.clone()]).await;
        let c = build(vec![job.clone(), group.clone()]).await;
        // A build of another job in a serial group with c.
        let d = build(vec![group]).await;
        let blocked = |t: &[TurnAhead]| t.iter().any(TurnAhead::blocks);
        assert!(!blocked(&db.builds().builds_ahead(a).await.unwrap()));
        assert!(!blocked(&db.builds().builds_ahead(b).await.unwrap()));
        // c: two builds of its job ahead (max 2); nothing ahead in g.
        let c_turns = db.builds().builds_ahead(c).await.unwrap();
        assert_eq!(
            c_turns,
            vec![
                TurnAhead {
                    key: "main/p/group:g".into(),
                    max_in_flight: 1,
                    ahead: vec![]
                },
                TurnAhead {
                    key: "main/p/job:j".into(),
                    max_in_flight: 2,
                    ahead: vec![a, b]
                },
            ]
        );
        assert!(blocked(&c_turns));
        // d waits for c in group g.
        assert_eq!(db.builds().builds_ahead(d).await.unwrap()[0].ahead, vec![c]);
        // a ends: c may start.
        db.builds()
            .finish_build(a, BuildStatus::Succeeded, Some(0), None)
            .await
            .unwrap();
        assert!(!blocked(&db.builds().builds_ahead(c).await.unwrap()));
        // A build with no turns never waits.
        assert!(db
            .builds()
            .builds_ahead(build(vec![]).await)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn turns_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        turns_round_trip(&db).await;
    }

    /// Builds of one key created at once: each sees exactly the builds
    /// with lower ids ahead of it, whatever order their creations commit in.
    #[tokio::test]
    async fn turns_on_postgres_follow_the_ids() {
        let pg = PgDb::new().await;
        turns_round_trip(&pg.db).await;
        let created = (0..12).map(|_| {
            let db = pg.db.clone();
            tokio::spawn(async move {
                let turns = [("main/p/job:race".to_string(), 1)];
                let id = db
                    .builds()
                    .create_build_taking_turns("main", &serde_json::json!({}), "n", &turns)
                    .await
                    .unwrap();
                // Looked at right after its own creation, as a build does.
                (
                    id,
                    db.builds().builds_ahead(id).await.unwrap()[0].ahead.clone(),
                )
            })
        });
        let mut seen = Vec::new();
        for c in created {
            seen.push(c.await.unwrap());
        }
        seen.sort();
        let ids: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
        for (i, (id, ahead)) in seen.iter().enumerate() {
            assert_eq!(ahead, &ids[..i].to_vec(), "build {id}");
        }
        pg.drop().await;
    }
}
