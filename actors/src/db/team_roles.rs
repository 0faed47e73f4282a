//! Who is what in a team (table `team_roles`): users and groups with a
//! role each.

use crate::db::Teams;
use crate::error::EngineError;
use crate::roles::Role;
use crate::views::TeamRole;

impl Teams<'_> {
    /// Gives `name` (a user or a group, `kind`) `role` in `team`, in place
    /// of the one it had.
    pub(crate) async fn set_team_role(&self, team: &str, r: &TeamRole) -> Result<(), EngineError> {
        let mut tx = self.db.pool().begin().await?;
        sqlx::query("DELETE FROM team_roles WHERE team = $1 AND kind = $2 AND name = $3")
            .bind(team)
            .bind(r.kind.as_str())
            .bind(&r.name)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO team_roles (team, kind, name, role) VALUES ($1, $2, $3, $4)")
            .bind(team)
            .bind(r.kind.as_str())
            .bind(&r.name)
            .bind(r.role.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Takes `name`'s role in `team` away; answers whether it had one.
    pub(crate) async fn remove_team_role(
        &self,
        team: &str,
        kind: crate::views::MemberKind,
        name: &str,
    ) -> Result<bool, EngineError> {
        let done =
            sqlx::query("DELETE FROM team_roles WHERE team = $1 AND kind = $2 AND name = $3")
                .bind(team)
                .bind(kind.as_str())
                .bind(name)
                .execute(self.db.pool())
                .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Everyone with a role, by team, kind and name (of `team` only, when
    /// given).
    pub(crate) async fn team_roles(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<(String, TeamRole)>, EngineError> {
        let rows: Vec<(String, String, String, String)> = match team {
            Some(team) => {
                sqlx::query_as(
                    "SELECT team, kind, name, role FROM team_roles WHERE team = $1 \
                     ORDER BY team, kind, name",
                )
                .bind(team)
                .fetch_all(self.db.pool())
                .await?
            }
            None => {
                sqlx::query_as(
                    "SELECT team, kind, name, role FROM team_roles ORDER BY team, kind, name",
                )
                .fetch_all(self.db.pool())
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(team, kind, name, role)| {
                Some((
                    team,
                    TeamRole {
                        kind: kind.parse().ok()?,
                        name,
                        role: role.parse::<Role>().ok()?,
                    },
                ))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::roles::Role;
    use crate::views::{MemberKind, TeamRole};

    #[tokio::test]
    async fn roles_are_set_replaced_removed_and_go_with_their_team() {
        let (db, _dir) = crate::db::test_db().await;
        db.ensure_team("red").await.unwrap();
        let alice = |role| TeamRole {
            kind: MemberKind::User,
            name: "alice".into(),
            role,
        };
        let ops = TeamRole {
            kind: MemberKind::Group,
            name: "ops".into(),
            role: Role::Viewer,
        };
        db.teams()
            .set_team_role("red", &alice(Role::Viewer))
            .await
            .unwrap();
        db.teams()
            .set_team_role("red", &alice(Role::Owner))
            .await
            .unwrap();
        db.teams().set_team_role("red", &ops).await.unwrap();
        let red = db.teams().team_roles(Some("red")).await.unwrap();
        assert_eq!(
            red,
            [
                ("red".to_string(), ops.clone()),
                ("red".to_string(), alice(Role::Owner))
            ]
        );
        assert!(db
            .teams()
            .remove_team_role("red", MemberKind::Group, "ops")
            .await
            .unwrap());
        assert!(!db
            .teams()
            .remove_team_role("red", MemberKind::Group, "ops")
            .await
            .unwrap());
        db.teams().remove_team("red", 1).await.unwrap();
        assert!(db.teams().team_roles(None).await.unwrap().is_empty());
    }
}
