//! End to end: the controls of a stored pipeline, on a quickstart (runc when
//! `GANTRY_REQUIRE_RUNC` is set). Versions come on demand from the `mock`
//! type: `check-resource --from version:X` checks from X, which mock
//! reports back, so X becomes the newest version. Job `j` is triggered by
//! `m`; pausing the job or the pipeline holds it back, unpausing lets it
//! go; a pin, a disabled version and the webhook each change what it gets,
//! and a version triggers the job once (Concourse's first occurrence).
//! A build triggered by hand of a paused job (or pipeline) is held pending
//! until both are unpaused; one that can run checks its inputs first.
//! A `set_pipeline: self` step updates its own pipeline, and the next
//! build runs the new config. A rerun (`rerun-build`) runs a job again
//! with the versions one of its builds was given, named `N.M`.

use crate::common;

use std::time::Duration;

use common::git::{bare_repo_of, GitDaemon};
use common::pipelines::*;
use common::*;

const M: Input = Input {
    name: "m",
    key: "version",
};

const CONTROLS: &str = "resources:\n- name: m\n  type: mock\n  check_every: never\n  webhook_token: s3cret\n  source: {initial_version: v0}\n\
jobs:\n- name: j\n  plan:\n  - get: m\n    trigger: true\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [ran]}}\n";

/// Checks `m` from `version` (it becomes the newest); waits for the check.
fn new_version(url: &str, version: &str) {
    let from = format!("version:{version}");
    ok(&client(
        url,
        &["check-resource", "-r", "c/m", "--from", &from],
    ));
}

#[test]
fn pausing_pinning_disabling_and_the_webhook_steer_a_pipelines_triggers() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    write(&dir.path().join("c.yml"), CONTROLS);
    let file = dir.path().join("c.yml");
    ok(&client(
        url,
        &["set-pipeline", "-p", "c", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "c"]));

    new_version(url, "v1");
    wait_run_of(url, "c", "j", M, "v1", "succeeded");

    // A paused job is not triggered; unpaused, it is.
    ok(&client(url, &["pause-job", "-j", "c/j"]));
    new_version(url, "v2");
    wait_rounds_after(url, now_ms());
    assert!(runs_of(url, "c", "j", M).iter().all(|(_, v, _)| v != "v2"));
    let jobs = ok(&client(url, &["jobs", "-p", "c"]));
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("j") && l.contains("true")),
        "{jobs}"
    );
    ok(&client(url, &["unpause-job", "-j", "c/j"]));
    wait_run_of(url, "c", "j", M, "v2", "succeeded");

    // A paused pipeline triggers nothing; unpaused, it does.
    ok(&client(url, &["pause-pipeline", "-p", "c"]));
    new_version(url, "v3");
    wait_rounds_after(url, now_ms());
    assert!(runs_of(url, "c", "j", M).iter().all(|(_, v, _)| v != "v3"));
    ok(&client(url, &["unpause-pipeline", "-p", "c"]));
    wait_run_of(url, "c", "j", M, "v3", "succeeded");

    // Pinned to v1, which j already ran: no build starts (a version
    // triggers a job once, Concourse's first occurrence) and `why` says
    // so; a build by hand runs v1.
    ok(&client(
        url,
        &["pin-resource", "-r", "c/m", "-v", "version:v1"],
    ));
    wait_rounds_after(url, now_ms());
    assert_eq!(runs_of(url, "c", "j", M).len(), 3);
    let why = ok(&client(url, &["why", "-j", "c/j"]));
    assert!(why.contains("already ran input \"m\"'s version"), "{why}");
    ok(&client(url, &["trigger-job", "-j", "c/j"]));
    wait_for(
        "j to run v1 again by hand, pinned",
        Duration::from_secs(60),
        || {
            let runs = runs_of(url, "c", "j", M);
            (runs.last()?.1 == "v1" && runs.last()?.2 == "succeeded" && runs.len() == 4)
                .then_some(())
        },
    );
    let resources = ok(&client(url, &["resources", "-p", "c", "--json"]));
    assert!(resources.contains("\"pinned\": {"), "{resources}");
    // Unpinned, the newest (v3, which j ran) starts nothing; a new version does.
    ok(&client(url, &["unpin-resource", "-r", "c/m"]));
    new_version(url, "v4");
    wait_run_of(url, "c", "j", M, "v4", "succeeded");
    assert_eq!(runs_of(url, "c", "j", M).len(), 5);

    // Disabled, v4 is never an input: the newest left is v3, which j ran,
    // so nothing starts; by hand, j runs v3.
    ok(&client(
        url,
        &["disable-resource-version", "-r", "c/m", "-v", "version:v4"],
    ));
    wait_rounds_after(url, now_ms());
    assert_eq!(runs_of(url, "c", "j", M).len(), 5);
    ok(&client(url, &["trigger-job", "-j", "c/j"]));
    wait_for(
        "j to run v3 with v4 disabled",
        Duration::from_secs(60),
        || {
            let runs = runs_of(url, "c", "j", M);
            (runs.last()?.1 == "v3" && runs.last()?.2 == "succeeded" && runs.len() == 6)
                .then_some(())
        },
    );
    let versions = ok(&client(url, &["resource-versions", "-r", "c/m"]));
    assert!(
        versions
            .lines()
            .any(|l| l.contains("v4") && l.contains("true")),
        "{versions}"
    );
    ok(&client(
        url,
        &["enable-resource-version", "-r", "c/m", "-v", "version:v4"],
    ));
    ok(&client(url, &["trigger-job", "-j", "c/j"]));
    wait_for("j to run v4 once enabled", Duration::from_secs(60), || {
        let runs = runs_of(url, "c", "j", M);
        (runs.last()?.1 == "v4" && runs.len() == 7).then_some(())
    });
    // A version no check found cannot be pinned or disabled.
    let out = client(url, &["pin-resource", "-r", "c/m", "-v", "version:nope"]);
    assert!(!out.status.success());
    assert!(
        one_error_line(&out).contains("not found"),
        "{}",
        one_error_line(&out)
    );

    // The webhook: a wrong token is refused, the right one checks at once.
    let hook = |token: &str| {
        reqwest::blocking::Client::new()
            .post(format!(
                "{url}/api/v1/teams/main/pipelines/c/resources/m/check/webhook?webhook_token={token}"
            ))
            .send()
            .unwrap()
    };
    let wrong = hook("guess");
    assert_eq!(wrong.status().as_u16(), 401);
    let body: serde_json::Value = wrong.json().unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("webhook token"),
        "{body}"
    );
    let right = hook("s3cret");
    assert_eq!(right.status().as_u16(), 201);
    let build: serde_json::Value = right.json().unwrap();
    let id = build["id"].as_i64().unwrap();
    // The hook learns the build's id, not the pipeline's config and vars.
    assert_eq!(build.as_object().map(|b| b.len()), Some(1), "{build}");
    wait_for(
        "the webhook's check to succeed",
        Duration::from_secs(60),
        || (api(url, &format!("/api/v1/builds/{id}"))["status"] == "succeeded").then_some(()),
    );
    let resources = api(url, "/api/v1/teams/main/pipelines/c/resources");
    assert_eq!(
        resources[0]["last_check"]["id"].as_i64(),
        Some(id),
        "{resources}"
    );
}

/// Unix ms now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn self_setting(say: &str) -> String {
    [
        "resources:",
        "- {name: repo, type: git, check_every: never, source: {uri: ((uri)), branch: main}}",
        "jobs:",
        "- name: configure",
        "  plan:",
        "  - get: repo",
        "  - task: say",
        &format!("    config: {{platform: linux, run: {{path: echo, args: ['{say}']}}}}"),
        "  - set_pipeline: self",
        "    file: repo/ci/pipeline.yml",
        "    vars: {uri: ((uri))}",
        "",
    ]
    .join("\n")
}

#[test]
fn a_set_pipeline_self_step_updates_its_pipeline_and_the_next_build_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let next = self_setting("config two");
    bare_repo_of(dir.path(), "repo", &[("ci/pipeline.yml", next.as_bytes())]);
    let daemon = GitDaemon::serve(dir.path());
    let uri = format!("uri={}", daemon.uri("repo.git"));
    write(&dir.path().join("p.yml"), self_setting("config one"));
    let file = dir.path().join("p.yml");
    ok(&client(
        url,
        &[
            "set-pipeline",
            "-p",
            "s",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &uri,
        ],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "s"]));
    ok(&client(url, &["check-resource", "-r", "s/repo"]));

    let out = client(url, &["trigger-job", "-j", "s/configure", "--watch"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("config one"), "{stdout}");
    // Concourse's lines, on stdout: the difference, then what is set.
    assert!(
        stdout.contains("+    config: {platform: linux, run: {path: echo, args: ['config two']}}"),
        "{stdout}"
    );
    assert!(stdout.contains("setting pipeline: s\ndone\n"), "{stdout}");
    let stored = ok(&client(url, &["get-pipeline", "-p", "s"]));
    assert_eq!(stored, next);

    let out = client(url, &["trigger-job", "-j", "s/configure", "--watch"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("config two"), "{stdout}");
    // Set again as it is stored: nothing is written.
    assert!(stdout.contains("no changes to apply.\n"), "{stdout}");
    assert!(!stdout.contains("setting pipeline:"), "{stdout}");
    let p: serde_json::Value =
        serde_json::from_str(&ok(&client(url, &["pipelines", "--json"]))).unwrap();
    assert_eq!(p[0]["config_version"], 2, "{p}");
}

const WAITS: &str = "resources:\n- name: m\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
- name: n\n  type: mock\n  check_every: never\n  source: {no_initial_version: true}\n\
jobs:\n- name: up\n  plan:\n  - get: m\n- name: down\n  plan:\n  - get: n\n  - get: m\n    passed: [up]\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [ran]}}\n";

/// The build `trigger-job` made, from its output.
fn triggered(out: &str) -> i64 {
    let id = out
        .split("(build ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no build in {out:?}"));
    id.parse().unwrap()
}

#[test]
fn a_build_triggered_by_hand_waits_for_inputs_it_cannot_have_yet_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let mut node = quickstart_runc(dir.path(), &db);
    write(&dir.path().join("w.yml"), WAITS);
    let file = dir.path().join("w.yml");
    ok(&client(
        &node.url,
        &["set-pipeline", "-p", "w", "-c", file.to_str().unwrap()],
    ));
    ok(&client(&node.url, &["unpause-pipeline", "-p", "w"]));

    // It checks n first (not m: it has `passed`); n has no version even
    // then: the build is created pending and says why.
    let out = ok(&client(&node.url, &["trigger-job", "-j", "w/down"]));
    assert!(
        out.contains("pending: waiting: for checks of resource \"n\""),
        "{out}"
    );
    let waiting = triggered(&out);
    wait_for("n's check to be done", Duration::from_secs(30), || {
        let build = build_json(&node.url, waiting);
        assert_eq!(build["status"], "pending", "{build}");
        build["waiting"]
            .as_str()
            .filter(|w| w.contains("input \"n\""))
            .map(drop)
    });
    // A second one, aborted while it waits, ends there.
    let aborted = triggered(&ok(&client(&node.url, &["trigger-job", "-j", "w/down"])));
    ok(&client(
        &node.url,
        &["abort-build", "-b", &aborted.to_string()],
    ));
    assert_eq!(build_json(&node.url, aborted)["status"], "aborted");

    // A waiting build runs nowhere: a restart of its node leaves it waiting.
    node.kill();
    drop(node);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let build = build_json(url, waiting);
    assert_eq!(build["status"], "pending", "{build}");
    let first = build["waiting"].as_str().unwrap().to_string();
    assert!(first.contains("input \"n\""), "{first}");

    // `n` has a version now, `m` none through `up`: it still waits, with
    // a new reason (not for that check of n: its checks were done).
    new_version_of(url, "w/n", "n1");
    let second = wait_for("a new reason", Duration::from_secs(30), || {
        let b = build_json(url, waiting);
        b["waiting"]
            .as_str()
            .filter(|w| *w != first)
            .map(str::to_string)
    });
    assert!(!second.contains("input \"n\""), "{second}");
    assert!(second.contains("succeeded build of \"up\""), "{second}");
    new_version_of(url, "w/m", "v1");

    // Through `up`, it starts with that version and runs; nothing else of
    // `down` ran, and the aborted build stayed aborted.
    ok(&client(url, &["trigger-job", "-j", "w/up", "--watch"]));
    wait_run_of(url, "w", "down", M, "v1", "succeeded");
    let runs = job_builds(url, "w", "down");
    let ids: Vec<i64> = runs.iter().map(|b| b["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{runs:?}");
    assert!(ids.contains(&waiting) && ids.contains(&aborted), "{runs:?}");
    assert_eq!(build_json(url, waiting)["status"], "succeeded");
    assert_eq!(build_json(url, aborted)["status"], "aborted");
    let out = client(url, &["watch", "-b", &waiting.to_string()]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("ran"), "{stdout}");
    assert_eq!(
        stderr.matches("waiting: input").count(),
        2,
        "each reason told once: {stderr}"
    );

    // Destroying the pipeline ends what still waits (pinned to a version
    // that never went through `up`, `down` waits again).
    new_version_of(url, "w/m", "v2");
    ok(&client(
        url,
        &["pin-resource", "-r", "w/m", "-v", "version:v2"],
    ));
    // A job gone from the pipeline ends what of it waits, saying why.
    let gone = triggered(&ok(&client(url, &["trigger-job", "-j", "w/down"])));
    assert_eq!(build_json(url, gone)["status"], "pending");
    write(
        &dir.path().join("w.yml"),
        WAITS.replace("- name: down", "- name: renamed"),
    );
    ok(&client(
        url,
        &["set-pipeline", "-p", "w", "-c", file.to_str().unwrap()],
    ));
    wait_for(
        "the build of a removed job to end",
        Duration::from_secs(30),
        || (build_json(url, gone)["status"] == "aborted").then_some(()),
    );
    assert!(error_of(url, gone).contains("no longer startable"));

    write(&dir.path().join("w.yml"), WAITS);
    ok(&client(
        url,
        &["set-pipeline", "-p", "w", "-c", file.to_str().unwrap()],
    ));
    let left = triggered(&ok(&client(url, &["trigger-job", "-j", "w/down"])));
    assert_eq!(build_json(url, left)["status"], "pending");
    ok(&client(url, &["destroy-pipeline", "-p", "w"]));
    assert_eq!(build_json(url, left)["status"], "aborted");
    assert_eq!(error_of(url, left), "its pipeline was destroyed");
}

const HELD: &str = "resources:\n- name: m\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
jobs:\n- name: j\n  plan:\n  - get: m\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [held]}}\n\
- name: other\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [other]}}\n";

/// Triggers `h/j` by hand while `paused` says it is held; the build is
/// pending and says why, and stays so while `h/other` runs to the end
/// and scheduling rounds pass. Answers its id.
fn held_build(url: &str, paused: &str) -> i64 {
    let out = ok(&client(url, &["trigger-job", "-j", "h/j"]));
    assert!(
        out.contains(&format!("pending: waiting: {paused}")),
        "{out}"
    );
    let held = triggered(&out);
    ok(&client(url, &["trigger-job", "-j", "h/other", "--watch"]));
    wait_rounds_after(url, now_ms());
    let build = build_json(url, held);
    assert_eq!(build["status"], "pending", "{build}");
    assert_eq!(build["waiting"].as_str(), Some(paused), "{build}");
    held
}

/// Waits for build `id` to have succeeded.
fn wait_succeeded(url: &str, id: i64) {
    wait_for("the held build to succeed", Duration::from_secs(60), || {
        let status = build_json(url, id)["status"].clone();
        assert!(
            status != "failed" && status != "errored" && status != "aborted",
            "{status}"
        );
        (status == "succeeded").then_some(())
    });
}

#[test]
fn a_paused_job_or_pipeline_holds_a_build_triggered_by_hand_until_unpaused() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    write(&dir.path().join("h.yml"), HELD);
    let file = dir.path().join("h.yml");
    ok(&client(
        url,
        &["set-pipeline", "-p", "h", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "h"]));
    new_version_of(url, "h/m", "v1");

    // A paused job holds it: pending, saying so, until unpaused.
    ok(&client(url, &["pause-job", "-j", "h/j"]));
    let held = held_build(url, "job \"j\" is paused");
    // One aborted while held ends there.
    let aborted = triggered(&ok(&client(url, &["trigger-job", "-j", "h/j"])));
    ok(&client(url, &["abort-build", "-b", &aborted.to_string()]));
    assert_eq!(build_json(url, aborted)["status"], "aborted");
    ok(&client(url, &["unpause-job", "-j", "h/j"]));
    wait_succeeded(url, held);
    let out = client(url, &["watch", "-b", &held.to_string()]);
    let (stdout, stderr) = text(&out);
    assert!(stdout.contains("held"), "{stdout}");
    assert!(stderr.contains("waiting: job \"j\" is paused"), "{stderr}");
    assert_eq!(build_json(url, aborted)["status"], "aborted");

    // So does a paused pipeline (all its jobs are held, `other` too):
    // rounds that retry waiting builds pass, and it still waits.
    ok(&client(url, &["pause-pipeline", "-p", "h"]));
    let out = ok(&client(url, &["trigger-job", "-j", "h/j"]));
    assert!(
        out.contains("pending: waiting: pipeline \"h\" is paused"),
        "{out}"
    );
    let held = triggered(&out);
    wait_rounds_after(url, now_ms());
    assert_eq!(build_json(url, held)["status"], "pending");
    ok(&client(url, &["unpause-pipeline", "-p", "h"]));
    wait_succeeded(url, held);
}

/// Checks resource `r` (`P/R`) of mock type from `version`, which becomes
/// its newest.
fn new_version_of(url: &str, r: &str, version: &str) {
    let from = format!("version:{version}");
    ok(&client(url, &["check-resource", "-r", r, "--from", &from]));
}

/// Build `id` as the API shows it.
fn build_json(url: &str, id: i64) -> serde_json::Value {
    api(url, &format!("/api/v1/builds/{id}"))
}

/// The message of build `id`'s error event.
fn error_of(url: &str, id: i64) -> String {
    common::nodes::events(url, id)
        .iter()
        .find(|e| e["type"] == "error")
        .and_then(|e| e["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("build {id} has no error event"))
}

/// The job's finished and next builds, by name, as the API answers them
/// (Concourse's `finished_build` / `next_build`), and the `build` and
/// `next` cells of its row of `gantry jobs`.
fn finished_and_next(url: &str) -> (Option<String>, Option<String>, String) {
    let job = api(url, "/api/v1/teams/main/pipelines/c/jobs/j");
    let name = |b: &serde_json::Value| b["name"].as_str().map(str::to_string);
    let jobs = ok(&client(url, &["jobs", "-p", "c"]));
    let row = jobs
        .lines()
        .find(|l| l.starts_with("j "))
        .unwrap_or_else(|| panic!("no row of j: {jobs}"))
        .to_string();
    (name(&job["finished_build"]), name(&job["next_build"]), row)
}

/// As Concourse's testflight `rerun_build_test.go` ("Rerunning a build",
/// `fixtures/simple-trigger.yml`): reruns are named `N.M`, listed with the
/// job's builds, and a rerun of build 1 after build 2 leaves build 2 the
/// job's finished build (ordered by number, not by when builds ended).
#[test]
fn a_rerun_runs_a_job_again_with_the_versions_a_build_was_given() {
    reruns(DbKind::Sqlite);
}

/// [`a_rerun_runs_a_job_again_with_the_versions_a_build_was_given`] on
/// PostgreSQL.
#[test]
fn a_rerun_runs_a_job_again_with_the_versions_a_build_was_given_on_postgres() {
    reruns(DbKind::Postgres);
}

fn reruns(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    write(&dir.path().join("c.yml"), CONTROLS);
    let file = dir.path().join("c.yml");
    ok(&client(
        url,
        &["set-pipeline", "-p", "c", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "c"]));
    new_version(url, "v1");
    let first = wait_run_of(url, "c", "j", M, "v1", "succeeded");
    new_version(url, "v2");
    wait_run_of(url, "c", "j", M, "v2", "succeeded");

    // Build 1 again, after v2: named 1.1, given v1, and it triggers
    // nothing (v2 is no new version to j).
    let out = ok(&client(
        url,
        &["rerun-build", "-j", "c/j", "-b", "1", "--watch"],
    ));
    assert!(out.contains("started c/j #1.1 (build "), "{out}");
    let rerun = triggered(&out);
    let build = build_json(url, rerun);
    assert_eq!(build["status"], "succeeded", "{build}");
    assert_eq!(build["name"], "1.1", "{build}");
    assert_eq!(build["rerun_of"]["id"], first["id"], "{build}");
    assert_eq!(build["rerun_of"]["name"], "1", "{build}");
    assert_eq!(build["rerun_number"], 1, "{build}");
    assert_eq!(input_of(url, rerun, M).as_deref(), Some("v1"));
    let builds = ok(&client(url, &["builds", "-j", "c/j"]));
    assert!(builds.contains("c/j #1.1"), "{builds}");
    wait_rounds_after(url, now_ms());
    assert_eq!(runs_of(url, "c", "j", M).len(), 3);
    // 1.1 ended last, yet build 2 stays the job's finished build.
    let (finished, next, row) = finished_and_next(url);
    assert_eq!(
        (finished.as_deref(), next.as_deref()),
        (Some("2"), None),
        "{row}"
    );
    assert!(row.contains(" 2 ") && !row.contains("1.1"), "{row}");

    // A paused job holds a rerun pending until unpaused; `jobs` names it.
    ok(&client(url, &["pause-job", "-j", "c/j"]));
    let out = ok(&client(url, &["rerun-build", "-j", "c/j", "-b", "2"]));
    assert!(
        out.contains("created c/j #2.1 (build ") && out.contains("waiting: job \"j\" is paused"),
        "{out}"
    );
    let held = triggered(&out);
    wait_rounds_after(url, now_ms());
    assert_eq!(build_json(url, held)["status"], "pending");
    // It is the job's next build; build 2 its finished one.
    let (finished, next, row) = finished_and_next(url);
    assert_eq!(
        (finished.as_deref(), next.as_deref()),
        (Some("2"), Some("2.1")),
        "{row}"
    );
    assert!(row.contains("2.1 pending (waiting: "), "{row}");
    ok(&client(url, &["unpause-job", "-j", "c/j"]));
    wait_succeeded(url, held);
    assert_eq!(input_of(url, held, M).as_deref(), Some("v2"));
    // A rerun of the newest build is the finished build once it ends.
    let (finished, next, _) = finished_and_next(url);
    assert_eq!((finished.as_deref(), next.as_deref()), (Some("2.1"), None));

    // A build the job does not have is refused in one line.
    for bad in ["9", "1.7", "x"] {
        let err = one_error_line(&client(url, &["rerun-build", "-j", "c/j", "-b", bad]));
        assert!(err.contains("not found"), "{bad}: {err}");
    }
    // A rerun of a rerun reruns the original: 1.2, given v1.
    let out = ok(&client(
        url,
        &["rerun-build", "-j", "c/j", "-b", "1.1", "--watch"],
    ));
    assert!(out.contains("started c/j #1.2 (build "), "{out}");
    let again = build_json(url, triggered(&out));
    assert_eq!(again["rerun_of"]["id"], first["id"], "{again}");
    assert_eq!(input_of(url, triggered(&out), M).as_deref(), Some("v1"));
    let (finished, _, _) = finished_and_next(url);
    assert_eq!(finished.as_deref(), Some("2.1"));
    // An archived pipeline's builds are not rerun.
    ok(&client(url, &["archive-pipeline", "-p", "c", "-n"]));
    let err = one_error_line(&client(url, &["rerun-build", "-j", "c/j", "-b", "1"]));
    assert!(err.contains("archived"), "{err}");
}
