//! Renaming jobs and resources of a stored pipeline (`old_name`), inside
//! the transaction that stores its config, so a rename is all or nothing
//! on SQLite and PostgreSQL alike. As Concourse's `updateJobsName` and
//! `updateResourcesName`, an old name that names nothing stored is
//! ignored, and everything kept under the old name follows the new one:
//!
//! - a job: its row (paused, the next build number, the last decision),
//!   its builds (what `builds -j`, `passed` and the collector read), the
//!   turns of its builds (`serial`, `max_in_flight`), its task caches, and
//!   the pipelines its `set_pipeline` steps set (their parent job);
//! - a resource: its row (pin and its comment), its disabled versions, the
//!   versions builds of the pipeline used and made of it (what `passed`
//!   reads), and, when it keeps a history of its own (global resources
//!   off), that history and its check state. A history shared by config
//!   (global resources) is not the resource's to move: it stays, and the
//!   renamed resource, with the same config, finds it.

use sqlx::{Any, Transaction};

use crate::error::EngineError;

/// One rename to store: the history under `old` goes to `new`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NameChange {
    /// The former name.
    pub old: String,
    /// The name now.
    pub new: String,
    /// For a resource: the scope of the history of its own under the old
    /// name and under the new one (`crate::resources::scope`, with
    /// `db::PIPELINE_ID` for the pipeline's id).
    pub own_scopes: Option<(String, String)>,
}

/// The renames of one stored config, each list in the order to apply it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Renames {
    /// Of its jobs.
    pub jobs: Vec<NameChange>,
    /// Of its resources.
    pub resources: Vec<NameChange>,
}

/// Where a renamed pipeline's rows are.
pub(super) struct At<'a> {
    /// Its id.
    pub id: i64,
    /// Its team.
    pub team: &'a str,
    /// Its name.
    pub pipeline: &'a str,
    /// What stands for its id in a scope given (`db::PIPELINE_ID`).
    pub id_placeholder: &'a str,
}

/// Applies `renames` to pipeline `at` in `tx`, before its jobs and
/// resources are written. A job renamed onto a job still stored (one this
/// config drops, with builds of its own) is refused: their builds and
/// numbers would mix.
pub(super) async fn apply(
    tx: &mut Transaction<'_, Any>,
    at: &At<'_>,
    renames: &Renames,
) -> Result<(), EngineError> {
    for r in &renames.resources {
        rename_resource(tx, at, r).await?;
    }
    for r in &renames.jobs {
        rename_job(tx, at, r).await?;
    }
    Ok(())
}

/// Whether pipeline `id` stores `name` in `table` (`pipeline_jobs` or
/// `pipeline_resources`).
async fn stored(
    tx: &mut Transaction<'_, Any>,
    table: &str,
    id: i64,
    name: &str,
) -> Result<bool, EngineError> {
    let row: Option<(i64,)> = sqlx::query_as(&format!(
        "SELECT 1 FROM {table} WHERE pipeline_id = $1 AND name = $2"
    ))
    .bind(id)
    .bind(name)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(row.is_some())
}

async fn rename_job(
    tx: &mut Transaction<'_, Any>,
    at: &At<'_>,
    NameChange { old, new, .. }: &NameChange,
) -> Result<(), EngineError> {
    if !stored(tx, "pipeline_jobs", at.id, old).await? {
        return Ok(());
    }
    if stored(tx, "pipeline_jobs", at.id, new).await? {
        return Err(EngineError::Invalid(format!(
            "jobs[{new}].old_name: job {new:?} is stored already, with builds of its own, and job {old:?} too: \
             their builds cannot be merged; set the pipeline without job {old:?} first, or drop old_name"
        )));
    }
    sqlx::query("UPDATE pipeline_jobs SET name = $1 WHERE pipeline_id = $2 AND name = $3")
        .bind(new)
        .bind(at.id)
        .bind(old)
        .execute(&mut **tx)
        .await?;
    let by_job = |sql: String| (sql, new.as_str(), old.as_str());
    let mut statements = vec![by_job(
        "UPDATE builds SET job = $1 WHERE team = $2 AND pipeline = $3 AND job = $4".into(),
    )];
    // A cache the new name somehow holds already stays; the old one goes
    // the way of a dropped job's.
    for table in ["task_caches", "task_cache_leftovers"] {
        let guard = if table == "task_caches" {
            " AND NOT EXISTS (SELECT 1 FROM task_caches n WHERE n.team = task_caches.team \
             AND n.pipeline = task_caches.pipeline AND n.job = $1 AND n.step = task_caches.step \
             AND n.path = task_caches.path AND n.worker = task_caches.worker)"
        } else {
            ""
        };
        statements.push(by_job(format!(
            "UPDATE {table} SET job = $1 WHERE team = $2 AND pipeline = $3 AND job = $4{guard}"
        )));
    }
    for (sql, new, old) in statements {
        sqlx::query(&sql)
            .bind(new)
            .bind(at.team)
            .bind(at.pipeline)
            .bind(old)
            .execute(&mut **tx)
            .await?;
    }
    // Turn keys as `engine::job_builds` writes them.
    let key = |job: &str| format!("{}/{}/job:{job}", at.team, at.pipeline);
    sqlx::query("UPDATE build_turns SET turn_key = $1 WHERE turn_key = $2")
        .bind(key(new))
        .bind(key(old))
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "UPDATE pipelines SET parent_job = $1 WHERE parent_pipeline_id = $2 AND parent_job = $3",
    )
    .bind(new)
    .bind(at.id)
    .bind(old)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn rename_resource(
    tx: &mut Transaction<'_, Any>,
    at: &At<'_>,
    NameChange {
        old,
        new,
        own_scopes,
    }: &NameChange,
) -> Result<(), EngineError> {
    if !stored(tx, "pipeline_resources", at.id, old).await? {
        return Ok(());
    }
    // As Concourse: a resource stored under the new name (one this config
    // drops) gives way, with its pin and disabled versions.
    for (table, column) in [
        ("pipeline_resources", "name"),
        ("disabled_versions", "resource"),
    ] {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE pipeline_id = $1 AND {column} = $2"
        ))
        .bind(at.id)
        .bind(new)
        .execute(&mut **tx)
        .await?;
    }
    for (table, column) in [
        ("pipeline_resources", "name"),
        ("disabled_versions", "resource"),
    ] {
        sqlx::query(&format!(
            "UPDATE {table} SET {column} = $1 WHERE pipeline_id = $2 AND {column} = $3"
        ))
        .bind(new)
        .bind(at.id)
        .bind(old)
        .execute(&mut **tx)
        .await?;
    }
    sqlx::query(
        "UPDATE build_versions SET resource = $1 WHERE resource = $2 AND build_id IN \
         (SELECT id FROM builds WHERE team = $3 AND pipeline = $4 AND job IS NOT NULL)",
    )
    .bind(new)
    .bind(old)
    .bind(at.team)
    .bind(at.pipeline)
    .execute(&mut **tx)
    .await?;
    // A history of its own is named after it: it moves (any left under
    // the new name, a dropped resource's, goes first).
    let Some((from, to)) = own_scopes else {
        return Ok(());
    };
    let id = at.id.to_string();
    let (from, to) = (
        from.replace(at.id_placeholder, &id),
        to.replace(at.id_placeholder, &id),
    );
    let (scope_now,): (String,) =
        sqlx::query_as("SELECT scope FROM pipeline_resources WHERE pipeline_id = $1 AND name = $2")
            .bind(at.id)
            .bind(new)
            .fetch_one(&mut **tx)
            .await?;
    if scope_now == from {
        for (table, column) in [("resource_versions", "team"), ("resource_checks", "scope")] {
            sqlx::query(&format!("DELETE FROM {table} WHERE {column} = $1"))
                .bind(&to)
                .execute(&mut **tx)
                .await?;
            sqlx::query(&format!(
                "UPDATE {table} SET {column} = $1 WHERE {column} = $2"
            ))
            .bind(&to)
            .bind(&from)
            .execute(&mut **tx)
            .await?;
        }
        sqlx::query(
            "UPDATE pipeline_resources SET scope = $1 WHERE pipeline_id = $2 AND name = $3",
        )
        .bind(&to)
        .bind(at.id)
        .bind(new)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{NameChange, Renames};
    use crate::db::test_pg::PgDb;
    use crate::db::{test_db, Db, ResourceRow, SetBy, PIPELINE_ID};

    fn job(old: &str, new: &str) -> NameChange {
        NameChange {
            old: old.into(),
            new: new.into(),
            own_scopes: None,
        }
    }

    /// Resource `name` keeping a history of its own.
    fn resource(name: &str) -> ResourceRow {
        ResourceRow {
            name: name.into(),
            scope: format!("pipeline:{PIPELINE_ID}/{name}"),
            config: "c".into(),
            check_every_ms: None,
            pinned: None,
        }
    }

    /// Sets pipeline `p` with `jobs`, `resources` and `renames`.
    async fn set(
        db: &Db,
        jobs: &[&str],
        resources: &[ResourceRow],
        renames: &Renames,
    ) -> Result<i64, crate::error::EngineError> {
        let jobs: Vec<String> = jobs.iter().map(|j| j.to_string()).collect();
        let by = SetBy {
            renames: Some(renames),
            ..SetBy::default()
        };
        db.pipelines()
            .set_pipeline_by(
                "main",
                "p",
                ("jobs: []", "{}"),
                None,
                &jobs,
                (resources, &[]),
                by,
            )
            .await
            .map(|(row, _)| row.id)
    }

    async fn rows(db: &Db, sql: &str) -> Vec<String> {
        let rows: Vec<(String,)> = sqlx::query_as(sql).fetch_all(db.pool()).await.unwrap();
        rows.into_iter().map(|(r,)| r).collect()
    }

    /// A chain (`b` to `c`, then `a` to `b`) moves each job's builds one
    /// step; a rename onto a job still stored is refused, and with it the
    /// resource rename of the same set: nothing of that set is stored.
    async fn renames_follow_chains_and_are_all_or_nothing(db: &Db) {
        let none = Renames::default();
        let id = set(db, &["a", "b"], &[resource("r1")], &none)
            .await
            .unwrap();
        for (job, n) in [("a", 1), ("b", 7)] {
            sqlx::query(
                "INSERT INTO builds (team, status, plan, created_at, pipeline, job, build_number) \
                 VALUES ('main', 'succeeded', '{}', 0, 'p', $1, $2)",
            )
            .bind(job)
            .bind(n)
            .execute(db.pool())
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO resource_versions (team, config, version, check_order, created_at) VALUES ($1, 'c', 'v1', 1, 0)",
        )
        .bind(format!("pipeline:{id}/r1"))
        .execute(db.pool())
        .await
        .unwrap();

        // A pending build of `a` holds its turn (`serial`); a pipeline
        // `b`'s step set names it as its parent.
        sqlx::query("INSERT INTO build_turns (build_id, turn_key, max_in_flight) VALUES (1, 'main/p/job:a', 1)")
            .execute(db.pool())
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO pipelines (team, name, config, config_version, created_at, updated_at, parent_pipeline_id, parent_job) \
             VALUES ('main', 'child', 'jobs: []', 1, 0, 0, $1, 'b')",
        )
        .bind(id)
        .execute(db.pool())
        .await
        .unwrap();

        let chain = Renames {
            jobs: vec![job("b", "c"), job("a", "b")],
            resources: vec![],
        };
        set(db, &["b", "c"], &[resource("r1")], &chain)
            .await
            .unwrap();
        let builds = rows(
            db,
            "SELECT job || ':' || build_number FROM builds ORDER BY job",
        )
        .await;
        assert_eq!(builds, ["b:1", "c:7"]);
        let turns = rows(db, "SELECT turn_key FROM build_turns").await;
        assert_eq!(turns, ["main/p/job:b"]);
        let parents = rows(db, "SELECT parent_job FROM pipelines WHERE name = 'child'").await;
        assert_eq!(parents, ["c"]);

        // `c` onto `b`, stored: refused; the resource's rename goes too.
        let onto = Renames {
            jobs: vec![job("c", "b")],
            resources: vec![NameChange {
                old: "r1".into(),
                new: "r2".into(),
                own_scopes: Some((
                    format!("pipeline:{PIPELINE_ID}/r1"),
                    format!("pipeline:{PIPELINE_ID}/r2"),
                )),
            }],
        };
        let e = set(db, &["b"], &[resource("r2")], &onto).await.unwrap_err();
        assert!(e.to_string().contains("jobs[b].old_name"), "{e}");
        let names = rows(db, "SELECT name FROM pipeline_resources").await;
        assert_eq!(names, ["r1"]);
        let scopes = rows(db, "SELECT team FROM resource_versions").await;
        assert_eq!(scopes, [format!("pipeline:{id}/r1")]);
        let jobs = rows(db, "SELECT name FROM pipeline_jobs ORDER BY name").await;
        assert_eq!(jobs, ["b", "c"]);

        // The resource alone: its own history moves with it.
        let resource_only = Renames {
            jobs: vec![],
            ..onto
        };
        set(db, &["b", "c"], &[resource("r2")], &resource_only)
            .await
            .unwrap();
        let scopes = rows(db, "SELECT team FROM resource_versions").await;
        assert_eq!(scopes, [format!("pipeline:{id}/r2")]);
        let checks = rows(db, "SELECT scope FROM resource_checks ORDER BY scope").await;
        assert_eq!(checks, [format!("pipeline:{id}/r2")]);
    }

    #[tokio::test]
    async fn renames_follow_chains_and_are_all_or_nothing_on_sqlite() {
        let (db, _dir) = test_db().await;
        renames_follow_chains_and_are_all_or_nothing(&db).await;
    }

    #[tokio::test]
    async fn renames_follow_chains_and_are_all_or_nothing_on_postgres() {
        let pg = PgDb::new().await;
        renames_follow_chains_and_are_all_or_nothing(&pg.db).await;
        pg.drop().await;
    }
}
