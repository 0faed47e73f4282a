//! The database's migrations, embedded in the binary (`build.rs` lists the
//! files of `migrations/`), and the source sqlx's migrator reads them from.
//!
//! One tree: `migrations/VERSION_DESCRIPTION.sql` is a migration both
//! dialects run; where their SQL differs, the version is a pair of files
//! of the same name instead, `migrations/sqlite/..` and
//! `migrations/postgres/..` (never one dialect alone, never both shared
//! and a pair: the build fails; never a pair of identical files: the
//! `migrations` gate fails). A dialect's migrations are the shared files
//! and its own, by version.
//!
//! A migration is named `VERSION_DESCRIPTION.sql` and read as sqlx's own
//! directory source reads it (the same version, description, checksum and
//! `-- no-transaction` opt-out), so databases migrated by earlier builds
//! see the same migrations. sqlx refuses a database whose applied
//! migration's checksum (the SHA-384 of its SQL) changed: the text of a
//! released migration is never edited, not even a comment, and
//! `migration_pins.rs` pins each one's checksum.

use std::borrow::Cow;

use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// A dialect's migration files (shared and its own): name and SQL.
#[derive(Debug, Clone, Copy)]
struct Embedded(&'static [(&'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move { parse(self.0).map_err(Into::into) })
    }
}

/// The migrations of `files`, by version.
fn parse(files: &'static [(&'static str, &'static str)]) -> Result<Vec<Migration>, String> {
    let mut out = Vec::with_capacity(files.len());
    for (name, sql) in files {
        let (version, rest) = name
            .split_once('_')
            .ok_or_else(|| format!("migration {name:?} is not named VERSION_DESCRIPTION.sql"))?;
        let version: i64 = version
            .parse()
            .map_err(|_| format!("migration {name:?} does not start with a version number"))?;
        let kind = MigrationType::from_filename(rest);
        let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
        let no_tx = sql.starts_with("-- no-transaction");
        out.push(Migration::new(
            version,
            Cow::Owned(description),
            kind,
            Cow::Borrowed(sql),
            no_tx,
        ));
    }
    out.sort_by_key(|m| m.version);
    Ok(out)
}

/// The migrator of SQLite databases.
pub(super) async fn sqlite() -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded(embedded::SQLITE)).await
}

/// The migrator of PostgreSQL databases.
pub(super) async fn postgres() -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded(embedded::POSTGRES)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What sqlx's own directory source reads from a directory holding
    /// the shared migrations and `dialect`'s own.
    async fn from_directory(dialect: &str) -> Vec<Migration> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        let merged = tempfile::tempdir().unwrap();
        for dir in [root.clone(), root.join(dialect)] {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|x| x == "sql") {
                    std::fs::copy(&path, merged.path().join(path.file_name().unwrap())).unwrap();
                }
            }
        }
        let migrator = Migrator::new(merged.path().to_path_buf()).await.unwrap();
        migrator.migrations.into_owned()
    }

    fn key(m: &Migration) -> (i64, String, Vec<u8>, bool, String) {
        (
            m.version,
            m.description.to_string(),
            m.checksum.to_vec(),
            m.no_tx,
            format!("{:?}", m.migration_type),
        )
    }

    #[tokio::test]
    async fn the_embedded_migrations_are_the_directorys_as_sqlx_reads_them() {
        for (dialect, embedded) in [("sqlite", sqlite().await), ("postgres", postgres().await)] {
            let embedded: Vec<_> = embedded.unwrap().migrations.iter().map(key).collect();
            let read: Vec<_> = from_directory(dialect).await.iter().map(key).collect();
            assert!(
                embedded.len() >= 42,
                "{dialect}: {} migrations",
                embedded.len()
            );
            assert_eq!(embedded, read, "{dialect}");
        }
    }

    #[tokio::test]
    async fn every_version_is_in_both_dialects_once() {
        let versions = |m: Migrator| m.migrations.iter().map(|m| m.version).collect::<Vec<_>>();
        let sqlite = versions(sqlite().await.unwrap());
        let postgres = versions(postgres().await.unwrap());
        assert_eq!(sqlite, postgres);
        let mut unique = sqlite.clone();
        unique.dedup();
        assert_eq!(unique, sqlite, "a version twice");
    }
}
