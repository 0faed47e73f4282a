//! End to end: a pipeline's custom resource type whose image is an OCI
//! layout built here (busybox with `/opt/resource` scripts), delivered by
//! the base `git` type from a repository served over loopback; a resource
//! of that type is fetched with the image's `in`, and a task runs in the
//! image `image_resource` (`mock` with `mirror_self`) gives it. The image
//! is fetched once: the second build's fetches come from the cache.

mod common;

use std::time::Duration;

use common::git::{bare_repo_of, GitDaemon};
use common::oci::oci_image_with;
use common::*;

const CHECK: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho '[{\"v\":\"1\"}]'\n";
const IN: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho hello-from-custom > \"$1/greeting\"\necho '{\"version\":{\"v\":\"1\"},\"metadata\":[{\"name\":\"by\",\"value\":\"custom\"}]}'\n";

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

fn custom_type_and_image_resource(db: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(db);
    let image = dir.path().join("image.tar");
    oci_image_with(
        &image,
        &[
            ("opt/", b"", false, 0o755),
            ("opt/resource/", b"", false, 0o755),
            ("opt/resource/check", CHECK, false, 0o755),
            ("opt/resource/in", IN, false, 0o755),
        ],
    );
    let tar = std::fs::read(&image).unwrap();
    bare_repo_of(dir.path(), "greeter", &[("image.tar", &tar)]);
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
