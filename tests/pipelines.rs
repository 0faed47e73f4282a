//! End to end: stored pipelines that run themselves, on a quickstart (runc
//! when `GANTRY_REQUIRE_RUNC` is set) with a real git repository served by
//! `git daemon`. `set-pipeline` stores the pipeline paused; unpaused, its
//! `git` resource is checked every second, job `a` is triggered by each new
//! commit, `b` (`passed: [a]`) by each commit `a` passed, and `each`
//! (`version: every`) gets one build per commit, in order. A diamond shows
//! the `passed` rule across two upstream jobs. A build triggered by hand
//! checks its inputs first (`check_every: never` ones too), and the fly
//! flags scripts use (`set-pipeline -n -y`, `pin-resource --comment`,
//! `resource-versions --json`, `--team`) work.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::git::git;
use common::pipelines::*;
use common::*;
use serde_json::Value;

const SHOW: &str = "      platform: linux\n      inputs: [{name: repo}]\n      run: {path: sh, args: [-ec, 'cat repo/msg']}\n";

fn pipeline() -> String {
    format!(
        "resources:\n- name: repo\n  type: git\n  check_every: 1s\n  source: {{uri: ((uri)), branch: main}}\n\
jobs:\n\
- name: a\n  plan:\n  - get: repo\n    trigger: true\n  - task: t\n    config:\n{SHOW}\
- name: b\n  plan:\n  - get: repo\n    trigger: true\n    passed: [a]\n  - task: t\n    config:\n{SHOW}\
- name: each\n  plan:\n  - get: repo\n    trigger: true\n    version: every\n  - task: t\n    config:\n{SHOW}"
    )
}

fn a_pushed_commit_triggers_its_jobs_through_passed_and_every(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let repo = GitRepo::new(dir.path());
    let (work, seed) = (repo.work.clone(), repo.seed.clone());
    write(&dir.path().join("pipeline.yml"), pipeline());
    let uri = repo.uri_var.clone();

    // Set: shown as a diff, stored paused.
    let out = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            dir.path().join("pipeline.yml").to_str().unwrap(),
            "-v",
            &uri,
        ],
    );
    let stdout = ok(&out);
    assert!(stdout.contains("+- name: each"), "{stdout}");
    assert!(stdout.contains("it is paused"), "{stdout}");
    let listed: Value = serde_json::from_str(&ok(&client(url, &["pipelines", "--json"]))).unwrap();
    assert_eq!(listed[0]["name"], "p");
    assert_eq!(listed[0]["paused"], true);
    // A stale --config-version is refused, naming the stored one.
    let out = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            dir.path().join("pipeline.yml").to_str().unwrap(),
            "-v",
            &uri,
            "--config-version",
            "7",
        ],
    );
    assert!(!out.status.success());
    assert!(
        one_error_line(&out).contains("is at config version 1"),
        "{}",
        one_error_line(&out)
    );

    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    // The seed commit goes through a, then b; `each` takes it too.
    wait_run(url, "p", "a", &seed, "succeeded");
    wait_run(url, "p", "b", &seed, "succeeded");
    wait_run(url, "p", "each", &seed, "succeeded");

    // A new commit triggers a soon after the push (its resource is
    // checked every second; the bound leaves room for a loaded machine
    // and is still a third of Concourse's default minute), then b with it.
    let c1 = commit(&work, "one");
    let pushed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    git(&work, &["push", "-q", "origin", "main"]);
    let started = Instant::now();
    let a_created = wait_run(url, "p", "a", &c1, "succeeded")["created_at"]
        .as_i64()
        .unwrap();
    assert!(
        a_created - pushed_at < 20_000,
        "a was triggered {} ms after the push",
        a_created - pushed_at
    );
    wait_run(url, "p", "b", &c1, "succeeded");
    eprintln!(
        "a and b ran commit one {:?} after its push",
        started.elapsed()
    );

    // Three commits pushed at once: `each` runs every one of them, in order.
    let batch: Vec<String> = ["two", "three", "four"]
        .iter()
        .map(|m| commit(&work, m))
        .collect();
    git(&work, &["push", "-q", "origin", "main"]);
    wait_run(url, "p", "each", &batch[2], "succeeded");
    wait_run(url, "p", "b", &batch[2], "succeeded");
    let each: Vec<String> = runs(url, "p", "each")
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    let mut expected = vec![seed.clone(), c1.clone()];
    expected.extend(batch.iter().cloned());
    assert_eq!(each, expected, "one build of `each` per commit, in order");
    // Numbered per job, from 1.
    let numbers: Vec<i64> = runs(url, "p", "each")
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(numbers, (1..=5).collect::<Vec<_>>());
    // a and b never ran one commit twice, and b only ran what a passed.
    let a_runs = runs(url, "p", "a");
    for job in ["a", "b"] {
        let commits: Vec<String> = runs(url, "p", job).into_iter().map(|(_, c, _)| c).collect();
        let mut unique = commits.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            commits.len(),
            "job {job} ran a commit twice: {commits:?}"
        );
        for c in &commits {
            assert!(
                a_runs.iter().any(|(_, ac, s)| ac == c && s == "succeeded"),
                "{job} ran {c}, which a did not pass"
            );
        }
    }

    // `why` says what the last round decided; `jobs -p` lists them.
    let why = ok(&client(url, &["why", "-j", "p/b"]));
    assert!(
        why.contains(&format!("input repo: {{\"ref\":\"{}\"}}", batch[2])),
        "{why}"
    );
    let jobs = ok(&client(url, &["jobs", "-p", "p"]));
    assert!(jobs.lines().any(|l| l.starts_with("each")), "{jobs}");
    // A build by hand takes the newest versions its inputs allow.
    let out = client(url, &["trigger-job", "-j", "p/b", "--watch"]);
    let stdout = ok(&out);
    assert!(stdout.contains("started p/b #"), "{stdout}");
    let last = job_builds(url, "p", "b").pop().unwrap();
    assert_eq!(
        input_ref(url, last["id"].as_i64().unwrap()).as_deref(),
        Some(batch[2].as_str())
    );
    // Checks are periodic builds of their own, shown on the resource (a
    // check may be running: its last finished one succeeded).
    let resources: Value = wait_for("a succeeded last check", Duration::from_secs(30), || {
        let r: Value =
            serde_json::from_str(&ok(&client(url, &["resources", "-p", "p", "--json"]))).ok()?;
        (r[0]["last_check"]["status"] == "succeeded").then_some(r)
    });
    assert_eq!(resources[0]["check_error"], Value::Null);
}

#[test]
fn a_pushed_commit_triggers_its_jobs_through_passed_and_every_on_sqlite() {
    a_pushed_commit_triggers_its_jobs_through_passed_and_every(DbKind::Sqlite);
}

#[test]
fn a_pushed_commit_triggers_its_jobs_through_passed_and_every_on_postgres() {
    a_pushed_commit_triggers_its_jobs_through_passed_and_every(DbKind::Postgres);
}

/// Job `up` passes every commit; `left` fails commits whose message says
/// `bad`; `right` passes all; `down` needs both.
fn diamond() -> String {
    let fail_bad = "      platform: linux\n      inputs: [{name: repo}]\n      run: {path: sh, args: [-ec, 'cat repo/msg; ! grep -q bad repo/msg']}\n";
    format!(
        "resources:\n- name: repo\n  type: git\n  check_every: 1s\n  source: {{uri: ((uri)), branch: main}}\n\
jobs:\n\
- name: up\n  plan:\n  - get: repo\n    trigger: true\n  - task: t\n    config:\n{SHOW}\
- name: left\n  plan:\n  - get: repo\n    trigger: true\n    passed: [up]\n  - task: t\n    config:\n{fail_bad}\
- name: right\n  plan:\n  - get: repo\n    trigger: true\n    passed: [up]\n  - task: t\n    config:\n{SHOW}\
- name: down\n  plan:\n  - get: repo\n    trigger: true\n    passed: [left, right]\n  - task: t\n    config:\n{SHOW}"
    )
}

#[test]
fn in_a_diamond_the_last_job_only_gets_versions_that_passed_both_branches() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let repo = GitRepo::new(dir.path());
    let seed = repo.seed.clone();
    write(&dir.path().join("diamond.yml"), diamond());
    let uri = repo.uri_var.clone();
    ok(&client(
        url,
        &[
            "set-pipeline",
            "-p",
            "d",
            "-c",
            dir.path().join("diamond.yml").to_str().unwrap(),
            "-v",
            &uri,
        ],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "d"]));
    wait_run(url, "d", "down", &seed, "succeeded");

    // A bad commit: left fails it, right passes it; down must not take it.
    let bad = repo.push("bad");
    let left = wait_run(url, "d", "left", &bad, "failed");
    let right = wait_run(url, "d", "right", &bad, "succeeded");
    let right_done = left["finished_at"]
        .as_i64()
        .unwrap()
        .max(right["finished_at"].as_i64().unwrap());
    // Two scheduling rounds that began after both branches ran: down is
    // still on seed.
    wait_rounds_after(url, right_done);
    let decided = api(url, "/api/v1/teams/main/pipelines/d/jobs/down");
    assert_eq!(
        decided["decision"]["inputs"]["repo"]["ref"],
        seed.as_str(),
        "{decided}"
    );
    assert!(runs(url, "d", "down").iter().all(|(_, c, _)| c != &bad));
    // `why` says so, version by version.
    let why = ok(&client(url, &["why", "-j", "d/down"]));
    assert!(
        why.contains(&format!(
            "{{\"ref\":\"{bad}\"}}: not yet through a succeeded build of \"left\""
        )),
        "{why}"
    );
    assert!(
        why.contains(&format!("{{\"ref\":\"{seed}\"}}: chosen")),
        "{why}"
    );

    // A good commit on top goes through both: down takes it.
    let good = repo.push("good");
    wait_run(url, "d", "down", &good, "succeeded");
    let down: Vec<String> = runs(url, "d", "down")
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    assert_eq!(down, [seed, good]);
    let by_job: BTreeMap<&str, Vec<(i64, String, String)>> = ["left", "right"]
        .iter()
        .map(|j| (*j, runs(url, "d", j)))
        .collect();
    for c in &down {
        for (job, runs) in &by_job {
            assert!(
                runs.iter().any(|(_, rc, s)| rc == c && s == "succeeded"),
                "down ran {c}, which {job} did not pass"
            );
        }
    }
}

/// Two web nodes on one PostgreSQL database run the pipeline of the first
/// test for 20 commits, the first node killed halfway: no job runs a
/// commit twice, and the resource is never checked twice at once (one
/// check build a second at most: the checks were not doubled).
#[test]
fn two_web_nodes_trigger_each_commit_once_and_check_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let shared = format!(
        "[web]\nartifacts_dir = \"{}\"\nregistration_key = \"k3y\"\n",
        dir.path().join("artifacts").display()
    );
    let mut a = start_web(&dir.path().join("a"), &db, &shared);
    let b = start_web(&dir.path().join("b"), &db, &shared);
    let webs = format!("{},{}", a.url, b.url);
    let _worker = start_worker(dir.path(), &webs, "w1", worker_backend());
    wait_running(&b.url, 1);
    let repo = GitRepo::new(dir.path());
    let seed = repo.seed.clone();
    write(&dir.path().join("pipeline.yml"), pipeline());
    let uri = repo.uri_var.clone();
    let file = dir.path().join("pipeline.yml");
    ok(&client(
        &a.url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &uri,
        ],
    ));
    ok(&client(&b.url, &["unpause-pipeline", "-p", "p"]));
    wait_run(&b.url, "p", "b", &seed, "succeeded");

    let mut commits = Vec::new();
    for i in 0..20 {
        if i == 10 {
            // The first node dies; the other goes on alone.
            a.kill();
        }
        commits.push(repo.push(&format!("commit {i}")));
        std::thread::sleep(Duration::from_millis(400));
    }
    let last = commits.last().unwrap();
    wait_run(&b.url, "p", "each", last, "succeeded");
    wait_run(&b.url, "p", "b", last, "succeeded");
    for job in ["a", "b", "each"] {
        let ran: Vec<String> = runs(&b.url, "p", job)
            .into_iter()
            .map(|(_, c, _)| c)
            .collect();
        let mut unique = ran.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ran.len(),
            "job {job} ran a commit twice: {ran:?}"
        );
    }
    // `each` ran every commit, once, in order.
    let each: Vec<String> = runs(&b.url, "p", "each")
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    let mut expected = vec![seed];
    expected.extend(commits);
    assert_eq!(each, expected);
    // Check builds of the resource, by creation: never two within 900 ms.
    let checks: Vec<i64> = {
        let mut all: Vec<serde_json::Value> = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = api(&b.url, &format!("/api/v1/builds?limit=500{cursor}"));
            let page = page.as_array().unwrap().clone();
            let Some(id) = page.last().and_then(|p| p["id"].as_i64()) else {
                break;
            };
            cursor = format!("&cursor={id}");
            all.extend(page);
        }
        let mut t: Vec<i64> = all
            .iter()
            .filter(|b| b["plan"]["check"] == "repo")
            .map(|b| b["created_at"].as_i64().unwrap())
            .collect();
        t.sort();
        t
    };
    assert!(checks.len() >= 5, "{checks:?}");
    let closest = checks.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest >= 900, "two checks {closest} ms apart: {checks:?}");
}

/// Bump → build → push → deploy: `build` makes an artifact of each commit
/// and puts it (a `mock` version read from a file); `deploy` takes what
/// `build` put (`passed: [build]`). And `flip` gets the newest `m` (v2)
/// and puts v1 again: v1 keeps its place in `m`'s history (no build is
/// triggered by it), and `after` (`passed: [flip]`) takes v1, the output
/// of flip's newest build, before its input v2.
fn delivery() -> String {
    let build = "      platform: linux\n      inputs: [{name: repo}]\n      outputs: [{name: out}]\n      run: {path: sh, args: [-ec, 'printf %s \"$(cat repo/msg)\" > out/version']}\n";
    let show = |input: &str| {
        format!("      platform: linux\n      inputs: [{{name: {input}}}]\n      run: {{path: sh, args: [-ec, 'cat {input}/version']}}\n")
    };
    format!(
        "resources:\n- name: repo\n  type: git\n  check_every: 1s\n  source: {{uri: ((uri)), branch: main}}\n\
- name: artifact\n  type: mock\n  check_every: never\n  source: {{log: artifact}}\n\
- name: m\n  type: mock\n  check_every: never\n  source: {{log: m}}\n\
jobs:\n\
- name: build\n  plan:\n  - get: repo\n    trigger: true\n  - task: t\n    config:\n{build}  - put: artifact\n    params: {{file: out/version}}\n\
- name: deploy\n  plan:\n  - get: artifact\n    trigger: true\n    passed: [build]\n  - task: t\n    config:\n{}\
- name: flip\n  plan:\n  - get: m\n  - put: m\n    params: {{version: v1}}\n\
- name: after\n  plan:\n  - get: m\n    trigger: true\n    passed: [flip]\n  - task: t\n    config:\n{}",
        show("artifact"),
        show("m"),
    )
}

fn a_puts_version_reaches_downstream_jobs_through_passed_outputs_first(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let repo = GitRepo::new(dir.path());
    write(&dir.path().join("delivery.yml"), delivery());
    let uri = repo.uri_var.clone();
    ok(&client(
        url,
        &[
            "set-pipeline",
            "-p",
            "rel",
            "-c",
            dir.path().join("delivery.yml").to_str().unwrap(),
            "-v",
            &uri,
        ],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "rel"]));

    // Each commit is built, pushed, and deployed through `passed`.
    const ARTIFACT: Input = Input {
        name: "artifact",
        key: "version",
    };
    wait_run_of(url, "rel", "deploy", ARTIFACT, "seed", "succeeded");
    repo.push("two");
    wait_run_of(url, "rel", "deploy", ARTIFACT, "two", "succeeded");
    let pushed = ok(&client(url, &["resource-versions", "-r", "rel/artifact"]));
    assert!(
        pushed.contains("two") && pushed.contains("seed"),
        "{pushed}"
    );

    // m has v1 then v2 (newest); flip gets v2 and puts v1.
    const M: Input = Input {
        name: "m",
        key: "version",
    };
    for v in ["v1", "v2"] {
        let from = format!("version:{v}");
        ok(&client(
            url,
            &["check-resource", "-r", "rel/m", "--from", &from],
        ));
    }
    let flip = client(url, &["trigger-job", "-j", "rel/flip", "--watch"]);
    ok(&flip);
    let flipped = job_builds(url, "rel", "flip");
    assert_eq!(flipped.len(), 1);
    assert_eq!(
        input_of(url, flipped[0]["id"].as_i64().unwrap(), M).as_deref(),
        Some("v2")
    );
    // after takes flip's output, v1, not its input v2.
    let after = wait_run_of(url, "rel", "after", M, "v1", "succeeded");
    wait_rounds_after(url, after["finished_at"].as_i64().unwrap());
    assert!(
        runs_of(url, "rel", "after", M)
            .iter()
            .all(|(_, v, _)| v == "v1"),
        "{:?}",
        runs_of(url, "rel", "after", M)
    );
    // `why` says why v2, newer, was not taken.
    let why = ok(&client(url, &["why", "-j", "rel/after"]));
    assert!(
        why.contains("{\"version\":\"v1\"}: chosen")
            && why.contains("{\"version\":\"v2\"}: the version chosen came from a newer build"),
        "{why}"
    );
    // v1 kept its place: v2 is still the newest version of m.
    let versions = ok(&client(url, &["resource-versions", "-r", "rel/m"]));
    let order: Vec<&str> = versions
        .lines()
        .filter_map(|l| ["v1", "v2"].into_iter().find(|v| l.contains(v)))
        .collect();
    assert_eq!(order, ["v2", "v1"], "{versions}");
}

#[test]
fn a_puts_version_reaches_downstream_jobs_through_passed_outputs_first_on_sqlite() {
    a_puts_version_reaches_downstream_jobs_through_passed_outputs_first(DbKind::Sqlite);
}

#[test]
fn a_puts_version_reaches_downstream_jobs_through_passed_outputs_first_on_postgres() {
    a_puts_version_reaches_downstream_jobs_through_passed_outputs_first(DbKind::Postgres);
}

/// A job whose inputs only a manual trigger checks: `repo` (git,
/// `check_every: never`) fetched twice (one config), and `m` (mock,
/// `never`, a check that takes a while) with `version: newest-please`
/// (taken as `latest`, with a warning). Its task's `attempts` is a typed
/// var: `-y` fills it, `-v` (a string) cannot. Job `k` gets `broken`,
/// whose check always fails.
fn by_hand() -> String {
    [
        "resources:",
        "- name: repo",
        "  type: git",
        "  check_every: never",
        "  source: {uri: ((uri)), branch: main}",
        "- name: m",
        "  type: mock",
        "  check_every: never",
        "  source: {initial_version: v0, check_delay: 2s}",
        "- name: broken",
        "  type: mock",
        "  check_every: never",
        "  source: {check_failure: boom}",
        "jobs:",
        "- name: k",
        "  plan:",
        "  - get: broken",
        "- name: j",
        "  plan:",
        "  - get: repo",
        "  - get: again",
        "    resource: repo",
        "  - get: m",
        "    version: newest-please",
        "  - task: t",
        "    attempts: ((tries))",
        "    config:",
        "      platform: linux",
        "      inputs: [{name: repo}]",
        "      run: {path: sh, args: [-ec, 'cat repo/msg']}",
        "",
    ]
    .join("\n")
}

fn a_build_triggered_by_hand_checks_its_inputs_first(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let repo = GitRepo::new(dir.path());
    let file = dir.path().join("by-hand.yml");
    write(&file, by_hand());
    let set = |typed: &str| {
        client(
            url,
            &[
                "set-pipeline",
                "-n",
                "-p",
                "x",
                "-c",
                file.to_str().unwrap(),
                "-v",
                &repo.uri_var,
                typed,
                "tries=2",
            ],
        )
    };
    // -v gives a string, which `attempts` is not; -y gives YAML.
    let refused = set("-v");
    assert!(one_error_line(&refused).contains("attempts"), "{refused:?}");
    let out = set("-y");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("pipeline x set"), "{stdout}");
    assert!(
        stderr.contains(
            "warning: ",
        ) && stderr.contains(
            "get \"m\": version \"newest-please\" is neither latest nor every nor a version: it is treated as latest"
        ),
        "{stderr}"
    );
    // On a terminal (no -n) it asks first, as fly does: "n" writes
    // nothing, "y" writes a new config version.
    let on_a_terminal = |answer: &str| {
        let command = format!(
            "{} --url {url} set-pipeline -p x -c {} -v {} -y tries=3",
            env!("CARGO_BIN_EXE_gantry"),
            file.display(),
            repo.uri_var
        );
        let mut child = std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("script(1), to run set-pipeline on a terminal");
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("apply configuration? [yN]"), "{stdout}");
        stdout
    };
    assert!(on_a_terminal("n").contains("bailing out"));
    let version = || api(url, "/api/v1/teams/main/pipelines/x")["config_version"].clone();
    assert_eq!(version(), 1);
    assert!(on_a_terminal("y").contains("pipeline x set: config version 2"));
    assert_eq!(version(), 2);
    let validated = gantry()
        .args(["validate-plan", file.to_str().unwrap()])
        .output()
        .unwrap();
    let (_, stderr) = text(&validated);
    assert!(validated.status.success(), "{stderr}");
    assert!(stderr.contains("treated as latest"), "{stderr}");
    ok(&client(
        url,
        &["unpause-pipeline", "-p", "x", "--team", "main"],
    ));

    // Nothing was ever checked: the trigger checks both configs (repo's
    // once for its two inputs) and waits for them, saying so.
    let out = ok(&client(url, &["trigger-job", "-j", "x/j"]));
    assert!(
        out.contains("pending: waiting: for checks of resources \"repo\", \"m\""),
        "{out}"
    );
    // m's check takes two seconds: meanwhile `jobs` and `why` say so.
    let jobs = ok(&client(url, &["jobs", "-p", "x"]));
    assert!(jobs.contains("pending (waiting: for checks of"), "{jobs}");
    let why = ok(&client(url, &["why", "-j", "x/j"]));
    assert!(why.contains("is pending: waiting: for checks of"), "{why}");
    let first = wait_run(url, "x", "j", &repo.seed, "succeeded");
    const M: Input = Input {
        name: "m",
        key: "version",
    };
    let id = first["id"].as_i64().unwrap();
    assert_eq!(input_of(url, id, M).as_deref(), Some("v0"));

    // A new commit, never checked on its own: the next trigger finds it.
    let two = repo.push("two");
    let out = client(url, &["trigger-job", "-j", "x/j", "--watch"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("two"), "{stdout}");
    assert!(stderr.contains("waiting: for checks of"), "{stderr}");
    wait_run(url, "x", "j", &two, "succeeded");
    let versions: Value = serde_json::from_str(&ok(&client(
        url,
        &["resource-versions", "-r", "x/repo", "--json"],
    )))
    .unwrap();
    let refs: Vec<&str> = versions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"]["ref"].as_str())
        .collect();
    assert_eq!(refs, [two.as_str(), repo.seed.as_str()], "{versions}");

    // Pinned (with a comment, shown where the pin is), m is not checked.
    let out = ok(&client(
        url,
        &[
            "pin-resource",
            "-r",
            "x/m",
            "-v",
            "version:v0",
            "--comment",
            "v0 until v1 is fixed",
        ],
    ));
    assert!(out.contains("pin comment"), "{out}");
    let resources = ok(&client(url, &["resources", "-p", "x"]));
    assert!(resources.contains("(v0 until v1 is fixed)"), "{resources}");
    let viewed = api(url, "/api/v1/teams/main/pipelines/x/resources");
    let m = viewed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "m")
        .unwrap();
    assert_eq!(m["pin_comment"], "v0 until v1 is fixed", "{viewed}");
    let out = ok(&client(url, &["trigger-job", "-j", "x/j"]));
    assert!(
        out.contains("pending: waiting: for checks of resource \"repo\""),
        "{out}"
    );
    let third = triggered(&out);
    wait_for(
        "the third build to succeed",
        Duration::from_secs(60),
        || {
            let b = api(url, &format!("/api/v1/builds/{third}"));
            assert!(b["status"] != "failed" && b["status"] != "errored", "{b}");
            (b["status"] == "succeeded").then_some(())
        },
    );
    // A check that fails lets the build go on with the versions known
    // (as Concourse: its end is what counts, not its outcome).
    let planted = client(
        url,
        &["check-resource", "-r", "x/broken", "--from", "version:b1"],
    );
    assert!(!planted.status.success());
    let out = client(url, &["trigger-job", "-j", "x/k", "--watch"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("pending: waiting: for checks of resource \"broken\""),
        "{stdout}"
    );
    const BROKEN: Input = Input {
        name: "broken",
        key: "version",
    };
    let k = job_builds(url, "x", "k");
    assert_eq!(k.len(), 1);
    assert_eq!(
        input_of(url, k[0]["id"].as_i64().unwrap(), BROKEN).as_deref(),
        Some("b1")
    );
    let resources = ok(&client(url, &["resources", "-p", "x"]));
    assert!(
        resources
            .lines()
            .any(|l| l.starts_with("broken") && l.contains("the check failed")),
        "{resources}"
    );

    // A comment alone needs a pin.
    ok(&client(url, &["unpin-resource", "-r", "x/m"]));
    let refused = client(url, &["pin-resource", "-r", "x/m", "--comment", "why"]);
    assert!(
        one_error_line(&refused).contains("not pinned by hand"),
        "{refused:?}"
    );
}

/// The build `trigger-job` made, from its output.
fn triggered(out: &str) -> i64 {
    out.split("(build ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no build in {out:?}"))
}

#[test]
fn a_build_triggered_by_hand_checks_its_inputs_first_on_sqlite() {
    a_build_triggered_by_hand_checks_its_inputs_first(DbKind::Sqlite);
}

#[test]
fn a_build_triggered_by_hand_checks_its_inputs_first_on_postgres() {
    a_build_triggered_by_hand_checks_its_inputs_first(DbKind::Postgres);
}
