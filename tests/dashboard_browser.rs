//! End to end: the dashboard in real headless Chromium (Debian's
//! `chromium`, driven over the DevTools protocol) against a running
//! quickstart. The overview shows the worker running and the web node; a
//! job started through the API appears on its build page — the step tree,
//! then the log lines (the secrets a task printed redacted), then the
//! final status — without the page reloading. Screenshots go to
//! `target/test-screenshots/`. A team token's live feed shows only that
//! team's builds (plain HTTP on the server-sent events route). A stored
//! pipeline's page draws its jobs and resources, and a pushed commit turns
//! a job's box to running, then succeeded, without a reload.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

pub(crate) use gantry::bench::cdp;

use cdp::Browser;

/// Two tasks whose lines come seconds apart, so the page is seen while the
/// first one still runs; the second prints secrets of the built-in
/// credential manager (a value, and a JSON one's field), which the page
/// must show redacted.
const PIPELINE: &str = r#"
jobs:
- name: show
  plan:
  - task: first
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo line-one; sleep 6; echo line-two"]}
  - task: second
    config:
      platform: linux
      params: {TOKEN: ((dash-token)), PASS: ((dash-creds.password))}
      run: {path: sh, args: [-c, "echo line-three; echo \"token=$TOKEN pass=$PASS\"; sleep 1; echo last-line"]}
"#;

/// Where the screenshots go: `target/test-screenshots/`.
pub(crate) fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .join("test-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

/// The `chromium` binary, or `None` (then the test is skipped, unless the
/// test script's `GANTRY_REQUIRE_RUNC` says everything must run).
pub(crate) fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
            "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: install chromium (scripts/test.sh does)"
        );
        eprintln!("skipped: needs chromium");
    }
    found
}

/// A JavaScript expression's value as text ("" for null or undefined).
pub(crate) fn text(browser: &mut Browser, expr: &str) -> String {
    match browser.eval(expr) {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// [`text`] while the page may be navigating (a redirect, a sign-in):
/// "" when the page had gone, so a wait asks again.
pub(crate) fn text_settling(browser: &mut Browser, expr: &str) -> String {
    browser.try_text(expr).unwrap_or_default()
}

/// The status a step's node shows on the build page.
fn step_status(browser: &mut Browser, step: &str) -> String {
    text(
        browser,
        &format!(r#"document.querySelector('#steps [data-step="{step}"]')?.dataset.status"#),
    )
}

/// The log a step's node shows on the build page.
fn step_log(browser: &mut Browser, step: &str) -> String {
    text(
        browser,
        &format!(r#"document.querySelector('#steps [data-step="{step}"] > pre.log')?.textContent"#),
    )
}

/// The name of the web node at `url` (`gantry web-nodes`).
fn server_node_name(url: &str) -> String {
    let out = client(url, &["web-nodes", "--json"]);
    let nodes: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    nodes
        .iter()
        .find(|n| n["this_node"] == true)
        .and_then(|n| n["name"].as_str())
        .expect("this node in gantry web-nodes")
        .to_string()
}

#[test]
fn the_dashboard_shows_the_worker_and_a_build_live_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir.path(), &db);
    write(&dir.path().join("pipeline.yml"), PIPELINE);
    let token = format!("dash-tok-{}", uuid::Uuid::new_v4().simple());
    let pass = format!("dash-pw-{}", uuid::Uuid::new_v4().simple());
    set_secret(&server.url, &["dash-token"], &token);
    set_secret(
        &server.url,
        &["dash-creds"],
        &serde_json::json!({"user": "u", "password": pass}).to_string(),
    );
    let shots = screenshot_dir();
    let mut browser = Browser::launch(&chromium, dir.path());

    // The overview: the worker shows as running, fed live.
    browser.navigate(&format!("{}/", server.url));
    let worker = wait_for(
        "the worker running on the overview",
        Duration::from_secs(30),
        || {
            let state = text(
                &mut browser,
                "document.querySelector('[data-worker] .state')?.textContent",
            );
            (state == "running").then(|| {
                text(
                    &mut browser,
                    "document.querySelector('[data-worker]').dataset.worker",
                )
            })
        },
    );
    assert!(!worker.is_empty());
    assert_eq!(
        text(&mut browser, "document.getElementById('live').textContent"),
        "live"
    );
    // The one web node, alive, marked as the one serving the page.
    assert_eq!(
        text(
            &mut browser,
            "[...document.querySelectorAll('[data-web-node]')].map(n => n.className + ' ' + n.textContent).join('|')"
        ),
        format!("web-node alive {} ◂", server_node_name(&server.url))
    );
    browser.eval("window.__marker = 1");

    // A job started through the API shows on the overview without a reload.
    let mut run = spawn_run(
        &server.url,
        dir.path(),
        "run",
        &["-p", "pipeline.yml", "-j", "show"],
    );
    let err_file = dir.path().join("run.err");
    let id = wait_for("the build id", Duration::from_secs(30), || {
        run_build(&err_file)
    });
    wait_for("the build on the overview", Duration::from_secs(30), || {
        let row = text(
            &mut browser,
            &format!("document.querySelector('#builds [data-build=\"{id}\"]')?.textContent"),
        );
        row.contains("pipeline/show").then_some(())
    });
    assert_eq!(browser.eval("window.__marker"), 1);
    let overview = shots.join("dashboard-overview.png");
    browser.screenshot(&overview);
    println!("screenshot: {}", overview.display());

    // Its page: the step tree, then the first line while the first task
    // still runs, then the rest and the status, all without a reload.
    browser.navigate(&format!("{}/builds/{id}", server.url));
    browser.eval("window.__marker = 2");
    wait_for("both steps in the tree", Duration::from_secs(30), || {
        let steps = text(
            &mut browser,
            "[...document.querySelectorAll('#steps [data-step]')].map(e => e.dataset.step).join(',')",
        );
        (steps == "first,second").then_some(())
    });
    wait_for(
        "the first line of the first step",
        Duration::from_secs(60),
        || {
            step_log(&mut browser, "first")
                .contains("line-one")
                .then_some(())
        },
    );
    // The first task sleeps after its first line: the page shows it running
    // and the rest not there yet.
    assert_eq!(step_status(&mut browser, "first"), "running");
    assert!(!step_log(&mut browser, "first").contains("line-two"));
    assert_eq!(step_status(&mut browser, "second"), "pending");
    assert_eq!(
        text(
            &mut browser,
            "document.getElementById('build-status').textContent"
        ),
        "started"
    );
    let running = shots.join("dashboard-build-running.png");
    browser.screenshot(&running);
    println!("screenshot: {}", running.display());

    wait_for(
        "the last line and the build's success",
        Duration::from_secs(60),
        || {
            let status = text(
                &mut browser,
                "document.getElementById('build-status').textContent",
            );
            (status == "succeeded" && step_log(&mut browser, "second").contains("last-line"))
                .then_some(())
        },
    );
    assert!(step_log(&mut browser, "first").contains("line-two"));
    // The secrets the task printed show redacted; neither value is
    // anywhere in the page.
    secrets_hidden(&mut browser, &[&token, &pass]);
    assert_eq!(step_status(&mut browser, "first"), "succeeded");
    assert_eq!(step_status(&mut browser, "second"), "succeeded");
    assert_eq!(
        browser.eval("window.__marker"),
        2,
        "the build page reloaded"
    );
    let done = shots.join("dashboard-build.png");
    browser.screenshot(&done);
    println!("screenshot: {}", done.display());
    assert!(wait_child(&mut run, Duration::from_secs(60)).success());

    // Back on the overview: the build finished, with a duration.
    browser.navigate(&format!("{}/", server.url));
    wait_for(
        "the finished build on the overview",
        Duration::from_secs(30),
        || {
            let row = text(
                &mut browser,
                &format!("document.querySelector('#builds [data-build=\"{id}\"]')?.textContent"),
            );
            row.contains("succeeded").then_some(())
        },
    );
    let after = shots.join("dashboard-overview-after.png");
    browser.screenshot(&after);
    println!("screenshot: {}", after.display());

    // Once the collector has moved the finished log to the artifact
    // store, the build's page reads it from there: every step's lines,
    // still redacted.
    wait_for(
        "the build's log moved to the store",
        Duration::from_secs(60),
        || {
            let build: serde_json::Value =
                reqwest::blocking::get(format!("{}/api/v1/builds/{id}", server.url))
                    .ok()?
                    .json()
                    .ok()?;
            (build["log"] == "store").then_some(())
        },
    );
    browser.navigate(&format!("{}/builds/{id}", server.url));
    wait_for(
        "the moved log on the build's page",
        Duration::from_secs(30),
        || {
            (step_log(&mut browser, "first").contains("line-two")
                && step_log(&mut browser, "second").contains("last-line"))
            .then_some(())
        },
    );
    assert!(step_log(&mut browser, "first").contains("line-one"));
    secrets_hidden(&mut browser, &[&token, &pass]);
}

/// The build page shows the second step's secrets redacted, and none of
/// `values` is anywhere in its HTML.
fn secrets_hidden(browser: &mut Browser, values: &[&str]) {
    let log = step_log(browser, "second");
    assert!(
        log.contains("token=((redacted)) pass=((redacted))"),
        "{log}"
    );
    let page = text(browser, "document.documentElement.outerHTML");
    for v in values {
        assert!(!page.contains(v), "a secret shows on the build page");
    }
}

/// The `data:` of the next message of a server-sent event stream whose
/// data satisfies `want`.
fn next_data(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    for line in lines {
        let line = line.expect("the feed stays open");
        if let Some(data) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data).expect("JSON data");
            if want(&v) {
                return v;
            }
        }
    }
    panic!("the feed ended");
}

/// Creates a one-off build of `team` with `token`; answers its id.
fn create_build(http: &reqwest::blocking::Client, url: &str, team: &str, token: &str) -> i64 {
    let resp = http
        .post(format!("{url}/api/v1/teams/{team}/builds"))
        .bearer_auth(token)
        .json(&serde_json::json!({
            "config": {"platform": "linux", "run": {"path": "true"}}
        }))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    resp.json::<serde_json::Value>().unwrap()["id"]
        .as_i64()
        .unwrap()
}

fn build_ids(data: &serde_json::Value) -> Vec<i64> {
    data["fleet"]["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn a_team_tokens_live_feed_shows_only_its_team() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        "[web]\nadmin_token = \"adm1n\"\n[web.teams]\nmain = \"m41n\"\nred = \"r3d\"\n",
    );
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // The page and its assets hold no data: served without a token.
    for path in [
        "/",
        "/builds/1",
        "/dashboard/app.js",
        "/dashboard/style.css",
    ] {
        let resp = http.get(format!("{}{path}", web.url)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    // The feed is not.
    let feed = format!("{}/api/v1/dashboard/events", web.url);
    assert_eq!(http.get(&feed).send().unwrap().status().as_u16(), 401);
    let wrong = http.get(format!("{feed}?token=nope")).send().unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    // Only the feed takes the token in its query.
    let elsewhere = http
        .get(format!("{}/api/v1/builds?token=r3d", web.url))
        .send()
        .unwrap();
    assert_eq!(elsewhere.status().as_u16(), 401);

    let main_build = create_build(&http, &web.url, "main", "m41n");
    let red_build = create_build(&http, &web.url, "red", "r3d");

    // Red's feed, token in the query as an EventSource sends it.
    let resp = http.get(format!("{feed}?token=r3d")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut lines = BufReader::new(resp).lines();
    let first = next_data(&mut lines, |_| true);
    assert_eq!(first["fleet"]["viewer"], "team red");
    assert_eq!(build_ids(&first), vec![red_build]);
    assert!(first["fleet"]["gc"]["containers"].is_object());
    // A new build of red's comes as the next change; main's never.
    let newer = create_build(&http, &web.url, "red", "r3d");
    let later = create_build(&http, &web.url, "main", "m41n");
    let next = next_data(&mut lines, |d| build_ids(d).contains(&newer));
    let ids = build_ids(&next);
    assert!(
        !ids.contains(&main_build) && !ids.contains(&later),
        "{ids:?}"
    );
    for b in next["fleet"]["builds"].as_array().unwrap() {
        assert_eq!(b["team"], "red");
    }

    // The admin's feed (bearer header) shows both teams'.
    let resp = http.get(&feed).bearer_auth("adm1n").send().unwrap();
    let mut lines = BufReader::new(resp).lines();
    let all = next_data(&mut lines, |d| build_ids(d).contains(&later));
    assert_eq!(all["fleet"]["viewer"], "admin");
    let ids = build_ids(&all);
    assert!(
        ids.contains(&main_build) && ids.contains(&red_build),
        "{ids:?}"
    );
}

/// Job `a` takes a few seconds, so its box is seen running; `b` follows it.
fn graph_pipeline() -> String {
    [
        "resources:",
        "- {name: repo, type: git, check_every: 1s, source: {uri: ((uri)), branch: main}}",
        "jobs:",
        "- name: a",
        "  plan:",
        "  - {get: repo, trigger: true}",
        "  - task: slow",
        "    config: {platform: linux, inputs: [{name: repo}], run: {path: sh, args: [-c, 'sleep 4; cat repo/msg']}}",
        "- name: b",
        "  plan:",
        "  - {get: repo, trigger: true, passed: [a]}",
        "  - task: t",
        "    config: {platform: linux, run: {path: echo, args: [b]}}",
        "",
    ]
    .join("\n")
}

/// The status job `job`'s box shows and its text.
fn job_box(browser: &mut Browser, job: &str) -> (String, String) {
    let q = format!(r#"document.querySelector('#pipeline-graph [data-job="{job}"]')"#);
    (
        text(browser, &format!("{q}?.dataset.status")),
        text(browser, &format!("{q}?.textContent")),
    )
}

#[test]
fn a_pipelines_page_shows_a_new_commit_run_through_its_jobs_live_in_chromium() {
    use common::git::git;
    use common::pipelines::{ok, GitRepo};
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir.path(), &db);
    let url = &server.url;
    let repo = GitRepo::new(dir.path());
    write(&dir.path().join("graph.yml"), graph_pipeline());
    let uri = repo.uri_var.clone();
    let file = dir.path().join("graph.yml");
    ok(&client(
        url,
        &[
            "set-pipeline",
            "-p",
            "g",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &uri,
        ],
    ));
    let shots = screenshot_dir();
    let mut browser = Browser::launch(&chromium, dir.path());

    // The overview lists it, paused; its page draws both jobs and the
    // resource, with an edge from a to b.
    browser.navigate(&format!("{url}/"));
    wait_for(
        "the pipeline on the overview",
        Duration::from_secs(30),
        || {
            let row = text(
                &mut browser,
                "document.querySelector('[data-pipeline=\"main/g\"]')?.textContent",
            );
            row.contains("paused").then_some(())
        },
    );
    ok(&client(url, &["unpause-pipeline", "-p", "g"]));
    browser.navigate(&format!("{url}/teams/main/pipelines/g"));
    browser.eval("window.__marker = 3");
    wait_for("b to run the seed commit", Duration::from_secs(90), || {
        let (status, label) = job_box(&mut browser, "b");
        (status == "succeeded" && label.contains("#1")).then_some(())
    });
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#pipeline-graph [data-resource=\"repo\"]')?.textContent.replace(/\\s+/g, '')"
        ),
        "repogit"
    );
    assert_eq!(
        text(
            &mut browser,
            "String(document.querySelectorAll('#pipeline-graph path.edge.trigger').length)"
        ),
        "2",
        "repo -> a and a -> b"
    );

    // A new commit: a's box turns to running, then succeeded; b follows.
    repo.push("second");
    wait_for("a running the new commit", Duration::from_secs(30), || {
        let (status, label) = job_box(&mut browser, "a");
        (status == "started" && label.contains("#2")).then_some(())
    });
    let running = shots.join("pipeline-running.png");
    browser.screenshot(&running);
    println!("screenshot: {}", running.display());
    wait_for("a and b done with it", Duration::from_secs(90), || {
        let (a, a_label) = job_box(&mut browser, "a");
        let (b, b_label) = job_box(&mut browser, "b");
        (a == "succeeded" && a_label.contains("#2") && b == "succeeded" && b_label.contains("#2"))
            .then_some(())
    });
    assert_eq!(
        browser.eval("window.__marker"),
        3,
        "the pipeline page reloaded"
    );
    let done = shots.join("pipeline.png");
    browser.screenshot(&done);
    println!("screenshot: {}", done.display());

    // The overview shows the pipeline's jobs at a glance: both newest
    // builds succeeded, none running.
    browser.navigate(&format!("{url}/"));
    wait_for(
        "the pipeline succeeded on the overview",
        Duration::from_secs(30),
        || {
            let row = text(
                &mut browser,
                "document.querySelector('[data-pipeline=\"main/g\"]')?.textContent",
            );
            (row.contains("succeeded") && !row.contains("started")).then_some(())
        },
    );

    // The job's page lists its builds with the commits they ran.
    let head = git(&repo.work, &["rev-parse", "HEAD"]);
    browser.navigate(&format!("{url}/teams/main/pipelines/g/jobs/a"));
    wait_for(
        "a's builds with their inputs",
        Duration::from_secs(30),
        || {
            let rows = text(
                &mut browser,
                "document.getElementById('job-builds').textContent",
            );
            (rows.contains(&head) && rows.contains("#2") && rows.contains("#1")).then_some(())
        },
    );

    // A rerun is named N.M there, as Concourse names it.
    ok(&client(url, &["rerun-build", "-j", "g/a", "-b", "1"]));
    wait_for("the rerun of a's build 1", Duration::from_secs(30), || {
        let rows = text(
            &mut browser,
            "document.getElementById('job-builds').textContent",
        );
        rows.contains("#1.1").then_some(())
    });
}
