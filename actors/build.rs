//! Embeds the migrations in the engine. One tree, `migrations/`:
//! - `migrations/VERSION_DESCRIPTION.sql`: a migration both dialects run,
//!   byte for byte;
//! - `migrations/sqlite/VERSION_DESCRIPTION.sql` and
//!   `migrations/postgres/VERSION_DESCRIPTION.sql`: a migration whose SQL
//!   differs between the dialects, always as a pair of the same name.
//!
//! A version is either shared or a pair, never both and never one dialect
//! alone: the build fails naming the file otherwise. (`scripts/gates.py
//! migrations` also refuses a pair whose two files are identical.)
//! `$OUT_DIR/migrations.rs` lists each dialect's files as `(file name,
//! include_str!(path))`, read by `db::migrations`. sqlx's `migrate!` macro
//! would do the same for one directory, but it alone needs sqlx's macros,
//! which compile a second sqlx (its PostgreSQL and SQLite drivers, tokio)
//! for the build host.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

/// The dialects, each with a directory of its own under `migrations/`.
const DIALECTS: [&str; 2] = ["sqlite", "postgres"];

/// The `.sql` files of `dir` by version (the digits before the first `_`).
fn by_version(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if !path.is_file() || path.extension().is_none_or(|x| x != "sql") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        let version = name.split_once('_').map_or(name, |(v, _)| v).to_string();
        if let Some(other) = out.insert(version, path.clone()) {
            panic!(
                "{} and {} have the same version",
                other.display(),
                path.display()
            );
        }
    }
    out
}

fn main() {
    let root = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("../migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let shared = by_version(&root);
    let dialects: Vec<_> = DIALECTS
        .iter()
        .map(|d| {
            let dir = root.join(d);
            println!("cargo:rerun-if-changed={}", dir.display());
            by_version(&dir)
        })
        .collect();
    for (i, own) in dialects.iter().enumerate() {
        for (version, path) in own {
            if let Some(both) = shared.get(version) {
                panic!(
                    "{} is also a shared migration ({}): a version is shared or a pair",
                    path.display(),
                    both.display()
                );
            }
            let other = &dialects[1 - i];
            let twin = other.get(version).map(|p| p.file_name());
            if twin != Some(path.file_name()) {
                panic!(
                    "{} has no twin of the same name in migrations/{}: a dialect's \
                     migration comes as a pair (or is one shared file)",
                    path.display(),
                    DIALECTS[1 - i]
                );
            }
        }
    }
    let mut out = String::new();
    for (dialect, own) in DIALECTS.iter().zip(&dialects) {
        let mut files: Vec<_> = shared.iter().chain(own).collect();
        files.sort();
        writeln!(
            out,
            "pub(super) const {}: &[(&str, &str)] = &[",
            dialect.to_uppercase()
        )
        .unwrap();
        for (_, path) in files {
            let path = path.canonicalize().unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            writeln!(
                out,
                "    ({name:?}, include_str!({:?})),",
                path.to_str().unwrap()
            )
            .unwrap();
        }
        writeln!(out, "];").unwrap();
    }
    let dest = Path::new(&env::var("OUT_DIR").unwrap()).join("migrations.rs");
    fs::write(dest, out).unwrap();
}
