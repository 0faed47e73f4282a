//! What is sealed at rest beside the workers' secrets: a build's plan
//! (`builds.plan`, which holds a job build's pipeline and vars) and a
//! stored pipeline's config and vars (`pipelines.config`, `pipelines.vars`:
//! the sources of its resources, the vars given with `set-pipeline -v`).
//! A dump of the database shows none of them. Each value is sealed with
//! the node's key bound to its column ([`crate::sealer::Sealer`]); a value
//! written before sealing began (an older node, or a [`Db`] never given a
//! key) is read as it is and sealed at the first start that seals.
//! Rotation ([`Db::sealed_with`] with the old key) seals every value again
//! with the new key, 500 rows per transaction; a rotation cut short is
//! resumed by the next start given both keys (a value the new key opens
//! already is kept), and the key check moves to the new key last.

use crate::db::{Db, Workers};
use crate::error::EngineError;
use crate::sealer::{Sealer, SEALED_PREFIX};

/// The column context of a build's plan.
pub(super) const PLAN: &str = "builds.plan";
/// The column context of a stored pipeline's config.
pub(super) const CONFIG: &str = "pipelines.config";
/// The column context of a stored pipeline's vars.
pub(super) const VARS: &str = "pipelines.vars";

/// What `sealed_at_rest` records once the plain rows are sealed.
const SEALED_COLUMNS: &str = "builds.plan pipelines.config pipelines.vars";

/// Rows re-sealed per statement batch.
const BATCH: i64 = 500;

/// Which stored values a pass seals again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    /// Those in plain text (stored before sealing began).
    Plain,
    /// Every sealed one (a key rotation).
    Sealed,
    /// Those an earlier version sealed (`v1`, ChaCha20-Poly1305).
    V1,
}

impl Which {
    /// What the values it names start with (`Plain`: what they do not).
    fn prefix(self) -> &'static str {
        match self {
            Which::Plain | Which::Sealed => SEALED_PREFIX,
            Which::V1 => crate::sealer::V1,
        }
    }
}

impl Db {
    /// `plain` as column `column` stores it: sealed once this node seals
    /// at rest ([`Db::sealed_with`]), as it is before.
    pub(crate) fn seal_at_rest(&self, column: &str, plain: &str) -> String {
        if self.at_rest {
            self.sealer.seal(column, plain)
        } else {
            plain.to_string()
        }
    }

    /// A value of `column` as stored: opened when sealed, as it is when it
    /// was written before sealing began.
    pub(crate) fn open_at_rest(&self, column: &str, stored: &str) -> Result<String, EngineError> {
        if Sealer::is_sealed(stored) {
            Ok(self.sealer.open(column, stored)?)
        } else {
            Ok(stored.to_string())
        }
    }

    /// Seals every plan and pipeline stored in plain text (written before
    /// sealing began); answers how many rows. Once done, it is recorded
    /// (`sealed_at_rest`), so later starts scan no table: what a node
    /// given a key writes is sealed already.
    pub(super) async fn seal_plain_rows(&self) -> Result<u64, EngineError> {
        let done: Option<(i64,)> =
            sqlx::query_as("SELECT sealed_at FROM sealed_at_rest WHERE columns = $1")
                .bind(SEALED_COLUMNS)
                .fetch_optional(self.pool())
                .await?;
        if done.is_some() {
            return Ok(0);
        }
        let mut sealed = 0;
        for (table, columns) in [
            ("builds", &[PLAN][..]),
            ("pipelines", &[CONFIG, VARS][..]),
            ("secrets", &[super::secrets::VALUE][..]),
            ("signing_keys", &[super::secrets::SIGNING_KEY][..]),
        ] {
            sealed += self
                .reseal_table(table, columns, None, Which::Plain)
                .await?;
        }
        sqlx::query(
            "INSERT INTO sealed_at_rest (columns, sealed_at) VALUES ($1, $2) \
             ON CONFLICT (columns) DO NOTHING",
        )
        .bind(SEALED_COLUMNS)
        .bind(super::now_ms())
        .execute(self.pool())
        .await?;
        Ok(sealed)
    }

    /// Seals again, as AES-256-GCM (`v2`), every value earlier versions
    /// sealed with ChaCha20-Poly1305 (`v1`), once per database (recorded
    /// in `sealed_at_rest`); answers how many rows. A `v1` value an older
    /// node writes later, during a rolling upgrade, still opens, and is
    /// sealed again by the next key rotation.
    pub(super) async fn upgrade_v1(&self) -> Result<u64, EngineError> {
        let marker = format!("v2 {SEALED_COLUMNS}");
        let done: Option<(i64,)> =
            sqlx::query_as("SELECT sealed_at FROM sealed_at_rest WHERE columns = $1")
                .bind(&marker)
                .fetch_optional(self.pool())
                .await?;
        if done.is_some() {
            return Ok(0);
        }
        let count = self.reseal_from(&self.sealer.clone(), Which::V1).await?;
        sqlx::query(
            "INSERT INTO sealed_at_rest (columns, sealed_at) VALUES ($1, $2) \
             ON CONFLICT (columns) DO NOTHING",
        )
        .bind(&marker)
        .bind(super::now_ms())
        .execute(self.pool())
        .await?;
        Ok(count)
    }

    /// Seals every sealed value again with this node's key, opening it
    /// with `old`: the workers' secrets, the plans, the pipelines. Answers
    /// how many rows.
    pub(super) async fn reseal_from(&self, old: &Sealer, which: Which) -> Result<u64, EngineError> {
        let mut count = 0;
        for (table, columns) in [
            ("builds", &[PLAN][..]),
            ("pipelines", &[CONFIG, VARS][..]),
            ("secrets", &[super::secrets::VALUE][..]),
            ("signing_keys", &[super::secrets::SIGNING_KEY][..]),
        ] {
            count += self.reseal_table(table, columns, Some(old), which).await?;
        }
        count += self.workers().reseal_workers(old, which).await?;
        Ok(count)
    }

    /// Writes `columns` (`table.column` contexts) of `table` sealed with
    /// this node's key, by id, a batch at a time: the rows `which` names,
    /// opening sealed values with `old`.
    async fn reseal_table(
        &self,
        table: &str,
        columns: &[&str],
        old: Option<&Sealer>,
        which: Which,
    ) -> Result<u64, EngineError> {
        let names: Vec<&str> = columns
            .iter()
            .map(|c| c.rsplit('.').next().unwrap_or(c))
            .collect();
        let select = names.join(", ");
        let prefix = format!("{}%", which.prefix());
        let wanted = names
            .iter()
            .map(|n| match which {
                Which::Plain => format!("{n} NOT LIKE $2"),
                Which::Sealed | Which::V1 => format!("{n} LIKE $2"),
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        let sets = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} = ${}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        // Only the row as read: a value written meanwhile (another node's
        // `set-pipeline`, a waiting build given its plan) is sealed by its
        // writer already and must not be overwritten with the old one.
        let n = names.len();
        let unchanged = names
            .iter()
            .enumerate()
            .map(|(i, c)| format!(" AND {c} = ${}", n + 2 + i))
            .collect::<String>();
        let update = format!("UPDATE {table} SET {sets} WHERE id = ${}{unchanged}", n + 1);
        let mut after = i64::MIN;
        let mut count = 0;
        loop {
            let rows: Vec<sqlx::any::AnyRow> = sqlx::query(&format!(
                "SELECT id, {select} FROM {table} WHERE id > $1 AND ({wanted}) ORDER BY id LIMIT {BATCH}"
            ))
            .bind(after)
            .bind(&prefix)
            .fetch_all(self.pool())
            .await?;
            let Some(last) = rows.last() else {
                return Ok(count);
            };
            after = sqlx::Row::try_get(last, 0)?;
            let mut tx = self.pool().begin().await?;
            for row in &rows {
                let id: i64 = sqlx::Row::try_get(row, 0)?;
                let mut q = sqlx::query(&update);
                let mut as_read = Vec::with_capacity(columns.len());
                for (i, column) in columns.iter().enumerate() {
                    let stored: String = sqlx::Row::try_get(row, i + 1)?;
                    as_read.push(stored.clone());
                    // A value sealed with the new key already (a rotation
                    // cut short) opens with it.
                    let plain = match (Sealer::is_sealed(&stored), old) {
                        (true, Some(old)) => match old.open(column, &stored) {
                            Ok(plain) => plain,
                            Err(_) => self.sealer.open(column, &stored)?,
                        },
                        (true, None) => self.sealer.open(column, &stored)?,
                        (false, _) => stored,
                    };
                    q = q.bind(self.sealer.seal(column, &plain));
                }
                q = q.bind(id);
                for stored in as_read {
                    q = q.bind(stored);
                }
                count += q.execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
        }
    }
}

impl Workers<'_> {
    /// Seals the secrets of every worker holding a value `which` names
    /// (sealed ones) again with this node's key, opening them with `old`;
    /// answers how many workers.
    async fn reseal_workers(&self, old: &Sealer, which: Which) -> Result<u64, EngineError> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT name, registration FROM workers WHERE registration LIKE $1")
                .bind(format!("%{}%", which.prefix()))
                .fetch_all(self.db.pool())
                .await?;
        let before = Db {
            sealer: old.clone(),
            ..self.db.clone()
        };
        let mut count = 0;
        for (name, json) in rows {
            // Sealed with the new key already: a rotation cut short.
            let reg = match before.workers().decode_registration(&json) {
                Ok(reg) => reg,
                Err(_) => self.decode_registration(&json)?,
            };
            // Only the row as read: a worker registering meanwhile is
            // sealed with the new key by its own write.
            count += sqlx::query(
                "UPDATE workers SET registration = $1 WHERE name = $2 AND registration = $3",
            )
            .bind(self.encode_registration(&reg))
            .bind(&name)
            .bind(&json)
            .execute(self.db.pool())
            .await?
            .rows_affected();
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db::test_pg::PgDb;

    const SECRET: &str = "s3cr3t-value";

    fn config() -> String {
        format!("resources: [{{name: r, type: git, source: {{private_key: {SECRET}}}}}]")
    }

    /// A build whose plan holds the secret, and a pipeline whose config and
    /// vars do; answers the build's id and the pipeline's.
    async fn write(db: &Db) -> (i64, i64) {
        let build = db
            .builds()
            .create_build("main", &json!({"password": SECRET}), "n")
            .await
            .unwrap();
        let vars = format!("{{\"password\": \"{SECRET}\"}}");
        let (row, _) = db
            .pipelines()
            .set_pipeline("main", "p", (&config(), &vars), None, &[], (&[], &[]))
            .await
            .unwrap();
        (build, row.id)
    }

    /// The stored plan, config and vars, as the database holds them.
    async fn raw(db: &Db, build: i64, pipeline: i64) -> Vec<String> {
        let (plan,): (String,) = sqlx::query_as("SELECT plan FROM builds WHERE id = $1")
            .bind(build)
            .fetch_one(db.pool())
            .await
            .unwrap();
        let (config, vars): (String, String) =
            sqlx::query_as("SELECT config, vars FROM pipelines WHERE id = $1")
                .bind(pipeline)
                .fetch_one(db.pool())
                .await
                .unwrap();
        vec![plan, config, vars]
    }

    /// What the node reads back.
    async fn read(db: &Db, build: i64) -> (serde_json::Value, String, String) {
        let b = db.builds().get_build(build).await.unwrap().unwrap();
        let p = db.pipelines().pipeline("main", "p").await.unwrap().unwrap();
        (b.plan, p.config, p.vars)
    }

    async fn sealed_and_read_back(url: &str) {
        let key = Sealer::ephemeral();
        let db = Db::connect(url)
            .await
            .unwrap()
            .sealed_with(key.clone(), None)
            .await
            .unwrap();
        let (build, pipeline) = write(&db).await;
        for stored in raw(&db, build, pipeline).await {
            assert!(Sealer::is_sealed(&stored), "{stored}");
            assert!(!stored.contains(SECRET), "{stored}");
        }
        let (plan, config, vars) = read(&db, build).await;
        assert_eq!(plan, json!({"password": SECRET}));
        assert_eq!(config, config_text());
        assert!(vars.contains(SECRET));

        // Another node on the key reads them too.
        let again = Db::connect(url)
            .await
            .unwrap()
            .sealed_with(key, None)
            .await
            .unwrap();
        assert_eq!(read(&again, build).await.0, plan);
    }

    fn config_text() -> String {
        config()
    }

    #[tokio::test]
    async fn plans_and_pipelines_are_sealed_at_rest_and_read_back_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        sealed_and_read_back(&sqlite(&dir)).await;
    }

    #[tokio::test]
    async fn plans_and_pipelines_are_sealed_at_rest_and_read_back_on_postgres() {
        let pg = PgDb::new().await;
        sealed_and_read_back(pg.db.url()).await;
        pg.drop().await;
    }

    /// A fresh SQLite file's URL (in `dir`).
    fn sqlite(dir: &tempfile::TempDir) -> String {
        format!("sqlite://{}/t.db?mode=rwc", dir.path().display())
    }

    #[tokio::test]
    async fn rows_written_in_plain_text_are_sealed_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        plain_rows_sealed(&sqlite(&dir)).await;
        let pg = PgDb::new().await;
        plain_rows_sealed(pg.db.url()).await;
        pg.drop().await;
    }

    async fn plain_rows_sealed(url: &str) {
        let url = url.to_string();
        // A handle given no key writes as it is (as a node before sealing).
        let plain = Db::connect(&url).await.unwrap();
        let (build, pipeline) = write(&plain).await;
        assert!(raw(&plain, build, pipeline)
            .await
            .iter()
            .all(|v| v.contains(SECRET)));
        let db = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(Sealer::ephemeral(), None)
            .await
            .unwrap();
        for stored in raw(&db, build, pipeline).await {
            assert!(Sealer::is_sealed(&stored), "{stored}");
        }
        assert_eq!(read(&db, build).await.0, json!({"password": SECRET}));
        // Done once, and recorded: a later start scans no table, and a row
        // written plain since (by a handle given no key) is read as it is.
        let (later, _) = write(&plain).await;
        assert_eq!(
            db.seal_plain_rows().await.unwrap(),
            0,
            "no table is scanned again"
        );
        let (plan,): (String,) = sqlx::query_as("SELECT plan FROM builds WHERE id = $1")
            .bind(later)
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert!(
            !Sealer::is_sealed(&plan),
            "the later row was left as written"
        );
        assert_eq!(read(&db, later).await.0, json!({"password": SECRET}));
    }

    #[tokio::test]
    async fn values_an_earlier_version_sealed_are_sealed_again_as_aes_gcm() {
        let dir = tempfile::tempdir().unwrap();
        v1_upgraded(&sqlite(&dir)).await;
        let pg = PgDb::new().await;
        v1_upgraded(pg.db.url()).await;
        pg.drop().await;
    }

    async fn v1_upgraded(url: &str) {
        let key = Sealer::ephemeral();
        let db = Db::connect(url)
            .await
            .unwrap()
            .sealed_with(key.clone(), None)
            .await
            .unwrap();
        let (build, pipeline) = write(&db).await;
        // As an earlier version left the database: every value, and the
        // key check, ChaCha20-Poly1305 (`v1`), no upgrade recorded.
        let plan = serde_json::to_string(&json!({"password": SECRET})).unwrap();
        let v1 = |column: &str, plain: &str| key.seal_v1(column, plain);
        for (q, value, id) in [
            (
                "UPDATE builds SET plan = $1 WHERE id = $2",
                v1(PLAN, &plan),
                build,
            ),
            (
                "UPDATE pipelines SET config = $1 WHERE id = $2",
                v1(CONFIG, &config()),
                pipeline,
            ),
            (
                "UPDATE seal_key_check SET sealed = $1 WHERE id = $2",
                v1("seal_key_check", "gantry seal key check"),
                1,
            ),
        ] {
            sqlx::query(q)
                .bind(value)
                .bind(id)
                .execute(db.pool())
                .await
                .unwrap();
        }
        sqlx::query("DELETE FROM sealed_at_rest WHERE columns LIKE 'v2 %'")
            .execute(db.pool())
            .await
            .unwrap();
        assert!(Sealer::is_v1(&raw(&db, build, pipeline).await[0]));
        assert_eq!(read(&db, build).await.0, json!({"password": SECRET}));

        let again = Db::connect(url)
            .await
            .unwrap()
            .sealed_with(key, None)
            .await
            .unwrap();
        for stored in raw(&again, build, pipeline).await {
            assert!(stored.starts_with("sealed:v2:"), "{stored}");
        }
        let (check,): (String,) = sqlx::query_as("SELECT sealed FROM seal_key_check WHERE id = 1")
            .fetch_one(again.pool())
            .await
            .unwrap();
        assert!(check.starts_with("sealed:v2:"), "{check}");
        let (plan, config_read, _) = read(&again, build).await;
        assert_eq!(plan, json!({"password": SECRET}));
        assert_eq!(config_read, config());
        assert_eq!(again.upgrade_v1().await.unwrap(), 0, "done once");
    }

    #[tokio::test]
    async fn a_new_key_with_the_old_one_seals_every_row_again() {
        let dir = tempfile::tempdir().unwrap();
        rotation(&sqlite(&dir)).await;
        let pg = PgDb::new().await;
        rotation(pg.db.url()).await;
        pg.drop().await;
    }

    async fn rotation(url: &str) {
        let url = url.to_string();
        let (old, new) = (Sealer::ephemeral(), Sealer::ephemeral());
        let db = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(old.clone(), None)
            .await
            .unwrap();
        let (build, pipeline) = write(&db).await;
        let before = raw(&db, build, pipeline).await;

        // The new key alone is refused, naming where the old one goes.
        let e = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(new.clone(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("old_encryption_key_file"), "{e}");
        // With the old key: every row is sealed again with the new one.
        let rotated = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(new.clone(), Some(old.clone()))
            .await
            .unwrap();
        let after = raw(&rotated, build, pipeline).await;
        for ((was, is), column) in before.iter().zip(&after).zip([PLAN, CONFIG, VARS]) {
            assert_ne!(was, is);
            assert!(
                old.open(column, is).is_err(),
                "{column} still opens with the old key"
            );
            assert!(
                new.open(column, is).is_ok(),
                "{column} does not open with the new key"
            );
        }
        assert_eq!(read(&rotated, build).await.0, json!({"password": SECRET}));
        // From now on the new key alone opens it, and the old one is refused.
        let again = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(new.clone(), None)
            .await;
        assert!(again.is_ok());
        let e = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(Sealer::ephemeral(), Some(Sealer::ephemeral()))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither the encryption key"), "{e}");
        let stale = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(old, None)
            .await;
        assert!(
            stale.is_err(),
            "the old key is refused once the database is rotated"
        );
    }
}
