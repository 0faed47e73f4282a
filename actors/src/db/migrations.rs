//! The database's migrations, embedded in the binary (`build.rs` lists the
//! files of `migrations/`), and the source sqlx's migrator reads them from.
//! A migration is named `VERSION_DESCRIPTION.sql` and read as sqlx's own
//! directory source reads it (the same version, description, checksum and
//! `-- no-transaction` opt-out), so databases migrated by earlier builds
//! see the same migrations.

use std::borrow::Cow;

use futures::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// A flavour's migration files: name and SQL.
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

    /// What sqlx's own directory source reads from `migrations/FLAVOUR`.
    async fn from_directory(flavour: &str) -> Vec<Migration> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(flavour);
        Migrator::new(dir).await.unwrap().migrations.into_owned()
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
        for (flavour, embedded) in [("sqlite", sqlite().await), ("postgres", postgres().await)] {
            let embedded: Vec<_> = embedded.unwrap().migrations.iter().map(key).collect();
            let read: Vec<_> = from_directory(flavour).await.iter().map(key).collect();
            assert!(
                embedded.len() >= 30,
                "{flavour}: {} migrations",
                embedded.len()
            );
            assert_eq!(embedded, read, "{flavour}");
        }
    }
}
