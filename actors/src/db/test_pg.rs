//! A fresh PostgreSQL database per test.

use super::Db;

/// A fresh database on the PostgreSQL server of the tests
/// (`GANTRY_TEST_PG`, default the local one), dropped by [`PgDb::drop`].
/// PostgreSQL must be up: the test does not skip when it is down.
pub(crate) struct PgDb {
    /// The database.
    pub(crate) db: Db,
    base: String,
    name: String,
}

impl PgDb {
    pub(crate) async fn new() -> PgDb {
        let base = std::env::var("GANTRY_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
        let name = format!("gantry_unit_{}", uuid::Uuid::new_v4().simple());
        let admin = Db::admin_pool(&format!("{base}/postgres")).await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("creating a PostgreSQL database (is PostgreSQL running?)");
        // A test's database need not survive a crash of PostgreSQL: commits
        // do not wait for the WAL's fsync.
        sqlx::query(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .execute(&admin)
        .await
        .expect("setting the test database's synchronous_commit");
        admin.close().await;
        let db = Db::connect(&format!("{base}/{name}"))
            .await
            .expect("connect");
        PgDb { db, base, name }
    }

    pub(crate) async fn drop(self) {
        self.db.close().await;
        let admin = Db::admin_pool(&format!("{}/postgres", self.base)).await;
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&admin)
        .await;
        admin.close().await;
    }
}

impl Db {
    async fn admin_pool(url: &str) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .expect("PostgreSQL is reachable (set GANTRY_TEST_PG)")
    }
}

/// Runs `test` on a fresh SQLite database, then on a fresh PostgreSQL one
/// (dropped after): one body for the twin tests of a store.
pub(crate) async fn on_both<F, Fut>(test: F)
where
    F: Fn(Db) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (db, _dir) = super::test_db().await;
    test(db).await;
    let pg = PgDb::new().await;
    test(pg.db.clone()).await;
    pg.drop().await;
}
