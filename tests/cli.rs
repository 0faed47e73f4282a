//! End to end: the CLI's surface. Shell completions for bash (checked by
//! `bash -n`), zsh and fish; `--json` on every listing prints JSON; a wrong
//! URL or a refused token is one error line; a server's log written to a
//! file carries no colour codes. A file given to read (`-c`, `-l`) is read
//! up to the bound of a YAML document and no further: `/dev/zero` is
//! refused in one line, the process staying small. A closed pipe on
//! standard output (`| head -c0`) ends `watch --raw` quietly with status 0.

use crate::common;

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use common::rusage::wait_spent;
use common::*;

#[test]
fn completions_are_valid_scripts_naming_the_verbs() {
    for shell in ["bash", "zsh", "fish"] {
        let out = gantry().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for verb in ["execute", "set-team", "clear-task-cache", "hijack"] {
            assert!(script.contains(verb), "{shell} completions lack {verb}");
        }
        if shell == "bash" {
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &script).unwrap();
            let check = std::process::Command::new("bash")
                .arg("-n")
                .arg(file.path())
                .output()
                .unwrap();
            assert!(
                check.status.success(),
                "{}",
                String::from_utf8_lossy(&check.stderr)
            );
        }
    }
    let out = gantry().args(["completions", "tcsh"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn listings_print_json_errors_are_one_line_and_logs_have_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "[web]\nadmin_token = \"adm\"\n");
    let as_admin = |args: &[&str]| {
        gantry()
            .env("GANTRY_TOKEN", "adm")
            .arg("--url")
            .arg(&web.url)
            .args(args)
            .output()
            .unwrap()
    };
    for verb in [
        "workers",
        "builds",
        "containers",
        "volumes",
        "jobs",
        "teams",
        "tokens",
    ] {
        let out = as_admin(&[verb, "--json"]);
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{verb} --json: {e}"));
        assert!(v.is_array(), "{verb} --json: {v}");
    }
    // A refused token, a missing one, a wrong URL: one line each.
    let refused = gantry()
        .env("GANTRY_TOKEN", "wrong")
        .args(["--url", &web.url, "builds"])
        .output()
        .unwrap();
    assert!(one_error_line(&refused).contains("401"));
    assert!(one_error_line(&client(&web.url, &["builds"])).contains("token"));
    let unreachable = client("http://127.0.0.1:1", &["builds"]);
    assert!(one_error_line(&unreachable).contains("cannot reach"));
    // The log went to a file: plain text.
    let log = web.log_text();
    assert!(log.contains("listening"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );
}

/// Every verb that reads a YAML file, given `/dev/zero` (as the config,
/// the task or a vars file): refused with one line naming the bound, in
/// well under the deadline, and the process never holds more than the
/// bound's few MiB. (It read the file whole: 5.9 GB in 8 s.)
#[test]
fn endless_files_are_read_up_to_the_document_bound_and_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("ok.yml");
    write(&ok, "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: \"true\"}}\n");
    let ok = ok.to_str().unwrap();
    let bound = format!(
        "more than {} bytes, the limit of a YAML document",
        4 * 1024 * 1024
    );
    for (args, code) in [
        (
            vec!["set-pipeline", "-p", "x", "-c", "/dev/zero", "-n"],
            Some(1),
        ),
        (
            vec!["set-pipeline", "-p", "x", "-c", ok, "-l", "/dev/zero", "-n"],
            None,
        ),
        (vec!["validate-plan", "/dev/zero"], Some(1)),
        (vec!["validate-plan", ok, "-l", "/dev/zero"], Some(1)),
        (vec!["validate-task", "/dev/zero"], Some(1)),
        (vec!["execute", "-c", "/dev/zero"], None),
        (vec!["run", "-p", "/dev/zero", "-j", "j"], None),
    ] {
        // Nothing listens at the URL: the file is refused before any request.
        let mut child = gantry()
            .env("GANTRY_TOKEN", "t")
            .args(["--url", "http://127.0.0.1:1"])
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let spent = wait_spent(&mut child, Duration::from_secs(20));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        eprintln!(
            "gantry {args:?}: {:?}, {:?} CPU, peak RSS {} KiB",
            spent.status, spent.cpu, spent.max_rss_kib
        );
        assert!(!spent.status.success(), "{args:?}: {stderr}");
        if code.is_some() {
            assert_eq!(spent.status.code(), code, "{args:?}: {stderr}");
        }
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(&bound), "{args:?}: {stderr}");
        assert!(stderr.contains("/dev/zero"), "{args:?}: {stderr}");
        assert!(
            spent.max_rss_kib < 100 * 1024,
            "{args:?}: peak RSS {} KiB",
            spent.max_rss_kib
        );
    }
}

/// `gantry watch --raw -b N | head -c0`: the reader is gone before the
/// first write (the pipe's read end closed, as once `head -c0` has
/// exited); the command ends quietly with status 0, not "Broken pipe"
/// with status 2. Its log is larger than a pipe's buffer, so no write
/// could be taken in by the pipe either.
#[test]
fn a_closed_pipe_ends_watch_raw_quietly_with_status_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir.path(), &db);
    write(
        &dir.path().join("task.yml"),
        "platform: linux\nrun: {path: seq, args: ['1', '50000']}\n",
    );
    let out = gantry()
        .current_dir(dir.path())
        .args(["--url", &server.url, "execute", "-c", "task.yml"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.len() > 64 * 1024, "{} bytes", stdout.len());
    let build = stderr
        .lines()
        .find_map(|l| l.strip_prefix("executing build "))
        .and_then(|n| n.trim().parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no build in {stderr}"));
    for args in [
        vec!["watch", "--raw", "-b", &build.to_string()],
        vec!["watch", "-b", &build.to_string()],
        vec!["builds"],
    ] {
        let mut child = gantry()
            .args(["--url", &server.url])
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `head -c0` exits at once: the read end closes.
        drop(child.stdout.take());
        let spent = wait_spent(&mut child, Duration::from_secs(60));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(spent.status.code(), Some(0), "gantry {args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "gantry {args:?}: {stderr}");
    }
}
