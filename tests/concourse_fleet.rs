//! End to end: fly's verbs on workers and teams, replayed as fly sends
//! them (read from `fly/commands` and `go-concourse/concourse`), the
//! answers decoded into Concourse's types as fly's Go decodes them (every
//! field the Go struct always sends present, with its JSON type).
//!
//! - `fly workers`: `GET /api/v1/workers`, a list of `atc.Worker`
//!   (`version` the info's `worker_version`, `resource_types` objects,
//!   `start_time` Unix seconds).
//! - `fly land-worker -w W`: the list, then `PUT /api/v1/workers/W/land`
//!   with a whole `atc.Worker` holding only the worker's `team`.
//! - `fly prune-worker -w W`: `PUT /api/v1/workers/W/prune`, no body; a
//!   running worker is refused with 400 and `atc.PruneWorkerResponseBody`
//!   (`stderr`), a landed one pruned.
//! - `fly set-team -n T --local-user alice`: `PUT /api/v1/teams/T` with
//!   `atc.Team{auth}`, answered `{team: atc.Team}` (201 made, 200 updated);
//!   the auth is the team's whole auth, and alice signed in has its role.
//! - `fly teams`, `fly get-team`: `atc.Team`s (`id`, `name`, `auth`).
//! - `fly destroy-team`: `DELETE /api/v1/teams/T`, 204.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde::Deserialize;
use serde_json::{json, Value};

const ADMIN: &str = "adm1n";

/// Concourse's `atc.WorkerResourceType`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct WorkerResourceType {
    #[serde(rename = "type")]
    type_: String,
    image: String,
    version: String,
    privileged: bool,
    unique_version_history: bool,
}

/// Concourse's `atc.Worker` (the fields it always sends).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Worker {
    addr: String,
    baggageclaim_url: String,
    active_containers: i64,
    active_volumes: i64,
    active_tasks: i64,
    max_active_tasks: i64,
    resource_types: Vec<WorkerResourceType>,
    platform: String,
    tags: Vec<String>,
    team: String,
    name: String,
    version: String,
    start_time: i64,
    ephemeral: bool,
    state: String,
}

/// Concourse's `atc.TeamAuth`.
type TeamAuth = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Concourse's `atc.Team`, as `GET` answers it.
#[derive(Debug, Deserialize)]
struct Team {
    id: i64,
    name: String,
    auth: TeamAuth,
}

/// go-concourse's `setTeamResponse` (its `team`).
#[derive(Debug, Deserialize)]
struct SetTeamResponse {
    team: Team,
}

/// A request as fly sends it (`token`'s bearer, a JSON body declared as
/// such): the status and the body's text.
fn send(url: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = http
        .request(method, format!("{url}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json");
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let answer = req.send().unwrap();
    (answer.status().as_u16(), answer.text().unwrap())
}

/// `GET path` as the admin, decoded as fly decodes it.
fn get<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> T {
    let (status, text) = send(url, ADMIN, "GET", path, None);
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// alice's token from Go's oauth2 password grant, as `fly login -u -p`.
fn alice_token(url: &str) -> String {
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
    answer["access_token"].as_str().unwrap().to_string()
}

/// fly's `workers`, `land-worker` and `prune-worker` on worker `w1`.
fn workers_verbs(url: &str) {
    let workers: Vec<Worker> = get(url, "/api/v1/workers");
    let info: Value = get(url, "/api/v1/info");
    let w = workers.iter().find(|w| w.name == "w1").unwrap();
    assert_eq!(
        (w.state.as_str(), w.platform.as_str(), w.team.as_str()),
        ("running", "linux", "")
    );
    assert_eq!(w.tags, ["t1"]);
    assert_eq!(
        w.version,
        info["worker_version"].as_str().unwrap(),
        "fly: not outdated"
    );
    assert!(w.resource_types.iter().any(|t| t.type_ == "mock"), "{w:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - 600..=now + 5).contains(&w.start_time), "{w:?}");
    assert!(!w.addr.is_empty() && !w.addr.contains("://"), "{w:?}");
    assert!(w.baggageclaim_url.starts_with("http"), "{w:?}");
    assert!(!w.ephemeral);

    // prune-worker on a running worker: 400 with fly's `stderr`.
    let (status, text) = send(url, ADMIN, "PUT", "/api/v1/workers/w1/prune", None);
    assert_eq!(status, 400, "{text}");
    let refused: Value = serde_json::from_str(&text).unwrap();
    assert!(
        refused["stderr"].as_str().unwrap().contains("running"),
        "{text}"
    );

    // land-worker: a whole atc.Worker with only its team.
    let body = json!({
        "addr": "", "baggageclaim_url": "", "active_containers": 0, "active_volumes": 0,
        "active_tasks": 0, "max_active_tasks": 0, "resource_types": null, "platform": "",
        "tags": null, "team": w.team, "name": "", "version": "", "start_time": 0,
        "ephemeral": false, "state": "",
    });
    let (status, text) = send(url, ADMIN, "PUT", "/api/v1/workers/w1/land", Some(body));
    assert_eq!(status, 200, "{text}");
    wait_for("w1 landed", Duration::from_secs(60), || {
        let workers: Vec<Worker> = get(url, "/api/v1/workers");
        workers
            .iter()
            .any(|w| w.name == "w1" && w.state == "landed")
            .then_some(())
    });
    let (status, text) = send(url, ADMIN, "PUT", "/api/v1/workers/w1/prune", None);
    assert_eq!(status, 200, "{text}");
}

/// fly's `set-team`, `teams`, `get-team` and `destroy-team` on team red.
fn teams_verbs(url: &str) {
    let set = |auth: Value| {
        send(
            url,
            ADMIN,
            "PUT",
            "/api/v1/teams/red",
            Some(json!({ "auth": auth })),
        )
    };
    // Refused as Concourse refuses, and a role Gantry has not got.
    let (status, text) = set(json!({}));
    assert_eq!(
        (status, text.contains("must not be empty")),
        (400, true),
        "{text}"
    );
    let (status, text) = set(json!({"admin": {"users": ["local:alice"], "groups": []}}));
    assert_eq!(
        (status, text.contains("Gantry's roles")),
        (400, true),
        "{text}"
    );
    let (status, _) = send(url, ADMIN, "GET", "/api/v1/teams/red", None);
    assert_eq!(status, 404, "nothing was made");

    // fly set-team -n red --local-user alice: created, alice its owner.
    let (status, text) = set(json!({"owner": {"users": ["local:alice"], "groups": []}}));
    assert_eq!(status, 201, "{text}");
    let made: SetTeamResponse = serde_json::from_str(&text).unwrap();
    assert_eq!(made.team.name, "red");
    assert!(made.team.id > 0, "{text}");
    assert_eq!(made.team.auth["owner"]["users"], ["local:alice"]);
    // Again, with another auth: updated, and it is the whole auth.
    let (status, text) = set(json!({
        "member": {"users": ["local:alice"], "groups": ["github:acme:ops"]},
        "viewer": {"users": ["github:bob"], "groups": []},
    }));
    assert_eq!(status, 200, "{text}");
    let updated: SetTeamResponse = serde_json::from_str(&text).unwrap();
    assert_eq!(updated.team.id, made.team.id);
    assert!(!updated.team.auth.contains_key("owner"), "{text}");

    // alice signed in is red's member (and reads it, as get-team does).
    let token = alice_token(url);
    let (status, text) = send(url, &token, "GET", "/api/v1/user", None);
    assert_eq!(status, 200, "{text}");
    let user: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(user["teams"]["red"], json!(["member"]), "{user}");
    let (status, text) = send(url, &token, "GET", "/api/v1/teams/red", None);
    assert_eq!(status, 200, "{text}");

    // fly teams, fly get-team.
    let teams: Vec<Team> = get(url, "/api/v1/teams");
    let names: Vec<&str> = teams.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"main") && names.contains(&"red"),
        "{names:?}"
    );
    let red: Team = get(url, "/api/v1/teams/red");
    assert_eq!(red.id, made.team.id);
    assert_eq!(red.auth["member"]["users"], ["local:alice"]);
    assert_eq!(red.auth["member"]["groups"], ["github:acme:ops"]);
    assert_eq!(red.auth["viewer"]["users"], ["github:bob"]);

    // fly destroy-team: 204, then gone.
    let (status, text) = send(url, ADMIN, "DELETE", "/api/v1/teams/red", None);
    assert_eq!((status, text.as_str()), (204, ""));
    let (status, _) = send(url, ADMIN, "GET", "/api/v1/teams/red", None);
    assert_eq!(status, 404);
}

#[test]
fn fly_verbs_on_workers_and_teams_are_concourses() {
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
    let _w1 = start_worker(dir, url, "w1", &["--tag", "t1"]);
    wait_for("w1 running", Duration::from_secs(60), || {
        let workers: Vec<Worker> = get(url, "/api/v1/workers");
        workers
            .iter()
            .any(|w| w.name == "w1" && w.state == "running")
            .then_some(())
    });
    workers_verbs(url);
    teams_verbs(url);
}
