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
            .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
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
