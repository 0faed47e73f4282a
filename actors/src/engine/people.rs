//! People: who is what in a team (users and groups with a role), and the
//! tokens a sign-in makes. Who a person is (their password, their
//! identity provider) is the web node's to check; the engine keeps what
//! they may do.

use super::teams::NewToken;
use super::Engine;
use crate::error::EngineError;
use crate::roles::Role;
use crate::views::{MemberKind, TeamRole};

/// The longest a user or group name may be.
const MAX_MEMBER_NAME: usize = 256;

/// A sign-in: the token it made, and what it is.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Session {
    /// The token and its record (team, role, user, expiry).
    #[serde(flatten)]
    pub token: NewToken,
}

impl Engine {
    /// Gives each of `roles` (users and groups) its role in `team`, which
    /// must exist, in place of the one it had.
    pub async fn set_team_roles(&self, team: &str, roles: &[TeamRole]) -> Result<(), EngineError> {
        if !self.db.team_exists(team).await? {
            return Err(EngineError::NotFound {
                kind: "team",
                name: team.to_string(),
            });
        }
        for r in roles {
            let ok = !r.name.is_empty()
                && r.name.len() <= MAX_MEMBER_NAME
                && !r.name.chars().any(char::is_control);
            if !ok {
                return Err(EngineError::Invalid(format!(
                    "{} name {:?}: give 1 to {MAX_MEMBER_NAME} characters, none a control character",
                    r.kind.as_str(),
                    r.name
                )));
            }
        }
        for r in roles {
            self.db.teams().set_team_role(team, r).await?;
        }
        Ok(())
    }

    /// Makes `roles` the whole of who is what in `team` (Concourse's
    /// `set-team`, whose auth is the team's desired state): each gets its
    /// role, and every other user or group loses the one it had.
    pub async fn replace_team_roles(
        &self,
        team: &str,
        roles: &[TeamRole],
    ) -> Result<(), EngineError> {
        self.set_team_roles(team, roles).await?;
        for (_, had) in self.db.teams().team_roles(Some(team)).await? {
            if !roles
                .iter()
                .any(|r| r.kind == had.kind && r.name == had.name)
            {
                self.db
                    .teams()
                    .remove_team_role(team, had.kind, &had.name)
                    .await?;
            }
        }
        Ok(())
    }

    /// Takes a user's or group's role in `team` away.
    pub async fn remove_team_role(
        &self,
        team: &str,
        kind: MemberKind,
        name: &str,
    ) -> Result<(), EngineError> {
        if self.db.teams().remove_team_role(team, kind, name).await? {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                kind: "team member",
                name: format!("{} {name} of team {team}", kind.as_str()),
            })
        }
    }

    /// Everyone with a role, by team (of `team` only, when given).
    pub async fn team_roles(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<(String, TeamRole)>, EngineError> {
        self.db.teams().team_roles(team).await
    }

    /// The roles of a person (user `user`, in `groups`) by team: in each
    /// team, the highest its name or any of its groups is given.
    pub async fn roles_of_person(
        &self,
        user: &str,
        groups: &[String],
    ) -> Result<Vec<(String, Role)>, EngineError> {
        let all = self.db.teams().team_roles(None).await?;
        Ok(best_roles(all, user, groups))
    }

    /// A person's role in `team` now (the highest of their name's and
    /// their groups'), if any: what their sign-in's token acts with.
    pub async fn role_of_person_in(
        &self,
        user: &str,
        groups: &[String],
        team: &str,
    ) -> Result<Option<Role>, EngineError> {
        let rows = self.db.teams().team_roles(Some(team)).await?;
        Ok(best_roles(rows, user, groups)
            .into_iter()
            .next()
            .map(|(_, role)| role))
    }

    /// Signs a person in to `team` (or, when none is asked, to `main`
    /// when they have a role there, else to the first team they have
    /// one in): a token with their role there, expiring after `ttl_ms`.
    /// `None` when they have no role in the team (or in any).
    pub async fn sign_in(
        &self,
        user: &str,
        groups: &[String],
        team: Option<&str>,
        ttl_ms: i64,
    ) -> Result<Option<Session>, EngineError> {
        let roles = self.roles_of_person(user, groups).await?;
        let chosen = match team {
            Some(t) => roles.iter().find(|(team, _)| team == t),
            None => roles
                .iter()
                .find(|(team, _)| team == "main")
                .or_else(|| roles.first()),
        };
        let Some((team, role)) = chosen else {
            return Ok(None);
        };
        let token = self
            .issue_token(
                team,
                *role,
                Some(ttl_ms),
                Some("sign-in".into()),
                Some(user.to_string()),
                groups.to_vec(),
            )
            .await?;
        Ok(Some(Session { token }))
    }
}

/// In each team, the highest role `user`'s name or any of its `groups`
/// is given, by team.
fn best_roles(all: Vec<(String, TeamRole)>, user: &str, groups: &[String]) -> Vec<(String, Role)> {
    let mut best: std::collections::BTreeMap<String, Role> = Default::default();
    for (team, r) in all {
        let theirs = match r.kind {
            MemberKind::User => r.name == user,
            MemberKind::Group => groups.contains(&r.name),
        };
        if theirs {
            let at = best.entry(team).or_insert(r.role);
            *at = (*at).max(r.role);
        }
    }
    best.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_persons_role_in_a_team_is_the_highest_of_their_name_and_groups() {
        let role = |team: &str, kind, name: &str, role| {
            (
                team.to_string(),
                TeamRole {
                    kind,
                    name: name.into(),
                    role,
                },
            )
        };
        let all = vec![
            role("red", MemberKind::User, "alice", Role::Viewer),
            role("red", MemberKind::Group, "ops", Role::PipelineOperator),
            role("blue", MemberKind::Group, "ops", Role::Viewer),
            role("main", MemberKind::User, "bob", Role::Owner),
            role("green", MemberKind::User, "alicia", Role::Owner),
        ];
        let ops = vec!["ops".to_string()];
        assert_eq!(
            best_roles(all.clone(), "alice", &ops),
            [
                ("blue".to_string(), Role::Viewer),
                ("red".to_string(), Role::PipelineOperator)
            ]
        );
        assert_eq!(
            best_roles(all.clone(), "alice", &[]),
            [("red".to_string(), Role::Viewer)]
        );
        // A group named like a user is not the user.
        assert!(best_roles(all, "ops", &[]).is_empty());
    }
}
