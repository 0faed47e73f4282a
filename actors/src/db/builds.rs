//! The `builds` and `build_events` tables.

use crate::db::{now_ms, Builds, Db};
use crate::error::EngineError;
use crate::views::Build;

use gantry_wire::state::BuildStatus;

/// Which builds a page lists (`GET /api/v1/builds`): every filter given
/// must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildQuery {
    /// Only this team's builds.
    pub team: Option<String>,
    /// Only builds in this status.
    pub status: Option<BuildStatus>,
    /// Only builds of this pipeline's jobs.
    pub pipeline: Option<String>,
    /// Only builds of a job of this name.
    pub job: Option<String>,
    /// Only builds with a smaller id (the cursor: the last id of the page before).
    pub before: Option<i64>,
    /// Only builds with this id or a greater one (Concourse's `from`).
    pub from: Option<i64>,
    /// Only builds that started at this unix ms or later (Concourse's
    /// `from` with `timestamps`).
    pub started_from: Option<i64>,
    /// Only builds that started at this unix ms or earlier (Concourse's
    /// `to` with `timestamps`).
    pub started_until: Option<i64>,
    /// Oldest first (the page nearest `from`), rather than newest first.
    pub oldest_first: bool,
    /// At most this many builds.
    pub limit: i64,
}

/// A build's row as [`COLUMNS`] reads it (more columns than a tuple
/// decodes: read by position).
struct Raw {
    id: i64,
    team: String,
    status: String,
    plan: String,
    worker: Option<String>,
    exit_status: Option<i64>,
    error: Option<String>,
    created_at: i64,
    finished_at: Option<i64>,
    pipeline: Option<String>,
    job: Option<String>,
    build_number: Option<i64>,
    waiting: Option<String>,
    rerun_of: Option<i64>,
    rerun_number: Option<i64>,
    log: String,
    created_by: Option<String>,
    aborted_by: Option<String>,
    started_at: Option<i64>,
}

impl<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> for Raw {
    fn from_row(row: &'r sqlx::any::AnyRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row as _;
        Ok(Raw {
            id: row.try_get(0)?,
            team: row.try_get(1)?,
            status: row.try_get(2)?,
            plan: row.try_get(3)?,
            worker: row.try_get(4)?,
            exit_status: row.try_get(5)?,
            error: row.try_get(6)?,
            created_at: row.try_get(7)?,
            finished_at: row.try_get(8)?,
            pipeline: row.try_get(9)?,
            job: row.try_get(10)?,
            build_number: row.try_get(11)?,
            waiting: row.try_get(12)?,
            rerun_of: row.try_get(13)?,
            rerun_number: row.try_get(14)?,
            log: row.try_get(15)?,
            created_by: row.try_get(16)?,
            aborted_by: row.try_get(17)?,
            started_at: row.try_get(18)?,
        })
    }
}

/// The channel a stored event is announced on (PostgreSQL `NOTIFY`, the
/// payload the build's id), so followers on every web node read it at once.
pub(crate) const EVENTS_CHANNEL: &str = "gantry_events";

/// The 16th column is where the build's log is, as text: `database`,
/// `store`, or `reaped MS` (when).
const COLUMNS: &str =
    "id, team, status, plan, worker, exit_status, error, created_at, finished_at, pipeline, job, build_number, waiting, rerun_of, rerun_number, \
     CASE WHEN log_reaped_at IS NOT NULL THEN 'reaped ' || CAST(log_reaped_at AS TEXT) \
     WHEN log_key IS NOT NULL THEN 'store' ELSE 'database' END, created_by, aborted_by, started_at";

/// A stored build; an unknown status, or a plan that does not open or
/// parse, is an error naming it.
fn decode(db: &Db, r: Raw) -> Result<Build, EngineError> {
    let plan = db.open_at_rest(super::at_rest::PLAN, &r.plan)?;
    let plan = serde_json::from_str(&plan)
        .map_err(|e| EngineError::Invalid(format!("build {}: its stored plan: {e}", r.id)))?;
    let name = match r.build_number {
        Some(n) => build_name(n, r.rerun_number),
        None => r.id.to_string(),
    };
    let mut build = Build {
        id: r.id,
        team: r.team,
        status: super::states::decode(&r.status)?,
        plan,
        worker: r.worker,
        exit_status: r.exit_status,
        error: r.error,
        created_at: r.created_at,
        started_at: r.started_at,
        finished_at: r.finished_at,
        pipeline: r.pipeline,
        job: r.job,
        build_number: r.build_number,
        name,
        rerun_of: r.rerun_of.map(|id| crate::views::RerunOf {
            id,
            name: r.build_number.unwrap_or_default().to_string(),
        }),
        waiting: r.waiting,
        log_reaped_at: r.log.strip_prefix("reaped ").and_then(|ms| ms.parse().ok()),
        log: r.log.split(' ').next().unwrap_or_default().to_string(),
        created_by: r.created_by,
        aborted_by: r.aborted_by,
        concourse: Default::default(),
    };
    build.concourse = crate::views::ConcourseBuild::of(&build);
    Ok(build)
}

/// A job build's name: its number `n`, `n.m` for the m-th rerun of
/// build `n`.
pub(super) fn build_name(n: i64, rerun: Option<i64>) -> String {
    match rerun {
        Some(m) => format!("{n}.{m}"),
        None => n.to_string(),
    }
}

/// Inserts a pending build (team, plan, created_at, web_node), returning
/// its id.
pub(super) const INSERT_BUILD: &str =
    "INSERT INTO builds (team, status, plan, created_at, web_node) \
     VALUES ($1, $5, $2, $3, $4) RETURNING id";

impl Builds<'_> {
    /// Creates a pending build and returns its id.
    pub(crate) async fn create_build(
        &self,
        team: &str,
        plan: &serde_json::Value,
        web_node: &str,
    ) -> Result<i64, EngineError> {
        let (id,): (i64,) = sqlx::query_as(INSERT_BUILD)
            .bind(team)
            .bind(
                self.db
                    .seal_at_rest(super::at_rest::PLAN, &plan.to_string()),
            )
            .bind(now_ms())
            .bind(web_node)
            .bind(BuildStatus::Pending.as_str())
            .fetch_one(self.db.pool())
            .await?;
        Ok(id)
    }

    /// Marks a build started on a worker.
    pub(crate) async fn start_build(&self, id: i64, worker: &str) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE builds SET status = $1, worker = $2, started_at = COALESCE(started_at, $4) \
             WHERE id = $3",
        )
        .bind(BuildStatus::Started.as_str())
        .bind(worker)
        .bind(id)
        .bind(now_ms())
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Records how a build ended.
    pub(crate) async fn finish_build(
        &self,
        id: i64,
        status: BuildStatus,
        exit_status: Option<i32>,
        error: Option<&str>,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE builds SET status = $1, exit_status = $2, error = $3, finished_at = $4 WHERE id = $5",
        )
        .bind(status.as_str())
        .bind(exit_status.map(i64::from))
        .bind(error)
        .bind(now_ms())
        .bind(id)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Records who made build `id` by hand, or who aborted it (`aborted`).
    pub(crate) async fn record_person(
        &self,
        id: i64,
        who: &str,
        aborted: bool,
    ) -> Result<(), EngineError> {
        let column = if aborted { "aborted_by" } else { "created_by" };
        sqlx::query(&format!("UPDATE builds SET {column} = $1 WHERE id = $2"))
            .bind(who)
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// One build.
    pub(crate) async fn get_build(&self, id: i64) -> Result<Option<Build>, EngineError> {
        let row: Option<Raw> =
            sqlx::query_as(&format!("SELECT {COLUMNS} FROM builds WHERE id = $1"))
                .bind(id)
                .fetch_optional(self.db.pool())
                .await?;
        row.map(|r| decode(self.db, r)).transpose()
    }

    /// One page of builds, newest first (oldest first when asked): those
    /// matching every filter of `query`, with ids below its `before`
    /// cursor and in its bounds, at most `limit`.
    pub(crate) async fn list_builds_page(
        &self,
        query: &BuildQuery,
    ) -> Result<Vec<Build>, EngineError> {
        // The cursor is an integer, formatted here: a text bind does not
        // compare with a BIGINT on PostgreSQL.
        let bounds: Vec<String> = [
            query.before.map(|id| format!("id < {id}")),
            query.from.map(|id| format!("id >= {id}")),
            query.started_from.map(|ms| format!("started_at >= {ms}")),
            query.started_until.map(|ms| format!("started_at <= {ms}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let before = (!bounds.is_empty()).then(|| bounds.join(" AND "));
        let (filter, texts) = super::where_given(
            &[
                ("team =", query.team.as_deref()),
                ("status =", query.status.map(|s| s.as_str())),
                ("pipeline =", query.pipeline.as_deref()),
                ("job =", query.job.as_deref()),
            ],
            before,
        );
        let sql = format!(
            "SELECT {COLUMNS} FROM builds {filter} ORDER BY id {} LIMIT {}",
            if query.oldest_first { "ASC" } else { "DESC" },
            query.limit.max(0)
        );
        let mut q = sqlx::query_as::<_, Raw>(&sql);
        for t in texts {
            q = q.bind(t);
        }
        let rows = q.fetch_all(self.db.pool()).await?;
        rows.into_iter().map(|r| decode(self.db, r)).collect()
    }

    /// Builds that had not ended (e.g. when a web node stopped under them).
    pub(crate) async fn unfinished_builds(&self, web_node: &str) -> Result<Vec<i64>, EngineError> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM builds WHERE status IN ($1, $2) AND (web_node = $3 OR web_node IS NULL) \
             AND waiting IS NULL",
        )
        .bind(BuildStatus::Pending.as_str())
        .bind(BuildStatus::Started.as_str())
        .bind(web_node)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }

    /// Every build that had not ended, made this node's (`web_node`): the
    /// one node of a SQLite database takes over what a previous run left,
    /// whatever that run's name was (`quickstart` started again on another
    /// `--listen` port is named anew).
    pub(crate) async fn adopt_unfinished_builds(
        &self,
        web_node: &str,
    ) -> Result<Vec<i64>, EngineError> {
        sqlx::query(
            "UPDATE builds SET web_node = $1 WHERE status IN ($2, $3) AND waiting IS NULL \
             AND web_node IS NOT NULL AND web_node <> $1",
        )
        .bind(web_node)
        .bind(BuildStatus::Pending.as_str())
        .bind(BuildStatus::Started.as_str())
        .execute(self.db.pool())
        .await?;
        self.unfinished_builds(web_node).await
    }

    /// Counts of builds by status.
    pub(crate) async fn count_builds_by_status(&self) -> Result<Vec<(String, i64)>, EngineError> {
        Ok(
            sqlx::query_as("SELECT status, COUNT(*) FROM builds GROUP BY status")
                .fetch_all(self.db.pool())
                .await?,
        )
    }

    /// Appends an event (already JSON) with its sequence number, and
    /// whether it is the build's last; on PostgreSQL, notifies
    /// [`EVENTS_CHANNEL`] with the build's id.
    pub(crate) async fn append_build_event(
        &self,
        build_id: i64,
        seq: i64,
        event: &str,
        is_final: bool,
    ) -> Result<(), EngineError> {
        // Several web nodes: the build's followers on other nodes are told
        // in the same statement (`LISTEN` on [`EVENTS_CHANNEL`]).
        let shared = self.db.is_shared();
        let sql = match shared {
            true => {
                "WITH stored AS (INSERT INTO build_events (build_id, seq, event, final) \
                     VALUES ($1, $2, $3, $4) RETURNING build_id) \
                     SELECT pg_notify($5, CAST(build_id AS TEXT)) FROM stored"
            }
            false => {
                "INSERT INTO build_events (build_id, seq, event, final) VALUES ($1, $2, $3, $4)"
            }
        };
        let mut query = sqlx::query(sql)
            .bind(build_id)
            .bind(seq)
            .bind(event)
            .bind(i64::from(is_final));
        if shared {
            query = query.bind(EVENTS_CHANNEL);
        }
        query.execute(self.db.pool()).await?;
        Ok(())
    }

    /// At most `limit` events of a build after `after`, in order, ending
    /// at the event that brings them to `max_bytes` (the rows are read as
    /// a stream, the rest never fetched), and whether more may follow: a
    /// page of a long log in bounded memory, whatever its events' sizes.
    pub(crate) async fn build_events_bounded(
        &self,
        build_id: i64,
        after: i64,
        limit: i64,
        max_bytes: usize,
    ) -> Result<(Vec<(i64, String, bool)>, bool), EngineError> {
        use futures::TryStreamExt as _;
        let sql = format!(
            "SELECT seq, event, final FROM build_events WHERE build_id = $1 AND seq > $2 ORDER BY seq LIMIT {}",
            limit.max(1)
        );
        let mut rows = sqlx::query_as::<_, (i64, String, i64)>(&sql)
            .bind(build_id)
            .bind(after)
            .fetch(self.db.pool());
        let (mut out, mut bytes) = (Vec::new(), 0);
        while let Some((seq, json, fin)) = rows.try_next().await? {
            bytes += json.len();
            out.push((seq, json, fin != 0));
            if bytes >= max_bytes {
                return Ok((out, true));
            }
        }
        let more = out.len() as i64 >= limit.max(1);
        Ok((out, more))
    }

    /// The sequence number of a build's last event (0 when it has none).
    pub(crate) async fn last_event_seq(&self, build_id: i64) -> Result<i64, EngineError> {
        let (seq,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(seq) FROM build_events WHERE build_id = $1")
                .bind(build_id)
                .fetch_one(self.db.pool())
                .await?;
        Ok(seq.unwrap_or(0))
    }

    /// Every event of a build after `after`, in order.
    pub(crate) async fn build_events_after(
        &self,
        build_id: i64,
        after: i64,
    ) -> Result<Vec<(i64, String)>, EngineError> {
        Ok(sqlx::query_as(
            "SELECT seq, event FROM build_events WHERE build_id = $1 AND seq > $2 ORDER BY seq",
        )
        .bind(build_id)
        .bind(after)
        .fetch_all(self.db.pool())
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn builds_and_events_round_trip() {
        let (db, _dir) = crate::db::test_db().await;
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({"task": "t"}), "a")
            .await
            .unwrap();
        db.builds()
            .append_build_event(id, 1, "{\"a\":1}", false)
            .await
            .unwrap();
        db.builds()
            .append_build_event(id, 2, "{\"a\":2}", true)
            .await
            .unwrap();
        let (page, more) = db
            .builds()
            .build_events_bounded(id, 0, 10, 1 << 20)
            .await
            .unwrap();
        let finals: Vec<bool> = page.iter().map(|e| e.2).collect();
        assert_eq!(finals, vec![false, true]);
        assert!(!more, "a page shorter than its limit is the last");
        // A page ends at the event that brings it to its bytes.
        let (first, more) = db
            .builds()
            .build_events_bounded(id, 0, 10, 3)
            .await
            .unwrap();
        assert_eq!((first.len(), more), (1, true));
        let (full, more) = db
            .builds()
            .build_events_bounded(id, 0, 2, 1 << 20)
            .await
            .unwrap();
        assert_eq!((full.len(), more), (2, true));
        assert_eq!(
            db.builds().build_events_after(id, 1).await.unwrap(),
            vec![(2, "{\"a\":2}".into())]
        );
        db.builds()
            .finish_build(id, BuildStatus::Failed, Some(3), None)
            .await
            .unwrap();
        let b = db.builds().get_build(id).await.unwrap().unwrap();
        assert_eq!(b.status, BuildStatus::Failed);
        assert_eq!(b.exit_status, Some(3));
        assert!(db.builds().unfinished_builds("a").await.unwrap().is_empty());
        let other = db
            .builds()
            .create_build("main", &serde_json::json!({}), "b")
            .await
            .unwrap();
        assert!(db.builds().unfinished_builds("a").await.unwrap().is_empty());
        assert_eq!(
            db.builds().unfinished_builds("b").await.unwrap(),
            vec![other]
        );
    }
}
