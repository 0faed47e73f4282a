//! Embeds the migrations (`migrations/sqlite`, `migrations/postgres`) in the
//! engine: `$OUT_DIR/migrations.rs` lists each flavour's files as
//! `(file name, include_str!(path))`, read by `db::migrations`. sqlx's
//! `migrate!` macro would do the same, but it alone needs sqlx's macros,
//! which compile a second sqlx (its PostgreSQL and SQLite drivers, tokio)
//! for the build host.

use std::fmt::Write as _;
use std::path::Path;
use std::{env, fs};

fn main() {
    let root = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("../migrations");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut out = String::new();
    for flavour in ["sqlite", "postgres"] {
        let dir = root.join(flavour);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<_> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .collect();
        files.sort();
        writeln!(
            out,
            "pub(super) const {}: &[(&str, &str)] = &[",
            flavour.to_uppercase()
        )
        .unwrap();
        for path in files {
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
