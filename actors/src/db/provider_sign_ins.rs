//! Sign-ins through a provider under way (table `provider_sign_ins`):
//! each made when a browser is sent to the provider and taken, once, when
//! the same browser comes back. The PKCE verifier and the nonce are sealed
//! at rest like every other secret the database holds; the state and the
//! browser's cookie are stored only as hashes. The routes that make them
//! are open to anyone, so at most [`MAX_PENDING`] may wait at once.

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

/// The column context of a sign-in's sealed PKCE verifier.
const VERIFIER: &str = "provider_sign_ins.verifier";
/// The column context of a sign-in's sealed nonce.
const NONCE: &str = "provider_sign_ins.nonce";

/// How many sign-ins may wait for their provider's answer at once: the
/// routes beginning them are open, so a caller looping on them fills the
/// table only this far (each row is gone once taken or too old).
pub const MAX_PENDING: i64 = 10_000;

/// What taking a sign-in under way found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The sign-in, now deleted: no second answer may use it.
    SignIn(PendingSignIn),
    /// The state names a sign-in another browser began (or the browser
    /// sent no cookie): it is kept for the browser that began it.
    OtherBrowser,
    /// No sign-in has this state (never made, already taken, forgotten, or
    /// sealed with a key this node no longer has).
    Unknown,
}

impl Teams<'_> {
    /// Stores a sign-in under way, and deletes those made before
    /// `stale_before` (unix ms), which no callback may take any more.
    /// Refuses (unavailable) while [`MAX_PENDING`] others wait.
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
        let (waiting,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM provider_sign_ins")
            .fetch_one(&mut *tx)
            .await?;
        if waiting >= MAX_PENDING {
            return Err(EngineError::Unavailable(format!(
                "{waiting} sign-ins are already waiting for their provider's answer \
                 (at most {MAX_PENDING}): try again in a few minutes"
            )));
        }
        sqlx::query(&format!(
            "INSERT INTO provider_sign_ins ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&s.state_hash)
        .bind(&s.provider)
        .bind(&s.browser_hash)
        .bind(self.db.seal_at_rest(VERIFIER, &s.verifier))
        .bind(self.db.seal_at_rest(NONCE, &s.nonce))
        .bind(&s.team)
        .bind(s.cli_port.map(i64::from))
        .bind(&s.cli_state)
        .bind(s.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes (deletes and answers) the sign-in of `state_hash` begun by
    /// the browser whose cookie hashes to `browser_hash`: a second take of
    /// the same state finds nothing, and another browser's take leaves it.
    pub(crate) async fn take_sign_in(
        &self,
        state_hash: &str,
        browser_hash: Option<&str>,
    ) -> Result<Taken, EngineError> {
        let row: Option<Row> = match browser_hash {
            Some(browser) => {
                sqlx::query_as(&format!(
                    "DELETE FROM provider_sign_ins WHERE state_hash = $1 AND browser_hash = $2 \
                     RETURNING {COLUMNS}"
                ))
                .bind(state_hash)
                .bind(browser)
                .fetch_optional(self.db.pool())
                .await?
            }
            None => None,
        };
        let Some(r) = row else {
            let other: Option<(i64,)> =
                sqlx::query_as("SELECT 1 FROM provider_sign_ins WHERE state_hash = $1")
                    .bind(state_hash)
                    .fetch_optional(self.db.pool())
                    .await?;
            return Ok(match other {
                Some(_) => Taken::OtherBrowser,
                None => Taken::Unknown,
            });
        };
        let (Ok(verifier), Ok(nonce)) = (
            self.db.open_at_rest(VERIFIER, &r.3),
            self.db.open_at_rest(NONCE, &r.4),
        ) else {
            return Ok(Taken::Unknown);
        };
        Ok(Taken::SignIn(PendingSignIn {
            state_hash: r.0,
            provider: r.1,
            browser_hash: r.2,
            verifier,
            nonce,
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
    async fn a_sign_in_is_taken_once_by_its_browser_and_stale_ones_go_as_new_ones_come() {
        let (db, _dir) = crate::db::test_db().await;
        let teams = db.teams();
        teams.insert_sign_in(&pending("old", 10), 0).await.unwrap();
        teams.insert_sign_in(&pending("s", 100), 0).await.unwrap();
        // Another browser, or none, leaves it for the one that began it.
        assert_eq!(
            teams.take_sign_in("s", Some("other")).await.unwrap(),
            Taken::OtherBrowser
        );
        assert_eq!(
            teams.take_sign_in("s", None).await.unwrap(),
            Taken::OtherBrowser
        );
        assert_eq!(
            teams.take_sign_in("s", Some("b")).await.unwrap(),
            Taken::SignIn(pending("s", 100))
        );
        assert_eq!(
            teams.take_sign_in("s", Some("b")).await.unwrap(),
            Taken::Unknown,
            "used once"
        );
        // A new sign-in deletes those made before its cut-off.
        teams
            .insert_sign_in(&pending("new", 200), 50)
            .await
            .unwrap();
        assert_eq!(
            teams.take_sign_in("old", Some("b")).await.unwrap(),
            Taken::Unknown
        );
        assert!(matches!(
            teams.take_sign_in("new", Some("b")).await.unwrap(),
            Taken::SignIn(_)
        ));
    }

    #[tokio::test]
    async fn the_verifier_and_nonce_are_sealed_at_rest() {
        let (db, _dir) = crate::db::test_db().await;
        let key = [7u8; crate::sealer::KEY_LEN];
        let db = db
            .sealed_with(crate::sealer::Sealer::from_key(&key, "test"), None)
            .await
            .unwrap();
        let mut s = pending("s", 100);
        s.verifier = "the-pkce-verifier".into();
        s.nonce = "the-nonce".into();
        db.teams().insert_sign_in(&s, 0).await.unwrap();
        let (verifier, nonce): (String, String) =
            sqlx::query_as("SELECT verifier, nonce FROM provider_sign_ins")
                .fetch_one(db.pool())
                .await
                .unwrap();
        assert!(!verifier.contains("pkce") && !nonce.contains("nonce"));
        assert!(crate::sealer::Sealer::is_sealed(&verifier), "{verifier}");
        assert_eq!(
            db.teams().take_sign_in("s", Some("b")).await.unwrap(),
            Taken::SignIn(s)
        );
    }

    #[tokio::test]
    async fn at_most_max_pending_sign_ins_wait() {
        let (db, _dir) = crate::db::test_db().await;
        // Filled in one statement per thousand rows, as a loop on the open
        // route would over time.
        for chunk in 0..MAX_PENDING / 1000 {
            let values = (0..1000)
                .map(|i| format!("('s{}', 'oidc', 'b', 'v', 'n', 100)", chunk * 1000 + i))
                .collect::<Vec<_>>()
                .join(", ");
            sqlx::query(&format!(
                "INSERT INTO provider_sign_ins \
                 (state_hash, provider, browser_hash, verifier, nonce, created_at) VALUES {values}"
            ))
            .execute(db.pool())
            .await
            .unwrap();
        }
        let refused = db
            .teams()
            .insert_sign_in(&pending("one-more", 100), 0)
            .await;
        assert!(
            matches!(&refused, Err(EngineError::Unavailable(m)) if m.contains("10000 sign-ins")),
            "{refused:?}"
        );
        // Once the old ones are stale, new sign-ins are taken again.
        db.teams()
            .insert_sign_in(&pending("later", 100 + 1), 101)
            .await
            .unwrap();
    }
}
