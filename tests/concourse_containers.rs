//! End to end: fly's `containers`, `volumes`, `intercept`'s container
//! look-up, `sync` and `active-users`, replayed as fly sends them (read
//! from `fly/commands` and `go-concourse/concourse`), the answers decoded
//! into Concourse's types as fly's Go decodes them.
//!
//! - `fly containers`: `GET /api/v1/teams/T/containers`, a list of
//!   `atc.Container` (`id`, `worker_name` always; the others when known).
//! - `fly intercept -j P/J -s S`: the same route with `pipeline_name`,
//!   `job_name`, `step_name` (and `type`, `build_name`) as query; a filter
//!   Gantry cannot apply (`attempt`) is refused, not ignored.
//! - `GetContainer`: `GET /api/v1/teams/T/containers/ID`.
//! - `fly volumes`: `GET /api/v1/teams/T/volumes`, `atc.Volume`s with
//!   every field.
//! - `fly clear-resource-cache`: `DELETE .../resources/R/cache`, with
//!   `{"version": {...}}` or no body, `{"caches_removed": N}`.
//! - `fly sync`: `GET /api/v1/cli?arch=A&platform=P`, the binary of
//!   `fly-P-A.tgz` (or a plain `fly-P-A`) in `[web] fly_cli_dir`.
//! - `fly active-users --since D`: `GET /api/v1/users?since=yyyy-mm-dd`,
//!   the admin's, `atc.User`s.

use crate::common;

use std::time::Duration;

use common::pipelines::ok;
use common::*;
use serde::Deserialize;
use serde_json::Value;

/// Concourse's `atc.Container` (`id` and `worker_name` always sent, the
/// rest `omitempty`).
#[derive(Debug, Deserialize)]
struct Container {
    id: String,
    worker_name: String,
    #[serde(default)]
    state: String,
    #[serde(default, rename = "type")]
    type_: String,
    #[serde(default)]
    step_name: String,
    #[serde(default)]
    build_id: i64,
    #[serde(default)]
    pipeline_name: String,
    #[serde(default)]
    job_name: String,
    #[serde(default)]
    build_name: String,
}

/// Concourse's `atc.Volume` (every field always sent; checked present
/// before decoding).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Volume {
    id: String,
    worker_name: String,
    #[serde(rename = "type")]
    type_: String,
    container_handle: String,
    path: String,
    parent_handle: String,
    resource_type: Option<Value>,
    base_resource_type: Option<Value>,
    pipeline_id: i64,
    pipeline_name: String,
    pipeline_instance_vars: Option<Value>,
    job_name: String,
    step_name: String,
}

/// Concourse's `atc.User` (every field `omitempty`).
#[derive(Debug, Deserialize)]
struct User {
    #[serde(default)]
    username: String,
    #[serde(default)]
    connector: String,
    #[serde(default)]
    last_login: i64,
}

const PIPELINE: &str = "\
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v0}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    config:
      platform: linux
      inputs: [{name: r}]
      run: {path: sh, args: [-c, 'echo up; sleep 300']}
";

/// A request as fly sends it: status and body text.
fn send(url: &str, token: Option<&str>, method: &str, path: &str) -> (u16, Vec<u8>) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = http.request(method, format!("{url}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let answer = req.send().unwrap();
    (answer.status().as_u16(), answer.bytes().unwrap().to_vec())
}

/// `GET path`, 200, decoded.
fn get<T: serde::de::DeserializeOwned>(url: &str, token: Option<&str>, path: &str) -> T {
    let (status, body) = send(url, token, "GET", path);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// A JSON error answer's status and message.
fn refused(url: &str, token: Option<&str>, path: &str) -> (u16, String) {
    let (status, body) = send(url, token, "GET", path);
    let error: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("{path}: not JSON: {}", String::from_utf8_lossy(&body)));
    (
        status,
        error["error"].as_str().unwrap_or_default().to_string(),
    )
}

/// Concourse's `fly-PLATFORM-ARCH.tgz` holding `fly`.
fn fly_tgz(path: &std::path::Path, fly: &[u8]) {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(fly.len() as u64);
    header.set_mode(0o755);
    header.set_cksum();
    tar.append_data(&mut header, "fly", fly).unwrap();
    write(path, tar.into_inner().unwrap().finish().unwrap());
}

/// fly's `sync` against `[web] fly_cli_dir`.
fn sync(url: &str) {
    let (status, body) = send(url, None, "GET", "/api/v1/cli?arch=amd64&platform=linux");
    assert_eq!(
        (status, body.as_slice()),
        (200, b"linux fly".as_slice()),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = send(url, None, "GET", "/api/v1/cli?arch=arm64&platform=darwin");
    assert_eq!((status, body.as_slice()), (200, b"darwin fly".as_slice()));
    let (status, error) = refused(url, None, "/api/v1/cli?arch=amd64&platform=windows");
    assert_eq!(status, 404, "{error}");
    assert!(error.contains("fly_cli_dir"), "{error}");
    let (status, _) = refused(url, None, "/api/v1/cli?arch=amd64&platform=..%2Fx");
    assert_eq!(status, 400);
}

/// fly's `containers`, `intercept`'s look-up and `volumes`, while job
/// j's task runs.
fn containers_and_volumes(url: &str) {
    let (status, body) = send(
        url,
        None,
        "POST",
        "/api/v1/teams/main/pipelines/p/jobs/j/builds",
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let build: Value = serde_json::from_slice(&body).unwrap();
    let build_id = build["id"].as_i64().unwrap();
    let task = wait_for("the task's container", Duration::from_secs(120), || {
        let all: Vec<Container> = get(url, None, "/api/v1/teams/main/containers");
        all.into_iter()
            .find(|c| c.step_name == "t" && c.state == "created")
    });
    let b: Value = get(url, None, &format!("/api/v1/builds/{build_id}"));
    assert_eq!(task.type_, "task", "{task:?} {}", b["plan"]);
    assert_eq!(
        (task.pipeline_name.as_str(), task.job_name.as_str()),
        ("p", "j")
    );
    assert_eq!((task.build_id, task.build_name.as_str()), (build_id, "1"));
    assert!(!task.worker_name.is_empty() && !task.id.is_empty());

    // fly intercept -j p/j -s t (and --step-type task -b 1).
    let found: Vec<Container> = get(
        url,
        None,
        "/api/v1/teams/main/containers?pipeline_name=p&job_name=j&step_name=t&type=task&build_name=1",
    );
    let ids: Vec<&str> = found.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [task.id.as_str()]);
    let none: Vec<Container> = get(
        url,
        None,
        "/api/v1/teams/main/containers?step_name=t&type=get",
    );
    assert!(none.is_empty(), "{none:?}");
    let by_build: Vec<Container> = get(
        url,
        None,
        &format!("/api/v1/teams/main/containers?build_id={build_id}&step_name=t"),
    );
    assert_eq!(by_build.len(), 1);
    let (status, error) = refused(url, None, "/api/v1/teams/main/containers?attempt=1");
    assert_eq!(status, 400);
    assert!(error.contains("attempt"), "{error}");

    // GetContainer.
    let one: Container = get(
        url,
        None,
        &format!("/api/v1/teams/main/containers/{}", task.id),
    );
    assert_eq!((one.id, one.step_name.as_str()), (task.id.clone(), "t"));
    let (status, _) = refused(url, None, "/api/v1/teams/main/containers/no-such");
    assert_eq!(status, 404);

    // fly volumes: every field of atc.Volume.
    let raw: Vec<Value> = get(url, None, "/api/v1/teams/main/volumes");
    for v in &raw {
        for field in [
            "id",
            "worker_name",
            "type",
            "container_handle",
            "path",
            "parent_handle",
            "resource_type",
            "base_resource_type",
            "pipeline_id",
            "pipeline_name",
            "pipeline_instance_vars",
            "job_name",
            "step_name",
        ] {
            assert!(v.get(field).is_some(), "{field} missing: {v}");
        }
    }
    let volumes: Vec<Volume> = serde_json::from_value(Value::Array(raw)).unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v.job_name == "j" && v.pipeline_name == "p"),
        "{volumes:?}"
    );
    let (status, _) = send(
        url,
        None,
        "PUT",
        &format!("/api/v1/builds/{build_id}/abort"),
    );
    assert_eq!(status, 200);
}

/// fly's `clear-resource-cache -r p/r [-v version:v0]`: `DELETE
/// .../resources/r/cache` with `atc.ClearResourceCacheRequest` (or no
/// body), answered `{"caches_removed": N}`; the get kept one cache of r.
fn clear_resource_cache(url: &str) {
    let clear = |body: Option<&str>| {
        let mut req = reqwest::blocking::Client::new()
            .delete(format!(
                "{url}/api/v1/teams/main/pipelines/p/resources/r/cache"
            ))
            .header("Content-Type", "application/json");
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let answer = req.send().unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().unwrap();
        assert_eq!(status, 200, "{text}");
        let removed: Value = serde_json::from_str(&text).unwrap();
        removed["caches_removed"].as_i64().unwrap()
    };
    assert_eq!(clear(Some(r#"{"version": {"version": "other"}}"#)), 0);
    assert_eq!(clear(Some(r#"{"version": {"version": "v0"}}"#)), 1);
    assert_eq!(clear(None), 0, "gone already");
    let (status, _) = send(
        url,
        None,
        "DELETE",
        "/api/v1/teams/main/pipelines/p/resources/nope/cache",
    );
    assert_eq!(status, 404);
}

#[test]
fn fly_containers_volumes_and_sync_are_concourses() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let bins = dir.path().join("fly-bins");
    fly_tgz(&bins.join("fly-linux-amd64.tgz"), b"linux fly");
    write(&bins.join("fly-darwin-arm64"), b"darwin fly");
    let config = dir.path().join("gantry.toml");
    write(
        &config,
        format!("[web]\nfly_cli_dir = {:?}\n", bins.to_str().unwrap()),
    );
    let node = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = node.url.as_str();
    sync(url);
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    let file = file.to_str().unwrap();
    ok(&client(url, &["set-pipeline", "-p", "p", "-c", file]));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    containers_and_volumes(url);
    clear_resource_cache(url);
}

#[test]
fn fly_active_users_lists_who_signed_in() {
    const ADMIN: &str = "adm1n";
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = crate::people::hash(&home, "alice pw");
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n[web.users]\nalice = \"{alice}\"\n"),
    );
    let url = web.url.as_str();
    // fly sync needs no token; with no fly_cli_dir it says which setting.
    let (status, error) = refused(url, None, "/api/v1/cli?arch=amd64&platform=linux");
    assert_eq!(status, 404);
    assert!(error.contains("fly_cli_dir"), "{error}");

    // Nobody signed in yet.
    let users: Vec<User> = get(url, Some(ADMIN), "/api/v1/users?since=1970-01-01");
    assert!(users.is_empty(), "{users:?}");
    // alice, red's owner (`fly set-team -n red --local-user alice`),
    // signs in as `fly login -u -p` does.
    let (status, _) = reqwest::blocking::Client::new()
        .put(format!("{url}/api/v1/teams/red"))
        .bearer_auth(ADMIN)
        .header("Content-Type", "application/json")
        .body(r#"{"auth": {"owner": {"users": ["local:alice"], "groups": []}}}"#)
        .send()
        .map(|a| (a.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 201);
    let form = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "alice pw"),
        ("scope", "openid profile email federated:id groups"),
    ];
    let answer: Value = reqwest::blocking::Client::new()
        .post(format!("{url}/sky/issuer/token"))
        .basic_auth("fly", Some("Zmx5"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(form).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = answer["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string();

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let users: Vec<User> = get(url, Some(ADMIN), "/api/v1/users?since=1970-01-01");
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(
        (users[0].username.as_str(), users[0].connector.as_str()),
        ("alice", "local")
    );
    assert!(
        (now - 60..=now + 5).contains(&users[0].last_login),
        "{users:?}"
    );
    let later: Vec<User> = get(url, Some(ADMIN), "/api/v1/users?since=2999-01-01");
    assert!(later.is_empty(), "{later:?}");
    let (status, error) = refused(url, Some(ADMIN), "/api/v1/users?since=yesterday");
    assert_eq!(
        (status, error.as_str()),
        (400, "wrong date format (yyyy-mm-dd)")
    );
    // Only the admin lists them.
    let (status, _) = refused(url, Some(&token), "/api/v1/users?since=1970-01-01");
    assert_eq!(status, 403);
}
