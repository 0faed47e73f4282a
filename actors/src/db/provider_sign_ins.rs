//! Sign-ins through a provider under way (table `provider_sign_ins`):
//! each made when a browser is sent to the provider and taken, once, when
//! it comes back.

use crate::db::Teams;
use crate::error::EngineError;
use crate::views::PendingSignIn;

type Row = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    i64,
);

const COLUMNS: &str =
    "state_hash, provider, browser_hash, verifier, nonce, team, cli_port, cli_state, created_at";

impl Teams<'_> {
    /// Stores a sign-in under way, and deletes those made before
    /// `stale_before` (unix ms), which no callback may take any more.
    pub(crate) async fn insert_sign_in(
        &self,
        s: &PendingSignIn,
        stale_before: i64,
    ) -> Result<(), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        sqlx::query("DELETE FROM provider_sign_ins WHERE created_at < $1")
            .bind(stale_before)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "INSERT INTO provider_sign_ins ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&s.state_hash)
        .bind(&s.provider)
        .bind(&s.browser_hash)
        .bind(&s.verifier)
        .bind(&s.nonce)
        .bind(&s.team)
        .bind(s.cli_port.map(i64::from))
        .bind(&s.cli_state)
        .bind(s.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes (deletes and answers) the sign-in of `state_hash`: a second
    /// take of the same state finds nothing.
    pub(crate) async fn take_sign_in(
        &self,
        state_hash: &str,
    ) -> Result<Option<PendingSignIn>, EngineError> {
        let row: Option<Row> = sqlx::query_as(&format!(
            "DELETE FROM provider_sign_ins WHERE state_hash = $1 RETURNING {COLUMNS}"
        ))
        .bind(state_hash)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|r| PendingSignIn {
            state_hash: r.0,
            provider: r.1,
            browser_hash: r.2,
            verifier: r.3,
            nonce: r.4,
            team: r.5,
            cli_port: r.6.and_then(|p| u16::try_from(p).ok()),
            cli_state: r.7,
            created_at: r.8,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(state: &str, created_at: i64) -> PendingSignIn {
        PendingSignIn {
            state_hash: state.into(),
            provider: "oidc".into(),
            browser_hash: "b".into(),
            verifier: "v".into(),
            nonce: "n".into(),
            team: Some("red".into()),
            cli_port: Some(40123),
            cli_state: Some("c".into()),
            created_at,
        }
    }

    #[tokio::test]
    async fn a_sign_in_is_taken_once_and_stale_ones_go_as_new_ones_come() {
        let (db, _dir) = crate::db::test_db().await;
        let teams = db.teams();
        teams.insert_sign_in(&pending("old", 10), 0).await.unwrap();
        teams.insert_sign_in(&pending("s", 100), 0).await.unwrap();
        assert_eq!(
            teams.take_sign_in("s").await.unwrap(),
            Some(pending("s", 100))
        );
        assert_eq!(teams.take_sign_in("s").await.unwrap(), None, "used once");
        // A new sign-in deletes those made before its cut-off.
        teams
            .insert_sign_in(&pending("new", 200), 50)
            .await
            .unwrap();
        assert_eq!(teams.take_sign_in("old").await.unwrap(), None);
        assert!(teams.take_sign_in("new").await.unwrap().is_some());
    }
}
