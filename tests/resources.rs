//! End to end: resources on three real worker processes (runc when
//! `GANTRY_REQUIRE_RUNC` is set). A job `get`s a `git` resource pointing at
//! a bare repository made here, runs two tasks pinned by tags to different
//! workers that both read the fetched file (checking its checksum inside
//! the container), commits, and `put`s the commit back. Run again, its
//! `get` is answered by the resource cache (build events and `/metrics`).
//! `gantry check` stores versions; `image_resource` runs a task in the
//! image a resource fetched.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::git::{bare_repo, git, GitDaemon};
use common::*;

const PIPELINE: &str = r#"
resources:
- name: repo
  type: git
  source: {uri: ((uri)), branch: main}
jobs:
- name: ship
  plan:
  - get: repo
  - in_parallel:
    - task: left
      tags: [left]
      params: {SUM: ((sum))}
      config:
        platform: linux
        inputs: [{name: repo}]
        outputs: [{name: left-out}]
        caches: [{path: cache}]
        run:
          path: sh
          args: [-ec, 'test "$(sha256sum repo/data.txt | cut -d" " -f1)" = "$SUM"; echo "left-ok $(date +%s%N)" > left-out/note; echo "left checked $SUM"; if [ -f cache/seen ]; then echo "cache-had $(cat cache/seen)"; fi; echo "$SUM" > cache/seen']
    - task: right
      tags: [right]
      params: {SUM: ((sum))}
      config:
        platform: linux
        inputs: [{name: repo}]
        run:
          path: sh
          args: [-ec, 'test "$(sha256sum repo/data.txt | cut -d" " -f1)" = "$SUM"; echo "right checked $SUM"']
  - task: commit
    tags: [left]
    config:
      platform: linux
      inputs: [{name: repo}, {name: left-out}]
      outputs: [{name: repo}]
      params: {GIT_AUTHOR_NAME: ci, GIT_AUTHOR_EMAIL: ci@example.com, GIT_COMMITTER_NAME: ci, GIT_COMMITTER_EMAIL: ci@example.com, HOME: /tmp}
      run:
        path: sh
        args: [-ec, 'cp left-out/note repo/note; cd repo; git -c safe.directory="*" add note; git -c safe.directory="*" commit -q -m "from gantry"']
  - put: repo
    params: {repository: repo}
"#;

/// A web node and three workers: `left` and `right` tagged, `plain` not.
struct Fleet {
    web: Server,
    _workers: Vec<Server>,
}

fn fleet(dir: &Path, db: &TestDb) -> Fleet {
    let web = start_web(dir, db, "");
    let backend = worker_backend();
    let mut workers = Vec::new();
    for (name, tag) in [
        ("left", Some("left")),
        ("right", Some("right")),
        ("plain", None),
    ] {
        let mut extra: Vec<&str> = backend.to_vec();
        if let Some(t) = tag {
            extra.extend(["--tag", t]);
        }
        workers.push(start_worker(dir, &web.url, name, &extra));
    }
    let listed = wait_running(&web.url, 3);
    for w in listed.as_array().unwrap() {
        let types: Vec<&str> = w["resource_types"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["type"].as_str()).collect())
            .unwrap_or_default();
        assert!(types.contains(&"git") && types.contains(&"mock"), "{w}");
    }
    Fleet {
        web,
        _workers: workers,
    }
}

fn a_git_job_gets_runs_tagged_tasks_and_puts_back(db: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(db);
    let fleet = fleet(dir.path(), &db);
    let url = &fleet.web.url;
    let (bare, sum) = bare_repo(dir.path());
    let daemon = GitDaemon::serve(dir.path());
    write(&dir.path().join("pipeline.yml"), PIPELINE);
    let uri = format!("uri={}", daemon.uri("repo.git"));
    let sum_var = format!("sum={sum}");
    let args = [
        "-p",
        "pipeline.yml",
        "-j",
        "ship",
        "-v",
        &uri,
        "-v",
        &sum_var,
    ];

    let out = gantry_run(url, dir.path(), &args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("left checked {sum}")), "{stdout}");
    assert!(stdout.contains(&format!("right checked {sum}")), "{stdout}");
    assert!(
        !stdout.contains("cache-had"),
        "a new cache is empty: {stdout}"
    );
    // The fetched input went to each tagged worker, and the log says so.
    for (step, worker) in [("left", "left"), ("right", "right"), ("commit", "left")] {
        let line = format!("step {step}: streamed repo (artifact ");
        let told = stderr
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_else(|| panic!("no {line:?} in:\n{stderr}"));
        assert!(told.contains(&format!("to worker {worker} (")), "{told}");
    }
    // The get ran `in` on the untagged worker; the put pushed the commit.
    assert!(stderr.contains("step repo: get repo {\"ref\":"), "{stderr}");
    assert!(stderr.contains("on worker plain"), "{stderr}");
    let head = git(&bare, &["log", "-1", "--format=%s", "main"]);
    assert_eq!(head, "from gantry");
    let pushed = git(&bare, &["rev-parse", "main"]);
    assert!(
        stderr.contains(&format!("step repo: put repo {{\"ref\":\"{pushed}\"}}")),
        "{stderr}"
    );
    let misses = metric(url, "gantry_resource_cache_misses_total");
    assert!(misses >= 1.0);

    // Again: the newest version is the pushed commit, which the put's
    // implicit get fetched already: the resource cache answers, no `in` runs.
    let hits_before = metric(url, "gantry_resource_cache_hits_total");
    let out = gantry_run(url, dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The task cache the first build wrote is there.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("cache-had {sum}")), "{stdout}");
    assert!(
        stderr.contains("cache \"cache\": reused from an earlier build on left"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "step repo: get repo {{\"ref\":\"{pushed}\"}}: from the resource cache (no in ran)"
        )),
        "{stderr}"
    );
    assert!(metric(url, "gantry_resource_cache_hits_total") >= hits_before + 1.0);
    assert_eq!(
        metric(url, "gantry_resource_cache_misses_total"),
        misses + 1.0,
        "only the second put's implicit get (a new commit) ran in"
    );
    let log = git(&bare, &["log", "--format=%s", "main"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["from gantry", "from gantry", "seed"]
    );

    // `gantry check` stores and prints the versions it found.
    let out = gantry()
        .current_dir(dir.path())
        .args(["--url", url, "check", "-p", "pipeline.yml", "-r", "repo"])
        .args(["-v", &uri, "-v", &sum_var])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let newest = git(&bare, &["rev-parse", "main"]);
    assert!(
        stdout.lines().last().unwrap_or("").contains(&newest),
        "{stdout}"
    );
    // The task cache stays on its worker; what the builds made is gone.
    wait_only_unowned_volumes(url, 1, Duration::from_secs(30));
}

#[test]
fn a_git_job_gets_runs_tagged_tasks_and_puts_back_sqlite() {
    a_git_job_gets_runs_tagged_tasks_and_puts_back(DbKind::Sqlite);
}

#[test]
fn a_git_job_gets_runs_tagged_tasks_and_puts_back_postgres() {
    a_git_job_gets_runs_tagged_tasks_and_puts_back(DbKind::Postgres);
}

/// Concourse's testflight `fixtures/resource-check-timeouts.yml`
/// (`resource_check_timeout_test.go`, "A resource check which times out"),
/// with a shorter `check_timeout` and a `check_delay` of a minute; a
/// resource of a custom type whose own image check is slow (held by the
/// node's default timeout, as Concourse's `--global-resource-check-timeout`
/// holds a resource type's check), and one of a quick custom type whose
/// own check is slow (held by its `check_timeout`).
const CHECK_TIMEOUTS: &str = r#"
resource_types:
- name: slow-type
  type: mock
  check_every: never
  source: {mirror_self: true, check_delay: 60s}
- name: quick-type
  type: mock
  check_every: never
  source: {mirror_self: true}
resources:
- name: my-resource
  type: mock
  check_timeout: 2s
  check_every: never
  source: {check_delay: 60s}
- name: quick-resource
  type: mock
  check_timeout: 20s
  check_every: never
  source: {check_delay: 1s}
- name: of-slow-type
  type: slow-type
  check_every: never
  source: {}
- name: slow-of-quick-type
  type: quick-type
  check_timeout: 2s
  check_every: never
  source: {check_delay: 60s}
jobs:
- name: resource-getter
  plan:
  - get: my-resource
  - get: quick-resource
  - get: of-slow-type
  - get: slow-of-quick-type
"#;

/// `gantry check-resource -r cto/RESOURCE`: its exit code, all it printed,
/// and how long it took.
fn check_resource(url: &str, resource: &str) -> (Option<i32>, String, Duration) {
    let started = std::time::Instant::now();
    let out = client(url, &["check-resource", "-r", &format!("cto/{resource}")]);
    let (stdout, stderr) = text(&out);
    (
        out.status.code(),
        format!("{stdout}{stderr}"),
        started.elapsed(),
    )
}

/// A check running past its timeout fails with `timeout exceeded` and
/// `check-resource` exits 1, at about the timeout, not when the check
/// would have ended (so does the check a one-off run's `get` makes): the
/// resource's `check_timeout`, else the node's
/// `resource_check_timeout_secs` (which a resource type's image check
/// takes). A check ending in time succeeds. `check_timeout` on a resource
/// type is refused, as Concourse's strict config refuses it.
fn checks_time_out(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let config = dir.path().join("gantry.toml");
    write(&config, "[web]\nresource_check_timeout_secs = 3\n");
    let node = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = &node.url;
    let file = dir.path().join("cto.yml");
    write(&file, CHECK_TIMEOUTS);
    let file = file.to_str().unwrap();
    common::pipelines::ok(&client(url, &["set-pipeline", "-p", "cto", "-c", file]));
    common::pipelines::ok(&client(url, &["unpause-pipeline", "-p", "cto"]));

    for (resource, limit) in [
        ("my-resource", 2),
        ("of-slow-type", 3),
        ("slow-of-quick-type", 2),
    ] {
        let (code, said, took) = check_resource(url, resource);
        assert_eq!(code, Some(1), "{resource}: {said}");
        assert!(said.contains("timeout exceeded"), "{resource}: {said}");
        assert!(
            took >= Duration::from_secs(limit) && took < Duration::from_secs(40),
            "{resource}: took {took:?}: {said}"
        );
    }
    let (code, said, _) = check_resource(url, "quick-resource");
    assert_eq!(code, Some(0), "{said}");

    // A one-off run's get checks first, under the same check_timeout.
    let started = std::time::Instant::now();
    let out = gantry_run(url, dir.path(), &["-p", "cto.yml", "-j", "resource-getter"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("timeout exceeded"),
        "{stdout}\n{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(40));

    // A resource type has no `check_timeout` in Concourse's config.
    let typed = dir.path().join("typed.yml");
    write(
        &typed,
        "resource_types:\n- {name: t, type: mock, check_timeout: 2s, source: {}}\nresources:\n- {name: r, type: t, source: {}}\njobs:\n- {name: j, plan: [{get: r}]}\n",
    );
    let out = client(
        url,
        &["set-pipeline", "-p", "typed", "-c", typed.to_str().unwrap()],
    );
    let (_, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("check_timeout"), "{stderr}");
}

#[test]
fn a_check_past_its_timeout_fails_saying_timeout_exceeded_sqlite() {
    checks_time_out(DbKind::Sqlite);
}

#[test]
fn a_check_past_its_timeout_fails_saying_timeout_exceeded_postgres() {
    checks_time_out(DbKind::Postgres);
}
