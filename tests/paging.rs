//! End to end: the list routes answer bounded pages with a link to the
//! next one, honour their filters, and the CLI pages through them and
//! quits quietly when its reader goes away. On SQLite and PostgreSQL.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "adm1n";

/// Builds the test makes: a few that succeed on a worker, one-off builds
/// and job builds that error at once (their tag matches no worker), some
/// of them of team red.
const SUCCEEDED: usize = 3;
const JOB_BUILDS: usize = 5;
const RED: usize = 40;
const TOTAL: usize = 500;

fn create(http: &reqwest::blocking::Client, url: &str, team: &str, body: &Value) -> i64 {
    let resp = http
        .post(format!("{url}/api/v1/teams/{team}/builds"))
        .bearer_auth(ADMIN)
        .json(body)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201, "{:?}", resp.text());
    resp.json::<Value>().unwrap()["id"].as_i64().unwrap()
}

/// One page: its builds and the link to the next, if any.
fn page(http: &reqwest::blocking::Client, url: &str, path: &str) -> (Vec<Value>, Option<String>) {
    let resp = http
        .get(format!("{url}{path}"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let next = resp
        .headers()
        .get("link")
        .map(|v| v.to_str().unwrap().to_string())
        .map(|link| {
            let target = link.split(';').next().unwrap().trim();
            assert!(link.contains("rel=\"next\""), "{link}");
            target
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        });
    (resp.json().unwrap(), next)
}

/// Every build of a listing, following the links from `first`.
fn all_pages(http: &reqwest::blocking::Client, url: &str, first: &str) -> (Vec<Value>, usize) {
    let (mut items, mut next) = page(http, url, first);
    let mut pages = 1;
    while let Some(path) = next {
        let (more, after) = page(http, url, &path);
        assert!(!more.is_empty(), "an empty page behind a next link: {path}");
        items.extend(more);
        next = after;
        pages += 1;
    }
    (items, pages)
}

fn ids(builds: &[Value]) -> Vec<i64> {
    builds.iter().map(|b| b["id"].as_i64().unwrap()).collect()
}

fn builds_are_paged_filtered_and_listed_by_the_cli(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n[web.teams]\nred = \"r3d\"\n"),
    );
    let _w = start_worker(dir.path(), &web.url, "w", worker_backend());
    wait_running_as(&web.url, ADMIN, 1);
    let http = reqwest::blocking::Client::new();
    let task = json!({"platform": "linux", "run": {"path": "true"}});
    let mut succeeded = Vec::new();
    for _ in 0..SUCCEEDED {
        succeeded.push(create(&http, &web.url, "main", &json!({"config": task})));
    }
    let pipeline = "jobs:\n- name: build\n  plan:\n  - task: t\n    tags: [nowhere]\n    config: {platform: linux, run: {path: 'true'}}\n";
    for _ in 0..JOB_BUILDS {
        create(
            &http,
            &web.url,
            "main",
            &json!({"pipeline": pipeline, "job": "build"}),
        );
    }
    let nowhere = json!({"config": task, "tags": ["nowhere"]});
    let mut red = BTreeSet::new();
    for i in 0..TOTAL - SUCCEEDED - JOB_BUILDS {
        if i < RED {
            red.insert(create(&http, &web.url, "red", &nowhere));
        } else {
            create(&http, &web.url, "main", &nowhere);
        }
    }
    wait_for("every build ended", Duration::from_secs(120), || {
        let (all, _) = all_pages(&http, &web.url, "/api/v1/builds?limit=500");
        all.iter()
            .all(|b| !matches!(b["status"].as_str(), Some("pending" | "started")))
            .then_some(())
    });

    // A page of 10, and a link to the next.
    let (first, next) = page(&http, &web.url, "/api/v1/builds?limit=10");
    assert_eq!(first.len(), 10);
    let next = next.expect("a link to the next page");
    assert!(next.contains("cursor="), "{next}");
    // Paging through 500 builds returns each exactly once, newest first.
    let (all, pages) = all_pages(&http, &web.url, "/api/v1/builds?limit=37");
    let all = ids(&all);
    assert_eq!(all.len(), TOTAL);
    assert_eq!(
        all.iter().collect::<BTreeSet<_>>().len(),
        TOTAL,
        "a build listed twice"
    );
    assert!(all.windows(2).all(|w| w[0] > w[1]), "not newest first");
    assert_eq!(pages, TOTAL.div_ceil(37));
    assert_eq!(ids(&first), all[..10]);
    // Without a limit, a page is bounded (100).
    let (default, _) = page(&http, &web.url, "/api/v1/builds");
    assert_eq!(default.len(), 100);

    // Filters: team, status, job, and all of them at once.
    let (reds, _) = all_pages(&http, &web.url, "/api/v1/builds?team=red&limit=7");
    assert_eq!(ids(&reds).into_iter().collect::<BTreeSet<_>>(), red);
    let (ok, _) = all_pages(&http, &web.url, "/api/v1/builds?status=succeeded&limit=2");
    let mut ok = ids(&ok);
    ok.sort();
    assert_eq!(ok, succeeded);
    let (jobs, _) = all_pages(
        &http,
        &web.url,
        "/api/v1/builds?job=build&status=errored&limit=2",
    );
    assert_eq!(jobs.len(), JOB_BUILDS);
    assert!(jobs.iter().all(|b| b["plan"]["job"] == "build"), "{jobs:?}");
    let (none, _) = page(&http, &web.url, "/api/v1/builds?team=red&status=succeeded");
    assert!(none.is_empty());
    // A team token sees only its own team, whatever it asks.
    let resp = http
        .get(format!("{}/api/v1/builds?team=main&limit=500", web.url))
        .bearer_auth("r3d")
        .send()
        .unwrap();
    assert!(resp.json::<Vec<Value>>().unwrap().is_empty());
    let resp = http
        .get(format!("{}/api/v1/builds?limit=500", web.url))
        .bearer_auth("r3d")
        .send()
        .unwrap();
    assert_eq!(resp.json::<Vec<Value>>().unwrap().len(), RED);

    // A build's events resume after a cursor (the seq of the last one read).
    let events = |query: &str| {
        let resp = http
            .get(format!(
                "{}/api/v1/builds/{}/events{query}",
                web.url, succeeded[0]
            ))
            .header("accept", "application/x-ndjson")
            .bearer_auth(ADMIN)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let seqs = |text: &str| -> Vec<i64> {
        text.lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_i64()
                    .unwrap()
            })
            .collect()
    };
    let (_, whole) = events("");
    let whole = seqs(&whole);
    assert!(whole.len() >= 3, "{whole:?}");
    let (_, tail) = events("?after=2");
    assert_eq!(seqs(&tail), whole[2..]);
    assert_eq!(events("?after=-1").0, 400);
    assert_eq!(events("?from=2").0, 400);

    // Containers, volumes, workers, tokens, teams and jobs page the same
    // way, by their key. Their fields move meanwhile (heartbeats, job runs),
    // so keys are compared; containers and volumes may also go meanwhile
    // (GC), so theirs need only come each once.
    for (route, key, stable) in [
        ("containers", "handle", false),
        ("volumes", "handle", false),
        ("workers", "name", true),
        ("tokens", "id", true),
        ("teams", "name", true),
        ("background-jobs", "name", true),
    ] {
        let keys = |items: Vec<Value>| -> Vec<String> {
            items
                .iter()
                .map(|i| i[key].as_str().unwrap().to_string())
                .collect()
        };
        // Page by page; a container or volume gone meanwhile may leave the
        // last page empty.
        let (mut paged, mut pages) = (Vec::new(), 0);
        let mut next = Some(format!("/api/v1/{route}?limit=1"));
        while let Some(path) = next.take() {
            let (items, after) = page(&http, &web.url, &path);
            assert!(items.len() <= 1, "{route}: {items:?}");
            paged.extend(keys(items));
            next = after;
            pages += 1;
        }
        // Each once (their order is the database's collation's).
        let unique: BTreeSet<&String> = paged.iter().collect();
        assert_eq!(unique.len(), paged.len(), "{route}: {paged:?}");
        if stable {
            assert_eq!(pages, paged.len().max(1), "{route}: one item a page");
            let (whole, _) = page(&http, &web.url, &format!("/api/v1/{route}?limit=500"));
            assert_eq!(paged, keys(whole), "{route}");
        }
    }

    // The CLI pages through (pages of 100) up to its --limit.
    let cli = |args: &[&str]| client_as(&web.url, ADMIN, args);
    let out = cli(&["builds", "--limit", "250", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&listed), all[..250]);
    let out = cli(&["builds", "--team", "red", "--json", "--limit", "1000"]);
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.len(), RED);
    // A reader that goes away: no panic, status 0 (as Unix tools do).
    for args in ["builds --limit 500 --json", "builds --limit 500 --wide"] {
        let out = std::process::Command::new("bash")
            .args(["-o", "pipefail", "-c"])
            .arg(format!(
                "{} --url {} {args} | head -1",
                env!("CARGO_BIN_EXE_gantry"),
                web.url
            ))
            .env("GANTRY_TOKEN", ADMIN)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args}: {:?} {err}", out.status);
        assert!(!err.contains("panicked"), "{args}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    }
}

/// Waits until `n` workers are running, asking with `token`.
fn wait_running_as(url: &str, token: &str, n: usize) {
    let http = reqwest::blocking::Client::new();
    wait_for("running workers", Duration::from_secs(60), || {
        let w: Vec<Value> = http
            .get(format!("{url}/api/v1/workers"))
            .bearer_auth(token)
            .send()
            .ok()?
            .json()
            .ok()?;
        (w.iter().filter(|w| w["state"] == "running").count() == n).then_some(())
    });
}

#[test]
fn builds_are_paged_filtered_and_listed_by_the_cli_on_sqlite() {
    builds_are_paged_filtered_and_listed_by_the_cli(DbKind::Sqlite);
}

#[test]
fn builds_are_paged_filtered_and_listed_by_the_cli_on_postgres() {
    builds_are_paged_filtered_and_listed_by_the_cli(DbKind::Postgres);
}
