//! End to end: a job's builds take turns as Concourse's job settings say
//! (real binary, SQLite, runc): `serial: true` runs one build at a time,
//! `max_in_flight: 2` two, and jobs sharing a serial group one at a time
//! across the group; a waiting build says what it waits for, and an abort
//! ends its wait without running anything. Intervals are recorded inside
//! the tasks.

use crate::common;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use common::*;

/// A task that records when it ran, around four seconds of work (long
/// enough that builds allowed at once do overlap on a loaded machine).
const TASK: &str = r#"    config:
      platform: linux
      run:
        path: sh
        args: [-c, "echo start $(date +%s%N); sleep 4; echo end $(date +%s%N)"]"#;

fn pipeline() -> String {
    let job = |name: &str, settings: &str| {
        format!("- name: {name}\n{settings}  plan:\n  - task: work\n{TASK}\n")
    };
    format!(
        "jobs:\n{}{}{}{}",
        job("one-at-a-time", "  serial: true\n"),
        job("two-at-a-time", "  max_in_flight: 2\n"),
        job("deploy-a", "  serial_groups: [deploy]\n"),
        job("deploy-b", "  serial_groups: [deploy]\n"),
    )
}

/// The interval a finished run's task recorded.
fn span(dir: &Path, tag: &str) -> (u128, u128) {
    let out = std::fs::read_to_string(dir.join(format!("{tag}.out"))).unwrap();
    let field = |p: &str| -> u128 {
        out.lines()
            .find_map(|l| l.strip_prefix(p))
            .unwrap_or_else(|| panic!("{tag}: no {p:?} line in {out:?}"))
            .trim()
            .parse()
            .unwrap()
    };
    (field("start "), field("end "))
}

fn stderr_of(dir: &Path, tag: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{tag}.err"))).unwrap_or_default()
}

#[test]
fn serial_max_in_flight_and_serial_groups_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir, &db);
    let url = &server.url;
    write(&dir.join("pipeline.yml"), pipeline());

    // Every run at once: three of each job with a limit, one of each
    // deploy job, and a fourth serial one to abort while it waits.
    let runs: Vec<(String, &str)> = [
        ("serial", "one-at-a-time", 3),
        ("two", "two-at-a-time", 3),
        ("deploy-a", "deploy-a", 1),
        ("deploy-b", "deploy-b", 1),
    ]
    .iter()
    .flat_map(|(tag, job, n)| (0..*n).map(move |i| (format!("{tag}{i}"), *job)))
    .collect();
    let mut children: Vec<(String, Child)> = runs
        .iter()
        .map(|(tag, job)| {
            let child = spawn_run(url, dir, tag, &["-p", "pipeline.yml", "-j", job]);
            (tag.clone(), child)
        })
        .collect();
    for (tag, _) in &children {
        wait_for(&format!("{tag}'s build"), Duration::from_secs(60), || {
            run_build(&dir.join(format!("{tag}.err")))
        });
    }
    let mut waiter = spawn_run(
        url,
        dir,
        "waiter",
        &["-p", "pipeline.yml", "-j", "one-at-a-time"],
    );
    let waiter_id = wait_for("the waiter to wait", Duration::from_secs(60), || {
        let err = stderr_of(dir, "waiter");
        err.contains("waiting for its turn")
            .then(|| run_build_text(&err))
            .flatten()
    });
    let out = client(url, &["abort-build", "-b", &waiter_id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!wait_child(&mut waiter, Duration::from_secs(30)).success());
    assert!(
        !std::fs::read_to_string(dir.join("waiter.out"))
            .unwrap_or_default()
            .contains("start"),
        "the aborted build ran its task"
    );

    for (tag, child) in &mut children {
        let status = wait_child(child, Duration::from_secs(120));
        assert!(status.success(), "{tag}: {}", stderr_of(dir, tag));
    }
    let spans = |prefix: &str| -> Vec<(u128, u128)> {
        runs.iter()
            .filter(|(tag, _)| tag.starts_with(prefix))
            .map(|(tag, _)| span(dir, tag))
            .collect()
    };
    let waited = |prefix: &str| {
        runs.iter()
            .filter(|(tag, _)| tag.starts_with(prefix))
            .filter(|(tag, _)| stderr_of(dir, tag).contains("waiting for its turn"))
            .count()
    };
    // serial: one at a time; the two later ones waited.
    assert_eq!(most_at_once(&spans("serial")), 1);
    assert_eq!(waited("serial"), 2);
    // max_in_flight 2: two at once, never three; the third waited.
    assert_eq!(most_at_once(&spans("two")), 2);
    assert_eq!(waited("two"), 1);
    // The deploy jobs share a group: one at a time across both.
    assert_eq!(most_at_once(&spans("deploy")), 1);
    assert_eq!(waited("deploy"), 1);
    let err = stderr_of(
        dir,
        if stderr_of(dir, "deploy-a0").contains("waiting") {
            "deploy-a0"
        } else {
            "deploy-b0"
        },
    );
    assert!(err.contains("serial group deploy"), "{err}");

    let statuses: Vec<serde_json::Value> = builds_json(url)
        .into_iter()
        .filter(|b| b["id"] == waiter_id)
        .collect();
    assert_eq!(statuses[0]["status"], "aborted", "{statuses:?}");
}
