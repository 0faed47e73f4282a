//! End to end: a build's log as plain text (`GET /api/v1/builds/{id}/log`)
//! on a real worker (runc). A finished build's log is byte for byte what
//! its tasks printed, one step's with `?step=`, its last lines with
//! `?tail=`; `gantry watch --raw` and `--tail N` print the same. A running
//! build's `?tail=N` starts with the last N lines printed so far and then
//! follows the new ones, with no line lost or repeated between the two.
//! Byte ranges (`Range: bytes=...`, as the dashboard's log view reads a
//! huge log) answer 206 with that part and the whole length, 416 past the
//! end; a running build's events without its stored log lines
//! (`?skip_stored_logs=true`) and its text up to the event they name
//! (`?upto=`) join with no line lost or repeated.

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

/// `GET /api/v1/builds/BUILD/log QUERY` with `Range: RANGE`: status,
/// `Content-Range`, and text.
fn log_range(url: &str, build: i64, query: &str, range: &str) -> (u16, String, String) {
    let answer = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/log{query}"))
        .header("Range", range)
        .send()
        .unwrap();
    let status = answer.status().as_u16();
    let content_range = answer
        .headers()
        .get("content-range")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, content_range, answer.text().unwrap())
}

/// The numbers of `line-N` lines.
fn numbered(text: &str) -> Vec<u64> {
    text.lines()
        .map(|l| {
            l.strip_prefix("line-")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{l:?} in {text:?}"))
        })
        .collect()
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
    assert_eq!(log(url, id, "?step=count"), (200, counted.clone()));
    assert_eq!(log(url, id, "?step=other"), (200, "other-step\n".into()));
    assert_eq!(log(url, id, "?tail=2"), (200, "3000\nother-step\n".into()));
    let (status, body) = log(url, id, "?tail=0");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("give 1 to"), "{body}");
    // Byte ranges: a span, a suffix, one step's, past the end, malformed.
    let len = whole.len();
    assert_eq!(
        log_range(url, id, "", "bytes=0-4"),
        // A closed span is read only up to its end: the length unknown.
        (206, "bytes 0-4/*".to_string(), whole[..5].to_string())
    );
    assert_eq!(
        log_range(url, id, "", "bytes=-11"),
        (
            206,
            format!("bytes {}-{}/{len}", len - 11, len - 1),
            "other-step\n".into()
        )
    );
    let counted_len = counted.len();
    assert_eq!(
        log_range(url, id, "?step=count", "bytes=10-"),
        (
            206,
            format!("bytes 10-{}/{counted_len}", counted_len - 1),
            counted[10..].to_string()
        )
    );
    let (status, content_range, body) = log_range(url, id, "", &format!("bytes={len}-"));
    assert_eq!(
        (status, content_range),
        (416, format!("bytes */{len}")),
        "{body}"
    );
    assert!(body.contains("past its end"), "{body}");
    let (status, _, body) = log_range(url, id, "", "bytes=5-1");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("one range of bytes"), "{body}");
    let (status, _, body) = log_range(url, id, "?tail=2", "bytes=0-1");
    assert_eq!(status, 400, "{body}");
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

    // Its events without the log lines stored so far (but the step's
    // first, emptied), then its text up to where they stop, then the
    // live lines: no line lost or repeated.
    let events = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!(
            "{url}/api/v1/builds/{id}/events?skip_stored_logs=true"
        ))
        .header("accept", "application/x-ndjson")
        .send()
        .unwrap();
    assert_eq!(events.status().as_u16(), 200);
    let after: i64 = events.headers()["x-gantry-logs-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(after > 0);
    let mut stored_logs = 0;
    let mut live = String::new();
    for line in BufReader::new(events).lines() {
        let line: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let event = &line["event"];
        if event["type"] != "log" {
            continue;
        }
        if line["seq"].as_i64().unwrap() <= after {
            stored_logs += 1;
            assert_eq!(event["data"], "", "{line}");
        } else {
            live.push_str(event["data"].as_str().unwrap());
            if live.lines().count() >= 5 {
                break;
            }
        }
    }
    assert_eq!(
        stored_logs, 1,
        "one emptied line stands for the step's stored log"
    );
    let (status, upto) = log(url, id, &format!("?upto={after}"));
    assert_eq!(status, 200);
    assert!(upto.ends_with('\n'), "{upto:?}");
    let upto_numbers = numbered(&upto);
    let live_numbers = numbered(&live);
    assert_eq!(upto_numbers[0], 1);
    assert_eq!(
        live_numbers[0],
        upto_numbers[upto_numbers.len() - 1] + 1,
        "the text up to {after} and the live lines join"
    );
    let (status, content_range, tail) = log_range(url, id, &format!("?upto={after}"), "bytes=-20");
    assert_eq!(status, 206);
    assert_eq!(tail, upto[upto.len() - 20..]);
    assert!(
        content_range.ends_with(&format!("/{}", upto.len())),
        "{content_range}"
    );
    // Aborted, its log ends and `watch --tail` says how it ended.
    let answer = reqwest::blocking::Client::new()
        .put(format!("{url}/api/v1/builds/{id}/abort"))
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
