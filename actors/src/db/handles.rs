//! The `containers` and `volumes` tables: every container and volume the web
//! node asked a worker to create. Both have the same life (a `creating` row is
//! written first, with a per-worker sequence number, then `created`, then
//! `destroying`), so one set of queries serves both.

use serde::Serialize;

use crate::db::{now_ms, Handles};
use crate::error::EngineError;
use gantry_wire::state::HandleState;

/// Which of the two tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HandleKind {
    /// A row of `containers`.
    Container,
    /// A row of `volumes`.
    Volume,
}

impl HandleKind {
    pub(crate) fn table(&self) -> &'static str {
        match self {
            HandleKind::Container => "containers",
            HandleKind::Volume => "volumes",
        }
    }
}

/// A stored container or volume, decoded straight into the type the API
/// answers ([`crate::views::Handle`]).
pub(super) type HandleRow = crate::views::Handle;

/// Who keeps a container or volume, in words.
fn owner_of(build: Option<i64>, step: Option<&str>, artifact: Option<&str>) -> String {
    match (build, step, artifact) {
        (Some(b), Some(s), _) => format!("build {b} ({s})"),
        (Some(b), None, _) => format!("build {b}"),
        (None, Some(s), _) if s.starts_with("task-cache:") => {
            format!("task cache ({})", &s["task-cache:".len()..])
        }
        (None, _, Some(a)) => format!("image {a}"),
        (None, Some(s), None) => s.to_string(),
        (None, None, None) => "none".into(),
    }
}

/// A stored state name as a [`HandleState`].
fn stored_state(s: &str) -> Result<HandleState, EngineError> {
    super::states::decode(s)
}

impl Handles<'_> {
    /// Writes a `creating` row before the worker is asked (GC relies on it).
    pub(crate) async fn insert_handle(
        &self,
        kind: HandleKind,
        handle: &str,
        worker: &str,
        build_id: Option<i64>,
        step: Option<&str>,
        team: &str,
    ) -> Result<(), EngineError> {
        self.insert_node_handle(kind, handle, worker, build_id, step, team, None)
            .await
    }

    /// Writes a `creating` row as [`Handles::insert_handle`] does, with the plan
    /// node (see [`gantry_wire::events::Origin::key`]) of the step that creates
    /// it, by which a web node taking the build over finds it again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_node_handle(
        &self,
        kind: HandleKind,
        handle: &str,
        worker: &str,
        build_id: Option<i64>,
        step: Option<&str>,
        team: &str,
        node: Option<&str>,
    ) -> Result<(), EngineError> {
        let seq = self.db.workers().next_sequence(worker).await?;
        sqlx::query(&format!(
            "INSERT INTO {} (handle, worker, state, sequence, build_id, step, team, created_at, node) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            kind.table()
        ))
        .bind(handle)
        .bind(worker)
        .bind(HandleState::Creating.as_str())
        .bind(seq)
        .bind(build_id)
        .bind(step)
        .bind(team)
        .bind(now_ms())
        .bind(node)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Sets a row's state. A row becoming `created` records the current GC
    /// epoch in the same statement (see migration 0008): only a report made
    /// at a later epoch may judge it absent.
    pub(crate) async fn set_handle_state(
        &self,
        kind: HandleKind,
        handle: &str,
        state: HandleState,
    ) -> Result<(), EngineError> {
        let epoch = match state {
            HandleState::Created => ", created_epoch = (SELECT value FROM gc_epoch WHERE id = 1)",
            _ => "",
        };
        sqlx::query(&format!(
            "UPDATE {} SET state = $1{epoch} WHERE handle = $2",
            kind.table()
        ))
        .bind(state.as_str())
        .bind(handle)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Removes a row once the worker no longer has it.
    pub(crate) async fn delete_handle(
        &self,
        kind: HandleKind,
        handle: &str,
    ) -> Result<(), EngineError> {
        sqlx::query(&format!("DELETE FROM {} WHERE handle = $1", kind.table()))
            .bind(handle)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// One row by handle.
    pub(crate) async fn get_handle(
        &self,
        kind: HandleKind,
        handle: &str,
    ) -> Result<Option<HandleRow>, EngineError> {
        Ok(self
            .select_handles(kind, "WHERE handle = $1", &[handle])
            .await?
            .pop())
    }

    /// How many rows each worker has in each state, by worker then state.
    pub(crate) async fn count_handles(
        &self,
        kind: HandleKind,
    ) -> Result<Vec<(String, HandleState, i64)>, EngineError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(&format!(
            "SELECT worker, state, COUNT(*) FROM {} GROUP BY worker, state ORDER BY worker, state",
            kind.table()
        ))
        .fetch_all(self.db.pool())
        .await?;
        rows.into_iter()
            .map(|(worker, state, n)| Ok((worker, stored_state(&state)?, n)))
            .collect()
    }

    /// Every row of one kind that a build created.
    #[cfg(test)]
    pub(crate) async fn build_handles(
        &self,
        kind: HandleKind,
        build_id: i64,
    ) -> Result<Vec<HandleRow>, EngineError> {
        let id = build_id.to_string();
        self.select_handles(kind, "WHERE build_id = CAST($1 AS BIGINT)", &[&id])
            .await
    }

    /// The rows of what the step at plan node `node` of build `build_id`
    /// created, oldest first.
    pub(crate) async fn node_handles(
        &self,
        kind: HandleKind,
        build_id: i64,
        node: &str,
    ) -> Result<Vec<HandleRow>, EngineError> {
        let id = build_id.to_string();
        self.select_handles(
            kind,
            "WHERE build_id = CAST($1 AS BIGINT) AND node = $2",
            &[&id, node],
        )
        .await
    }

    /// The latest container of a build's step.
    pub(crate) async fn find_step_container(
        &self,
        build_id: i64,
        step: &str,
    ) -> Result<Option<HandleRow>, EngineError> {
        let id = build_id.to_string();
        Ok(self
            .select_handles(
                HandleKind::Container,
                "WHERE build_id = CAST($1 AS BIGINT) AND step = $2",
                &[&id, step],
            )
            .await?
            .pop())
    }

    /// One page of a table's rows (of one team, when given), by handle: at
    /// most `limit` rows whose handles sort after the cursor `after` (the
    /// last handle of the page before).
    pub(crate) async fn list_handles_page(
        &self,
        kind: HandleKind,
        team: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<HandleRow>, EngineError> {
        let (filter, binds) = super::where_given(&[("team =", team), ("handle >", after)], None);
        let order = format!("ORDER BY handle LIMIT {}", limit.max(0));
        self.select_handles_in(kind, &filter, &order, &binds).await
    }

    /// Rows matching a `WHERE` clause (string binds), oldest first.
    async fn select_handles(
        &self,
        kind: HandleKind,
        filter: &str,
        binds: &[&str],
    ) -> Result<Vec<HandleRow>, EngineError> {
        self.select_handles_in(kind, filter, "ORDER BY created_at, handle", binds)
            .await
    }

    /// Rows matching a `WHERE` clause (string binds), in `order` (an
    /// `ORDER BY`, and a `LIMIT` if any).
    async fn select_handles_in(
        &self,
        kind: HandleKind,
        filter: &str,
        order: &str,
        binds: &[&str],
    ) -> Result<Vec<HandleRow>, EngineError> {
        type Raw = (
            String,
            String,
            String,
            i64,
            Option<i64>,
            Option<String>,
            String,
            Option<String>,
            Option<i64>,
        );
        // Only volumes hold artifacts (images, build outputs).
        let artifact = match kind {
            HandleKind::Volume => "artifact_id",
            HandleKind::Container => "CAST(NULL AS TEXT)",
        };
        let sql = format!(
            "SELECT handle, worker, state, sequence, build_id, step, team, {artifact}, missing_since FROM {} {filter} {order}",
            kind.table()
        );
        let mut q = sqlx::query_as::<_, Raw>(&sql);
        for b in binds {
            q = q.bind(*b);
        }
        let rows = q.fetch_all(self.db.pool()).await?;
        rows.into_iter()
            .map(|r| {
                Ok(HandleRow {
                    owner: owner_of(r.4, r.5.as_deref(), r.7.as_deref()),
                    missing: r.8.is_some(),
                    handle: r.0,
                    worker: r.1,
                    state: stored_state(&r.2)?,
                    sequence: r.3,
                    build_id: r.4,
                    step: r.5,
                    team: r.6,
                })
            })
            .collect()
    }
}

impl Handles<'_> {
    /// Marks a volume as holding an artifact's contents (an image).
    pub(crate) async fn set_volume_artifact(
        &self,
        handle: &str,
        artifact: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE volumes SET artifact_id = $1 WHERE handle = $2")
            .bind(artifact)
            .bind(handle)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// A `created` volume on `worker` holding `artifact`, if there is one.
    pub(crate) async fn find_artifact_volume(
        &self,
        worker: &str,
        artifact: &str,
    ) -> Result<Option<String>, EngineError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT handle FROM volumes WHERE worker = $1 AND artifact_id = $2 AND state = $3 ORDER BY created_at LIMIT 1",
        )
        .bind(worker)
        .bind(artifact)
        .bind(HandleState::Created.as_str())
        .fetch_optional(self.db.pool())
        .await?;
        Ok(row.map(|r| r.0))
    }
}

/// A volume holding a copy of an artifact on a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArtifactCopy {
    /// The worker holding it.
    pub worker: String,
    /// The volume's handle.
    pub volume: String,
}

impl Handles<'_> {
    /// The `created` volumes of build `build` holding `artifact`, oldest
    /// first: where a later step of the build can get it from.
    pub(crate) async fn artifact_copies(
        &self,
        artifact: &str,
        build: i64,
    ) -> Result<Vec<ArtifactCopy>, EngineError> {
        self.copies(artifact, Some(build)).await
    }

    /// The `created` volumes holding `artifact` (of build `build` only,
    /// when given), oldest first.
    async fn copies(
        &self,
        artifact: &str,
        build: Option<i64>,
    ) -> Result<Vec<ArtifactCopy>, EngineError> {
        let of_build = if build.is_some() {
            "AND build_id = $3"
        } else {
            ""
        };
        let sql = format!(
            "SELECT worker, handle FROM volumes WHERE artifact_id = $1 AND state = $2 {of_build} \
             ORDER BY created_at, handle"
        );
        let mut query = sqlx::query_as(&sql)
            .bind(artifact)
            .bind(HandleState::Created.as_str());
        if let Some(b) = build {
            query = query.bind(b);
        }
        let rows: Vec<(String, String)> = query.fetch_all(self.db.pool()).await?;
        Ok(rows
            .into_iter()
            .map(|(worker, volume)| ArtifactCopy { worker, volume })
            .collect())
    }
}

impl Handles<'_> {
    /// Every `created` volume holding `artifact`, on any worker, oldest
    /// first (an image pulled onto several workers).
    pub(crate) async fn artifact_holders(
        &self,
        artifact: &str,
    ) -> Result<Vec<ArtifactCopy>, EngineError> {
        self.copies(artifact, None).await
    }
}

impl Handles<'_> {}

#[cfg(test)]
mod owner_tests {
    use super::owner_of;

    #[test]
    fn a_rows_owner_is_told_in_words() {
        assert_eq!(owner_of(Some(7), Some("test"), None), "build 7 (test)");
        assert_eq!(
            owner_of(Some(7), Some("artifact:out"), Some("a1")),
            "build 7 (artifact:out)"
        );
        assert_eq!(
            owner_of(None, Some("task-cache:deps"), None),
            "task cache (deps)"
        );
        assert_eq!(owner_of(None, None, Some("img")), "image img");
        assert_eq!(owner_of(None, None, None), "none");
    }
}
