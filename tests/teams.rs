//! End to end: teams and team tokens managed through the API. The admin
//! makes teams and tokens (`gantry set-team`, `gantry token create`); a
//! token is stored hashed, acts only for its team (another team's build,
//! events, artifacts, abort and hijack answer 404), and is refused once
//! revoked or expired or once its team is removed. A team's worker
//! (`--team`) runs only that team's steps. Workers with a wrong
//! registration key are refused.

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
        ("POST", format!("/api/v1/builds/{build}/abort")),
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
