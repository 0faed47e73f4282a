//! Teams and team tokens through the engine. A token made here reads
//! `gtk_<id>_<secret>` (an 8-byte public id and a 32-byte secret, both hex);
//! only the SHA-256 of the whole token is stored, so the database alone
//! cannot act as anyone.

use rand::RngCore as _;

use super::Engine;
use crate::db::{now_ms, TokenRow};
use crate::error::EngineError;
use crate::roles::Role;
use crate::views::{AuditEntry, Team, Token};

/// The prefix of every token made through the API.
pub const TOKEN_PREFIX: &str = "gtk_";

/// A token just made: the only time its secret is seen.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NewToken {
    /// The whole token, to present as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// What the API shows of it from now on.
    #[serde(flatten)]
    pub row: Token,
}

/// Checks a team name: 1 to 64 of `[A-Za-z0-9_-]`, not starting with `-`.
pub fn check_team_name(name: &str) -> Result<(), EngineError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "team name {name:?}: use 1 to 64 letters, digits, '-' or '_', not starting with '-'"
        )))
    }
}

fn hash(token: &str) -> String {
    crate::digest::sha256_hex(token)
}

/// Compares two strings in constant time (for equal lengths).
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Engine {
    /// Takes one of `team`'s `per_minute` build creations
    /// (`web.builds_per_team_per_minute`; every web node sharing the
    /// database takes from the same allowance): `None` when taken, or how
    /// long until the next one.
    pub async fn take_team_build(
        &self,
        team: &str,
        per_minute: u32,
    ) -> Result<Option<std::time::Duration>, EngineError> {
        if per_minute == 0 {
            return Ok(None);
        }
        let now = self.db.nodes().db_now_ms().await?;
        let wait = self
            .db
            .builds()
            .take_team_build(team, per_minute, now)
            .await?;
        Ok(wait.map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0)))
    }

    /// Every team.
    pub async fn teams(&self) -> Result<Vec<Team>, EngineError> {
        self.db.teams().list_teams().await
    }

    /// Creates team `name` if it does not exist; answers whether it was new.
    pub async fn set_team(&self, name: &str) -> Result<bool, EngineError> {
        check_team_name(name)?;
        if self.db.team_exists(name).await? {
            return Ok(false);
        }
        self.db.ensure_team(name).await?;
        Ok(true)
    }

    /// Removes team `name` and revokes its tokens. Refused for `main` and
    /// while a build of the team has not ended.
    pub async fn remove_team(&self, name: &str) -> Result<(), EngineError> {
        if name == "main" {
            return Err(EngineError::Invalid("team main cannot be removed".into()));
        }
        if !self.db.team_exists(name).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: name.to_string(),
            });
        }
        let running = self.db.teams().unfinished_builds_of_team(name).await?;
        if running > 0 {
            return Err(EngineError::Invalid(format!(
                "team {name} has {running} builds that have not ended: abort them or wait"
            )));
        }
        self.db.teams().remove_team(name, now_ms()).await?;
        Ok(())
    }

    /// Makes a token for `team` (which must exist) with `role` in it,
    /// valid for `ttl_ms` if given.
    pub async fn create_token(
        &self,
        team: &str,
        role: Role,
        ttl_ms: Option<i64>,
        description: Option<String>,
    ) -> Result<NewToken, EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.to_string(),
            });
        }
        if ttl_ms.is_some_and(|t| t <= 0) {
            return Err(EngineError::Invalid(
                "a token's lifetime must be positive".into(),
            ));
        }
        self.issue_token(team, role, ttl_ms, description, None, Vec::new())
            .await
    }

    /// Makes and stores a token for `team` with `role`, for `user` (in
    /// the provider's `groups`) when it is a sign-in's.
    pub(super) async fn issue_token(
        &self,
        team: &str,
        role: Role,
        ttl_ms: Option<i64>,
        description: Option<String>,
        user: Option<String>,
        groups: Vec<String>,
    ) -> Result<NewToken, EngineError> {
        let mut id = [0u8; 8];
        let mut secret = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut id);
        rand::thread_rng().fill_bytes(&mut secret);
        let id = hex::encode(id);
        let token = format!("{TOKEN_PREFIX}{id}_{}", hex::encode(secret));
        let now = now_ms();
        let row = TokenRow {
            id,
            team: team.to_string(),
            token_hash: hash(&token),
            description,
            created_at: now,
            expires_at: ttl_ms.map(|t| now.saturating_add(t)),
            revoked_at: None,
            role,
            user,
            groups,
        };
        self.db.teams().insert_token(&row).await?;
        Ok(NewToken {
            token,
            row: row.into(),
        })
    }

    /// One page of tokens (of `team` only, when given) by id, without
    /// secrets: at most `limit` after the id `after`.
    pub async fn tokens_page(
        &self,
        team: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Token>, EngineError> {
        let rows = self.db.teams().list_tokens_page(team, after, limit).await?;
        Ok(rows.into_iter().map(Token::from).collect())
    }

    /// Revokes token `id` (when `team` is given, only one of that team's:
    /// another team's is answered as absent).
    pub async fn revoke_token(&self, id: &str, team: Option<&str>) -> Result<(), EngineError> {
        let row = self.db.teams().token(id).await?;
        match row.filter(|r| team.is_none_or(|t| t == r.team)) {
            None => Err(EngineError::NotFound {
                kind: "token",
                name: id.to_string(),
            }),
            Some(row) if row.revoked_at.is_some() => Err(EngineError::Invalid(format!(
                "token {id} is already revoked"
            ))),
            Some(_) => {
                self.db.teams().revoke_token(id, now_ms()).await?;
                Ok(())
            }
        }
    }

    /// Appends a change to the audit log, stamped now.
    pub async fn record_audit(&self, mut entry: AuditEntry) -> Result<(), EngineError> {
        entry.at = now_ms();
        self.db.teams().record_audit(&entry).await
    }

    /// One page of the audit log, oldest first (of `team` only, when
    /// given): at most `limit` entries after the entry `after`.
    pub async fn audit_page(
        &self,
        team: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<AuditEntry>, EngineError> {
        self.db.teams().audit_page(team, after, limit).await
    }

    /// Records who made build `id` by hand, or who aborted it (`aborted`).
    pub async fn record_build_person(
        &self,
        id: i64,
        who: &str,
        aborted: bool,
    ) -> Result<(), EngineError> {
        self.db.builds().record_person(id, who, aborted).await
    }

    /// The team of the token with public id `id`, if there is one.
    pub async fn team_of_token_id(&self, id: &str) -> Result<Option<String>, EngineError> {
        Ok(self.db.teams().token(id).await?.map(|r| r.team))
    }

    /// The token made through the API that `token` is, when it is one, is
    /// known, matches its stored hash, and is neither revoked nor expired:
    /// its team, role and person.
    pub async fn team_of_token(&self, token: &str) -> Result<Option<Token>, EngineError> {
        let Some(rest) = token.strip_prefix(TOKEN_PREFIX) else {
            return Ok(None);
        };
        let Some((id, _)) = rest.split_once('_') else {
            return Ok(None);
        };
        let Some(row) = self.db.teams().token(id).await? else {
            return Ok(None);
        };
        if !same(&row.token_hash, &hash(token)) || !row.valid_at(now_ms()) {
            return Ok(None);
        }
        Ok(Some(row.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_names_are_checked() {
        for good in ["main", "red", "a-b_c9", &"x".repeat(64)] {
            assert!(check_team_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", "a b", "a/b", "ü", &"x".repeat(65)] {
            assert!(check_team_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hashes_are_hex_sha256() {
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(same("ab", "ab") && !same("ab", "ac") && !same("ab", "abc"));
    }
}
