//! End to end: five web nodes started at the same moment on a fresh
//! PostgreSQL database, ten times, with one shared artifacts directory and
//! then with one S3 bucket (`s3s-fs` on loopback, see `common/s3.rs`):
//! every node starts (migrations, the store's id, the teams of the
//! configuration, node names and leadership all settle whoever comes
//! first), and the store id the database records is the one in the store.
//!
//! One test in a binary of its own: five nodes hold about 45 PostgreSQL
//! connections, which beside another binary's nodes could pass the
//! server's limit.

use crate::common;

use std::time::Instant;

use common::nodes::start_web_nodes_together;
use common::s3::S3Server;
use common::*;

/// Web nodes started together.
const TOGETHER: usize = 5;

/// Rounds of nodes started together, each on a fresh database.
const ROUNDS: usize = 10;

/// Starts [`TOGETHER`] nodes on `db` with `config(node name)` and stops
/// them, failing with the log of any that did not start.
fn start_and_stop_together(
    dir: &std::path::Path,
    db: &TestDb,
    config: &(dyn Fn(&str) -> String + Sync),
    round: usize,
) {
    let mut nodes = Vec::new();
    for (i, node) in start_web_nodes_together(dir, db, config, TOGETHER)
        .into_iter()
        .enumerate()
    {
        match node {
            Ok(node) => nodes.push(node),
            Err(log) => panic!("round {round}: node{i} did not start:\n{log}"),
        }
    }
    for node in &mut nodes {
        node.kill();
    }
}

#[test]
fn five_web_nodes_started_together_on_a_fresh_database_agree_on_one_store() {
    let dir = tempfile::tempdir().unwrap();

    // One shared directory.
    let started = Instant::now();
    for round in 0..ROUNDS {
        let db = TestDb::new(DbKind::Postgres);
        let round_dir = dir.path().join(format!("dir-round{round}"));
        let store = round_dir.join("shared-artifacts");
        let config = |node: &str| {
            format!(
                "[web]\nnode_name = \"{node}\"\nartifacts_dir = \"{}\"\n\
                 [web.teams]\nalpha = \"alpha-token-of-round-{round}-0123456789\"\n",
                store.display()
            )
        };
        start_and_stop_together(&round_dir, &db, &config, round);
        let recorded = db.query_value("SELECT store_id FROM artifact_store");
        let in_dir = std::fs::read_to_string(store.join(".store-id")).unwrap();
        assert_eq!(recorded, in_dir.trim(), "round {round}");
        assert_eq!(
            db.query_value("SELECT COUNT(*) FROM teams WHERE name = 'alpha'"),
            "1"
        );
    }
    eprintln!(
        "{ROUNDS} rounds of {TOGETHER} web nodes on one directory started together in {:?}",
        started.elapsed()
    );

    // One bucket and prefix.
    let s3 = S3Server::start(dir.path());
    let started = Instant::now();
    for round in 0..ROUNDS {
        let db = TestDb::new(DbKind::Postgres);
        let prefix = format!("round{round}");
        let config = |node: &str| {
            let (artifacts, table) = s3.web_config(&prefix);
            format!("[web]\nnode_name = \"{node}\"\n{artifacts}{table}")
        };
        start_and_stop_together(&dir.path().join(&prefix), &db, &config, round);
        let recorded = db.query_value("SELECT store_id FROM artifact_store");
        let in_bucket = s3
            .get(&format!("{prefix}/.store-id"))
            .expect("the store's id under the prefix");
        assert_eq!(
            recorded,
            String::from_utf8_lossy(&in_bucket).trim(),
            "round {round}"
        );
    }
    eprintln!(
        "{ROUNDS} rounds of {TOGETHER} web nodes on one bucket started together in {:?}",
        started.elapsed()
    );
}
