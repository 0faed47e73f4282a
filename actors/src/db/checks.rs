//! The checks due on pipelines' resources and resource types
//! (`resource_checks`): which are due, claiming one among racing nodes,
//! and the build that last checked each config.

use crate::db::Pipelines;
use crate::error::EngineError;

/// A resource config due for a check, with one pipeline resource naming
/// it (whose pipeline the check build runs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DueCheck {
    /// Where its versions are kept.
    pub scope: String,
    /// Its config's hash.
    pub config: String,
    /// When it was due (what claiming it compares).
    pub next_check_at: i64,
    /// The pipeline whose resource is checked.
    pub pipeline_id: i64,
    /// That resource's name (or resource type's, for [`DueCheck::of_type`]).
    pub resource: String,
    /// Its interval.
    pub check_every_ms: i64,
    /// Whether what is checked is a resource type's image.
    pub of_type: bool,
}

impl Pipelines<'_> {
    /// Resource configs of unpaused pipelines due for a check at `now`,
    /// soonest first, at most `limit`, each with one pipeline resource (or
    /// resource type) naming it (the shortest interval's).
    pub(crate) async fn due_checks(
        &self,
        now: i64,
        limit: i64,
    ) -> Result<Vec<DueCheck>, EngineError> {
        let rows: Vec<(String, String, i64, i64, String, i64, i64)> = sqlx::query_as(
            "SELECT c.scope, c.config, c.next_check_at, r.pipeline_id, r.name, r.check_every_ms, r.of_type \
             FROM resource_checks c \
             JOIN (SELECT pipeline_id, name, scope, config, check_every_ms, 0 AS of_type FROM pipeline_resources \
                   UNION ALL \
                   SELECT pipeline_id, name, scope, config, check_every_ms, 1 AS of_type FROM pipeline_resource_types) r \
               ON r.scope = c.scope AND r.config = c.config \
             JOIN pipelines p ON p.id = r.pipeline_id \
             WHERE c.next_check_at <= $1 AND p.paused = 0 AND r.check_every_ms IS NOT NULL \
             ORDER BY c.next_check_at, r.check_every_ms, r.pipeline_id, r.of_type LIMIT $2",
        )
        .bind(now)
        .bind(limit * 4)
        .fetch_all(self.db.pool())
        .await?;
        let mut due: Vec<DueCheck> = Vec::new();
        for (scope, config, next_check_at, pipeline_id, resource, every, of_type) in rows {
            if due.iter().any(|d| d.scope == scope && d.config == config) {
                continue;
            }
            due.push(DueCheck {
                scope,
                config,
                next_check_at,
                pipeline_id,
                resource,
                check_every_ms: every,
                of_type: of_type != 0,
            });
            if due.len() as i64 >= limit {
                break;
            }
        }
        Ok(due)
    }

    /// Claims a due check: moves its next check to `next` only if it is
    /// still `was` (so of nodes racing, one wins); answers whether this
    /// call did.
    pub(crate) async fn claim_check(&self, due: &DueCheck, next: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE resource_checks SET next_check_at = $1 WHERE scope = $2 AND config = $3 AND next_check_at = $4",
        )
        .bind(next)
        .bind(&due.scope)
        .bind(&due.config)
        .bind(due.next_check_at)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records the check build that checked (`scope`, `config`).
    pub(crate) async fn record_check_build(
        &self,
        scope: &str,
        config: &str,
        build: i64,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE resource_checks SET last_build = $1 WHERE scope = $2 AND config = $3")
            .bind(build)
            .bind(scope)
            .bind(config)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// The build of the last check of (`scope`, `config`) if it is a build
    /// of `team` (its status and error are the check's): what `team` is
    /// shown, never another team's check build (its plan holds that team's
    /// pipeline config and vars).
    pub(crate) async fn team_last_check(
        &self,
        scope: &str,
        config: &str,
        team: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT c.last_build FROM resource_checks c JOIN builds b ON b.id = c.last_build \
             WHERE c.scope = $1 AND c.config = $2 AND b.team = $3",
        )
        .bind(scope)
        .bind(config)
        .bind(team)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|(b,)| b))
    }

    /// The build of the last check of (`scope`, `config`), if any, whoever
    /// ran it: for the checker, which does not double a running check.
    /// What a team is shown is [`Pipelines::team_last_check`].
    pub(crate) async fn last_check(
        &self,
        scope: &str,
        config: &str,
    ) -> Result<Option<i64>, EngineError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT last_build FROM resource_checks WHERE scope = $1 AND config = $2",
        )
        .bind(scope)
        .bind(config)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.and_then(|(b,)| b))
    }
}
