//! End to end: a task runs from an OCI image layout tar built in the test
//! from a busybox-static root filesystem (two layers, the second with a
//! whiteout); a second container from the same image reuses the unpacked
//! image instead of unpacking it again. A task's `image_resource` shares
//! the resource cache of a `get` of the same type, source, version and
//! params (Concourse's testflight `image_resource_caching_test.go`).

use crate::common;

use common::oci::{oci_image, tar_with_modes};
use common::*;

#[test]
fn a_task_runs_from_an_oci_image_unpacked_once_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    let image = dir.path().join("busybox-oci.tar");
    oci_image(&image);
    write(
        &dir.path().join("task.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, 'test -e /etc/os-release && echo host-view; test -e /bin/ls && echo ls-present; cat /hello.txt; id -u']\n",
    );
    let task = dir.path().join("task.yml");
    for round in 0..2 {
        let out = client(
            &server.url,
            &[
                "execute",
                "-c",
                task.to_str().unwrap(),
                "--image",
                image.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "round {round}: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.log_text()
        );
        // The image's own root: no host files, the whiteout removed ls, layer 2 applied.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "from the second layer\n0\n"
        );
    }
    let unpacks = server
        .log_text()
        .matches("unpacked image into volume")
        .count();
    assert_eq!(unpacks, 1, "the image was unpacked {unpacks} times");
    // A bad image is refused with a clear error.
    let bad = dir.path().join("bad.tar");
    std::fs::write(
        &bad,
        tar_with_modes(&[
            (
                "oci-layout",
                b"{\"imageLayoutVersion\":\"1.0.0\"}",
                false,
                0o644,
            ),
            (
                "index.json",
                b"{\"schemaVersion\":2,\"manifests\":[]}",
                false,
                0o644,
            ),
        ]),
    )
    .unwrap();
    let out = client(
        &server.url,
        &[
            "execute",
            "-c",
            task.to_str().unwrap(),
            "--image",
            bad.to_str().unwrap(),
        ],
    );
    let last = failure_line(&out);
    assert!(last.contains("image"), "{last}");
}

/// Concourse's testflight `image_resource_caching_test.go` ("gets the image
/// resource from the cache based on given params"): a `get` and a task's
/// `image_resource` with the same type, source, version and params share
/// one resource cache.
const WITH_PARAMS: &str = r#"
resources:
- name: some-resource
  type: mock
  source: &src
    initial_version: ((initial_version))
    mirror_self: true
jobs:
- name: without-params
  plan:
  - get: some-resource
- name: with-params
  plan:
  - get: some-resource
    params:
      create_files_via_params: {foo: bar}
- name: image-resource-with-params
  plan:
  - task: image-resource-task
    config:
      platform: linux
      image_resource:
        type: mock
        source: *src
        params:
          create_files_via_params: {foo: bar}
      run: {path: sh, args: [-c, 'echo "in=$MIRRORED_VERSION"']}
- name: image-resource-without-params
  plan:
  - task: image-resource-task
    config:
      platform: linux
      image_resource:
        type: mock
        source: *src
      run: {path: sh, args: [-c, 'echo "in=$MIRRORED_VERSION"']}
"#;

fn image_resource_shares_the_get_cache(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let server = quickstart_runc(dir.path(), &db);
    write(&dir.path().join("pipeline.yml"), WITH_PARAMS);
    let version = format!("v-{}", uuid::Uuid::new_v4());
    let var = format!("initial_version={version}");
    let fetched = format!("{{\"version\":\"{version}\"}}");
    let mut ins = 0;
    let mut run = |job: &str, step: &str, what: &str, cached: bool| {
        let out = gantry_run(
            &server.url,
            dir.path(),
            &["-p", "pipeline.yml", "-j", job, "-v", &var],
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{job}: {stdout}\n{stderr}");
        // mock's `in` says what it fetches: the count of `in` runs.
        ins += stderr.matches("fetching version: ").count();
        let start = format!("step {step}: {what} {fetched}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&start))
            .unwrap_or_else(|| panic!("{job}: no {start:?} in:\n{stderr}"));
        assert_eq!(
            line.ends_with("from the resource cache (no in ran)"),
            cached,
            "{job}: {line}"
        );
        stdout
    };
    let task = "image-resource-task";
    let image = "image mock";
    let get = "get some-resource";
    run("with-params", "some-resource", get, false);
    // The image is the get's cache; the task ran in it (its env).
    let stdout = run("image-resource-with-params", task, image, true);
    assert_eq!(stdout, format!("in={version}\n"));
    let stdout = run("image-resource-without-params", task, image, false);
    assert_eq!(stdout, format!("in={version}\n"));
    // The image fetch's files are the cache a get uses, and the image's.
    run("without-params", "some-resource", get, true);
    let stdout = run("image-resource-without-params", task, image, true);
    assert_eq!(stdout, format!("in={version}\n"));
    assert_eq!(ins, 2, "in ran {ins} times for two (version, params)");
    assert_eq!(
        metric(&server.url, "gantry_resource_cache_misses_total"),
        2.0
    );
    assert_eq!(metric(&server.url, "gantry_resource_cache_hits_total"), 3.0);
}

#[test]
fn image_resource_shares_the_get_cache_sqlite() {
    if !runc_runs_here() {
        return;
    }
    image_resource_shares_the_get_cache(DbKind::Sqlite);
}

#[test]
fn image_resource_shares_the_get_cache_postgres() {
    if !runc_runs_here() {
        return;
    }
    image_resource_shares_the_get_cache(DbKind::Postgres);
}
