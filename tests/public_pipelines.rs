//! End to end: public pipelines, as Concourse's `expose-pipeline` makes
//! them. On a secured web node with a real worker, team main's pipeline
//! runs a public job (whose task prints a secret) and a private one;
//! `gantry expose-pipeline` makes it readable with no token and by
//! another team: the pipeline (no config), its jobs' statuses, the
//! public job's log (the secret redacted), a private job's build status
//! but not its log, a public resource's version metadata but not a
//! private one's. Every operation of the OpenAPI document is then called
//! with no token: only the reads of an exposed pipeline (and the open
//! routes: pages, health) succeed. `gantry hide-pipeline` takes it all
//! back, a page feed opened before included.

use crate::common;

use std::collections::BTreeSet;
use std::io::Read;
use std::time::Duration;

use common::*;

const ADMIN: &str = "adm1n";

/// A public job `open` (its task prints the secret `api-token`) and a
/// private job `closed`, each getting a `mock` resource whose `in` tells
/// metadata: `pr` public, `r` not.
const PIPELINE: &str = r#"
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v0, metadata: [{name: commit, value: private-meta}]}
- name: pr
  type: mock
  public: true
  check_every: never
  source: {initial_version: p0, metadata: [{name: commit, value: public-meta}]}
jobs:
- name: open
  public: true
  plan:
  - get: pr
  - task: say
    config:
      platform: linux
      params: {TOKEN: ((api-token))}
      run: {path: sh, args: [-c, 'echo "open-output token=$TOKEN"']}
- name: closed
  plan:
  - get: r
  - task: say
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo closed-output-private']}
"#;

/// The operations a reader outside the team may call on an exposed
/// pipeline (Concourse's "pipeline is public" routes).
const PUBLIC: &[&str] = &[
    "listPipelines",
    "getPipeline",
    "pipelineBadge",
    "jobBadge",
    "getJobBuild",
    "getResource",
    "listResourceTypes",
    "listAllPipelines",
    "listAllJobs",
    "listAllResources",
    "listPipelineBuilds",
    "pipelineFeed",
    "listPipelineJobs",
    "getPipelineJob",
    "listJobBuilds",
    "listResources",
    "listResourceVersions",
    "getBuild",
    "getBuildResources",
    "buildEvents",
    "buildLog",
];

fn admin(url: &str, args: &[&str]) -> String {
    let out = client_as(url, ADMIN, args);
    assert!(out.status.success(), "{args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// GET `path` with `token` (none: anonymous): status and body (a stream
/// is not read).
fn get(url: &str, token: Option<&str>, path: &str) -> (u16, serde_json::Value) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut req = http.get(format!("{url}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let answer = req.send().unwrap();
    let status = answer.status().as_u16();
    let streamed = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.contains("event-stream") || c.contains("ndjson"));
    if streamed {
        return (status, serde_json::Value::Null);
    }
    let text = answer.text().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, body)
}

/// The text of build `id`'s log, read with no token.
fn anonymous_log(url: &str, id: i64) -> (u16, String) {
    let answer = reqwest::blocking::get(format!("{url}/api/v1/builds/{id}/log")).unwrap();
    (answer.status().as_u16(), answer.text().unwrap())
}

/// Reads `stream` until its text holds `want` (or the deadline passes).
fn read_until(stream: &mut reqwest::blocking::Response, want: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while std::time::Instant::now() < deadline {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&seen).contains(want) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&seen).to_string();
    assert!(text.contains(want), "waited for {want:?} in: {text}");
    text
}

/// The newest build of job `job` of main's pipeline p.
fn newest_build(url: &str, job: &str) -> serde_json::Value {
    let (status, builds) = get(
        url,
        Some(ADMIN),
        &format!("/api/v1/teams/main/pipelines/p/jobs/{job}/builds"),
    );
    assert_eq!(status, 200, "{builds}");
    builds[0].clone()
}

/// Calls every operation of the served document with no token, its path
/// filled for main's pipeline p and build `build`: the operations that
/// answered 2xx, but the open ones (`security: [{}]`: pages, health, the
/// document).
fn anonymous_successes(url: &str, build: i64) -> BTreeSet<String> {
    let doc: serde_json::Value = reqwest::blocking::get(format!("{url}/api/v1/openapi.json"))
        .unwrap()
        .json()
        .unwrap();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut ok = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap().to_string();
            let open = op["security"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|r| r.as_object().is_some_and(|o| o.is_empty()))
            });
            if open {
                continue;
            }
            let target = path
                .replace("{team}", "main")
                .replace("{pipeline}", "p")
                .replace("{job}", "open")
                .replace("{resource}", "pr")
                .replace("{resource_type}", "mock")
                .replace("{build}", "1")
                .replace("{handle}", "no-such-handle")
                .replace("{kind}", "user")
                .replace("{name}", "no-such-name")
                .replace("{id}", &build.to_string());
            let mut req = http
                .request(
                    method.to_uppercase().parse().unwrap(),
                    format!("{url}{target}"),
                )
                .header("content-type", "application/json");
            if method != "get" {
                req = req.body("{}");
            }
            let status = req.send().unwrap().status();
            assert!(
                status.as_u16() < 500,
                "{method} {target} with no token: {status}"
            );
            if status.is_success() {
                ok.insert(id);
            }
        }
    }
    ok
}

#[test]
fn an_exposed_pipeline_is_read_by_anyone_as_concourse_shows_it_and_hidden_again() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, &format!("[web]\nadmin_token = \"{ADMIN}\"\n"));
    let url = web.url.as_str();
    let _worker = common::workers::start_worker(dir, url, "w1", worker_backend());
    let secret = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let mut set_secret = gantry();
    set_secret
        .env("GANTRY_TOKEN", ADMIN)
        .args(["--url", url, "set-secret", "api-token"]);
    let out = output_with_stdin(set_secret, &secret);
    assert!(out.status.success(), "{}", said(&out));
    admin(url, &["set-team", "blue"]);
    let blue = admin(
        url,
        &["token", "create", "--team", "blue", "--role", "member"],
    );
    let file = dir.join("p.yml");
    write(&file, PIPELINE);
    let f = file.to_str().unwrap();
    admin(url, &["set-pipeline", "-p", "p", "-c", f]);
    admin(url, &["set-pipeline", "-p", "q", "-c", f]);
    admin(url, &["unpause-pipeline", "-p", "p"]);
    for r in ["p/r", "p/pr"] {
        admin(url, &["check-resource", "-r", r]);
    }
    let shown = admin(url, &["trigger-job", "-j", "p/open", "--watch"]);
    assert!(shown.contains("open-output token=((redacted))"), "{shown}");
    admin(url, &["trigger-job", "-j", "p/closed", "--watch"]);
    let open = newest_build(url, "open")["id"].as_i64().unwrap();
    let closed = newest_build(url, "closed")["id"].as_i64().unwrap();

    // Not exposed: the team's alone.
    let pipeline = "/api/v1/teams/main/pipelines/p";
    assert_eq!(get(url, None, pipeline).0, 401);
    assert_eq!(get(url, Some(&blue), pipeline).0, 404);
    assert_eq!(anonymous_log(url, open).0, 401);
    assert_eq!(get(url, None, "/api/v1/teams/main/pipelines").0, 401);
    assert_eq!(
        get(url, None, &format!("{pipeline}/jobs/open/badge")).0,
        401
    );

    assert_eq!(admin(url, &["expose-pipeline", "-p", "p"]), "exposed 'p'");
    let mut feed = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()
        .unwrap()
        .get(format!("{url}{pipeline}/feed"))
        .send()
        .unwrap();
    assert_eq!(feed.status(), 200);
    let first = read_until(&mut feed, "\n\n");
    assert!(
        first.contains("\"public\":true") && first.contains("closed"),
        "{first}"
    );

    // The pipeline, without its config, to anyone.
    for token in [None, Some(blue.as_str())] {
        let (status, p) = get(url, token, pipeline);
        assert_eq!(status, 200, "{p}");
        assert_eq!(p["public"], true);
        assert!(p.get("config").is_none(), "no config for the public: {p}");
    }
    let (status, listed) = get(url, None, "/api/v1/teams/main/pipelines");
    assert_eq!(status, 200);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p"], "only the exposed pipeline is listed");
    for token in [None, Some(blue.as_str())] {
        let (status, all) = get(url, token, "/api/v1/pipelines");
        assert_eq!(status, 200, "{all}");
        let names: Vec<String> = all
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p["team"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["main/p"], "{token:?}: only the exposed pipeline");
    }

    // Badges, as a project's README shows them.
    let (status, badge) = get(url, None, &format!("{pipeline}/jobs/open/badge?title=ci"));
    assert_eq!(status, 200);
    let badge = badge.as_str().unwrap().to_string();
    assert!(
        badge.contains("<svg") && badge.contains(">passing<") && badge.contains(">ci<"),
        "{badge}"
    );
    let (status, badge) = get(url, None, &format!("{pipeline}/badge"));
    assert_eq!(status, 200);
    assert!(badge.as_str().unwrap().contains(">passing<"), "{badge}");

    // Its jobs' statuses, without the scheduler's decisions or workers.
    let (status, jobs) = get(url, None, &format!("{pipeline}/jobs"));
    assert_eq!(status, 200, "{jobs}");
    for job in jobs.as_array().unwrap() {
        assert_eq!(job["finished_build"]["status"], "succeeded", "{job}");
        assert!(job["decision"].is_null(), "{job}");
        assert!(job["finished_build"]["worker"].is_null(), "{job}");
    }

    // The public job's log, its secret redacted as everywhere.
    let (status, log) = anonymous_log(url, open);
    assert_eq!(status, 200, "{log}");
    assert!(log.contains("open-output token=((redacted))"), "{log}");
    assert!(!log.contains(&secret), "the secret shows: {log}");
    assert_eq!(
        get(url, None, &format!("/api/v1/builds/{open}/events")).0,
        200
    );

    // The pipeline's builds, cut the same way.
    let (status, builds) = get(url, None, &format!("{pipeline}/builds"));
    assert_eq!(status, 200, "{builds}");
    let listed: Vec<i64> = builds
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert!(b["worker"].is_null(), "{b}");
            b["id"].as_i64().unwrap()
        })
        .collect();
    assert!(
        listed.contains(&open) && listed.contains(&closed),
        "{builds}"
    );

    // The private job's build: its status, not its plan, log or events.
    let (status, b) = get(url, None, &format!("/api/v1/builds/{closed}"));
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["status"], "succeeded");
    assert!(b["worker"].is_null(), "{b}");
    assert_eq!(
        b["plan"],
        serde_json::json!({"job": "closed", "pipeline_name": "p"})
    );
    assert_eq!(anonymous_log(url, closed).0, 401);
    assert_eq!(
        get(url, None, &format!("/api/v1/builds/{closed}/events")).0,
        401
    );
    assert_eq!(
        get(url, Some(&blue), &format!("/api/v1/builds/{closed}/log")).0,
        404
    );
    let (status, log) = get(url, Some(ADMIN), &format!("/api/v1/builds/{closed}/log"));
    assert_eq!(status, 200);
    assert!(log.to_string().contains("closed-output-private"), "{log}");

    // Version metadata of the public resource only.
    let versions = |resource: &str| {
        let (status, v) = get(
            url,
            None,
            &format!("{pipeline}/resources/{resource}/versions"),
        );
        assert_eq!(status, 200, "{v}");
        v.to_string()
    };
    assert!(versions("pr").contains("public-meta"));
    let private = versions("r");
    assert!(
        !private.contains("private-meta") && private.contains("v0"),
        "{private}"
    );
    let (_, team_view) = get(
        url,
        Some(ADMIN),
        &format!("{pipeline}/resources/r/versions"),
    );
    assert!(
        team_view.to_string().contains("private-meta"),
        "{team_view}"
    );

    // Every operation with no token: only the public reads succeed
    // (with a private job's build, not its events or log).
    let want: BTreeSet<String> = PUBLIC.iter().map(|s| s.to_string()).collect();
    assert_eq!(anonymous_successes(url, open), want);
    let mut want_private = want.clone();
    want_private.remove("buildEvents");
    want_private.remove("buildLog");
    assert_eq!(anonymous_successes(url, closed), want_private);

    #[cfg(feature = "bench")]
    browse_anonymously(dir, url, open);

    // Hidden again: the team's alone, a feed opened before told so.
    assert_eq!(admin(url, &["hide-pipeline", "-p", "p"]), "hid 'p'");
    assert_eq!(get(url, None, pipeline).0, 401);
    assert_eq!(get(url, Some(&blue), pipeline).0, 404);
    assert_eq!(anonymous_log(url, open).0, 401);
    assert_eq!(get(url, None, &format!("/api/v1/builds/{closed}")).0, 401);
    read_until(&mut feed, "event: problem");
    assert_eq!(anonymous_successes(url, open), BTreeSet::new());
}

/// In headless Chromium with no session: the exposed pipeline's page draws
/// its graph with no action button and a sign-in link (no redirect to the
/// sign-in page), and the public job's build page shows its log.
#[cfg(feature = "bench")]
fn browse_anonymously(dir: &std::path::Path, url: &str, open: i64) {
    use crate::dashboard_browser::cdp::Browser;
    use crate::dashboard_browser::chromium;
    let Some(chromium) = chromium() else { return };
    let mut browser = Browser::launch(&chromium, dir);
    let wait_text = |browser: &mut Browser, what: &str, js: &str, want: &str| {
        wait_for(what, Duration::from_secs(60), || {
            browser.try_text(js).filter(|t| t.contains(want))
        })
    };
    browser.navigate(&format!("{url}/teams/main/pipelines/p"));
    wait_text(
        &mut browser,
        "the graph",
        "document.getElementById('pipeline-graph')?.textContent ?? ''",
        "closed",
    );
    assert_eq!(
        browser.try_text("location.pathname").as_deref(),
        Some("/teams/main/pipelines/p"),
        "not sent to sign in"
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('button.action').length"),
        serde_json::json!(0),
        "no action for the public"
    );
    assert_eq!(
        browser.eval("document.getElementById('signin').hidden"),
        serde_json::json!(false)
    );
    browser.navigate(&format!("{url}/builds/{open}"));
    wait_text(
        &mut browser,
        "the public job's log",
        "document.getElementById('steps')?.textContent ?? ''",
        "open-output token=((redacted))",
    );
}
