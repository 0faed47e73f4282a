//! End to end: concoursepy (PyPI), a Concourse client no one here wrote,
//! against a quickstart. `tests/concoursepy/calls.py` makes each of its
//! calls that Concourse itself serves (a route of `atc/routes.go`) and
//! checks every answer against the shape of Concourse's Go type (each
//! field the struct always sends present, with its JSON type). Each call
//! is printed with how it went; every one must pass.

use crate::common;

use std::time::Duration;

use common::*;

const PIPELINE: &str = "\
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v0}
jobs:
- name: j
  plan:
  - get: r
    trigger: true
  - task: t
    config: {platform: linux, run: {path: echo, args: [hi]}}
";

/// The Python that has concoursepy (`GANTRY_CONCOURSEPY_PYTHON`, which
/// the test script sets up), or `None` to skip, which fails under
/// `GANTRY_REQUIRE_RUNC` (the test script's runs).
fn python() -> Option<String> {
    match std::env::var("GANTRY_CONCOURSEPY_PYTHON") {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
                "GANTRY_CONCOURSEPY_PYTHON is not set (scripts/test.sh sets it up): this test may not be skipped"
            );
            eprintln!("skipped: GANTRY_CONCOURSEPY_PYTHON is not set");
            None
        }
    }
}

#[test]
fn concoursepy_calls_what_concourse_serves() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = node.url.as_str();
    let file = dir.path().join("p.yml");
    std::fs::write(&file, PIPELINE).unwrap();
    let set = client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    );
    assert!(set.status.success(), "{}", said(&set));
    let unpause = client(url, &["unpause-pipeline", "-p", "p"]);
    assert!(unpause.status.success(), "{}", said(&unpause));
    let run = client(url, &["trigger-job", "-j", "p/j", "--watch"]);
    assert!(run.status.success(), "{}", said(&run));

    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/concoursepy/calls.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args([url, "main", "p", "j", "r"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let calls: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let passed: Vec<&str> = calls
        .iter()
        .filter(|c| c["ok"] == true)
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    for c in &calls {
        eprintln!(
            "{} {} ({}) {}",
            if c["ok"] == true { "ok  " } else { "FAIL" },
            c["call"].as_str().unwrap(),
            c["route"].as_str().unwrap(),
            c["why"].as_str().unwrap()
        );
    }
    eprintln!(
        "concoursepy_calls_passed: {} of {}",
        passed.len(),
        calls.len()
    );
    // Every call Concourse serves answers as Concourse does (issue 56's
    // second point); the script makes at least the 35 counted when it
    // was written, so a call dropped from it is noticed too.
    let failed: Vec<&serde_json::Value> = calls.iter().filter(|c| c["ok"] != true).collect();
    assert!(
        failed.is_empty(),
        "concoursepy's calls that fail: {failed:?}"
    );
    assert!(calls.len() >= 35, "{calls:?}");

    // A job keeps its id when its pipeline is set again with another job
    // beside it; the new job takes an id of its own.
    let jobs = || -> Vec<serde_json::Value> {
        reqwest::blocking::get(format!("{url}/api/v1/teams/main/pipelines/p/jobs"))
            .unwrap()
            .json()
            .unwrap()
    };
    let before = jobs();
    let grown = format!(
        "{PIPELINE}- name: k\n  plan:\n  - task: t\n    config: {{platform: linux, run: {{path: echo}}}}\n"
    );
    std::fs::write(&file, grown).unwrap();
    let set = client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    );
    assert!(set.status.success(), "{}", said(&set));
    let after = wait_for("the second job listed", Duration::from_secs(10), || {
        Some(jobs()).filter(|j| j.len() == 2)
    });
    assert_eq!(after[0]["name"], "j");
    assert_eq!(after[0]["id"], before[0]["id"], "{after:?}");
    assert_ne!(after[1]["id"], after[0]["id"], "{after:?}");
    assert!(after[1]["id"].as_i64().unwrap() > 0, "{after:?}");
}

/// concoursepy signs in as it does against Concourse: it reads the login
/// form at `/sky/login`, posts the person's name and password to the
/// form's `/sky/issuer/auth/local` action and takes the token from the
/// `skymarshal_auth` cookie; that token then reads the teams the person
/// has a role in. (Its calls are made with the token: concoursepy's own
/// session-keeping path reads `collections.Mapping`, which Python 3.10
/// removed, against Concourse as here.)
#[test]
fn concoursepy_signs_in_with_a_name_and_password() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = crate::people::hash(&home, "alice pw");
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"adm1n\"\n[web.users]\nalice = \"{alice}\"\n"),
    );
    let url = web.url.as_str();
    let out = client_as(
        url,
        "adm1n",
        &["set-team", "red", "--user", "alice", "--role", "member"],
    );
    assert!(out.status.success(), "{}", said(&out));
    let script = "import sys, json, concoursepy\n\
        signed = concoursepy.api(sys.argv[1], 'alice', sys.argv[2])\n\
        assert signed.ATC_AUTH, 'no token'\n\
        api = concoursepy.api(sys.argv[1], token=signed.ATC_AUTH)\n\
        print(json.dumps([t['name'] for t in api.list_teams()]))\n";
    let run = |password: &str| {
        std::process::Command::new(&python)
            .args(["-c", script, url, password])
            .output()
            .unwrap()
    };
    let out = run("alice pw");
    assert!(out.status.success(), "{}", said(&out));
    let teams: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(teams, ["red"], "{}", said(&out));
    // A wrong password: concoursepy raises, as against Concourse.
    let out = run("wrong");
    assert!(!out.status.success(), "{}", said(&out));
}
