//! End to end: a build's log as plain text (`GET /api/v1/builds/{id}/log`)
//! on a real worker (runc). A finished build's log is byte for byte what
//! its tasks printed, one step's with `?step=`, its last lines with
//! `?tail=`; `gantry watch --raw` and `--tail N` print the same. A running
//! build's `?tail=N` starts with the last N lines printed so far and then
//! follows the new ones, with no line lost or repeated between the two.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::time::Duration;

use common::*;

const PIPELINE: &str = r#"jobs:
- name: two
  plan:
  - task: count
    config:
      platform: linux
      run: {path: seq, args: ['1', '3000']}
  - task: other
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo other-step']}
- name: forever
  plan:
  - task: tick
    config:
      platform: linux
      run: {path: sh, args: [-c, 'i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.05; done']}
"#;

fn ok(out: &std::process::Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stderr}");
    stdout
}

/// The newest build of job `p/JOB`, once there is one.
fn newest_build(url: &str, job: &str) -> i64 {
    wait_for(
        &format!("a build of {job}"),
        Duration::from_secs(30),
        || {
            let builds: serde_json::Value = reqwest::blocking::get(format!(
                "{url}/api/v1/teams/main/pipelines/p/jobs/{job}/builds"
            ))
            .ok()?
            .json()
            .ok()?;
            builds.get(0)?["id"].as_i64()
        },
    )
}

/// `GET /api/v1/builds/BUILD/log QUERY`, answered as it streams.
fn get_log(url: &str, build: i64, query: &str) -> reqwest::blocking::Response {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/builds/{build}/log{query}"))
        .send()
        .unwrap()
}

/// The whole log (the build has ended): status and text.
fn log(url: &str, build: i64, query: &str) -> (u16, String) {
    let answer = get_log(url, build, query);
    (answer.status().as_u16(), answer.text().unwrap())
}

/// The first `n` lines of build `build`'s log (with `query`), read as
/// they stream (the build may still run).
fn first_lines(url: &str, build: i64, query: &str, n: usize) -> Vec<String> {
    let answer = get_log(url, build, query);
    assert_eq!(answer.status().as_u16(), 200);
    BufReader::new(answer)
        .lines()
        .take(n)
        .map(|l| l.unwrap())
        .collect()
}

#[test]
fn a_builds_log_is_its_output_as_text_whole_by_step_and_by_tail_and_a_tail_follows() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let q = quickstart_runc(dir.path(), &db);
    let url = q.url.as_str();
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    ok(&client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));

    // A finished build.
    ok(&client(url, &["trigger-job", "-j", "p/two", "--watch"]));
    let id = newest_build(url, "two");
    let counted: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    let whole = format!("{counted}other-step\n");
    assert_eq!(log(url, id, ""), (200, whole.clone()));
    assert_eq!(log(url, id, "?step=count"), (200, counted));
    assert_eq!(log(url, id, "?step=other"), (200, "other-step\n".into()));
    assert_eq!(log(url, id, "?tail=2"), (200, "3000\nother-step\n".into()));
    let (status, body) = log(url, id, "?tail=0");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("give 1 to"), "{body}");
    let id_text = id.to_string();
    assert_eq!(ok(&client(url, &["watch", "-b", &id_text, "--raw"])), whole);
    assert_eq!(
        ok(&client(url, &["watch", "-b", &id_text, "--tail", "1"])),
        "other-step\n"
    );

    // A running build: its tail starts where it has got to, then follows.
    ok(&client(url, &["trigger-job", "-j", "p/forever"]));
    let id = newest_build(url, "forever");
    let seen = first_lines(url, id, "", 20);
    assert_eq!(seen[19], "line-20");
    let followed = first_lines(url, id, "?tail=3", 10);
    let numbers: Vec<u64> = followed
        .iter()
        .map(|l| {
            l.strip_prefix("line-")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{l:?} in {followed:?}"))
        })
        .collect();
    assert!(
        numbers[0] >= 18,
        "the tail of 20+ lines starts at {numbers:?}"
    );
    let consecutive: Vec<u64> = (numbers[0]..numbers[0] + 10).collect();
    assert_eq!(numbers, consecutive, "lines lost or repeated");
    // Aborted, its log ends and `watch --tail` says how it ended.
    let answer = reqwest::blocking::Client::new()
        .post(format!("{url}/api/v1/builds/{id}/abort"))
        .send()
        .unwrap();
    assert!(answer.status().is_success());
    wait_for("the build aborted", Duration::from_secs(60), || {
        let build: serde_json::Value = reqwest::blocking::get(format!("{url}/api/v1/builds/{id}"))
            .ok()?
            .json()
            .ok()?;
        (build["status"] == "aborted").then_some(())
    });
    // Ended: its last two lines, and how it ended.
    let out = client(url, &["watch", "-b", &id.to_string(), "--tail", "2"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("was aborted"), "{stderr}");
    let last: Vec<&str> = stdout.lines().collect();
    assert_eq!(last.len(), 2, "{stdout}");
    assert!(last.iter().all(|l| l.starts_with("line-")), "{stdout}");
}
