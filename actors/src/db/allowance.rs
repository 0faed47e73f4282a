//! Each team's allowance of build creations (`web.builds_per_team_per_minute`):
//! a token bucket of `n` creations at once, refilled at `n` a minute, kept
//! in `team_build_allowance` so that web nodes sharing the database take
//! from one bucket per team. One statement takes a creation, so two nodes
//! (or two requests on one) never take the same token.

use super::Builds;
use crate::error::EngineError;

/// Milliseconds in the minute the allowance is counted over.
const MINUTE_MS: f64 = 60_000.0;

impl Builds<'_> {
    /// Takes one of `team`'s `per_minute` build creations at `now_ms`
    /// (the database's clock, [`Nodes::db_now_ms`]): `Ok(None)` when taken,
    /// `Ok(Some(ms))` when none is left, with how long until the next one.
    pub(crate) async fn take_team_build(
        &self,
        team: &str,
        per_minute: u32,
        now_ms: i64,
    ) -> Result<Option<f64>, EngineError> {
        let n = f64::from(per_minute);
        sqlx::query(
            "INSERT INTO team_build_allowance (team, tokens, at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (team) DO NOTHING",
        )
        .bind(team)
        .bind(n)
        .bind(now_ms)
        .execute(self.db.pool())
        .await?;
        // The tokens at $3: those left plus those refilled since `at_ms`
        // (none when another node's clock reading was later), at most $2.
        const REFILLED: &str = "(CASE WHEN tokens + (CASE WHEN $3 > at_ms THEN $3 - at_ms ELSE 0 END) * $2 / $4 > $2 \
             THEN $2 ELSE tokens + (CASE WHEN $3 > at_ms THEN $3 - at_ms ELSE 0 END) * $2 / $4 END)";
        let taken = sqlx::query(&format!(
            "UPDATE team_build_allowance SET tokens = {REFILLED} - 1, \
             at_ms = CASE WHEN $3 > at_ms THEN $3 ELSE at_ms END \
             WHERE team = $1 AND {REFILLED} >= 1"
        ))
        .bind(team)
        .bind(n)
        .bind(now_ms)
        .bind(MINUTE_MS)
        .execute(self.db.pool())
        .await?;
        if taken.rows_affected() == 1 {
            return Ok(None);
        }
        let (tokens, at_ms): (f64, i64) =
            sqlx::query_as("SELECT tokens, at_ms FROM team_build_allowance WHERE team = $1")
                .bind(team)
                .fetch_one(self.db.pool())
                .await?;
        let refilled = (tokens + (now_ms - at_ms).max(0) as f64 * n / MINUTE_MS).min(n);
        Ok(Some(((1.0 - refilled) * MINUTE_MS / n).max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use crate::db::test_pg::PgDb;
    use crate::db::Db;

    async fn allowance_round_trip(db: &Db) {
        let t0 = 1_000_000;
        for _ in 0..3 {
            assert_eq!(
                db.builds().take_team_build("red", 3, t0).await.unwrap(),
                None
            );
        }
        // The fourth waits 20 s (3 a minute).
        let wait = db
            .builds()
            .take_team_build("red", 3, t0)
            .await
            .unwrap()
            .unwrap();
        assert!((wait - 20_000.0).abs() < 1.0, "{wait}");
        // Another team has its own allowance.
        assert_eq!(
            db.builds().take_team_build("blue", 3, t0).await.unwrap(),
            None
        );
        // One more every 20 s.
        let wait = db
            .builds()
            .take_team_build("red", 3, t0 + 19_000)
            .await
            .unwrap()
            .unwrap();
        assert!((wait - 1_000.0).abs() < 1.0, "{wait}");
        assert_eq!(
            db.builds()
                .take_team_build("red", 3, t0 + 21_000)
                .await
                .unwrap(),
            None
        );
        assert!(db
            .builds()
            .take_team_build("red", 3, t0 + 21_000)
            .await
            .unwrap()
            .is_some());
        // A clock reading earlier than the last one refills nothing.
        assert!(db
            .builds()
            .take_team_build("red", 3, t0)
            .await
            .unwrap()
            .is_some());
        // A long pause refills to the allowance, not beyond.
        let later = t0 + 3_600_000;
        for _ in 0..3 {
            assert_eq!(
                db.builds().take_team_build("red", 3, later).await.unwrap(),
                None
            );
        }
        assert!(db
            .builds()
            .take_team_build("red", 3, later)
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn allowance_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        allowance_round_trip(&db).await;
    }

    /// Many requests at once (as from several web nodes) take exactly the
    /// allowance, never more.
    #[tokio::test]
    async fn allowance_on_postgres_is_taken_once_per_token() {
        let pg = PgDb::new().await;
        allowance_round_trip(&pg.db).await;
        let t = 5_000_000;
        let tries = (0..20).map(|_| {
            let db = pg.db.clone();
            tokio::spawn(async move { db.builds().take_team_build("green", 5, t).await.unwrap() })
        });
        let mut taken = 0;
        for t in tries {
            if t.await.unwrap().is_none() {
                taken += 1;
            }
        }
        assert_eq!(taken, 5);
        pg.drop().await;
    }
}
