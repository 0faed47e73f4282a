//! `docs/concourse-api.md` against the routes the node registers: its
//! "Gantry" column says, for each of Concourse's routes, whether the node
//! serves the same method and path, the path with another method, or
//! not at all; this test reads the table and holds each row to
//! [`super::routes::ROUTES`], so the document cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};

const TABLE: &str = include_str!("../../docs/concourse-api.md");

/// A path with its parameters (`:name` or `{name}`) made `*`.
fn shape(path: &str) -> String {
    path.split('/')
        .map(|s| {
            if s.starts_with(':') || (s.starts_with('{') && s.ends_with('}')) {
                "*"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn concourse_table_tells_the_routes_as_served() {
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (method, path) in super::routes::ROUTES {
        served
            .entry(shape(path))
            .or_default()
            .insert(method.to_uppercase());
    }
    let mut rows = 0;
    let mut same = 0;
    for line in TABLE
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("| `/"))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (name, method, path, gantry) =
            (cells[1], cells[2], cells[3].trim_matches('`'), cells[4]);
        let methods = served.get(&shape(path));
        let truth = match methods {
            Some(m) if m.contains(method) => "same route".to_string(),
            Some(m) => format!(
                "other method: {}",
                m.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => "—".to_string(),
        };
        assert_eq!(
            gantry, truth,
            "docs/concourse-api.md, {name} ({method} {path})"
        );
        rows += 1;
        same += usize::from(truth == "same route");
    }
    assert!(rows >= 100, "only {rows} rows read from the table");
    let summary = format!("{same} of {rows} routes are served at the same method and path.");
    assert!(
        TABLE.contains(&summary),
        "docs/concourse-api.md should say: {summary}"
    );
}
