//! End to end: the CLI's surface. Shell completions for bash (checked by
//! `bash -n`), zsh and fish; `--json` on every listing prints JSON; a wrong
//! URL or a refused token is one error line; a server's log written to a
//! file carries no colour codes.

use crate::common;

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
