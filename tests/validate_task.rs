//! `gantry validate-task`: accepts valid configs, names every problem of bad ones.

use crate::common;

use common::*;

fn validate(yaml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("task.yml");
    write(&f, yaml);
    let out = gantry().arg("validate-task").arg(&f).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn accepts_a_valid_config() {
    let (code, err) = validate(
        "platform: linux\nrootfs_uri: raw:///srv/rootfs\ninputs: [{name: src, optional: true}]\noutputs: [{name: out}]\ncaches: [{path: c}]\nparams: {A: 1, B: true}\nrun: {path: make, args: [all], dir: src, user: root}\ncontainer_limits: {memory: 1048576, cpu: 512}\n",
    );
    assert_eq!((code, err.as_str()), (0, ""));
}

#[test]
fn rejects_each_problem_with_a_message_naming_it() {
    let cases = [
        ("run: {path: ls}\n", "missing field platform"),
        (
            "platform: linux\nrun: {args: [x]}\n",
            "missing field run.path",
        ),
        (
            "platform: linux\ninputs: [{path: x}]\nrun: {path: ls}\n",
            "inputs[0]: missing field name",
        ),
        (
            "platform: linux\noutputs: [{path: x}]\nrun: {path: ls}\n",
            "outputs[0]: missing field name",
        ),
        (
            "platform: linux\ninputs: [{name: a}, {name: a}]\nrun: {path: ls}\n",
            "duplicate input name \"a\"",
        ),
        (
            "platform: linux\nrun: {path: ls}\nimage: busybox\n",
            "unknown field \"image\"",
        ),
    ];
    for (yaml, expected) in cases {
        let (code, err) = validate(yaml);
        assert_eq!(code, 1, "{yaml}");
        assert!(
            err.contains(expected),
            "for {yaml:?} expected {expected:?} in {err:?}"
        );
    }
}

#[test]
fn prints_every_problem_of_one_file() {
    let (code, err) = validate("inputs: [{path: x}]\nrun: {}\nbogus: 1\n");
    assert_eq!(code, 1);
    for expected in [
        "missing field platform",
        "missing field run.path",
        "inputs[0]: missing field name",
        "unknown field \"bogus\"",
    ] {
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
}

#[test]
fn a_missing_file_is_one_clear_line() {
    let out = gantry()
        .args(["validate-task", "/does/not/exist.yml"])
        .output()
        .unwrap();
    let err = one_error_line(&out);
    assert!(err.contains("/does/not/exist.yml"), "{err}");
}

#[test]
fn accepts_the_task_files_of_concourse_examples() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/concourse-tasks");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yml") {
            continue;
        }
        let out = gantry().arg("validate-task").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert_eq!(checked, 8, "every example task was checked");
}

#[test]
fn accepts_every_field_concourse_accepts() {
    let (code, err) = validate(
        r#"
platform: linux
image_resource:
  name: img
  type: registry-image
  source: {repository: golang}
  version: {digest: "sha256:0"}
  params: {format: oci}
  tags: [big]
inputs: [{name: src, path: /abs/src, optional: true}]
outputs: [{name: src}, {name: bin, path: /out/bin}]
caches: [{path: .cache, ttl: 24h}, {path: /root/.cache}]
params: {N: 1, F: 1.5, B: false, M: {a: 1}, L: [1], E: }
run: {path: go, args: [build, 1]}
container_limits: {cpu: 1024, memory: 1GB}
"#,
    );
    assert_eq!((code, err.as_str()), (0, ""));
}

#[test]
fn rejects_concourse_style_mistakes_by_name() {
    let cases = [
        (
            "platform: linux\nrun: {path: ls}\ncontainer_limits: {memory: 1.5GB}\n",
            "container_limits.memory: could not parse container memory limit",
        ),
        (
            "platform: linux\nrun: {path: ls}\ncontainer_limits: {cpu: lots}\n",
            "container_limits.cpu: cpu limit must be an integer",
        ),
        (
            "platform: linux\nrun: {path: ls}\ncaches: [{path: c, ttl: 500ms}]\n",
            "caches[0].ttl: cache ttl must be at least 1s",
        ),
        (
            "platform: linux\nrun: {path: ls}\ncaches: [{path: c, ttl: soon}]\n",
            "caches[0].ttl: invalid cache ttl",
        ),
        (
            "platform: linux\nrun: {path: ls}\nimage_resource: {source: {}}\n",
            "image_resource: missing field type",
        ),
        (
            "platform: linux\nrun: {path: ls}\nimage_resource: {type: mock, privileged: true}\n",
            "image_resource: unknown field \"privileged\"",
        ),
        (
            "platform: linux\nrun: {path: ls}\ncaches: [{path: c, size: 1}]\n",
            "caches[0]: unknown field \"size\"",
        ),
        (
            "platform: linux\nrun: {path: ls}\noutputs: [{name: o, path: /}]\n",
            "output path \"/\"",
        ),
    ];
    for (yaml, expected) in cases {
        let (code, err) = validate(yaml);
        assert_eq!(code, 1, "{yaml}");
        assert!(
            err.contains(expected),
            "for {yaml:?} expected {expected:?} in {err:?}"
        );
    }
}
