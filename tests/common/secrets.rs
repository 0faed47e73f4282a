//! Helpers of the secrets tests: a value's hash (what a task prints
//! instead of the value), `gantry set-secret`, a dump of the database.

use std::path::Path;
use std::process::Command;

use super::{gantry, TestDb};

/// Hex SHA-256 of `text` (what a task prints with `sha256sum`, so a test
/// checks a secret's value without the secret showing).
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `gantry set-secret` with `value` on its standard input.
pub fn set_secret(url: &str, args: &[&str], value: &str) {
    let mut cmd = gantry();
    cmd.arg("--url").arg(url).arg("set-secret").args(args);
    let out = super::output_with_stdin(cmd, value);
    assert!(
        out.status.success(),
        "set-secret {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every text of a dump of a web node's database: `sqlite3 .dump` of its
/// SQLite file `sqlite_file`, or `pg_dump` of its PostgreSQL database
/// (every table, every column).
pub fn dump_database(sqlite_file: &Path, db: &TestDb) -> String {
    let out = match &db.url {
        None => Command::new("sqlite3")
            .arg(sqlite_file)
            .arg(".dump")
            .output()
            .expect("sqlite3 runs (the test script installs it)"),
        Some(url) => Command::new("pg_dump")
            .args(["--data-only", "--no-owner", url])
            .output()
            .expect("pg_dump runs (the test script installs postgresql-client)"),
    };
    assert!(
        out.status.success(),
        "dumping the database: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
