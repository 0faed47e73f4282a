//! End to end: teams and team tokens managed through the API. The admin
//! makes teams and tokens (`gantry set-team`, `gantry token create`); a
//! token is stored hashed, acts only for its team (another team's build,
//! events, artifacts, abort and hijack answer 404), and is refused once
//! revoked or expired or once its team is removed. A team's worker
//! (`--team`) runs only that team's steps. Workers with a wrong
//! registration key are refused. Two teams whose pipelines declare the
//! same resource (type and source) share no history: neither sees the
//! other's config, vars, params, check builds or errors, and nothing one
//! does changes the versions the other's jobs take.

use crate::common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

const ADMIN: &str = "adm1n";

fn as_token(url: &str, token: &str, args: &[&str]) -> Output {
    gantry()
        .env("GANTRY_TOKEN", token)
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The status of `GET path` (or another method) with `token`.
fn status(method: &str, url: &str, path: &str, token: &str) -> u16 {
    let http = reqwest::blocking::Client::new();
    let req = match method {
        "POST" => http.post(format!("{url}{path}")).body("{}"),
        "PUT" => http.put(format!("{url}{path}")),
        "DELETE" => http.delete(format!("{url}{path}")),
        _ => http.get(format!("{url}{path}")),
    };
    req.bearer_auth(token).send().unwrap().status().as_u16()
}

fn teams_and_tokens(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    let web = start_web(dir, &db, &format!("[web]\nadmin_token = \"{ADMIN}\"\n"));
    let url = &web.url;
    let mut backend = worker_backend().to_vec();
    let _general = start_worker(dir, url, "general", &backend);
    backend.extend(["--team", "blue", "--tag", "blue-only"]);
    let _blue_worker = start_worker(dir, url, "blue-worker", &backend);
    wait_for("two running workers", Duration::from_secs(60), || {
        let out = as_token(url, ADMIN, &["workers", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let running = v.as_array()?.iter().filter(|w| w["state"] == "running");
        (running.count() == 2).then_some(())
    });

    // The admin makes two teams and a token for each; the tokens are
    // printed once and stored hashed.
    assert_eq!(
        ok(as_token(url, ADMIN, &["set-team", "red"])),
        "team red created"
    );
    assert_eq!(
        ok(as_token(url, ADMIN, &["set-team", "red"])),
        "team red exists"
    );
    ok(as_token(url, ADMIN, &["set-team", "blue"]));
    let red = ok(as_token(url, ADMIN, &["token", "create", "--team", "red"]));
    let blue = ok(as_token(url, ADMIN, &["token", "create", "--team", "blue"]));
    assert!(red.starts_with("gtk_") && blue.starts_with("gtk_"), "{red}");
    let listed = ok(as_token(url, ADMIN, &["tokens", "--json"]));
    assert!(!listed.contains(&red[20..]), "a secret is listed: {listed}");
    let teams: serde_json::Value =
        serde_json::from_str(&ok(as_token(url, ADMIN, &["teams", "--json"]))).unwrap();
    let names: Vec<&str> = teams
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["blue", "main", "red"]);
    // A team token sees its own team only, and cannot manage teams.
    let own = ok(as_token(url, &red, &["teams", "--json"]));
    assert!(
        own.contains("\"red\"") && !own.contains("\"blue\""),
        "{own}"
    );
    assert!(one_error_line(&as_token(url, &red, &["set-team", "green"])).contains("admin"));
    assert!(one_error_line(&as_token(url, ADMIN, &["set-team", "no/slash"])).contains("team name"));
    assert!(one_error_line(&as_token(
        url,
        ADMIN,
        &["token", "create", "--team", "nope"]
    ))
    .contains("404"));

    // Blue runs a build on its own worker (the only one tagged blue-only)
    // with an output kept in the store; red cannot see or touch it.
    let task = dir.join("task.yml");
    write(
        &task,
        "platform: linux\noutputs: [{name: out}]\nrun:\n  path: sh\n  args: [-c, 'echo blue > out/f; echo done']\n",
    );
    let out_dir = dir.join("blue-out");
    let task_arg = task.to_str().unwrap();
    let out_arg = format!("out={}", out_dir.display());
    let args = [
        "execute",
        "--team",
        "blue",
        "--tag",
        "blue-only",
        "-c",
        task_arg,
        "-o",
        &out_arg,
    ];
    let done = as_token(url, &blue, &args);
    ok(done.clone());
    let build = announced_build_text(&String::from_utf8_lossy(&done.stderr)).unwrap();
    let shown: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}"))
        .bearer_auth(&blue)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(shown["worker"], "blue-worker", "{shown}");
    let events = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("accept", "application/x-ndjson")
        .bearer_auth(&blue)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let artifact = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|e| e["event"]["artifact_id"].as_str().map(str::to_string))
        .expect("an output event");
    for (method, path) in [
        ("GET", format!("/api/v1/builds/{build}")),
        ("GET", format!("/api/v1/builds/{build}/events")),
        ("GET", format!("/api/v1/builds/{build}/hijack")),
        ("PUT", format!("/api/v1/builds/{build}/abort")),
        ("GET", format!("/api/v1/teams/blue/artifacts/{artifact}")),
    ] {
        assert_eq!(
            status(method, url, &path, &red),
            404,
            "red: {method} {path}"
        );
    }
    assert_eq!(
        status(
            "GET",
            url,
            &format!("/api/v1/teams/blue/artifacts/{artifact}"),
            &blue
        ),
        200
    );
    let red_builds = ok(as_token(url, &red, &["builds", "--json"]));
    assert_eq!(red_builds, "[]");

    // The team's worker serves only its team: red cannot use it.
    let red_args = [
        "execute",
        "--team",
        "red",
        "--tag",
        "blue-only",
        "-c",
        task_arg,
    ];
    let err = failure_line(&as_token(url, &red, &red_args));
    assert!(err.contains("team"), "{err}");
    ok(as_token(
        url,
        &red,
        &["execute", "--team", "red", "-c", task_arg],
    ));

    // Revoked: refused at once.
    let tokens: serde_json::Value =
        serde_json::from_str(&ok(as_token(url, ADMIN, &["tokens", "--json"]))).unwrap();
    let red_id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "red")
        .and_then(|t| t["id"].as_str())
        .unwrap()
        .to_string();
    assert_eq!(
        ok(as_token(url, ADMIN, &["token", "revoke", &red_id])),
        format!("token {red_id} revoked")
    );
    assert_eq!(status("GET", url, "/api/v1/builds", &red), 401);
    assert!(one_error_line(&as_token(url, &red, &["builds"])).contains("401"));
    // A forged secret for a real id is refused too.
    let forged = format!("gtk_{red_id}_{}", "0".repeat(64));
    assert_eq!(status("GET", url, "/api/v1/builds", &forged), 401);

    // Expired: accepted until its time, refused after (timed from before
    // it was asked for: its two seconds start when the server makes it).
    let made = Instant::now();
    let short = ok(as_token(
        url,
        ADMIN,
        &["token", "create", "--team", "red", "--expires", "2s"],
    ));
    assert_eq!(status("GET", url, "/api/v1/builds", &short), 200);
    wait_for("the token to expire", Duration::from_secs(10), || {
        (status("GET", url, "/api/v1/builds", &short) == 401).then_some(())
    });
    assert!(made.elapsed() >= Duration::from_secs(2), "refused early");

    // A removed team's tokens go with it; main cannot be removed.
    assert!(one_error_line(&as_token(url, ADMIN, &["destroy-team", "main"])).contains("main"));
    ok(as_token(url, ADMIN, &["destroy-team", "blue"]));
    assert_eq!(status("GET", url, "/api/v1/builds", &blue), 401);

    // A worker presenting a wrong registration key is refused.
    let http = reqwest::blocking::Client::new();
    let resp = http
        .post(format!("{url}/api/v1/workers/register"))
        .bearer_auth("wrong-key")
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(body["error"].is_string(), "{body}");
}

#[test]
fn sqlite_teams_and_tokens_through_the_api() {
    teams_and_tokens(DbKind::Sqlite);
}

#[test]
fn postgres_teams_and_tokens_through_the_api() {
    teams_and_tokens(DbKind::Postgres);
}

/// Team alpha's secret: a var of its pipeline, in a task's params and in
/// a resource's tags (so its check's error names it).
const SECRET: &str = "s3cr3t-alpha-7f1c";

/// Alpha's pipeline's name, which beta must never see either.
const ALPHA_PIPELINE: &str = "alpha-private";

/// The pipeline both teams set: `ticker` (checked only by hand, so its
/// versions are what `check-resource --from` plants) and `flaky`, with
/// the same type and source in both; alpha's `flaky` asks for a tag no
/// worker has, so alpha's checks of it error, and alpha's job `use`
/// passes its secret to a task (job `watch`, never run, uses `flaky`).
fn shared_config(alpha: bool) -> String {
    let (tags, params) = if alpha {
        (
            "\n  tags: [((secret))]",
            "\n    params: {SECRET: ((secret))}",
        )
    } else {
        ("", "")
    };
    format!(
        "resources:\n\
- name: ticker\n  type: mock\n  check_every: never\n  source: {{initial_version: v0}}\n\
- name: flaky\n  type: mock\n  check_every: 1h{tags}\n  source: {{initial_version: f0}}\n\
jobs:\n\
- name: use\n  plan:\n  - get: ticker\n  - task: t{params}\n    config: {{platform: linux, run: {{path: sh, args: [-ec, 'echo ran']}}}}\n\
- name: watch\n  plan:\n  - get: flaky\n"
    )
}

/// A client command of `team` with its token.
fn as_team(url: &str, token: &str, team: &str, args: &[&str]) -> Output {
    gantry()
        .env("GANTRY_TOKEN", token)
        .env("GANTRY_TEAM", team)
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

/// `GET path` with `token`: its status and body.
fn get_as(url: &str, path: &str, token: &str) -> (u16, String) {
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{url}{path}"))
        .bearer_auth(token)
        .send()
        .unwrap();
    (resp.status().as_u16(), resp.text().unwrap())
}

/// `GET path` with `token`, which must answer 200 with JSON.
fn json_as(url: &str, path: &str, token: &str) -> serde_json::Value {
    let (status, body) = get_as(url, path, token);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// The version (`version` field) build `id` fetched as `ticker`, read with
/// `token`.
fn ticker_of(url: &str, id: i64, token: &str) -> String {
    let r = json_as(url, &format!("/api/v1/builds/{id}/resources"), token);
    r["inputs"]
        .as_array()
        .and_then(|i| i.iter().find(|i| i["name"] == "ticker"))
        .and_then(|i| i["version"]["version"].as_str())
        .unwrap_or_else(|| panic!("build {id} fetched no ticker: {r}"))
        .to_string()
}

/// The id of the build `trigger-job --watch` announced (`started P/J #N`,
/// then its build), which must have succeeded.
fn triggered(url: &str, token: &str, team: &str, job: &str) -> i64 {
    let out = as_team(url, token, team, &["trigger-job", "-j", job, "--watch"]);
    ok(out.clone());
    let (pipeline, job) = job.split_once('/').unwrap();
    let builds = json_as(
        url,
        &format!("/api/v1/teams/{team}/pipelines/{pipeline}/jobs/{job}/builds"),
        token,
    );
    builds[0]["id"].as_i64().expect("a build of the job")
}

/// The resource `name` of a `resources --json` listing.
fn resource<'a>(listing: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    listing
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no resource {name}: {listing}"))
}

/// The first snapshot of the dashboard's feed, as `token` sees it.
fn feed_snapshot(url: &str, token: &str) -> String {
    use std::io::BufRead;
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/dashboard/events"))
        .bearer_auth(token)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    std::io::BufReader::new(resp)
        .lines()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("data: "))
        .expect("a snapshot")
}

fn two_teams_sharing_a_resource_config(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(kind);
    let web = start_web(dir, &db, &format!("[web]\nadmin_token = \"{ADMIN}\"\n"));
    let url = &web.url;
    let _worker = start_worker(dir, url, "general", worker_backend());
    wait_for("a running worker", Duration::from_secs(60), || {
        let out = as_token(url, ADMIN, &["workers", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v.as_array()?.iter().any(|w| w["state"] == "running")).then_some(())
    });
    ok(as_token(url, ADMIN, &["set-team", "alpha"]));
    ok(as_token(url, ADMIN, &["set-team", "beta"]));
    let a = ok(as_token(
        url,
        ADMIN,
        &["token", "create", "--team", "alpha"],
    ));
    let b = ok(as_token(url, ADMIN, &["token", "create", "--team", "beta"]));

    // Both teams set the same resources; alpha's pipeline holds its secret.
    for (team, token, name, alpha) in [
        ("alpha", &a, ALPHA_PIPELINE, true),
        ("beta", &b, "beta-ci", false),
    ] {
        let file = dir.join(format!("{team}.yml"));
        write(&file, shared_config(alpha));
        let secret = format!("secret={SECRET}");
        let mut args = vec!["set-pipeline", "-p", name, "-c", file.to_str().unwrap()];
        if alpha {
            args.extend(["-v", &secret]);
        }
        ok(as_team(url, token, team, &args));
        // The admin acts on any team's pipeline with --team (as fly's
        // --team); a team's token reaches no other team's.
        ok(as_token(
            url,
            ADMIN,
            &["unpause-pipeline", "-p", name, "--team", team],
        ));
    }
    let refused = as_token(
        url,
        &b,
        &["pause-pipeline", "-p", ALPHA_PIPELINE, "--team", "alpha"],
    );
    assert!(one_error_line(&refused).contains("not found"));
    let listed = ok(as_token(
        url,
        ADMIN,
        &["pipelines", "--team", "beta", "--json"],
    ));
    assert!(listed.contains("\"paused\": false"), "{listed}");

    // Alpha checks its own version; its `flaky` check errors, naming the
    // tag (its secret), while beta's check of the same config succeeds.
    let alpha_ticker = format!("{ALPHA_PIPELINE}/ticker");
    ok(as_team(
        url,
        &a,
        "alpha",
        &[
            "check-resource",
            "-r",
            &alpha_ticker,
            "--from",
            "version:alpha-own",
        ],
    ));
    let alpha_resources = wait_for(
        "alpha's flaky check to error",
        Duration::from_secs(60),
        || {
            let r = json_as(
                url,
                &format!("/api/v1/teams/alpha/pipelines/{ALPHA_PIPELINE}/resources"),
                &a,
            );
            let error = resource(&r, "flaky")["check_error"].as_str()?.to_string();
            Some((r, error))
        },
    );
    let (alpha_resources, alpha_error) = alpha_resources;
    assert!(alpha_error.contains(SECRET), "{alpha_error}");
    wait_for(
        "beta's flaky check to succeed",
        Duration::from_secs(60),
        || {
            let r = json_as(url, "/api/v1/teams/beta/pipelines/beta-ci/resources", &b);
            (resource(&r, "flaky")["last_check"]["status"] == "succeeded").then_some(())
        },
    );

    // Beta plants a version in its history of the same config, and checks
    // again: alpha's job still takes alpha's own version.
    ok(as_team(
        url,
        &b,
        "beta",
        &[
            "check-resource",
            "-r",
            "beta-ci/ticker",
            "--from",
            "version:planted",
        ],
    ));
    ok(as_team(
        url,
        &b,
        "beta",
        &["check-resource", "-r", "beta-ci/ticker"],
    ));
    ok(as_team(
        url,
        &b,
        "beta",
        &["check-resource", "-r", "beta-ci/flaky"],
    ));
    let alpha_build = triggered(url, &a, "alpha", &format!("{ALPHA_PIPELINE}/use"));
    assert_eq!(ticker_of(url, alpha_build, &a), "alpha-own");
    let beta_build = triggered(url, &b, "beta", "beta-ci/use");
    assert_eq!(ticker_of(url, beta_build, &b), "planted");
    let alpha_versions = json_as(
        url,
        &format!("/api/v1/teams/alpha/pipelines/{ALPHA_PIPELINE}/resources/ticker/versions"),
        &a,
    );
    assert!(
        !alpha_versions.to_string().contains("planted"),
        "{alpha_versions}"
    );

    // Everything beta lists: its own things, none of alpha's.
    let beta_resources = json_as(url, "/api/v1/teams/beta/pipelines/beta-ci/resources", &b);
    for r in ["ticker", "flaky"] {
        let last = &resource(&beta_resources, r)["last_check"];
        assert_eq!(last["team"], "beta", "{beta_resources}");
        assert_eq!(last["status"], "succeeded", "{beta_resources}");
    }
    let mut answers: Vec<(String, String)> = Vec::new();
    for args in [
        vec!["pipelines", "--json"],
        vec!["resources", "-p", "beta-ci", "--json"],
        vec!["resource-versions", "-r", "beta-ci/ticker"],
        vec!["resource-versions", "-r", "beta-ci/flaky"],
        vec!["builds", "--json"],
        vec!["jobs", "-p", "beta-ci"],
        vec!["why", "-j", "beta-ci/use"],
        vec!["containers", "--json"],
        vec!["volumes", "--json"],
    ] {
        answers.push((args.join(" "), ok(as_team(url, &b, "beta", &args))));
    }
    let mut paths: Vec<String> = [
        "/api/v1/teams/beta/pipelines",
        "/api/v1/teams/beta/pipelines/beta-ci",
        "/api/v1/teams/beta/pipelines/beta-ci/resources",
        "/api/v1/teams/beta/pipelines/beta-ci/resources/ticker/versions",
        "/api/v1/teams/beta/pipelines/beta-ci/resources/flaky/versions",
        "/api/v1/teams/beta/pipelines/beta-ci/jobs",
        "/api/v1/teams/beta/pipelines/beta-ci/jobs/use",
        "/api/v1/teams/beta/pipelines/beta-ci/jobs/use/builds",
        "/api/v1/builds?limit=500",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    let beta_builds = json_as(url, "/api/v1/builds?limit=500", &b);
    let beta_ids: Vec<i64> = beta_builds
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_i64().unwrap())
        .collect();
    // Its job build and its checks (two by hand, two periodic at least).
    assert!(beta_ids.len() >= 5, "{beta_builds}");
    for id in &beta_ids {
        for tail in ["", "/events", "/resources"] {
            paths.push(format!("/api/v1/builds/{id}{tail}"));
        }
    }
    for path in &paths {
        let (status, body) = get_as(url, path, &b);
        assert_eq!(status, 200, "GET {path}: {body}");
        answers.push((format!("GET {path}"), body));
    }
    answers.push(("the dashboard feed".into(), feed_snapshot(url, &b)));
    assert!(
        answers.iter().any(|(_, a)| a.contains("planted")),
        "beta sees its own versions"
    );
    for (what, answer) in &answers {
        for leak in [SECRET, ALPHA_PIPELINE, "alpha-own", &alpha_error] {
            assert!(
                !answer.contains(leak),
                "beta's {what} shows alpha's {leak:?}: {answer}"
            );
        }
    }

    // Alpha's check builds and job build, and its pipeline, are not found
    // by beta.
    let alpha_ids = [
        resource(&alpha_resources, "ticker")["last_check"]["id"].as_i64(),
        resource(&alpha_resources, "flaky")["last_check"]["id"].as_i64(),
        Some(alpha_build),
    ];
    for id in alpha_ids {
        let id = id.expect("alpha's build");
        for tail in ["", "/events", "/resources"] {
            let path = format!("/api/v1/builds/{id}{tail}");
            let (status, body) = get_as(url, &path, &b);
            assert_eq!(status, 404, "beta: GET {path}: {body}");
            assert!(!body.contains(SECRET), "{body}");
        }
    }
    let path = format!("/api/v1/teams/alpha/pipelines/{ALPHA_PIPELINE}/resources");
    let (status, body) = get_as(url, &path, &b);
    assert!(
        matches!(status, 403 | 404),
        "beta: GET {path}: {status} {body}"
    );
    assert!(!body.contains(SECRET), "{body}");
}

#[test]
fn sqlite_two_teams_sharing_a_resource_config_share_no_secret_and_no_version() {
    two_teams_sharing_a_resource_config(DbKind::Sqlite);
}

#[test]
fn postgres_two_teams_sharing_a_resource_config_share_no_secret_and_no_version() {
    two_teams_sharing_a_resource_config(DbKind::Postgres);
}
