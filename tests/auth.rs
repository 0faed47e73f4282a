//! End to end: tokens. A secured web node refuses anonymous callers, teams
//! see and touch only their own things, the admin everything; workers use
//! the registration key; an open API is refused beyond loopback.

use crate::common;

use common::*;

fn with_token(url: &str, token: &str, args: &[&str]) -> std::process::Output {
    client_as(url, token, args)
}

#[test]
fn teams_reach_only_their_own_builds_and_the_admin_reaches_all() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        "[web]\nadmin_token = \"adm1n\"\n[web.teams]\nmain = \"m41n\"\nred = \"r3d\"\n",
    );
    let _w = start_worker(dir.path(), &web.url, "w", &[]);
    // Anonymous callers are refused with a JSON 401 (info stays open).
    let http = reqwest::blocking::Client::new();
    let resp = http
        .get(format!("{}/api/v1/builds", web.url))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let body: serde_json::Value = resp.json().unwrap();
    assert!(body["error"].as_str().unwrap().contains("token"), "{body}");
    assert_eq!(
        http.get(format!("{}/api/v1/info", web.url))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let err = one_error_line(&client(&web.url, &["workers"]));
    assert!(err.contains("401"), "{err}");
    wait_for("the worker", std::time::Duration::from_secs(30), || {
        let out = with_token(&web.url, "adm1n", &["workers", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (v.as_array()?.len() == 1 && v[0]["state"] == "running").then_some(())
    });

    // Team main runs a build with its token.
    write(
        &dir.path().join("t.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, 'echo mine']\n",
    );
    let task = dir.path().join("t.yml");
    let out = with_token(&web.url, "m41n", &["execute", "-c", task.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "mine\n");
    let build = announced_build_text(&String::from_utf8_lossy(&out.stderr)).unwrap();

    // Team red sees none of it; using its token on main's team is refused.
    let red: serde_json::Value =
        serde_json::from_slice(&with_token(&web.url, "r3d", &["builds", "--json"]).stdout).unwrap();
    assert_eq!(red.as_array().unwrap().len(), 0);
    let resp = http
        .get(format!("{}/api/v1/builds/{build}", web.url))
        .bearer_auth("r3d")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = http
        .get(format!("{}/api/v1/builds/{build}/events", web.url))
        .bearer_auth("r3d")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // Nor can it intercept main's build.
    let resp = http
        .get(format!("{}/api/v1/builds/{build}/hijack", web.url))
        .bearer_auth("r3d")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let out = with_token(
        &web.url,
        "r3d",
        &["execute", "--team", "main", "-c", task.to_str().unwrap()],
    );
    assert!(one_error_line(&out).contains("404"));
    // Team tokens cannot manage workers; the admin sees every build.
    let out = with_token(&web.url, "m41n", &["land-worker", "w"]);
    assert!(one_error_line(&out).contains("admin token"));
    let all: serde_json::Value =
        serde_json::from_slice(&with_token(&web.url, "adm1n", &["builds", "--json"]).stdout)
            .unwrap();
    assert_eq!(all.as_array().unwrap().len(), 1);
    // A team's own execute runs in its team, with its own worker pool.
    let out = with_token(
        &web.url,
        "r3d",
        &["execute", "--team", "red", "-c", task.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mine: serde_json::Value =
        serde_json::from_slice(&with_token(&web.url, "m41n", &["builds", "--json"]).stdout)
            .unwrap();
    assert_eq!(mine.as_array().unwrap().len(), 1);
}

#[test]
fn an_open_api_is_refused_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = gantry()
        .args(["web", "--listen", "0.0.0.0:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no admin_token or team tokens are set"),
        "{err}"
    );
}
