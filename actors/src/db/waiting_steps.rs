//! The fleet's queue: steps waiting for a worker, one row each while it
//! waits (`waiting_steps`), written by the web node running its build and
//! read through any node (`GET /api/v1/queue`, `gantry_steps_waiting`).

use super::Builds;
use crate::error::EngineError;

/// A step waiting for a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingStep {
    /// Its row's id.
    pub id: String,
    /// The web node running its build.
    pub web_node: String,
    /// Its build.
    pub build_id: i64,
    /// Its name.
    pub step: String,
    /// Its team.
    pub team: String,
    /// The platform it needs.
    pub platform: String,
    /// The tags it needs, sorted.
    pub tags: Vec<String>,
    /// The resource type it needs, if any.
    pub resource_type: Option<String>,
    /// Whether it needs a worker allowing privileged containers.
    pub privileged: bool,
    /// Why it waits.
    pub reason: String,
    /// Since when (unix ms).
    pub since: i64,
}

/// One kind of waiting steps: what they need, how many, the oldest since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingKind {
    /// Their team.
    pub team: String,
    /// The platform they need.
    pub platform: String,
    /// The tags they need, sorted.
    pub tags: Vec<String>,
    /// The resource type they need, if any.
    pub resource_type: Option<String>,
    /// Whether they need a worker allowing privileged containers.
    pub privileged: bool,
    /// How many wait.
    pub count: i64,
    /// Since when the oldest waits (unix ms).
    pub oldest: i64,
}

type KindRaw = (String, String, String, Option<String>, i64, i64, i64);

const COLUMNS: &str =
    "id, web_node, build_id, step, team, platform, tags, resource_type, privileged, reason, since";

fn tags_of(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

impl Builds<'_> {
    /// Records that `step` waits.
    pub(crate) async fn insert_waiting_step(&self, step: &WaitingStep) -> Result<(), EngineError> {
        let mut tags = step.tags.clone();
        tags.sort();
        sqlx::query(&format!(
            "INSERT INTO waiting_steps ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(&step.id)
        .bind(&step.web_node)
        .bind(step.build_id)
        .bind(&step.step)
        .bind(&step.team)
        .bind(&step.platform)
        .bind(tags.join(","))
        .bind(step.resource_type.as_deref())
        .bind(i64::from(step.privileged))
        .bind(&step.reason)
        .bind(step.since)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// The step of row `id` waits no more.
    pub(crate) async fn delete_waiting_step(&self, id: &str) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM waiting_steps WHERE id = $1")
            .bind(id)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Forgets the steps web node `node` had waiting (it started again, or
    /// was taken over: its builds wait again where they are resumed).
    pub(crate) async fn purge_waiting_steps(&self, node: &str) -> Result<u64, EngineError> {
        Ok(sqlx::query("DELETE FROM waiting_steps WHERE web_node = $1")
            .bind(node)
            .execute(self.db.pool())
            .await?
            .rows_affected())
    }

    /// The waiting steps by what they need (team, platform, tags, resource
    /// type, privileged), in that order, of `team` when given: one row per
    /// kind of need, however many steps wait.
    pub(crate) async fn waiting_kinds(
        &self,
        team: Option<&str>,
    ) -> Result<Vec<WaitingKind>, EngineError> {
        let rows: Vec<KindRaw> = sqlx::query_as(
            "SELECT team, platform, tags, resource_type, privileged, COUNT(*), MIN(since) \
             FROM waiting_steps WHERE ($1 IS NULL OR team = $1) \
             GROUP BY team, platform, tags, resource_type, privileged \
             ORDER BY team, platform, tags, resource_type, privileged",
        )
        .bind(team)
        .fetch_all(self.db.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(team, platform, tags, resource_type, privileged, count, oldest)| WaitingKind {
                    team,
                    platform,
                    tags: tags_of(&tags),
                    resource_type,
                    privileged: privileged != 0,
                    count,
                    oldest,
                },
            )
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    fn step(id: &str, team: &str, tags: &[&str], since: i64) -> WaitingStep {
        WaitingStep {
            id: id.into(),
            web_node: "a".into(),
            build_id: 1,
            step: "t".into(),
            team: team.into(),
            platform: "linux".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            resource_type: None,
            privileged: false,
            reason: "busy".into(),
            since,
        }
    }

    /// Steps are grouped by what they need (tags in any order are one
    /// kind), per team, and a node's go with it.
    #[tokio::test]
    async fn waiting_steps_are_grouped_and_purged_on_sqlite() {
        let (db, _dir) = crate::db::test_db().await;
        grouped_and_purged(&db).await;
    }

    #[tokio::test]
    async fn waiting_steps_are_grouped_and_purged_on_postgres() {
        let pg = crate::db::test_pg::PgDb::new().await;
        grouped_and_purged(&pg.db).await;
        pg.drop().await;
    }

    async fn grouped_and_purged(db: &Db) {
        db.builds()
            .insert_waiting_step(&step("1", "main", &["gpu", "big"], 10))
            .await
            .unwrap();
        db.builds()
            .insert_waiting_step(&step("2", "main", &["big", "gpu"], 20))
            .await
            .unwrap();
        db.builds()
            .insert_waiting_step(&step("3", "other", &[], 5))
            .await
            .unwrap();
        let kinds = db.builds().waiting_kinds(Some("main")).await.unwrap();
        assert_eq!(kinds.len(), 1);
        assert_eq!((kinds[0].count, kinds[0].oldest), (2, 10));
        assert_eq!(kinds[0].tags, ["big", "gpu"]);
        let all = db.builds().waiting_kinds(None).await.unwrap();
        assert_eq!(all[0].team, "main");
        assert_eq!((all[1].team.as_str(), all[1].count), ("other", 1));
        db.builds().delete_waiting_step("1").await.unwrap();
        assert_eq!(
            db.builds().waiting_kinds(Some("main")).await.unwrap()[0].count,
            1
        );
        assert_eq!(db.builds().purge_waiting_steps("a").await.unwrap(), 2);
        assert!(db.builds().waiting_kinds(None).await.unwrap().is_empty());
    }
}
