//! The two dialects' migrations make the same schema. Every migration runs
//! on a fresh SQLite database and on a fresh PostgreSQL one; each schema is
//! read back from the database's catalogue as a set of facts (tables;
//! columns with a type class, nullability and default; primary keys;
//! indexes with their table, columns, uniqueness and whether they are
//! partial), and the facts one dialect has and the other lacks must be
//! exactly the [`ALLOWED`] differences, each with its reason. A column,
//! table or index added to one dialect only fails here, naming it; so does
//! an allowed difference that is gone.
//!
//! Normalised away:
//! - the spelling of a type: a class, by SQLite's affinity rules on one
//!   side and PostgreSQL's type on the other (`BIGINT`, `INTEGER` and
//!   `BIGSERIAL` are all `integer`; a PostgreSQL `boolean` would be
//!   `integer` too, the class of the SQLite integers holding one);
//! - the names of the indexes a `UNIQUE` constraint makes
//!   (`sqlite_autoindex_t_1` against `t_x_key`): they are named by what
//!   they index;
//! - a default's casts (`'member'::text` is `'member'`), and how a key is
//!   generated (SQLite's rowid, PostgreSQL's `BIGSERIAL` sequence: both
//!   `generated`);
//! - a primary key's nullability: its columns are `not null` on both
//!   (PostgreSQL enforces it; SQLite's rowid key is never null).

use std::collections::BTreeSet;

use sqlx::Row;

use super::test_pg::PgDb;
use super::{test_db, Db};

/// Where the dialects' schemas legitimately differ: `(dialect that has the
/// fact, fact, why)`.
const ALLOWED: &[(&str, &str, &str)] = &[
    // Shared migrations 0014 and 0025 declare a one-row table keyed
    // `id INTEGER PRIMARY KEY`: on SQLite that column is the rowid, which
    // the database assigns when an insert names none; PostgreSQL assigns
    // nothing. Every insert names `id = 1` (`db/web_nodes.rs`,
    // `Db::sealed_with`), so neither dialect ever generates one.
    (
        "sqlite",
        "column artifact_store.id integer not null generated",
        SINGLE_ROW,
    ),
    (
        "postgres",
        "column artifact_store.id integer not null",
        SINGLE_ROW,
    ),
    (
        "sqlite",
        "column seal_key_check.id integer not null generated",
        SINGLE_ROW,
    ),
    (
        "postgres",
        "column seal_key_check.id integer not null",
        SINGLE_ROW,
    ),
    // Migration 0045 gives jobs integer ids: PostgreSQL counts them with
    // a sequence; SQLite cannot add a counting column, so a trigger gives
    // each new row one more than the highest (`sqlite/0045_job_ids.sql`),
    // and the column is never null after an insert.
    (
        "postgres",
        "column pipeline_jobs.id integer not null generated",
        JOB_IDS,
    ),
    ("sqlite", "column pipeline_jobs.id integer null", JOB_IDS),
    // Migration 0046 gives artifacts integer ids (Concourse's, which fly
    // reads and downloads by) the same way (`sqlite/0046_artifact_int_ids.sql`).
    (
        "postgres",
        "column artifacts.int_id integer not null generated",
        ARTIFACT_INT_IDS,
    ),
    (
        "sqlite",
        "column artifacts.int_id integer null",
        ARTIFACT_INT_IDS,
    ),
];

/// Why artifacts' integer ids are made differently by the dialects.
const ARTIFACT_INT_IDS: &str = "PostgreSQL counts artifacts' integer ids with a sequence; \
                                SQLite with a trigger on insert (it cannot add a counting column)";

/// Why jobs' ids are made differently by the dialects.
const JOB_IDS: &str = "PostgreSQL counts job ids with a sequence; SQLite with a trigger \
                       on insert (it cannot add a counting column)";

/// Why a one-row table's key may be generated on SQLite only.
const SINGLE_ROW: &str = "a one-row table's `INTEGER PRIMARY KEY` is SQLite's rowid; \
                          every insert names id 1";

/// A type class of a column, from what the database says its type is.
fn class(declared: &str) -> String {
    let t = declared.to_ascii_lowercase();
    // SQLite's affinity rules (https://sqlite.org/datatype3.html, 3.1), in
    // their order; PostgreSQL's names fall in the same classes.
    let class = if t.contains("int") || t == "bigserial" || t == "serial" || t == "boolean" {
        "integer"
    } else if t.contains("char") || t.contains("clob") || t.contains("text") {
        "text"
    } else if t.contains("blob") || t == "bytea" || t.is_empty() {
        "blob"
    } else if t.contains("real") || t.contains("floa") || t.contains("doub") {
        "real"
    } else {
        return format!("other ({t})");
    };
    class.to_string()
}

/// One index: the facts name it by its name, or by what it indexes when the
/// database named it after a constraint.
struct Index {
    name: String,
    table: String,
    columns: Vec<String>,
    unique: bool,
    partial: bool,
    /// Made by a `UNIQUE` constraint rather than `CREATE INDEX`.
    constraint: bool,
}

impl Index {
    fn fact(&self) -> String {
        let kind = if self.unique { "unique index" } else { "index" };
        let name = if self.constraint {
            "(of a constraint)".to_string()
        } else {
            self.name.clone()
        };
        let partial = if self.partial { " where .." } else { "" };
        format!(
            "{kind} {name} on {} ({}){partial}",
            self.table,
            self.columns.join(", ")
        )
    }
}

/// What a column holds when an insert names no value.
enum ColumnDefault {
    None,
    /// A value the database generates: SQLite's rowid key (`INTEGER
    /// PRIMARY KEY`, `AUTOINCREMENT` or not), PostgreSQL's sequence
    /// (`BIGSERIAL`: `nextval(..)`).
    Generated,
    /// A constant, as the catalogue spells it, less PostgreSQL's casts
    /// (`'member'::text` is `'member'`).
    Value(String),
}

impl ColumnDefault {
    fn read(spelled: Option<String>) -> ColumnDefault {
        let Some(mut spelled) = spelled else {
            return ColumnDefault::None;
        };
        if spelled.starts_with("nextval(") {
            return ColumnDefault::Generated;
        }
        while let Some((value, cast)) = spelled.rsplit_once("::") {
            if !cast.chars().all(|c| c.is_ascii_alphabetic() || c == ' ') {
                break;
            }
            spelled = value.to_string();
        }
        ColumnDefault::Value(spelled)
    }
}

/// A column as the facts spell it.
fn column_fact(
    table: &str,
    name: &str,
    class: &str,
    not_null: bool,
    default: ColumnDefault,
) -> String {
    let null = if not_null { "not null" } else { "null" };
    let default = match default {
        ColumnDefault::None => String::new(),
        ColumnDefault::Generated => " generated".into(),
        ColumnDefault::Value(v) => format!(" default {v}"),
    };
    format!("column {table}.{name} {class} {null}{default}")
}

/// The schema of a SQLite database, as facts.
async fn sqlite_schema(db: &Db) -> BTreeSet<String> {
    let pool = db.pool();
    let mut facts = BTreeSet::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in tables {
        facts.insert(format!("table {table}"));
        let columns = sqlx::query(
            "SELECT name, type, \"notnull\", pk, dflt_value FROM pragma_table_info($1) \
             ORDER BY pk, cid",
        )
        .bind(&table)
        .fetch_all(pool)
        .await
        .unwrap();
        let columns: Vec<(String, String, i64, i64, Option<String>)> = columns
            .iter()
            .map(|c| (c.get(0), c.get(1), c.get(2), c.get(3), c.get(4)))
            .collect();
        let key: Vec<&str> = columns
            .iter()
            .filter(|c| c.3 > 0)
            .map(|c| c.0.as_str())
            .collect();
        for (name, ty, not_null, pk, spelled) in &columns {
            // The one `INTEGER PRIMARY KEY` column is the rowid.
            let rowid = *pk > 0 && key.len() == 1 && ty.eq_ignore_ascii_case("integer");
            let default = if rowid {
                ColumnDefault::Generated
            } else {
                ColumnDefault::read(spelled.clone())
            };
            let not_null = *not_null == 1 || *pk > 0;
            facts.insert(column_fact(&table, name, &class(ty), not_null, default));
        }
        if !key.is_empty() {
            facts.insert(format!("primary key {table} ({})", key.join(", ")));
        }
        let indexes = sqlx::query(
            "SELECT name, \"unique\", origin, partial FROM pragma_index_list($1) \
             WHERE origin <> 'pk'",
        )
        .bind(&table)
        .fetch_all(pool)
        .await
        .unwrap();
        for i in indexes {
            let name: String = i.get(0);
            let columns: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&name)
                    .fetch_all(pool)
                    .await
                    .unwrap();
            let (unique, origin, partial): (i64, String, i64) = (i.get(1), i.get(2), i.get(3));
            let index = Index {
                name,
                table: table.clone(),
                columns: columns
                    .into_iter()
                    .map(|c| c.unwrap_or_else(|| "<expression>".into()))
                    .collect(),
                unique: unique == 1,
                partial: partial == 1,
                constraint: origin == "u",
            };
            facts.insert(index.fact());
        }
    }
    facts
}

/// The schema of a PostgreSQL database, as facts.
async fn postgres_schema(db: &Db) -> BTreeSet<String> {
    let pool = db.pool();
    let mut facts = BTreeSet::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' \
         AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        facts.insert(format!("table {table}"));
    }
    let columns = sqlx::query(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, \
                column_default::text \
         FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for c in columns {
        let (table, name, ty, nullable): (String, String, String, String) =
            (c.get(0), c.get(1), c.get(2), c.get(3));
        let default = ColumnDefault::read(c.get(4));
        facts.insert(column_fact(
            &table,
            &name,
            &class(&ty),
            nullable == "NO",
            default,
        ));
    }
    // Each index of a table of the schema, its columns in order (an
    // expression's `attnum` is 0: no column), whether it is a primary key,
    // unique, partial, and whether a constraint made it.
    let indexes = sqlx::query(
        "SELECT i.relname::text, t.relname::text, ix.indisprimary, ix.indisunique, \
                ix.indpred IS NOT NULL, \
                EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = ix.indexrelid), \
                (SELECT string_agg(COALESCE(a.attname::text, '<expression>'), ',' \
                                   ORDER BY key.ord) \
                 FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS key(attnum, ord) \
                 LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = key.attnum) \
         FROM pg_index ix \
         JOIN pg_class i ON i.oid = ix.indexrelid \
         JOIN pg_class t ON t.oid = ix.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = 'public' AND t.relname <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for i in indexes {
        let (name, table): (String, String) = (i.get(0), i.get(1));
        let (primary, unique, partial, constraint): (bool, bool, bool, bool) =
            (i.get(2), i.get(3), i.get(4), i.get(5));
        let columns: Vec<String> = i
            .get::<String, _>(6)
            .split(',')
            .map(str::to_string)
            .collect();
        if primary {
            facts.insert(format!("primary key {table} ({})", columns.join(", ")));
            continue;
        }
        let index = Index {
            name,
            table,
            columns,
            unique,
            partial,
            constraint,
        };
        facts.insert(index.fact());
    }
    facts
}

/// The facts each dialect has and the other lacks, less the allowed ones
/// (`+ dialect: fact`), and the allowed ones no longer found
/// (`allowed but gone: ..`).
fn unexplained(sqlite: &BTreeSet<String>, postgres: &BTreeSet<String>) -> Vec<String> {
    let mut found: BTreeSet<(&str, &str)> = BTreeSet::new();
    found.extend(sqlite.difference(postgres).map(|f| ("sqlite", f.as_str())));
    found.extend(
        postgres
            .difference(sqlite)
            .map(|f| ("postgres", f.as_str())),
    );
    let allowed: BTreeSet<(&str, &str)> = ALLOWED.iter().map(|&(d, f, _)| (d, f)).collect();
    let mut out: Vec<String> = found
        .difference(&allowed)
        .map(|(d, f)| format!("only {d}: {f}"))
        .collect();
    out.extend(
        allowed
            .difference(&found)
            .map(|(d, f)| format!("allowed but gone: only {d}: {f}")),
    );
    out
}

#[tokio::test]
async fn both_dialects_migrations_make_the_same_schema() {
    let (lite, _dir) = test_db().await;
    let pg = PgDb::new().await;
    let sqlite = sqlite_schema(&lite).await;
    let postgres = postgres_schema(&pg.db).await;
    pg.drop().await;
    assert!(
        sqlite.contains("column builds.status text not null"),
        "the schema reader reads columns: {sqlite:#?}"
    );
    assert!(sqlite.iter().any(|f| f.starts_with("unique index")));
    let differences = unexplained(&sqlite, &postgres);
    assert!(
        differences.is_empty(),
        "the dialects' schemas differ (add a migration to the dialect that lacks it, \
         or allow the difference in ALLOWED with its reason):\n{}",
        differences.join("\n")
    );
}

/// The comparison is not blind: a column, an index and a table that one
/// dialect's migration added and the other's did not are each named.
#[tokio::test]
async fn a_column_added_to_one_dialect_only_is_named() {
    let (lite, _dir) = test_db().await;
    let pg = PgDb::new().await;
    for statement in [
        "ALTER TABLE builds ADD COLUMN only_here BIGINT",
        "CREATE INDEX builds_only_here ON builds (only_here)",
        "CREATE TABLE only_here (id TEXT PRIMARY KEY)",
    ] {
        sqlx::query(statement).execute(lite.pool()).await.unwrap();
    }
    let sqlite = sqlite_schema(&lite).await;
    let postgres = postgres_schema(&pg.db).await;
    pg.drop().await;
    let differences = unexplained(&sqlite, &postgres);
    for fact in [
        "only sqlite: column builds.only_here integer null",
        "only sqlite: index builds_only_here on builds (only_here)",
        "only sqlite: table only_here",
        "only sqlite: primary key only_here (id)",
    ] {
        assert!(
            differences.iter().any(|d| d == fact),
            "{fact:?} not in {differences:#?}"
        );
    }
}
