//! The `build-logs` rule: each unpaused job of each unpaused pipeline keeps
//! the logs its retention says ([`super::log_retention`]), and each team's
//! builds of no job what the node's one-off retention says; the others'
//! events are deleted, their builds kept.

use crate::db::Db;
use crate::error::EngineError;
use crate::off_thread::{off_thread, PIPELINE_BUDGET};
use crate::pipeline::vars::Vars;
use crate::pipeline::Pipeline;

use super::log_retention::{to_reap, RetentionLimits};

/// Reaps the logs every job's retention lets go at `now`; answers the
/// builds reaped.
pub(crate) async fn build_logs(
    db: &Db,
    now: i64,
    limits: &RetentionLimits,
) -> Result<u64, EngineError> {
    let mut reaped = 0;
    let node_limits = *limits != RetentionLimits::default();
    let one_off = limits.of_one_off();
    for team in db.teams().list_teams().await? {
        if one_off.builds > 0 || one_off.days > 0 {
            let builds = db.gc().logged_one_off_builds(&team.name).await?;
            let gone = to_reap(one_off, &builds, now);
            if !gone.is_empty() {
                db.gc().reap_build_logs(&gone, now).await?;
                metrics::counter!("gantry_build_logs_reaped_total").increment(gone.len() as u64);
                reaped += gone.len() as u64;
            }
        }
        for row in db.pipelines().of_team(&team.name).await? {
            if row.paused || row.archived {
                continue;
            }
            // A pipeline none of whose jobs sets a retention, on a node with
            // no defaults or maximums, keeps every log: it is not parsed.
            if !node_limits
                && !row.config.contains("build_log_retention")
                && !row.config.contains("build_logs_to_retain")
            {
                continue;
            }
            let vars: Vars = serde_json::from_str(&row.vars).map_err(|e| {
                EngineError::Invalid(format!("pipeline {:?}: stored vars: {e}", row.name))
            })?;
            // Parsed off the runtime's threads, as every stored pipeline is.
            let (config, what) = (
                row.config.clone(),
                format!("reading pipeline {:?}", row.name),
            );
            let loaded = off_thread(&what, PIPELINE_BUDGET, move |_| {
                Pipeline::load_leaving(&config, &vars)
                    .map(|(p, _, _)| p)
                    .map_err(|problems| EngineError::Invalid(problems.join("; ")))
            })
            .await;
            let pipeline = match loaded {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(pipeline = %row.name, error = %e, "build-logs: the stored pipeline does not load; its logs are kept");
                    continue;
                }
            };
            let paused: std::collections::HashSet<String> = db
                .pipelines()
                .pipeline_jobs(row.id)
                .await?
                .into_iter()
                .filter(|j| j.paused)
                .map(|j| j.name)
                .collect();
            for job in &pipeline.jobs {
                if paused.contains(&job.name) {
                    continue;
                }
                let retention =
                    limits.of_job(job.build_log_retention.as_ref(), job.build_logs_to_retain);
                if retention.builds == 0 && retention.days == 0 {
                    continue;
                }
                let builds = db
                    .gc()
                    .logged_builds(&team.name, &row.name, &job.name)
                    .await?;
                let gone = to_reap(retention, &builds, now);
                if gone.is_empty() {
                    continue;
                }
                db.gc().reap_build_logs(&gone, now).await?;
                metrics::counter!("gantry_build_logs_reaped_total").increment(gone.len() as u64);
                reaped += gone.len() as u64;
            }
        }
    }
    Ok(reaped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::test_db;
    use crate::db::test_pg::PgDb;
    use crate::gc::log_retention::RetentionLimits;
    use gantry_wire::state::BuildStatus;

    const PIPELINE: &str =
        "jobs:\n- name: j\n  build_log_retention: {builds: 3, minimum_succeeded_builds: 1}\n  \
         plan:\n  - task: t\n    config: {platform: linux, run: {path: 'true'}}\n\
         - name: all\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: 'true'}}\n";

    /// A finished build of `job` with two events; answers its id.
    async fn build(db: &Db, job: &str, status: BuildStatus, finished_at: i64) -> i64 {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO builds (team, status, plan, created_at, finished_at, pipeline, job) \
             VALUES ('main', $1, '{}', 0, $2, 'p', $3) RETURNING id",
        )
        .bind(status.as_str())
        .bind(finished_at)
        .bind(job)
        .fetch_one(db.pool())
        .await
        .unwrap();
        for seq in 1..=2 {
            sqlx::query("INSERT INTO build_events (build_id, seq, event) VALUES ($1, $2, '{}')")
                .bind(id)
                .bind(seq)
                .execute(db.pool())
                .await
                .unwrap();
        }
        id
    }

    /// The builds of `job` that still have events, and those marked reaped.
    async fn logs(db: &Db, job: &str) -> (Vec<i64>, Vec<i64>) {
        let kept: Vec<(i64,)> = sqlx::query_as(
            "SELECT DISTINCT b.id FROM builds b JOIN build_events e ON e.build_id = b.id \
             WHERE b.job = $1 ORDER BY b.id",
        )
        .bind(job)
        .fetch_all(db.pool())
        .await
        .unwrap();
        let reaped: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM builds WHERE job = $1 AND log_reaped_at IS NOT NULL ORDER BY id",
        )
        .bind(job)
        .fetch_all(db.pool())
        .await
        .unwrap();
        (
            kept.into_iter().map(|r| r.0).collect(),
            reaped.into_iter().map(|r| r.0).collect(),
        )
    }

    /// Ten builds of `j` (the 5th succeeded, the others failed) and two of
    /// `all`: `j` keeps the 3 newest counting the newest success, `all`
    /// keeps everything; the reaped builds' rows stay.
    async fn reaps_as_concourse(db: &Db) {
        db.ensure_team("main").await.unwrap();
        let (row, _) = db
            .pipelines()
            .set_pipeline(
                "main",
                "p",
                (PIPELINE, "{}"),
                None,
                &["j".into(), "all".into()],
                (&[], &[]),
            )
            .await
            .unwrap();
        db.pipelines()
            .set_pipeline_paused(row.id, false)
            .await
            .unwrap();
        let mut ids = Vec::new();
        for i in 1..=10 {
            let status = if i == 5 {
                BuildStatus::Succeeded
            } else {
                BuildStatus::Failed
            };
            ids.push(build(db, "j", status, i * 1000).await);
        }
        let others = vec![
            build(db, "all", BuildStatus::Failed, 1).await,
            build(db, "all", BuildStatus::Failed, 2).await,
        ];
        let limits = RetentionLimits::default();
        assert_eq!(build_logs(db, 50_000, &limits).await.unwrap(), 7);
        let (kept, reaped) = logs(db, "j").await;
        assert_eq!(kept, vec![ids[4], ids[8], ids[9]]);
        assert_eq!(reaped.len(), 7);
        assert_eq!(logs(db, "all").await, (others.clone(), vec![]));
        let rows: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM builds WHERE job = 'j'")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(rows.0, 10, "the reaped builds' rows stay");
        // Nothing more to reap; a node maximum of 1 build caps the job.
        assert_eq!(build_logs(db, 50_000, &limits).await.unwrap(), 0);
        let capped = RetentionLimits {
            max_builds: 1,
            ..limits
        };
        assert_eq!(build_logs(db, 50_000, &capped).await.unwrap(), 3);
        assert_eq!(logs(db, "j").await.0, vec![ids[4]]);
        assert_eq!(
            logs(db, "all").await.0,
            vec![others[1]],
            "the maximum caps jobs that set nothing: the newest stays"
        );
    }

    /// Five one-off builds (no job) with events, the newest running: a
    /// node keeping two one-off logs per team keeps the running one and
    /// the two newest ended ones (a running build takes no place).
    #[tokio::test]
    async fn one_off_builds_keep_what_the_node_says() {
        let (db, _dir) = test_db().await;
        db.ensure_team("main").await.unwrap();
        let mut ids = Vec::new();
        for i in 1..=5i64 {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO builds (team, status, plan, created_at, finished_at) \
                 VALUES ('main', $1, '{}', 0, $2) RETURNING id",
            )
            .bind(if i == 5 {
                BuildStatus::Started.as_str()
            } else {
                BuildStatus::Succeeded.as_str()
            })
            .bind(if i == 5 { None } else { Some(i * 1000) })
            .fetch_one(db.pool())
            .await
            .unwrap();
            sqlx::query("INSERT INTO build_events (build_id, seq, event) VALUES ($1, 1, '{}')")
                .bind(id)
                .execute(db.pool())
                .await
                .unwrap();
            ids.push(id);
        }
        let all = RetentionLimits::default();
        assert_eq!(build_logs(&db, 50_000, &all).await.unwrap(), 0, "all kept");
        let two = RetentionLimits {
            one_off_builds: 2,
            ..all
        };
        assert_eq!(build_logs(&db, 50_000, &two).await.unwrap(), 2);
        let kept: Vec<(i64,)> =
            sqlx::query_as("SELECT DISTINCT build_id FROM build_events ORDER BY build_id")
                .fetch_all(db.pool())
                .await
                .unwrap();
        assert_eq!(
            kept.into_iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![ids[2], ids[3], ids[4]]
        );
    }

    #[tokio::test]
    async fn build_logs_are_reaped_as_concourse_reaps_them_on_sqlite() {
        let (db, _dir) = test_db().await;
        reaps_as_concourse(&db).await;
    }

    #[tokio::test]
    async fn build_logs_are_reaped_as_concourse_reaps_them_on_postgres() {
        let pg = PgDb::new().await;
        reaps_as_concourse(&pg.db).await;
        pg.drop().await;
    }
}
