//! Teams and the team tokens made through the API (table `api_tokens`:
//! only a hash of each secret is stored).

use crate::db::Teams;
use crate::error::EngineError;
use gantry_wire::state::BuildStatus;

/// A team, decoded straight into the type the API answers
/// ([`crate::views::Team`]).
pub(super) type TeamRow = crate::views::Team;

/// A team token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// Its public id (the `<id>` of `gtk_<id>_<secret>`).
    pub id: String,
    /// The team it acts for.
    pub team: String,
    /// Hex SHA-256 of the whole token.
    pub token_hash: String,
    /// What it is for, as given when it was made.
    pub description: Option<String>,
    /// Unix ms of its creation.
    pub created_at: i64,
    /// Unix ms after which it is refused (`None`: never).
    pub expires_at: Option<i64>,
    /// Unix ms of its revocation, if revoked.
    pub revoked_at: Option<i64>,
    /// Its role in its team.
    pub role: crate::roles::Role,
    /// The person it was made for at sign-in (`None`: a team token).
    pub user: Option<String>,
    /// The identity provider's groups that person was in at sign-in
    /// (empty for a local user's or a team token).
    pub groups: Vec<String>,
}

impl TokenRow {
    /// Whether it is accepted at `now` (unix ms): not revoked, not expired.
    pub fn valid_at(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| now < e)
    }
}

type TokenTuple = (
    String,
    String,
    String,
    Option<String>,
    i64,
    Option<i64>,
    Option<i64>,
    String,
    Option<String>,
    Option<String>,
);

fn token_row(t: TokenTuple) -> TokenRow {
    TokenRow {
        id: t.0,
        team: t.1,
        token_hash: t.2,
        description: t.3,
        created_at: t.4,
        expires_at: t.5,
        revoked_at: t.6,
        // The column only ever holds a role's name (written below); an
        // unknown one reads as the least.
        role: t.7.parse().unwrap_or(crate::roles::Role::Viewer),
        user: t.8,
        // Written below as a JSON array of strings.
        groups: t
            .9
            .as_deref()
            .and_then(|g| serde_json::from_str(g).ok())
            .unwrap_or_default(),
    }
}

const TOKEN_COLUMNS: &str =
    "id, team, token_hash, description, created_at, expires_at, revoked_at, role, user_name, groups";

impl Teams<'_> {
    /// Every team, by name.
    pub(crate) async fn list_teams(&self) -> Result<Vec<TeamRow>, EngineError> {
        let rows: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT id, name, created_at FROM teams ORDER BY name")
                .fetch_all(self.db.pool())
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at)| TeamRow {
                id,
                name,
                created_at,
            })
            .collect())
    }

    /// How many builds of `team` have not ended.
    pub(crate) async fn unfinished_builds_of_team(&self, team: &str) -> Result<i64, EngineError> {
        let (n,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM builds WHERE team = $1 AND status IN ($2, $3)")
                .bind(team)
                .bind(BuildStatus::Pending.as_str())
                .bind(BuildStatus::Started.as_str())
                .fetch_one(self.db.pool())
                .await?;
        Ok(n)
    }

    /// Removes team `team` and revokes its tokens at `now`, in one
    /// transaction; answers whether the team existed. Its ended builds
    /// stay in the history.
    pub(crate) async fn remove_team(&self, team: &str, now: i64) -> Result<bool, EngineError> {
        let mut tx = self.db.pool().begin().await?;
        let gone = sqlx::query("DELETE FROM teams WHERE name = $1")
            .bind(team)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM team_roles WHERE team = $1")
            .bind(team)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE team = $2 AND revoked_at IS NULL")
            .bind(now)
            .bind(team)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone > 0)
    }

    /// Stores a new token (its hash only).
    pub(crate) async fn insert_token(&self, row: &TokenRow) -> Result<(), EngineError> {
        sqlx::query(&format!(
            "INSERT INTO api_tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(&row.id)
        .bind(&row.team)
        .bind(&row.token_hash)
        .bind(&row.description)
        .bind(row.created_at)
        .bind(row.expires_at)
        .bind(row.revoked_at)
        .bind(row.role.as_str())
        .bind(&row.user)
        .bind((!row.groups.is_empty()).then(|| serde_json::json!(row.groups).to_string()))
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// The token with public id `id`, if any.
    pub(crate) async fn token(&self, id: &str) -> Result<Option<TokenRow>, EngineError> {
        let row: Option<TokenTuple> = sqlx::query_as(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(token_row))
    }

    /// One page of tokens (of `team` only, when given) by id: at most
    /// `limit` whose ids sort after the cursor `after`.
    pub(crate) async fn list_tokens_page(
        &self,
        team: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<TokenRow>, EngineError> {
        let (filter, binds) = super::where_given(&[("team =", team), ("id >", after)], None);
        let sql = format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens {filter} ORDER BY id LIMIT {}",
            limit.max(0)
        );
        let mut q = sqlx::query_as::<_, TokenTuple>(&sql);
        for b in binds {
            q = q.bind(b);
        }
        Ok(q.fetch_all(self.db.pool())
            .await?
            .into_iter()
            .map(token_row)
            .collect())
    }

    /// Revokes token `id` at `now`; answers whether it was valid until then.
    pub(crate) async fn revoke_token(&self, id: &str, now: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

/// What the API shows of a token: all but its hash.
impl From<TokenRow> for crate::views::Token {
    fn from(r: TokenRow) -> Self {
        crate::views::Token {
            id: r.id,
            team: r.team,
            description: r.description,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
            role: r.role,
            user: r.user,
            groups: r.groups,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str, team: &str, expires_at: Option<i64>) -> TokenRow {
        TokenRow {
            id: id.into(),
            team: team.into(),
            token_hash: format!("hash-{id}"),
            description: None,
            created_at: 10,
            expires_at,
            revoked_at: None,
            role: crate::roles::Role::Member,
            user: None,
            groups: Vec::new(),
        }
    }

    #[tokio::test]
    async fn tokens_are_stored_listed_revoked_and_go_with_their_team() {
        let (db, _dir) = crate::db::test_db().await;
        db.ensure_team("red").await.unwrap();
        db.teams()
            .insert_token(&token("a", "red", None))
            .await
            .unwrap();
        db.teams()
            .insert_token(&crate::db::TokenRow {
                role: crate::roles::Role::Viewer,
                groups: vec!["ops".into(), "dev \"x\"".into()],
                ..token("b", "red", Some(100))
            })
            .await
            .unwrap();
        db.teams()
            .insert_token(&token("c", "main", None))
            .await
            .unwrap();
        let b = db.teams().token("b").await.unwrap().unwrap();
        assert_eq!(b.token_hash, "hash-b");
        assert_eq!(b.role, crate::roles::Role::Viewer);
        assert_eq!(b.groups, ["ops", "dev \"x\""]);
        let a = db.teams().token("a").await.unwrap().unwrap();
        assert!(a.groups.is_empty());
        assert_eq!(a.role, crate::roles::Role::Member);
        assert!(b.valid_at(99) && !b.valid_at(100), "expires at 100");
        assert_eq!(
            db.teams()
                .list_tokens_page(Some("red"), None, 10)
                .await
                .unwrap()
                .len(),
            2
        );
        let all = db.teams().list_tokens_page(None, None, 10).await.unwrap();
        assert_eq!(all.len(), 3);
        // Pages by id: after the first, the other two.
        let rest = db
            .teams()
            .list_tokens_page(None, Some(&all[0].id), 10)
            .await
            .unwrap();
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|t| t.id > all[0].id));
        assert!(db.teams().revoke_token("a", 50).await.unwrap());
        assert!(!db.teams().revoke_token("a", 60).await.unwrap(), "once");
        assert!(!db.teams().token("a").await.unwrap().unwrap().valid_at(51));
        assert!(db.teams().token("zz").await.unwrap().is_none());
        assert!(db.teams().remove_team("red", 70).await.unwrap());
        assert!(!db.teams().remove_team("red", 70).await.unwrap());
        assert_eq!(
            db.teams().token("b").await.unwrap().unwrap().revoked_at,
            Some(70)
        );
        assert!(db.teams().token("c").await.unwrap().unwrap().valid_at(70));
        let names: Vec<String> = db
            .teams()
            .list_teams()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["main"]);
    }
}
