//! End to end: fly's build verbs replayed as fly sends them (read from
//! `fly/commands` and `go-concourse/concourse`), each answer decoded
//! strictly into Concourse's types (`atc.Build`, `atc.PublicBuildPlan`,
//! `atc.BuildPreparation`: every field the Go struct always sends present,
//! with its JSON type). `trigger-job -w`: `POST .../jobs/J/builds` (200
//! with the build), then its server-sent events to `end`. `builds -j`,
//! `builds -p`, `builds` and `builds --team`: `limit`, and `from`/`to`
//! followed through the `Link` header's `next` and `previous`; `builds
//! --since/--until`: `from`/`to` as times with `timestamps`. `rerun-build`:
//! `POST .../jobs/J/builds/NAME` (200 with the rerun). `abort-build`:
//! `PUT /api/v1/builds/ID/abort`. `watch -j`: the job's `next_build` or
//! `finished_build`, then its events. The build's plan (ids as the events'
//! `origin.id`) and preparation (a paused job's build held). A version by
//! its id, and the builds it went into (`input_to`) and came out of
//! (`output_of`).

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::pipelines::ok;
use common::*;
use serde_json::{json, Value};

const PIPELINE: &str = "\
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v1}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    attempts: 2
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo hello from t']}
- name: slow
  plan:
  - task: s
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo slow; sleep 300']}
- name: held
  plan:
  - get: r
";

const BASE: &str = "/api/v1/teams/main/pipelines/p";

/// A request as go-concourse sends it: status, `Link` headers, body.
fn send(url: &str, method: &str, path: &str) -> (u16, Vec<String>, Value) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let answer = http
        .request(method.parse().unwrap(), format!("{url}{path}"))
        .send()
        .unwrap();
    let status = answer.status().as_u16();
    let links = answer
        .headers()
        .get_all("link")
        .iter()
        .flat_map(|v| v.to_str().unwrap().split(','))
        .map(|l| l.trim().to_string())
        .collect();
    let text = answer.text().unwrap();
    (
        status,
        links,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// A `GET` answered 200: its links and body.
fn get(url: &str, path: &str) -> (Vec<String>, Value) {
    let (status, links, body) = send(url, "GET", path);
    assert_eq!(status, 200, "GET {path}: {body}");
    (links, body)
}

/// Decodes `b` as `atc.Build`: its id, name and status.
fn atc_build(b: &Value) -> (i64, String, String) {
    let id = b["id"].as_i64().unwrap_or_else(|| panic!("id: {b}"));
    for key in ["team_name", "name", "status", "api_url"] {
        assert!(b[key].is_string(), "{key}: {b}");
    }
    for key in ["job_name", "pipeline_name", "comment", "resource_name"] {
        assert!(b.get(key).is_none_or(Value::is_string), "{key}: {b}");
    }
    for key in [
        "start_time",
        "end_time",
        "reap_time",
        "rerun_number",
        "pipeline_id",
    ] {
        assert!(b.get(key).is_none_or(Value::is_i64), "{key}: {b}");
    }
    assert!(b.get("created_by").is_none_or(Value::is_string), "{b}");
    if let Some(of) = b.get("rerun_of") {
        assert!(of["id"].is_i64() && of["name"].is_string(), "{b}");
    }
    let name = b["name"].as_str().unwrap().to_string();
    (id, name, b["status"].as_str().unwrap().to_string())
}

/// Decodes a JSON list of `atc.Build`s: their ids, in order.
fn build_ids(list: &Value) -> Vec<i64> {
    let list = list.as_array().unwrap_or_else(|| panic!("{list}"));
    list.iter().map(|b| atc_build(b).0).collect()
}

/// A `Link` of `rel` as go-concourse reads it: the target's query.
fn link_query(links: &[String], rel: &str) -> Option<String> {
    links.iter().find_map(|l| {
        let (target, params) = l.split_once(';')?;
        (params.trim() == format!("rel=\"{rel}\"")).then(|| {
            let target = target.trim().trim_start_matches('<').trim_end_matches('>');
            target.split_once('?').unwrap().1.to_string()
        })
    })
}

/// Every page of `path`'s builds from `first`, following `next` links;
/// asserts each later page links back (`previous`) to the one before.
fn pages(url: &str, path: &str, first: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut query = first.to_string();
    let mut pages = 0;
    loop {
        let (links, body) = get(url, &format!("{path}?{query}"));
        let page = build_ids(&body);
        pages += 1;
        if pages > 1 {
            let back = link_query(&links, "previous").expect("a previous link");
            assert!(back.starts_with("from="), "{back}");
            let (_, older) = get(url, &format!("{path}?{back}"));
            assert_eq!(build_ids(&older).last(), ids.last(), "previous of {query}");
        }
        ids.extend(page);
        match link_query(&links, "next") {
            Some(next) => {
                assert!(
                    next.starts_with("to=") && next.contains("&limit=2"),
                    "{next}"
                );
                query = next;
            }
            None => return ids,
        }
    }
}

/// The server-sent events of build `id` to `end`: (event type, data).
fn events(url: &str, id: i64) -> Vec<(String, Value)> {
    let answer = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/builds/{id}/events"))
        .header("Last-Event-ID", "")
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let text = answer.text().unwrap();
    let mut out = Vec::new();
    for chunk in text.split("\n\n").filter(|c| !c.is_empty()) {
        let field = |name: &str| {
            chunk
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::to_string)
        };
        if field("event: ").as_deref() == Some("end") {
            return out;
        }
        let data: Value = serde_json::from_str(&field("data: ").unwrap()).unwrap();
        out.push((
            data["event"].as_str().unwrap().to_string(),
            data["data"].clone(),
        ));
    }
    panic!("no end event: {text}");
}

fn wait_status(url: &str, id: i64, status: &str) {
    wait_for(
        &format!("build {id} {status}"),
        Duration::from_secs(120),
        || (get(url, &format!("/api/v1/builds/{id}")).1["status"] == status).then_some(()),
    );
}

/// `fly trigger-job -j p/JOB`: 200 with the build.
fn trigger(url: &str, job: &str) -> i64 {
    let (status, _, build) = send(url, "POST", &format!("{BASE}/jobs/{job}/builds"));
    assert_eq!(status, 200, "{build}");
    atc_build(&build).0
}

/// Every `id` of a public plan, each node's.
fn plan_ids(plan: &Value, ids: &mut BTreeSet<String>) {
    match plan {
        Value::Object(m) => {
            if let Some(id) = m.get("id").and_then(Value::as_str) {
                ids.insert(id.to_string());
            }
            m.values().for_each(|v| plan_ids(v, ids));
        }
        Value::Array(a) => a.iter().for_each(|v| plan_ids(v, ids)),
        _ => {}
    }
}

/// Decodes `p` as `atc.BuildPreparation`.
fn preparation(url: &str, id: i64) -> Value {
    let (_, p) = get(url, &format!("/api/v1/builds/{id}/preparation"));
    assert_eq!(p["build_id"], id, "{p}");
    let status = |v: &Value| ["blocking", "not_blocking", "unknown"].contains(&v.as_str().unwrap());
    for key in [
        "paused_pipeline",
        "paused_job",
        "max_running_builds",
        "inputs_satisfied",
    ] {
        assert!(status(&p[key]), "{key}: {p}");
    }
    assert!(p["inputs"].as_object().unwrap().values().all(status), "{p}");
    let reasons = p["missing_input_reasons"].as_object().unwrap();
    assert!(reasons.values().all(Value::is_string), "{p}");
    p
}

#[test]
fn fly_build_verbs_page_plan_rerun_abort_and_watch_as_concourse() {
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
    assert_eq!(send(url, "PUT", &format!("{BASE}/unpause")).0, 200);

    // trigger-job -w: the build, then its events to `end`.
    let first = trigger(url, "j");
    let told = events(url, first);
    let status = told.iter().rev().find(|(e, _)| e == "status").unwrap();
    assert_eq!(status.1["status"], "succeeded", "{told:?}");
    let origins: BTreeSet<String> = told
        .iter()
        .filter_map(|(_, d)| d["origin"]["id"].as_str().map(str::to_string))
        .collect();
    assert!(!origins.is_empty(), "{told:?}");

    // The plan: Concourse's public plan, its ids the events' origins.
    let (_, plan) = get(url, &format!("/api/v1/builds/{first}/plan"));
    assert_eq!(plan["schema"], "exec.v2", "{plan}");
    let mut ids = BTreeSet::new();
    plan_ids(&plan["plan"], &mut ids);
    assert!(origins.is_subset(&ids), "events {origins:?}, plan {plan}");
    let text = plan.to_string();
    assert!(text.contains(r#""get":{"name":"r","type":""}"#), "{plan}");
    assert!(
        text.contains(r#""retry":["#) && text.contains(r#""name":"t""#),
        "{plan}"
    );
    let prep = preparation(url, first);
    assert_eq!(prep["inputs"], json!({"r": "not_blocking"}), "{prep}");

    // More builds of j, to page.
    let more: Vec<i64> = (0..2).map(|_| trigger(url, "j")).collect();
    for id in &more {
        wait_status(url, *id, "succeeded");
    }
    // A paused job's build is held: its preparation says so.
    assert_eq!(send(url, "PUT", &format!("{BASE}/jobs/held/pause")).0, 200);
    let held = trigger(url, "held");
    let prep = preparation(url, held);
    assert_eq!(prep["paused_job"], "blocking", "{prep}");
    assert_eq!(prep["paused_pipeline"], "not_blocking", "{prep}");
    assert_eq!(
        send(url, "GET", &format!("/api/v1/builds/{held}/plan")).0,
        404
    );

    // builds -j p/j: newest first; pages of 2 through `to` links.
    let (_, listed) = get(url, &format!("{BASE}/jobs/j/builds?limit=50"));
    let js = build_ids(&listed);
    assert_eq!(js, [more[1], more[0], first]);
    let newest = js[0];
    assert_eq!(
        pages(
            url,
            &format!("{BASE}/jobs/j/builds"),
            &format!("to={newest}&limit=2")
        ),
        js
    );
    // builds -p p, builds, builds --team main: every build (checks' too),
    // paged, as Gantry's own listing has them.
    let top = format!("to={held}&limit=2");
    for path in [
        format!("{BASE}/builds"),
        "/api/v1/builds".into(),
        "/api/v1/teams/main/builds".into(),
    ] {
        let (_, listed) = get(url, &format!("{path}?limit=500"));
        let listed = build_ids(&listed);
        assert!(
            listed.contains(&held) && listed.contains(&first),
            "{listed:?}"
        );
        assert_eq!(pages(url, &path, &top), listed, "{path}");
    }
    // `from` alone: the oldest page, newest first.
    let (_, oldest) = get(url, &format!("{BASE}/jobs/j/builds?from={first}&limit=2"));
    assert_eq!(build_ids(&oldest), [more[0], first]);

    // builds --since/--until: times, no links; a held build never started.
    let started: Vec<i64> = [first, more[0], more[1]]
        .iter()
        .map(|id| {
            get(url, &format!("/api/v1/builds/{id}")).1["start_time"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let (since, until) = (started.iter().min().unwrap(), started.iter().max().unwrap());
    let query = format!("limit=50&from={since}&to={until}&timestamps=true");
    let (links, timed) = get(url, &format!("{BASE}/jobs/j/builds?{query}"));
    assert_eq!(build_ids(&timed), [more[1], more[0], first]);
    assert!(links.is_empty(), "{links:?}");
    let later = format!(
        "{BASE}/jobs/j/builds?limit=50&from={}&timestamps=true",
        until + 3600
    );
    let (_, none) = get(url, &later);
    assert_eq!(build_ids(&none), Vec::<i64>::new());

    // rerun-build -j p/j -b 1: 200 with the rerun; the old path is gone.
    let (status, _, rerun) = send(url, "POST", &format!("{BASE}/jobs/j/builds/1"));
    assert_eq!(status, 200, "{rerun}");
    let (rerun_id, name, _) = atc_build(&rerun);
    assert_eq!(name, "1.1");
    assert_eq!(
        rerun["rerun_of"],
        json!({"id": first, "name": "1"}),
        "{rerun}"
    );
    assert_eq!(rerun["rerun_number"], 1, "{rerun}");
    wait_status(url, rerun_id, "succeeded");
    let (gone, _, _) = send(url, "POST", &format!("{BASE}/jobs/j/builds/1/rerun"));
    assert!(
        gone == 404 || gone == 405,
        "the old rerun path answered {gone}"
    );

    // The version j's builds got: by its id, and the builds it went into.
    let (_, listed) = get(url, &format!("{BASE}/resources/r/versions"));
    let v1 = &listed[0];
    let id = v1["id"].as_i64().unwrap_or_else(|| panic!("{listed}"));
    let (_, one) = get(url, &format!("{BASE}/resources/r/versions/{id}"));
    assert!(
        one["version"].is_object() && one["enabled"].is_boolean(),
        "{one}"
    );
    assert_eq!(one["id"], id, "{one}");
    let (_, into) = get(url, &format!("{BASE}/resources/r/versions/{id}/input_to"));
    let into = build_ids(&into);
    assert!(
        into.starts_with(&[rerun_id, more[1], more[0], first]),
        "{into:?}"
    );
    let (_, out) = get(url, &format!("{BASE}/resources/r/versions/{id}/output_of"));
    assert_eq!(build_ids(&out), Vec::<i64>::new());
    let missing = format!("{BASE}/resources/r/versions/{}", id + 1000);
    assert_eq!(send(url, "GET", &missing).0, 404);

    // abort-build, then watch -j p/slow: the job's build, its events.
    let slow = trigger(url, "slow");
    wait_status(url, slow, "started");
    let (status, _, _) = send(url, "PUT", &format!("/api/v1/builds/{slow}/abort"));
    assert!((200..300).contains(&status), "abort answered {status}");
    wait_status(url, slow, "aborted");
    let (_, job) = get(url, &format!("{BASE}/jobs/slow"));
    let watched = match job.get("next_build").filter(|b| !b.is_null()) {
        Some(b) => atc_build(b).0,
        None => atc_build(&job["finished_build"]).0,
    };
    assert_eq!(watched, slow, "{job}");
    let told = events(url, watched);
    let status = told.iter().rev().find(|(e, _)| e == "status").unwrap();
    assert_eq!(status.1["status"], "aborted", "{told:?}");
}
