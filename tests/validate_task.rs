//! `gantry validate-task`: accepts valid configs, names every problem of bad ones.

mod common;

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
