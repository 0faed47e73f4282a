//! End to end against a real registry (Debian's `docker-registry` over TLS
//! with a CA made here and htpasswd auth; images built here from
//! busybox-static and pushed with skopeo): a job's task runs in an
//! `image_resource` of type `registry-image` with the image's env and
//! user; a second build fetches no blob (the registry's access log shows
//! none); a `get` of a registry-image resource writes `rootfs/` and the
//! version's files; a resource type declared `type: registry-image` is
//! pulled and its own `check` and `in` run; a wrong password, an unknown
//! tag and an untrusted certificate each fail with one line naming the
//! cause.

use crate::common;

use common::oci::{busybox_layer, tar_with_modes};
use common::registry::{oci_layout_dir, Registry, PASSWORD, USER};
use common::*;

const CHECK: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho '[{\"v\":\"1\"}]'\n";
const IN: &[u8] = b"#!/bin/sh\ncat >/dev/null\necho hello-from-custom > \"$1/greeting\"\necho '{\"version\":{\"v\":\"1\"},\"metadata\":[]}'\n";

fn pipeline(reg: &Registry) -> String {
    let app = reg.source("app", "1.0");
    let greeter = reg.source("greeter", "latest");
    let bad_password = app.replace(PASSWORD, "wrong-password");
    let unknown_tag = reg.source("app", "9.9");
    let semver = format!(
        "{{repository: \"{}/app\", semver_constraint: \"~1\", username: {USER}, password: {PASSWORD}, ca_certs: [{}]}}",
        reg.host,
        serde_json::to_string(&reg.ca_pem).unwrap()
    );
    // docker-image's ca_certs name their registry.
    let docker = format!(
        "{{repository: \"{}/app\", tag: \"1.0\", username: {USER}, password: {PASSWORD}, ca_certs: [{{domain: \"{}\", cert: {}}}]}}",
        reg.host,
        reg.host,
        serde_json::to_string(&reg.ca_pem).unwrap()
    );
    let untrusted = format!(
        "{{repository: \"{}/app\", tag: \"1.0\", username: {USER}, password: {PASSWORD}}}",
        reg.host
    );
    let task = |source: &str| {
        format!(
            "    config:\n      platform: linux\n      image_resource:\n        type: registry-image\n        source: {source}\n      run: {{path: sh, args: [-c, 'echo \"greeting=$GREETING\"; echo \"uid=$(id -u)\"; cat /hello.txt']}}\n"
        )
    };
    format!(
        r#"
resource_types:
- name: greeter
  type: registry-image
  source: {greeter}
resources:
- name: hello
  type: greeter
  source: {{anything: here}}
- name: app-image
  type: registry-image
  source: {app}
- name: app-oci
  type: registry-image
  source: {app}
- name: app-semver
  type: registry-image
  source: {semver}
jobs:
- name: run-in-image
  plan:
  - task: show
{show}
- name: custom-type
  plan:
  - get: hello
  - get: app-image
  - task: look
    config:
      platform: linux
      image_resource:
        type: registry-image
        source: {app}
      inputs: [{{name: hello}}, {{name: app-image}}]
      run: {{path: sh, args: [-c, 'cat hello/greeting; cat app-image/tag; echo; cat app-image/digest; echo; cat app-image/rootfs/hello.txt; cat app-image/metadata.json']}}
- name: other-forms
  plan:
  - get: app-oci
    params: {{format: oci}}
  - get: app-version-only
    resource: app-image
    params: {{skip_download: true}}
  - get: app-semver
  - task: look
    config:
      platform: linux
      image_resource:
        type: docker-image
        source: {docker}
      inputs: [{{name: app-oci}}, {{name: app-version-only}}, {{name: app-semver}}]
      run: {{path: sh, args: [-c, 'echo "docker-image greeting=$GREETING"; test -s app-oci/image.tar && echo oci-tar; test -e app-oci/rootfs || echo no-rootfs; test -e app-version-only/rootfs || echo version-only; cat app-version-only/digest; echo; echo "semver=$(cat app-semver/tag)"']}}
- name: bad-password
  plan:
  - task: show
{bad_password}
- name: unknown-tag
  plan:
  - task: show
{unknown_tag}
- name: untrusted
  plan:
  - task: show
{untrusted}
"#,
        show = task(&app),
        semver = semver,
        docker = docker,
        bad_password = task(&bad_password),
        unknown_tag = task(&unknown_tag),
        untrusted = task(&untrusted),
    )
}

#[test]
fn tasks_run_in_images_from_a_registry_pulled_once_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(dir.path());
    let top = tar_with_modes(&[("hello.txt", b"hello from the registry\n", false, 0o644)]);
    let app = dir.path().join("app-layout");
    oci_layout_dir(
        &app,
        &[busybox_layer(), top],
        &["PATH=/bin", "GREETING=from-image"],
        "nobody",
    );
    reg.push(&app, "app", "1.0");
    // Tags for the semver constraint `~1` (1.x): 1.2.0 is the newest match.
    for tag in ["1.1.0", "1.2.0", "2.0.0", "1.3.0-rc.1"] {
        reg.push(&app, "app", tag);
    }
    let greeter = dir.path().join("greeter-layout");
    let scripts = tar_with_modes(&[
        ("opt/", b"", false, 0o755),
        ("opt/resource/", b"", false, 0o755),
        ("opt/resource/check", CHECK, false, 0o755),
        ("opt/resource/in", IN, false, 0o755),
    ]);
    oci_layout_dir(&greeter, &[busybox_layer(), scripts], &["PATH=/bin"], "");
    reg.push(&greeter, "greeter", "latest");
    let pushed = reg.blob_gets().len();

    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    write(&dir.path().join("pipeline.yml"), pipeline(&reg));
    let run = |job: &str| gantry_run(&server.url, dir.path(), &["-p", "pipeline.yml", "-j", job]);

    let out = run("run-in-image");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        server.log_text()
    );
    assert!(stdout.contains("greeting=from-image"), "{stdout}");
    assert!(stdout.contains("uid=65534"), "{stdout}");
    assert!(stdout.contains("hello from the registry"), "{stdout}");
    let first = reg.blob_gets().len() - pushed;
    // Two layers and a config.
    assert_eq!(
        first,
        3,
        "blob fetches of the first build:\n{}",
        reg.log_text()
    );

    let out = run("run-in-image");
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(text(&out).0.contains("greeting=from-image"));
    let second = reg.blob_gets().len() - pushed - first;
    assert_eq!(second, 0, "the second build fetched {second} blobs");

    let out = run("custom-type");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        server.log_text()
    );
    assert!(stdout.contains("hello-from-custom"), "{stdout}");
    assert!(stdout.contains(&reg.digest("app", "1.0")), "{stdout}");
    assert!(stdout.contains("1.0\n"), "{stdout}");
    assert!(stdout.contains("\"GREETING=from-image\""), "{stdout}");
    // The base layer the greeter image shares with app came from the cache.
    let busybox_gets = reg
        .blob_gets()
        .iter()
        .filter(|d| d.contains(&common::oci::sha(&common::oci::gzip(&busybox_layer()))))
        .count();
    assert_eq!(
        busybox_gets, 1,
        "the shared base layer was fetched {busybox_gets} times"
    );

    let out = run("other-forms");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        server.log_text()
    );
    assert!(
        stdout.contains("docker-image greeting=from-image"),
        "{stdout}"
    );
    assert!(
        stdout.contains("oci-tar\nno-rootfs\nversion-only\n"),
        "{stdout}"
    );
    assert!(stdout.contains(&reg.digest("app", "1.0")), "{stdout}");
    assert!(stdout.contains("semver=1.2.0"), "{stdout}");

    for (job, cause) in [
        ("bad-password", "the registry refused the credentials for"),
        ("unknown-tag", "tag \"9.9\": not found in"),
        ("untrusted", "TLS certificate"),
    ] {
        let out = run(job);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{job}: {stdout}");
        let line = format!("{stdout}{stderr}")
            .lines()
            .find(|l| l.contains("registry-image check:"))
            .unwrap_or_else(|| {
                panic!("{job}: no line naming the check's failure:\n{stdout}\n{stderr}")
            })
            .to_string();
        eprintln!("{job}: {line}");
        assert!(line.contains(cause), "{job}: {line}");
    }
}

/// A task writes a `docker save` tarball of one layer (as
/// concourse/oci-build-task writes `image/image.tar`).
const BUILD_TARBALL: &str = r#"set -e
mkdir -p image/l
echo pushed-by-gantry > image/l/pushed.txt
cd image
tar -cf layer.tar -C l pushed.txt
diff=$(sha256sum layer.tar | cut -d' ' -f1)
printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","PUSHED=yes"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff" > config.json
printf '[{"Config":"config.json","RepoTags":[],"Layers":["layer.tar"]}]' > manifest.json
tar -cf image.tar config.json manifest.json layer.tar
printf 'extra-one\nextra-two\n' > tags
"#;

#[test]
fn a_pushed_image_tarball_is_tagged_and_got_back_by_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(dir.path());
    let app = dir.path().join("app-layout");
    oci_layout_dir(&app, &[busybox_layer()], &["PATH=/bin"], "");
    reg.push(&app, "app", "1.0");
    let pipeline = format!(
        r#"
resources:
- name: out-image
  type: registry-image
  source: {out}
jobs:
- name: build-and-push
  plan:
  - task: build
    config:
      platform: linux
      image_resource:
        type: registry-image
        source: {app}
      outputs: [{{name: image}}]
      run: {{path: sh, args: [-c, {script}]}}
  - put: out-image
    params: {{image: image/image.tar, additional_tags: image/tags}}
- name: get-back
  plan:
  - get: out-image
  - task: show
    config:
      platform: linux
      image_resource:
        type: registry-image
        source: {app}
      inputs: [{{name: out-image}}]
      run: {{path: sh, args: [-c, 'echo "digest=$(cat out-image/digest)"; cat out-image/rootfs/pushed.txt; cat out-image/metadata.json']}}
"#,
        out = reg.source("pushed", "2.0"),
        app = reg.source("app", "1.0"),
        script = serde_json::to_string(BUILD_TARBALL).unwrap(),
    );
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    write(&dir.path().join("pipeline.yml"), pipeline);
    let run = |job: &str| gantry_run(&server.url, dir.path(), &["-p", "pipeline.yml", "-j", job]);
    let out = run("build-and-push");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        server.log_text()
    );
    let digest = reg.digest("pushed", "2.0");
    assert!(digest.starts_with("sha256:"), "{digest}");
    for tag in ["extra-one", "extra-two"] {
        assert_eq!(reg.digest("pushed", tag), digest, "tag {tag}");
    }
    assert!(
        format!("{stdout}{stderr}").contains(&digest),
        "the put names the digest it pushed:\n{stdout}\n{stderr}"
    );

    let out = run("get-back");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        server.log_text()
    );
    assert!(stdout.contains(&format!("digest={digest}")), "{stdout}");
    assert!(stdout.contains("pushed-by-gantry"), "{stdout}");
    assert!(stdout.contains("PUSHED=yes"), "{stdout}");
}

/// Ten tasks over three workers (by tags) on one new image of three layers.
fn fleet_pipeline(source: &str) -> String {
    let mut tasks = String::new();
    for i in 0..10 {
        tasks.push_str(&format!(
            "    - task: t{i}\n      tags: [w{w}]\n      config:\n        platform: linux\n        image_resource:\n          type: registry-image\n          source: {source}\n        run: {{path: sh, args: [-c, 'cat /one.txt /two.txt']}}\n",
            w = i % 3
        ));
    }
    format!("jobs:\n- name: spread\n  plan:\n  - in_parallel:\n{tasks}")
}

#[test]
fn one_pull_per_fleet_the_other_workers_take_the_layers_from_a_peer() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(dir.path());
    let app = dir.path().join("layout");
    oci_layout_dir(
        &app,
        &[
            busybox_layer(),
            tar_with_modes(&[("one.txt", b"layer one\n", false, 0o644)]),
            tar_with_modes(&[("two.txt", b"layer two\n", false, 0o644)]),
        ],
        &["PATH=/bin"],
        "",
    );
    reg.push(&app, "three", "1");
    let pushed = reg.blob_gets().len();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let _workers: Vec<Server> = (0..3)
        .map(|i| {
            let tag = format!("w{i}");
            start_worker(
                dir.path(),
                &web.url,
                &format!("worker-{i}"),
                &["--backend", "runc", "--tag", &tag],
            )
        })
        .collect();
    let listed = wait_running(&web.url, 3);
    write(
        &dir.path().join("pipeline.yml"),
        fleet_pipeline(&reg.source("three", "1")),
    );
    let out = gantry_run(
        &web.url,
        dir.path(),
        &["-p", "pipeline.yml", "-j", "spread"],
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\nlog:\n{}",
        web.log_text()
    );
    assert_eq!(stdout.matches("layer two").count(), 10, "{stdout}");

    // Each blob (config and three layers) left the registry exactly once.
    let gets = reg.blob_gets();
    let fetched = &gets[pushed..];
    let mut unique: Vec<&String> = fetched.iter().collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "blobs fetched: {fetched:?}");
    assert_eq!(fetched.len(), 4, "a blob was fetched twice: {fetched:?}");

    // One worker fetched them; the two others took them from a peer.
    let mut from_registry = Vec::new();
    let mut from_peers = Vec::new();
    for w in listed.as_array().unwrap() {
        let url = format!("{}/health", w["agent_url"].as_str().unwrap());
        let health: serde_json::Value = reqwest::blocking::get(&url).unwrap().json().unwrap();
        from_registry.push(health["blobs_fetched"].as_u64().unwrap());
        from_peers.push(health["blobs_from_peers"].as_u64().unwrap());
    }
    from_registry.sort();
    from_peers.sort();
    assert_eq!(
        from_registry,
        [0, 0, 4],
        "blobs from the registry per worker"
    );
    assert_eq!(from_peers, [0, 4, 4], "blobs from peers per worker");
}
