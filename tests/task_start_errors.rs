//! End to end: a task whose process cannot be started errors, as in
//! Concourse (`fly execute` exits 2), instead of failing with runc's exit
//! status: no such program, a program that is not executable, a user the
//! image does not have, an image without a shell. A program that starts and
//! exits 1 still fails. On a quickstart with runc, from a busybox OCI image
//! built in the test; the bwrap backend errors such a task too.

use crate::common;

use std::path::Path;

use common::oci::oci_image_with;
use common::*;

/// A task of `run` (YAML of the `run:` mapping) on the test's image.
fn execute(url: &str, dir: &Path, image: &Path, name: &str, run: &str) -> std::process::Output {
    let task = dir.join(format!("{name}.yml"));
    write(&task, format!("platform: linux\nrun: {run}\n"));
    client(
        url,
        &[
            "execute",
            "-c",
            task.to_str().unwrap(),
            "--image",
            image.to_str().unwrap(),
        ],
    )
}

#[test]
fn a_process_that_cannot_start_errors_the_task_naming_the_cause() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    // busybox without its shell, plus a script that is not executable.
    let image = dir.path().join("no-shell.tar");
    oci_image_with(
        &image,
        &[
            ("bin/.wh.sh", b"", false, 0o644),
            (
                "bin/not-executable",
                b"#!/bin/busybox sh\necho ran\n",
                false,
                0o644,
            ),
        ],
    );

    // Control: a program that starts and exits 1 fails, with its status.
    let out = execute(
        &server.url,
        dir.path(),
        &image,
        "exits-1",
        "{path: /bin/busybox, args: [\"false\"]}",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);

    let cases = [
        (
            "no-such-file",
            "{path: /no/such}",
            "run.path \"/no/such\" could not be started: no such file or directory",
        ),
        (
            "not-executable",
            "{path: /bin/not-executable}",
            "run.path \"/bin/not-executable\" could not be started: permission denied",
        ),
        (
            "bad-user",
            "{path: /bin/echo, user: nosuchuser}",
            "run.path \"/bin/echo\" could not be started: user \"nosuchuser\" not found in the container's /etc/passwd",
        ),
        (
            "no-shell",
            "{path: sh, args: [-c, \"echo ran\"]}",
            "run.path \"sh\" could not be started: executable file not found in $PATH",
        ),
    ];
    for (name, run, expected) in cases {
        let out = execute(&server.url, dir.path(), &image, name, run);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        let last = failure_line(&out);
        assert!(
            last.contains("errored: ") && last.contains(expected),
            "{name}: {last}\n--- stderr\n{stderr}"
        );
        assert!(!stdout.contains("ran"), "{name}: {stdout}");
    }
}

#[test]
fn a_process_bwrap_cannot_start_errors_the_task_too() {
    if !Path::new("/usr/bin/bwrap").exists() {
        assert!(
            std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
            "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs /usr/bin/bwrap"
        );
        eprintln!("skipped: needs /usr/bin/bwrap");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "bwrap"]);
    let image = dir.path().join("busybox.tar");
    oci_image_with(
        &image,
        &[("bin/not-executable", b"#!/bin/busybox sh\n", false, 0o644)],
    );
    let out = execute(
        &server.url,
        dir.path(),
        &image,
        "exits-1",
        "{path: /bin/busybox, args: [\"false\"]}",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    for (name, path, cause) in [
        ("no-such-file", "/no/such", "No such file or directory"),
        ("not-executable", "/bin/not-executable", "Permission denied"),
    ] {
        let out = execute(
            &server.url,
            dir.path(),
            &image,
            name,
            &format!("{{path: {path}}}"),
        );
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        let last = failure_line(&out);
        assert!(
            last.contains(&format!(
                "errored: run.path {path:?} could not be started: bwrap could not execute it"
            )),
            "{name}: {last}"
        );
        // bwrap's reason is on the task's stderr, just before.
        assert!(
            stderr.contains(&format!("bwrap: execvp {path}: {cause}")),
            "{name}: {stderr}"
        );
    }
}
