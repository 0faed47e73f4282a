//! End to end: strict input, on SQLite and on PostgreSQL. Every route of
//! the node's own OpenAPI document answers a path parameter or a query
//! parameter holding a NUL or another control character, and a body that
//! is a JSON array (`[]`, `["main", "v"]`), with a 4xx JSON error whose
//! text names nothing of the database; names in a pipeline config that no
//! path could name (empty, blank, `/`, `..`, control or bidi characters)
//! are refused by `set-pipeline`, by the API and by `validate-plan`, each
//! naming the field, while names Concourse only warns about are set with
//! its warnings.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "adm1n";

/// Words of the database's own errors: none may reach a caller.
const DATABASE_WORDS: &[&str] = &[
    "sqlx",
    "sqlite",
    "postgres",
    "pg_",
    "sqlstate",
    "database",
    "relation",
    "syntax",
    "constraint",
    "encoding \"utf8\"",
    "invalid byte sequence",
    "violates",
    "column \"",
];

/// Path parameter and query values holding control characters, encoded.
const CONTROL_VALUES: &[&str] = &["a%00b", "%00", "%01", "x%1Bx", "%7F", "%C2%85", "%0A"];

/// A pipeline whose job `j` and resource `r` the routes name.
const PIPELINE: &str = "resources:\n- name: r\n  type: mock\n  check_every: never\n  source: {}\njobs:\n- name: j\n  plan:\n  - get: r\n";

/// A real value for each path parameter (what names the pipeline set).
fn real_value(param: &str) -> &'static str {
    match param {
        "team" => "main",
        "pipeline" => "p",
        "job" => "j",
        "resource" => "r",
        "kind" => "user",
        "id" | "build" => "1",
        _ => "n",
    }
}

/// The document's path with `{param}`s filled: `value(param)`.
fn fill(path: &str, value: impl Fn(&str) -> String) -> String {
    path.split('/')
        .map(
            |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(param) => value(param),
                None => s.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Sends `method url` with the admin token and `body` (as JSON, when
/// given); asserts a 4xx JSON error naming nothing of the database.
fn assert_refused(http: &reqwest::blocking::Client, method: &str, url: &str, body: Option<&str>) {
    let method_ = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut req = http.request(method_, url).bearer_auth(ADMIN);
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let what = format!("{method} {url} {body:?}");
    let resp = req.send().unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    // A live feed's body never ends: its head is the answer.
    assert!(
        !content_type.starts_with("text/event-stream"),
        "{what}: answered a live feed ({status})"
    );
    let text = resp.text().unwrap_or_default();
    assert!((400..500).contains(&status), "{what}: {status} {text}");
    assert!(
        content_type.starts_with("application/json"),
        "{what}: {status} as {content_type:?}: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {text}: {e}"));
    let error = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error: {text}"))
        .to_lowercase();
    for word in DATABASE_WORDS {
        assert!(
            !error.contains(word),
            "{what}: {status}: the error names the database ({word:?}): {error}"
        );
    }
}

fn every_route_refuses_control_characters_and_arrays(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let set = http
        .put(format!("{}/api/v1/teams/main/pipelines/p", web.url))
        .bearer_auth(ADMIN)
        .json(&json!({ "config": PIPELINE }))
        .send()
        .unwrap();
    assert!(
        set.status().is_success(),
        "{}\n{}",
        set.text().unwrap(),
        web.log_text()
    );
    let doc: Value = http
        .get(format!("{}/api/v1/openapi.json", web.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let (mut in_paths, mut in_queries, mut arrays) = (0, 0, 0);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let params: Vec<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            // Each path parameter in turn holds a control character.
            for param in &params {
                for bad in CONTROL_VALUES {
                    let url = fill(path, |p| {
                        if p == *param {
                            bad.to_string()
                        } else {
                            real_value(p).to_string()
                        }
                    });
                    assert_refused(&http, method, &format!("{}{url}", web.url), None);
                    in_paths += 1;
                }
            }
            // Each query parameter in turn holds one (the path is real).
            let url = format!("{}{}", web.url, fill(path, |p| real_value(p).to_string()));
            let queries = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str());
            for name in queries {
                for bad in CONTROL_VALUES {
                    assert_refused(&http, method, &format!("{url}?{name}={bad}"), None);
                    in_queries += 1;
                }
            }
            // A control character in a query's name, too.
            assert_refused(&http, method, &format!("{url}?a%00=1"), None);
            // A JSON array for a body, whatever the route takes (an
            // object, no body, or none at all on a GET).
            for body in ["[]", r#"["main", "v"]"#, "[{}]"] {
                assert_refused(&http, method, &url, Some(body));
                arrays += 1;
            }
        }
    }
    println!(
        "{kind:?}: {in_paths} control characters in paths, {in_queries} in queries, {arrays} array bodies: all refused"
    );
    assert!(in_paths > 500 && in_queries > 50 && arrays > 250);
    // The pipeline is as set: nothing the arrays were sent to changed it.
    let p: Value = http
        .get(format!("{}/api/v1/teams/main/pipelines/p", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(p["name"], "p", "{p}");
    let secrets: Value = http
        .get(format!("{}/api/v1/teams/main/secrets", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        !secrets.to_string().contains("\"n\""),
        "a secret was set from an array: {secrets}"
    );
    // What the database would have said is in the log, not the answers;
    // nothing failed inside: no 500 was logged.
    assert!(
        !web.log_text().contains("api: database"),
        "{}",
        web.log_text()
    );
}

#[test]
fn every_route_refuses_control_characters_and_arrays_on_sqlite() {
    every_route_refuses_control_characters_and_arrays(DbKind::Sqlite);
}

#[test]
fn every_route_refuses_control_characters_and_arrays_on_postgres() {
    every_route_refuses_control_characters_and_arrays(DbKind::Postgres);
}

/// A pipeline config with one name of `name` at `field` (`job`,
/// `resource`, `task`), the others fine.
fn config_with(field: &str, name: &str) -> String {
    let name = serde_json::to_string(name).unwrap();
    let (job, resource, task) = match field {
        "job" => (name.as_str(), "r", "t"),
        "resource" => ("j", name.as_str(), "t"),
        _ => ("j", "r", name.as_str()),
    };
    format!(
        "resources:\n- name: {resource}\n  type: mock\n  check_every: never\n  source: {{}}\n\
         jobs:\n- name: {job}\n  plan:\n  - get: {resource}\n  - task: {task}\n    config: {{platform: linux, run: {{path: 'true'}}}}\n"
    )
}

fn names_no_path_can_carry_are_refused(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let http = reqwest::blocking::Client::new();
    let file = dir.path().join("p.yml");
    let file_arg = file.to_str().unwrap();
    let cases = [
        ("job", "", "jobs[0].name: must not be empty"),
        ("job", "   ", "jobs[0].name: must not be only whitespace"),
        ("job", "a/b", "jobs[0].name: must not hold '/'"),
        ("job", "../../x", "jobs[0].name: must not hold '/'"),
        (
            "job",
            "..",
            "jobs[0].name: \"..\" cannot be named in a path",
        ),
        (
            "job",
            "a\u{202E}b",
            "jobs[0].name: must not hold the invisible format character U+202E",
        ),
        (
            "job",
            "a\u{1b}b",
            "jobs[0].name: must not hold the control character U+001B",
        ),
        ("resource", "", "resources[0].name: must not be empty"),
        ("resource", "r/x", "resources[0].name: must not hold '/'"),
        (
            "resource",
            "r\u{2066}",
            "resources[0].name: must not hold the invisible format character U+2066",
        ),
        (
            "resource",
            " ",
            "resources[0].name: must not be only whitespace",
        ),
        ("task", "", "jobs[j].plan[1].task: must not be empty"),
        ("task", "t/u", "jobs[j].plan[1].task: must not hold '/'"),
        (
            "task",
            "t\u{0}",
            "jobs[j].plan[1].task: must not hold the control character U+0000",
        ),
        (
            "task",
            "\u{200F}",
            "jobs[j].plan[1].task: must not hold the invisible format character U+200F",
        ),
    ];
    for (field, name, want) in cases {
        let config = config_with(field, name);
        write(&file, &config);
        let what = format!("{field} {name:?}");
        // The CLI refuses it before sending it.
        let out = client_as(
            &web.url,
            ADMIN,
            &["set-pipeline", "-p", "p", "-c", file_arg],
        );
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success(),
            "{what}: set-pipeline succeeded: {err}"
        );
        assert!(err.contains(want), "{what}: set-pipeline said: {err}");
        // So does validate-plan.
        let out = gantry().args(["validate-plan", file_arg]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            !out.status.success(),
            "{what}: validate-plan succeeded: {err}"
        );
        assert!(err.contains(want), "{what}: validate-plan said: {err}");
        // And the API, for a client that does not check.
        let resp = http
            .put(format!("{}/api/v1/teams/main/pipelines/p", web.url))
            .bearer_auth(ADMIN)
            .json(&json!({ "config": config }))
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().unwrap();
        assert_eq!(status, 400, "{what}: {body}");
        let message = serde_json::from_str::<Value>(&body).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains(want), "{what}: the API said: {message}");
    }
    // Nothing was stored.
    let list: Value = http
        .get(format!("{}/api/v1/teams/main/pipelines", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");

    // What Concourse only warns about is set, with its warning.
    write(&file, config_with("job", "Build Linux"));
    let want = "jobs[0].name: 'Build Linux' is not a valid identifier: must start with a lowercase letter or a number";
    let out = client_as(
        &web.url,
        ADMIN,
        &["set-pipeline", "-p", "p", "-c", file_arg],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "set-pipeline: {err}");
    assert!(
        err.contains(&format!("warning: {file_arg}: {want}")),
        "{err}"
    );
    let out = gantry().args(["validate-plan", file_arg]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "validate-plan: {err}");
    assert!(err.contains(want), "{err}");
    let job: Value = http
        .get(format!(
            "{}/api/v1/teams/main/pipelines/p/jobs/Build%20Linux",
            web.url
        ))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(job["name"], "Build Linux", "{job}");
}

#[test]
fn names_no_path_can_carry_are_refused_on_sqlite() {
    names_no_path_can_carry_are_refused(DbKind::Sqlite);
}

#[test]
fn names_no_path_can_carry_are_refused_on_postgres() {
    names_no_path_can_carry_are_refused(DbKind::Postgres);
}
