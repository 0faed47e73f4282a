//! End to end: the routes of Concourse's API that Gantry serves as
//! Concourse does, driven with the requests `fly` sends (read from
//! `fly/commands` and `go-concourse/concourse`) and their answers decoded
//! as fly decodes them. `fly set-pipeline`: `GET .../config` (the stored
//! config and its version, or 404 for a new pipeline), then `PUT
//! .../config` with the YAML, `Content-Type: application/x-yaml` and the
//! version read (201 new, 200 changed, `{warnings}`; 400 `{errors}` for an
//! invalid config; a version read before another set is refused);
//! `fly get-pipeline` reads the config back; `fly get-team` reads one
//! team; `fly userinfo` reads `/api/v1/user`; `fly set-pipeline
//! --instance-var`, `pipelines`, `jobs`, `check-resource-type` and
//! `destroy-pipeline` decode into Concourse's types.

use crate::common;

use std::time::Duration;

use common::*;

const ADMIN: &str = "adm1n";

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
    config: {platform: linux, run: {path: echo, args: [hi]}}
";

/// What fly's `PipelineConfig` reads: the status, the config and the
/// version header.
fn get_config(url: &str, pipeline: &str) -> (u16, serde_json::Value, Option<String>) {
    let (name, query) = split_query(pipeline);
    let answer = reqwest::blocking::Client::new()
        .get(format!(
            "{url}/api/v1/teams/main/pipelines/{name}/config{query}"
        ))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    let status = answer.status().as_u16();
    let version = answer
        .headers()
        .get("X-Concourse-Config-Version")
        .map(|v| v.to_str().unwrap().to_string());
    let body = answer.json().unwrap_or(serde_json::Value::Null);
    (status, body, version)
}

/// `NAME?QUERY` as the name and `?QUERY` (an instance's vars, as fly sends
/// them), or the name alone.
fn split_query(pipeline: &str) -> (&str, String) {
    match pipeline.split_once('?') {
        Some((name, query)) => (name, format!("?{query}")),
        None => (pipeline, String::new()),
    }
}

/// fly's `CreateOrUpdatePipelineConfig`: status, content type, body.
fn put_config(
    url: &str,
    pipeline: &str,
    version: &str,
    content_type: &str,
    text: &str,
) -> (u16, String, serde_json::Value) {
    let (name, query) = split_query(pipeline);
    let answer = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .put(format!(
            "{url}/api/v1/teams/main/pipelines/{name}/config{query}"
        ))
        .bearer_auth(ADMIN)
        .header("Content-Type", content_type)
        .header("X-Concourse-Config-Version", version)
        .body(text.to_string())
        .send()
        .unwrap();
    let status = answer.status().as_u16();
    let kind = answer
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = answer.json().unwrap_or(serde_json::Value::Null);
    (status, kind, body)
}

#[test]
fn fly_sets_and_gets_a_pipeline_through_the_config_routes() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let url = web.url.as_str();

    // A new pipeline: not found, then created from the version fly read
    // (none: the header is sent empty).
    let (status, _, version) = get_config(url, "p");
    assert_eq!((status, version), (404, None));
    let (status, kind, body) = put_config(url, "p", "", "application/x-yaml", PIPELINE);
    assert_eq!(status, 201, "{body}");
    assert_eq!(kind, "application/json", "fly refuses another content type");
    assert!(body["warnings"].is_array(), "{body}");
    assert!(body.get("errors").is_none(), "{body}");

    // fly get-pipeline: the config as JSON, and its version.
    let (status, got, version) = get_config(url, "p");
    assert_eq!(status, 200, "{got}");
    assert_eq!(version.as_deref(), Some("1"));
    assert_eq!(got["config"]["jobs"][0]["name"], "j", "{got}");
    assert_eq!(
        got["config"]["resources"][0]["source"]["initial_version"],
        "v0"
    );
    assert_eq!(
        got["config"]["jobs"][0]["plan"][1]["config"]["run"]["args"],
        serde_json::json!(["hi"])
    );

    // Changed from the version read: 200; a version read before: refused,
    // and nothing changes.
    let changed = PIPELINE.replace("args: [hi]", "args: [changed]");
    let (status, _, body) = put_config(url, "p", "1", "application/x-yaml", &changed);
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = put_config(url, "p", "1", "application/x-yaml", PIPELINE);
    assert_eq!(status, 409, "{body}");
    let (_, got, version) = get_config(url, "p");
    assert_eq!(version.as_deref(), Some("2"));
    assert!(got.to_string().contains("changed"), "{got}");

    // An invalid config: 400 with Concourse's `errors` (fly prints each).
    let (status, kind, body) = put_config(
        url,
        "p",
        "2",
        "application/x-yaml",
        "jobs:\n- name: j\n  plan:\n  - get: nowhere\n",
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(kind, "application/json");
    let errors = body["errors"].as_array().expect("errors");
    assert!(errors[0].as_str().unwrap().contains("nowhere"), "{body}");
    let (status, _, body) = put_config(url, "p", "two", "application/x-yaml", PIPELINE);
    assert_eq!(status, 400, "{body}");
    assert!(
        body["errors"][0].as_str().unwrap().contains("malformed"),
        "{body}"
    );

    // JSON is taken as YAML is; another content type is refused.
    let as_json: serde_json::Value = serde_yaml::from_str(PIPELINE).unwrap();
    let (status, _, body) = put_config(url, "q", "", "application/json", &as_json.to_string());
    assert_eq!(status, 201, "{body}");
    let (status, _, _) = put_config(url, "q", "1", "text/plain", PIPELINE);
    assert_eq!(status, 415);

    // An archived pipeline's config is not found (fly: "pipeline not found").
    let out = client_as(url, ADMIN, &["archive-pipeline", "-p", "q", "-n"]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(get_config(url, "q").0, 404);

    // fly get-team: one team.
    let team: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/teams/main"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(team["name"], "main", "{team}");
    let missing = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/teams/nobody"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    // fly userinfo: Concourse's `UserInfo`.
    let me: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .header("Authorization", format!("bearer {ADMIN}"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(me["is_admin"], true, "{me}");
    assert_eq!(me["teams"]["main"], serde_json::json!(["owner"]), "{me}");
    assert!(me["user_name"].is_string(), "{me}");
}

/// What a Concourse Go struct's field always holds: the JSON type fly's
/// decoder needs.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Int,
    Str,
    Bool,
    /// A pointer: null or an object.
    NullOr,
}

/// Asserts `v` has each field the Go struct always sends, with its type.
fn decodes(v: &serde_json::Value, what: &str, fields: &[(&str, Kind)]) {
    for (field, kind) in fields {
        let f = v
            .get(field)
            .unwrap_or_else(|| panic!("{what}: no {field:?} in {v}"));
        let ok = match kind {
            Kind::Int => f.is_i64(),
            Kind::Str => f.is_string(),
            Kind::Bool => f.is_boolean(),
            Kind::NullOr => f.is_null() || f.is_object(),
        };
        assert!(ok, "{what}.{field}: {f} is not {kind:?}");
    }
}

const PIPELINE_FIELDS: &[(&str, Kind)] = &[
    ("id", Kind::Int),
    ("name", Kind::Str),
    ("paused", Kind::Bool),
    ("public", Kind::Bool),
    ("archived", Kind::Bool),
    ("team_name", Kind::Str),
];

const JOB_FIELDS: &[(&str, Kind)] = &[
    ("id", Kind::Int),
    ("name", Kind::Str),
    ("team_name", Kind::Str),
    ("pipeline_id", Kind::Int),
    ("pipeline_name", Kind::Str),
    ("next_build", Kind::NullOr),
    ("finished_build", Kind::NullOr),
];

const BUILD_FIELDS: &[(&str, Kind)] = &[
    ("id", Kind::Int),
    ("team_name", Kind::Str),
    ("name", Kind::Str),
    ("status", Kind::Str),
    ("api_url", Kind::Str),
];

/// fly's `set-pipeline --instance-var` (`?vars.K=JSON` on the config
/// routes), `pipelines`, `jobs`, `check-resource-type` and
/// `destroy-pipeline`, replayed on one web node and decoded into
/// Concourse's `atc.Pipeline`, `atc.Job` and `atc.Build`.
#[test]
fn fly_lists_pipelines_and_jobs_checks_a_type_and_destroys_an_instance() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let url = web.url.as_str();
    let http = reqwest::blocking::Client::new();
    let typed = format!(
        "resource_types:\n- name: t\n  type: registry-image\n  source: {{repository: busybox}}\n{PIPELINE}"
    );

    // set-pipeline -p p --instance-var branch=main: the config routes
    // with Concourse's query for the instance.
    let instance = "p?vars.branch=%22main%22";
    let (status, _, version) = get_config(url, instance);
    assert_eq!((status, version), (404, None));
    let (status, _, body) = put_config(url, instance, "", "application/x-yaml", &typed);
    assert_eq!(status, 201, "{body}");
    let (status, got, version) = get_config(url, instance);
    assert_eq!((status, version.as_deref()), (200, Some("1")), "{got}");

    // pipelines: atc.Pipeline, the instance's vars as Concourse's object.
    let pipelines: Vec<serde_json::Value> = http
        .get(format!("{url}/api/v1/teams/main/pipelines"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(pipelines.len(), 1, "{pipelines:?}");
    decodes(&pipelines[0], "pipeline", PIPELINE_FIELDS);
    assert_eq!(
        pipelines[0]["instance_vars"],
        serde_json::json!({"branch": "main"})
    );

    // jobs -p p/branch:main: atc.Job, fetched with the instance's query.
    let jobs: Vec<serde_json::Value> = http
        .get(format!("{url}/api/v1/teams/main/pipelines/{instance}").replace("?", "/jobs?"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    decodes(&jobs[0], "job", JOB_FIELDS);
    assert_eq!(jobs[0]["pipeline_id"], pipelines[0]["id"]);
    assert_eq!(jobs[0]["outputs"], serde_json::json!([]));

    // check-resource-type -r p/branch:main/t: the check build, atc.Build.
    let answer = http
        .post(format!(
            "{url}/api/v1/teams/main/pipelines/p/resource-types/t/check?vars.branch=%22main%22"
        ))
        .bearer_auth(ADMIN)
        .header("Content-Type", "application/json")
        .body(r#"{"from":null,"shallow":true}"#)
        .send()
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.status());
    let build: serde_json::Value = answer.json().unwrap();
    decodes(&build, "build", BUILD_FIELDS);

    // destroy-pipeline: 204, and the instance is gone.
    let gone = http
        .delete(format!("{url}/api/v1/teams/main/pipelines/{instance}"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(gone.status().as_u16(), 204);
    assert_eq!(get_config(url, instance).0, 404);
}
