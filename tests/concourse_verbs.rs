//! End to end: fly's verbs on pipelines, jobs, builds, resources and
//! workers, replayed as fly sends them (read from `fly/commands` and
//! `go-concourse/concourse`): Concourse's methods, paths and bodies, and
//! the answers decoded as fly decodes them. `pause-pipeline`,
//! `unpause-pipeline`, `archive-pipeline`, `pause-job`, `unpause-job`,
//! `unpin-resource`, `land-worker`, `prune-worker`: `PUT` with no body.
//! `order-pipelines`: `PUT .../pipelines/ordering` with a JSON list of
//! names. `rename-pipeline`: `PUT .../rename` with `{"name": ...}`, the
//! answer decoded as `atc.SaveConfigResponse`. `check-resource -f`:
//! `POST .../check` with `atc.CheckRequestBody` (`{"from", "shallow"}`),
//! 201 with the build. `resource-versions`: a page of `atc.ResourceVersion`
//! (integer `id`, `version`, `enabled`, `metadata`) and its `Link`.
//! `pin-resource -v -c`, `enable-` and `disable-resource-version`: the
//! version found by `filter=KEY:VALUE`, then `PUT .../versions/ID/pin`
//! (`/enable`, `/disable`) and `PUT .../pin_comment` with
//! `{"pin_comment": ...}`. `abort-build`: `PUT /api/v1/builds/ID/abort`.

use crate::common;

use std::time::Duration;

use common::pipelines::{api, ok};
use common::*;
use serde_json::{json, Value};

const PIPELINE: &str = "\
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v0}
- name: s
  type: mock
  check_every: never
  source: {initial_version: other}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo waiting-to-be-aborted; sleep 300']}
- name: k
  plan:
  - get: s
";

const BASE: &str = "/api/v1/teams/main/pipelines";

/// A request as fly sends it: status, `Link` header, body.
fn send(url: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String, Value) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let url = format!("{url}{path}");
    let mut req = match method {
        "PUT" => http.put(url),
        "POST" => http.post(url),
        _ => http.get(url),
    };
    if let Some(b) = body {
        req = req
            .header("Content-Type", "application/json")
            .body(b.to_string());
    }
    let answer = req.send().unwrap();
    let status = answer.status().as_u16();
    let link = answer
        .headers()
        .get("link")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = answer.text().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, link, body)
}

/// `PUT` with no body (fly's pause, unpause, archive, pin, unpin, land,
/// prune...): the status.
fn put(url: &str, path: &str) -> u16 {
    send(url, "PUT", path, None).0
}

/// Decodes `v` as Concourse's `atc.ResourceVersion`: every field fly reads,
/// with its JSON type (`metadata` may be left out, `omitempty`).
fn resource_version(v: &Value) -> (i64, Value, bool) {
    let id = v["id"].as_i64().unwrap_or_else(|| panic!("id: {v}"));
    let version = v["version"].as_object().unwrap_or_else(|| panic!("{v}"));
    assert!(version.values().all(Value::is_string), "atc.Version: {v}");
    let enabled = v["enabled"].as_bool().unwrap_or_else(|| panic!("{v}"));
    if let Some(m) = v.get("metadata") {
        for field in m.as_array().unwrap_or_else(|| panic!("metadata: {v}")) {
            assert!(
                field["name"].is_string() && field["value"].is_string(),
                "{v}"
            );
        }
    }
    (id, v["version"].clone(), enabled)
}

/// fly's `resource-versions`: the first page of `atc.ResourceVersion`s
/// (`query`: fly's `limit`, or `filter`s).
fn versions(url: &str, resource: &str, query: &str) -> (Vec<(i64, Value, bool)>, String) {
    let path = format!("{BASE}/p/resources/{resource}/versions?{query}");
    let (status, link, body) = send(url, "GET", &path, None);
    assert_eq!(status, 200, "{body}");
    let page = body.as_array().unwrap_or_else(|| panic!("{body}"));
    (page.iter().map(resource_version).collect(), link)
}

/// fly's `check-resource -f KEY:VALUE`: 201 and the build, followed
/// until it succeeded.
fn check_from(url: &str, version: &str) {
    let (status, _, build) = send(
        url,
        "POST",
        &format!("{BASE}/p/resources/r/check"),
        Some(json!({"from": {"version": version}, "shallow": false})),
    );
    assert_eq!(status, 201, "{build}");
    let id = build["id"].as_i64().unwrap_or_else(|| panic!("{build}"));
    wait_status(url, id, "succeeded");
}

fn wait_status(url: &str, id: i64, status: &str) {
    wait_for(
        &format!("build {id} {status}"),
        Duration::from_secs(120),
        || (api(url, &format!("/api/v1/builds/{id}"))["status"] == status).then_some(()),
    );
}

/// The names of the team's pipelines, in the order listed.
fn names(url: &str) -> Vec<String> {
    api(url, BASE)
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn fly_verbs_on_pipelines_jobs_and_builds_are_concourses() {
    let dir = tempfile::tempdir().unwrap();
    // On PostgreSQL (the resources' test is on SQLite).
    let db = TestDb::new(DbKind::Postgres);
    let node = quickstart_runc(dir.path(), &db);
    let url = node.url.as_str();
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    for p in ["p", "q", "z"] {
        ok(&client(
            url,
            &["set-pipeline", "-n", "-p", p, "-c", file.to_str().unwrap()],
        ));
    }

    // pause-pipeline / unpause-pipeline; Gantry's POST is gone.
    assert_eq!(put(url, &format!("{BASE}/p/unpause")), 200);
    assert_eq!(api(url, &format!("{BASE}/p"))["paused"], false);
    assert_eq!(put(url, &format!("{BASE}/p/pause")), 200);
    assert_eq!(api(url, &format!("{BASE}/p"))["paused"], true);
    let (status, _, _) = send(url, "POST", &format!("{BASE}/p/unpause"), None);
    assert!(status >= 400, "POST unpause answered {status}");
    assert_eq!(put(url, &format!("{BASE}/p/unpause")), 200);

    // order-pipelines: those named first, in order, then the others.
    assert_eq!(names(url), ["p", "q", "z"]);
    let order = |list: Value| send(url, "PUT", &format!("{BASE}/ordering"), Some(list));
    assert_eq!(order(json!(["z", "p"])).0, 200);
    assert_eq!(names(url), ["z", "p", "q"]);
    let all: Vec<Value> = api(url, "/api/v1/pipelines").as_array().unwrap().clone();
    let all: Vec<&str> = all.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        all,
        ["z", "p", "q"],
        "ListAllPipelines: by team, then in order"
    );
    let (status, _, body) = order(json!(["q", "nowhere"]));
    assert_eq!(status, 400, "{body}");
    assert_eq!(order(json!([])).0, 400, "fly names at least one");
    assert_eq!(names(url), ["z", "p", "q"], "a refused order changes none");

    // rename-pipeline: `{"name": new}`, answered as atc.SaveConfigResponse.
    let (status, _, body) = send(
        url,
        "PUT",
        &format!("{BASE}/q/rename"),
        Some(json!({"name": "q2"})),
    );
    assert_eq!(status, 200, "{body}");
    let answer = body.as_object().unwrap_or_else(|| panic!("{body}"));
    for key in ["errors", "warnings"] {
        assert!(answer.get(key).is_none_or(Value::is_array), "{body}");
    }
    assert_eq!(send(url, "GET", &format!("{BASE}/q"), None).0, 404);

    // archive-pipeline.
    assert_eq!(put(url, &format!("{BASE}/q2/archive")), 200);
    assert_eq!(api(url, &format!("{BASE}/q2"))["archived"], true);

    // pause-job / unpause-job.
    assert_eq!(put(url, &format!("{BASE}/p/jobs/j/pause")), 200);
    assert_eq!(api(url, &format!("{BASE}/p/jobs/j"))["paused"], true);
    assert_eq!(put(url, &format!("{BASE}/p/jobs/j/unpause")), 200);
    assert_eq!(api(url, &format!("{BASE}/p/jobs/j"))["paused"], false);

    // abort-build, of a build that would run five minutes.
    check_from(url, "v1");
    let (status, _, build) = send(url, "POST", &format!("{BASE}/p/jobs/j/builds"), None);
    assert!(status < 300, "{build}");
    let id = build["id"].as_i64().unwrap();
    wait_status(url, id, "started");
    let (status, _, _) = send(url, "PUT", &format!("/api/v1/builds/{id}/abort"), None);
    assert!((200..300).contains(&status), "abort answered {status}");
    wait_status(url, id, "aborted");
}

#[test]
fn fly_verbs_on_resources_and_workers_are_concourses() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = node.url.as_str();
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    ok(&client(
        url,
        &[
            "set-pipeline",
            "-n",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
        ],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));

    // check-resource -f, twice: v1 then v2 the newest.
    check_from(url, "v1");
    check_from(url, "v2");

    // resource-versions: atc.ResourceVersion, newest first, integer ids,
    // a Link to the next page.
    let (all, _) = versions(url, "r", "limit=50");
    let found: Vec<&str> = all
        .iter()
        .map(|v| v.1["version"].as_str().unwrap())
        .collect();
    assert_eq!(&found[..2], ["v2", "v1"], "{all:?}");
    assert!(all.iter().all(|v| v.2), "all enabled: {all:?}");
    let (first, link) = versions(url, "r", "limit=1");
    assert_eq!(first.len(), 1);
    assert!(link.contains("rel=\"next\""), "{link}");
    let next = link
        .split('<')
        .nth(1)
        .and_then(|l| l.split('>').next())
        .unwrap();
    let (status, _, second) = send(url, "GET", next, None);
    assert_eq!(status, 200);
    assert_eq!(resource_version(&second[0]).1, json!({"version": "v1"}));

    // pin-resource -v version:v1 -c COMMENT: the version fly finds by
    // filter, pinned by its id, then the comment.
    let (matching, _) = versions(url, "r", "filter=version:v1");
    assert_eq!(matching.len(), 1, "{matching:?}");
    let (v1, version, _) = matching[0].clone();
    assert_eq!(version, json!({"version": "v1"}));
    let r = format!("{BASE}/p/resources/r");
    assert_eq!(put(url, &format!("{r}/versions/{v1}/pin")), 200);
    let (status, _, body) = send(
        url,
        "PUT",
        &format!("{r}/pin_comment"),
        Some(json!({"pin_comment": "v2 breaks"})),
    );
    assert_eq!(status, 200, "{body}");
    let resource = api(url, &r);
    assert_eq!(resource["pinned"], json!({"version": "v1"}), "{resource}");
    assert_eq!(resource["pin_comment"], "v2 breaks", "{resource}");
    // An id of another resource's versions is not this one's.
    ok(&client(url, &["check-resource", "-r", "p/s"]));
    let (s_versions, _) = versions(url, "s", "limit=1");
    let other = s_versions[0].0;
    assert_ne!(other, v1);
    assert_eq!(put(url, &format!("{r}/versions/{other}/pin")), 404);
    assert_eq!(put(url, &format!("{r}/versions/999999/disable")), 404);

    // unpin-resource.
    assert_eq!(put(url, &format!("{r}/unpin")), 200);
    assert_eq!(api(url, &r)["pinned"], Value::Null);

    // disable-resource-version / enable-resource-version, by id.
    assert_eq!(put(url, &format!("{r}/versions/{v1}/disable")), 200);
    let (all, _) = versions(url, "r", "limit=50");
    let enabled = |all: &[(i64, Value, bool)]| all.iter().find(|v| v.0 == v1).unwrap().2;
    assert!(!enabled(&all), "{all:?}");
    assert_eq!(put(url, &format!("{r}/versions/{v1}/enable")), 200);
    let (all, _) = versions(url, "r", "limit=50");
    assert!(enabled(&all), "{all:?}");

    // land-worker, then prune-worker (a running worker is refused).
    let workers = api(url, "/api/v1/workers");
    let name = workers[0]["name"].as_str().unwrap().to_string();
    let worker = format!("/api/v1/workers/{name}");
    assert_eq!(put(url, &format!("{worker}/prune")), 400);
    assert_eq!(put(url, &format!("{worker}/land")), 200);
    wait_for("the worker landed", Duration::from_secs(60), || {
        let all = api(url, "/api/v1/workers");
        let w = all
            .as_array()?
            .iter()
            .find(|w| w["name"] == name.as_str())?;
        (w["state"] == "landed").then_some(())
    });
    assert_eq!(put(url, &format!("{worker}/prune")), 200);
}
