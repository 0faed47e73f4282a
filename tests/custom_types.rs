//! End to end: a pipeline's custom resource type whose image is an OCI
//! layout built here (busybox with `/opt/resource` scripts), delivered by
//! the base `git` type from a repository served over loopback; a resource
//! of that type is fetched with the image's `in`, and a task runs in the
//! image `image_resource` (`mock` with `mirror_self`) gives it. The image
//! is fetched once: the second build's fetches come from the cache.

use crate::common;

use std::time::Duration;

use common::git::{bare_repo_of, git, GitDaemon};
use common::oci::oci_image_with;
use common::*;

const CHECK: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho '[{\"v\":\"1\"}]'\n";
const IN: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho hello-from-custom > \"$1/greeting\"\necho '{\"version\":{\"v\":\"1\"},\"metadata\":[{\"name\":\"by\",\"value\":\"custom\"}]}'\n";
/// `out` answers who it was told made the build (`BUILD_CREATED_BY`).
const OUT: &[u8] = br#"#!/bin/sh
cat >/dev/null
echo "{\"version\":{\"v\":\"1\"},\"metadata\":[{\"name\":\"created_by\",\"value\":\"${BUILD_CREATED_BY:-untold}\"}]}"
"#;

const PIPELINE: &str = r#"
resource_types:
- name: greeter
  type: git
  source: {uri: ((uri)), branch: main}
resources:
- name: hello
  type: greeter
  source: {anything: here}
jobs:
- name: use
  plan:
  - get: hello
  - task: show
    config:
      platform: linux
      image_resource:
        type: mock
        source: {mirror_self: true}
      inputs: [{name: hello}]
      run: {path: sh, args: [-c, 'cat hello/greeting; echo "mirrored=$MIRRORED_VERSION"']}
"#;

/// The bare repository `greeter.git` under `dir`, whose `image.tar` is
/// the custom type's image (an OCI layout with `check` and `in`).
fn greeter_repo(dir: &std::path::Path) -> std::path::PathBuf {
    let image = dir.join("image.tar");
    oci_image_with(
        &image,
        &[
            ("opt/", b"", false, 0o755),
            ("opt/resource/", b"", false, 0o755),
            ("opt/resource/check", CHECK, false, 0o755),
            ("opt/resource/in", IN, false, 0o755),
            ("opt/resource/out", OUT, false, 0o755),
        ],
    );
    let tar = std::fs::read(&image).unwrap();
    bare_repo_of(dir, "greeter", &[("image.tar", &tar)])
}

fn custom_type_and_image_resource(db: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(db);
    greeter_repo(dir.path());
    let daemon = GitDaemon::serve(dir.path());
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    write(&dir.path().join("pipeline.yml"), PIPELINE);
    let uri = format!("uri={}", daemon.uri("greeter.git"));
    let run = || {
        gantry()
            .current_dir(dir.path())
            .args([
                "--url",
                &server.url,
                "run",
                "-p",
                "pipeline.yml",
                "-j",
                "use",
            ])
            .args(["-v", &uri])
            .output()
            .unwrap()
    };
    let out = run();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("hello-from-custom\nmirrored="),
        "{stdout}"
    );
    // The custom type's image was fetched by git's `in`, then its own `in`
    // fetched the resource.
    assert!(
        stderr.contains("step hello: image greeter {\"ref\":"),
        "{stderr}"
    );
    assert!(
        stderr.contains("step hello: get hello {\"v\":\"1\"}"),
        "{stderr}"
    );
    assert!(
        stderr.contains("step show: image mock {\"version\":"),
        "{stderr}"
    );

    // Again: every fetch is answered by a resource cache.
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for (step, what) in [
        ("hello", "image greeter"),
        ("hello", "get hello"),
        ("show", "image mock"),
    ] {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("step {step}: {what} ")))
            .unwrap_or_else(|| panic!("no {what} line in:\n{stderr}"));
        assert!(
            line.ends_with("from the resource cache (no in ran)"),
            "{line}"
        );
    }
    // What the builds made is gone; the imported image stays for the next.
    wait_only_unowned_volumes(&server.url, 1, Duration::from_secs(30));
}

#[test]
fn a_custom_type_from_an_oci_image_and_image_resource_sqlite() {
    if !runc_runs_here() {
        return;
    }
    custom_type_and_image_resource(DbKind::Sqlite);
}

#[test]
fn a_custom_type_from_an_oci_image_and_image_resource_postgres() {
    if !runc_runs_here() {
        return;
    }
    custom_type_and_image_resource(DbKind::Postgres);
}

/// A stored pipeline's custom type with its own `check_every`.
const STORED: &str = r#"
resource_types:
- name: greeter
  type: git
  check_every: 1s
  source: {uri: ((uri)), branch: main}
resources:
- name: hello
  type: greeter
  check_every: 1s
  source: {anything: here}
- name: told
  type: greeter
  check_every: never
  expose_build_created_by: true
  source: {anything: here}
- name: untold
  type: greeter
  check_every: never
  source: {anything: here}
jobs:
- name: push
  plan:
  - put: told
    no_get: true
  - put: untold
    no_get: true
- name: use
  plan:
  - get: hello
    trigger: true
  - task: show
    config:
      platform: linux
      image_resource:
        type: mock
        source: {mirror_self: true}
      inputs: [{name: hello}]
      run: {path: cat, args: [hello/greeting]}
"#;

/// The `resources` entry of the resource type `greeter` of pipeline `p`.
fn greeter_entry(url: &str) -> serde_json::Value {
    let out = client(url, &["resources", "-p", "p", "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let all: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    all.into_iter()
        .find(|r| r["name"] == "greeter" && r["resource_type"] == true)
        .unwrap_or_else(|| panic!("no resource type greeter listed"))
}

/// The image versions of `greeter` build `id` was told (its `image`
/// events), and whether it checked the type itself.
fn greeter_in_build(url: &str, id: i64) -> (Vec<serde_json::Value>, bool) {
    let events = common::nodes::events(url, id);
    let of = |action: &str| -> Vec<serde_json::Value> {
        events
            .iter()
            .filter(|e| {
                e["type"] == "resource" && e["resource"] == "greeter" && e["action"] == action
            })
            .map(|e| e["version"].clone())
            .collect()
    };
    (of("image"), !of("check").is_empty())
}

#[test]
fn a_stored_pipelines_resource_type_is_checked_on_its_own_and_its_builds_use_what_it_found() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let bare = greeter_repo(dir.path());
    let seed = dir.path().join("greeter-seed");
    let first = git(&seed, &["rev-parse", "HEAD"]).trim().to_string();
    let daemon = GitDaemon::serve(dir.path());
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    let url = &server.url;
    write(&dir.path().join("p.yml"), STORED);
    let uri = format!("uri={}", daemon.uri("greeter.git"));
    let file = dir.path().join("p.yml");
    let set = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &uri,
        ],
    );
    assert!(set.status.success(), "{}", text(&set).1);
    assert!(client(url, &["unpause-pipeline", "-p", "p"])
        .status
        .success());

    // The type's image is checked on its own, again and again.
    let checked = wait_for("the type's first check", Duration::from_secs(60), || {
        let g = greeter_entry(url);
        (g["last_check"]["status"] == "succeeded").then(|| g["last_check"]["id"].as_i64().unwrap())
    });
    assert_eq!(greeter_entry(url)["type_"], "git");
    wait_for("the type's next check", Duration::from_secs(30), || {
        let g = greeter_entry(url);
        (g["last_check"]["id"]
            .as_i64()
            .is_some_and(|id| id > checked))
        .then_some(())
    });

    // The job's build fetched the version those checks found, checking
    // nothing of the type itself.
    let build = wait_for("a build of use", Duration::from_secs(90), || {
        common::pipelines::job_builds(url, "p", "use")
            .into_iter()
            .find(|b| b["status"] == "succeeded")
    });
    let (images, checked_itself) = greeter_in_build(url, build["id"].as_i64().unwrap());
    assert_eq!(images, [serde_json::json!({"ref": first})]);
    assert!(!checked_itself);

    // A new commit is a new version of the type: found by its checks, and
    // the next build uses it.
    write(&seed.join("note"), "two");
    git(&seed, &["add", "note"]);
    git(&seed, &["commit", "-q", "-m", "two"]);
    git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let second = git(&seed, &["rev-parse", "HEAD"]).trim().to_string();
    let found = || {
        let out = client(url, &["check-resource", "-r", "p/hello"]);
        assert!(out.status.success(), "{}", text(&out).1);
        // "checking p/hello (build N)"
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let id = stderr
            .split("(build ")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|n| n.parse::<i64>().ok());
        id.map(|id| greeter_in_build(url, id))
    };
    wait_for(
        "a check of hello in the new image",
        Duration::from_secs(60),
        || found().filter(|(images, _)| images.contains(&serde_json::json!({"ref": second}))),
    );
    let out = client(url, &["trigger-job", "-j", "p/use", "--watch"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let id = common::pipelines::job_builds(url, "p", "use")
        .last()
        .and_then(|b| b["id"].as_i64())
        .unwrap();
    let (images, checked_itself) = greeter_in_build(url, id);
    assert_eq!(images, [serde_json::json!({"ref": second})]);
    assert!(!checked_itself);

    // `expose_build_created_by`: the put of the resource that sets it is
    // told who triggered the build; the other is not.
    let out = client(url, &["trigger-job", "-j", "p/push", "--watch"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let build = common::pipelines::job_builds(url, "p", "push")
        .pop()
        .unwrap();
    let who = build["created_by"].as_str().expect("a build made by hand");
    let events = common::nodes::events(url, build["id"].as_i64().unwrap());
    let told = |resource: &str| {
        events
            .iter()
            .find(|e| e["type"] == "resource" && e["action"] == "put" && e["resource"] == resource)
            .map(|e| e["metadata"][0]["value"].clone())
            .unwrap_or_else(|| panic!("no put of {resource}: {events:?}"))
    };
    // A person is named as Concourse names them (`alice`); this open node's
    // caller as the audit does.
    assert_eq!(told("told"), who.strip_prefix("user:").unwrap_or(who));
    assert_eq!(told("untold"), "untold");
}

/// Concourse's testflight `resource_type_check_test.go` ("Resource-types
/// checks", on its `fixtures/resource-types.yml`), plus a type built on
/// another (what `--shallow` spares) and a git-delivered type whose
/// repository gains a commit. The pipeline stays paused: nothing but
/// these commands checks anything.
const TYPES: &str = r#"
resource_types:
- name: custom-resource-type
  type: mock
  source: {mirror_self: true, initial_version: ((hash))}
- name: failing-custom-resource-type
  type: mock
  source: {check_failure: im totally failing to check}
- name: layered
  type: custom-resource-type
  source: {mirror_self: true, initial_version: layered-v1}
- name: greeter
  type: git
  source: {uri: ((uri)), branch: main}
resources:
- name: my-resource-image
  type: custom-resource-type
  source:
    mirror_self: true
    create_files: {unique: ((hash))}
jobs:
- name: resource-imager
  plan:
  - get: my-resource-image
"#;

/// The build a `check-resource`/`check-resource-type` announced
/// ("checking P/R (build N)"), and its exit code.
fn checked(url: &str, args: &[&str]) -> (i64, Option<i32>, String) {
    let out = client(url, args);
    let (stdout, stderr) = text(&out);
    let id = stderr
        .split("(build ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no build announced:\n{stdout}\n{stderr}"));
    (id, out.status.code(), format!("{stdout}\n{stderr}"))
}

/// The resources (or types) build `id` checked, in order.
fn checks_in(url: &str, id: i64) -> Vec<String> {
    common::nodes::events(url, id)
        .iter()
        .filter(|e| e["type"] == "resource" && e["action"] == "check")
        .map(|e| e["resource"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The newest version `verb -r what` lists (`resource-versions` or
/// `resource-type-versions`).
fn newest(url: &str, verb: &str, what: &str) -> serde_json::Value {
    let out = client(url, &[verb, "-r", what, "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let all: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    all.first()
        .map(|v| v["version"].clone())
        .unwrap_or(serde_json::Value::Null)
}

fn check_resource_type(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let bare = greeter_repo(dir.path());
    let seed = dir.path().join("greeter-seed");
    let first = git(&seed, &["rev-parse", "HEAD"]).trim().to_string();
    let daemon = GitDaemon::serve(dir.path());
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    let url = &server.url;
    let file = dir.path().join("p.yml");
    write(&file, TYPES);
    let uri = format!("uri={}", daemon.uri("greeter.git"));
    let set = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &uri,
            "-v",
            "hash=h1",
        ],
    );
    assert!(set.status.success(), "{}", text(&set).1);

    // "can check the resource-type".
    let (_, code, said) = checked(
        url,
        &["check-resource-type", "-r", "p/custom-resource-type"],
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        newest(url, "resource-type-versions", "p/custom-resource-type"),
        serde_json::json!({"version": "h1"})
    );

    // "when there is a new version": checked from it, it is the type's
    // newest, and what uses the type runs in that image (mock's check
    // there answers the image's MIRRORED_VERSION).
    let (_, code, said) = checked(
        url,
        &[
            "check-resource-type",
            "-r",
            "p/custom-resource-type",
            "-f",
            "version:v-new",
        ],
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        newest(url, "resource-type-versions", "p/custom-resource-type"),
        serde_json::json!({"version": "v-new"})
    );
    let (_, code, said) = checked(url, &["check-resource", "-r", "p/my-resource-image"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        newest(url, "resource-versions", "p/my-resource-image"),
        serde_json::json!({"version": "v-new"})
    );

    // "when the resource-type check fails": exit 1, saying why.
    let (_, code, said) = checked(
        url,
        &[
            "check-resource-type",
            "-r",
            "p/failing-custom-resource-type",
        ],
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("im totally failing to check"), "{said}");

    // A type built on another checks that one first, unless --shallow.
    let (id, code, said) = checked(url, &["check-resource-type", "-r", "p/layered"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(checks_in(url, id), ["custom-resource-type", "layered"]);
    let (id, code, said) = checked(
        url,
        &["check-resource-type", "-r", "p/layered", "--shallow"],
    );
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(checks_in(url, id), ["layered"]);
    assert_eq!(
        newest(url, "resource-type-versions", "p/layered"),
        serde_json::json!({"version": "layered-v1"})
    );

    // A type whose source gains a version: the next check finds it.
    let (_, code, said) = checked(url, &["check-resource-type", "-r", "p/greeter"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        newest(url, "resource-type-versions", "p/greeter"),
        serde_json::json!({"ref": first})
    );
    write(&seed.join("note"), "two");
    git(&seed, &["add", "note"]);
    git(&seed, &["commit", "-q", "-m", "two"]);
    git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let second = git(&seed, &["rev-parse", "HEAD"]).trim().to_string();
    let (_, code, said) = checked(url, &["check-resource-type", "-r", "p/greeter"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        newest(url, "resource-type-versions", "p/greeter"),
        serde_json::json!({"ref": second})
    );

    // An unknown type: one line naming it, non-zero; the API answers 404
    // JSON, and a bad body 400 JSON.
    let out = client(url, &["check-resource-type", "-r", "p/nope"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(one_error_line(&out).contains("nope"), "{}", text(&out).1);
    let http = reqwest::blocking::Client::new();
    let post = |t: &str, body: &str| {
        let resp = http
            .post(format!(
                "{url}/api/v1/teams/main/pipelines/p/resource-types/{t}/check"
            ))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        let json: serde_json::Value = resp.json().unwrap_or(serde_json::Value::Null);
        (status, json)
    };
    let (status, json) = post("nope", "{}");
    assert_eq!(status, 404, "{json}");
    assert!(
        json["error"].as_str().unwrap_or_default().contains("nope"),
        "{json}"
    );
    for bad in [
        r#"{"shallow": "yes"}"#,
        r#"{"from": "v1"}"#,
        r#"{"form": {"version": "v1"}}"#,
    ] {
        let (status, json) = post("custom-resource-type", bad);
        assert_eq!(status, 400, "{bad}: {json}");
        assert!(json["error"].is_string(), "{bad}: {json}");
    }
}

#[test]
fn check_resource_type_finds_new_versions_of_a_custom_type_sqlite() {
    if !runc_runs_here() {
        return;
    }
    check_resource_type(DbKind::Sqlite);
}

#[test]
fn check_resource_type_finds_new_versions_of_a_custom_type_postgres() {
    if !runc_runs_here() {
        return;
    }
    check_resource_type(DbKind::Postgres);
}
