//! End to end: pipelines that pipelines set, as Concourse's `set_pipeline`
//! step and archiving behave, through the CLI on a quickstart (runc when
//! `GANTRY_REQUIRE_RUNC` is set), on SQLite and on PostgreSQL.
//!
//! Job `sp` of pipeline `parent` gets a `mock` version whose files hold a
//! child pipeline, and sets it: `child` with `team: ""` (the build's own
//! team), an instance `kid/branch:B` per branch its files name (`across`
//! with `instance_vars`, Concourse's multi-branch example) and `other`.
//! Its log says Concourse's lines. Set again
//! without `other`, the next successful build archives `other`: paused,
//! its jobs refused, not unpausable, shown archived; `set-pipeline`
//! unarchives it (paused still). `archive-pipeline` archives by hand.
//!
//! Two instances of one instanced pipeline run side by side, each with
//! its own resource history, jobs and builds; an archived one is destroyed
//! past the node's retention.

use crate::common;

use std::time::Duration;

use common::pipelines::*;
use common::*;
use serde_json::Value;

/// A child pipeline saying `word`.
fn child(word: &str) -> String {
    format!("jobs:\n- name: hello\n  plan:\n  - task: say\n    config: {{platform: linux, run: {{path: echo, args: ['{word}']}}}}\n")
}

/// The parent pipeline: `sp` sets `child` (team ""), an instance of
/// `kid` per branch its files name (Concourse's multi-branch example:
/// `load_var` and `across`) and, when `other`, `other`.
fn parent(other: bool) -> String {
    let files = serde_json::json!({
        "child.yml": child("hi from a step"),
        "branches.json": "[\"a\", \"b\"]",
    })
    .to_string();
    let mut p = [
        "resources:",
        "- name: cfg",
        "  type: mock",
        "  check_every: never",
        &format!("  source: {{initial_version: v1, create_files: {files}}}"),
        "jobs:",
        "- name: sp",
        "  plan:",
        "  - get: cfg",
        "  - set_pipeline: child",
        "    file: cfg/child.yml",
        "    team: \"\"",
        "  - load_var: branches",
        "    file: cfg/branches.json",
        "  - set_pipeline: kid",
        "    across: [{var: branch, values: ((.:branches))}]",
        "    file: cfg/child.yml",
        "    instance_vars: {branch: ((.:branch))}",
        "",
    ]
    .join("\n");
    if other {
        p.push_str("  - set_pipeline: other\n    file: cfg/child.yml\n");
    }
    p
}

/// The team's pipelines by name.
fn pipelines(url: &str) -> Vec<Value> {
    let out = ok(&client(url, &["pipelines", "--json"]));
    serde_json::from_str::<Vec<Value>>(&out).unwrap()
}

/// Pipeline `name` as listed.
fn listed(url: &str, name: &str) -> Value {
    pipelines(url)
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no pipeline {name}"))
}

/// A command that must fail with one line containing `want`.
fn refused(out: &std::process::Output, want: &str) {
    let (stdout, stderr) = text(out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains(want), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

fn set_pipeline_steps_set_and_archive_child_pipelines(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let file = dir.path().join("parent.yml");
    write(&file, parent(true));
    let file = file.to_str().unwrap();
    ok(&client(url, &["set-pipeline", "-p", "parent", "-c", file]));
    ok(&client(url, &["unpause-pipeline", "-p", "parent"]));
    ok(&client(url, &["check-resource", "-r", "parent/cfg"]));

    // Concourse's lines on stdout: the difference, what is set, done.
    let out = ok(&client(url, &["trigger-job", "-j", "parent/sp", "--watch"]));
    assert!(out.contains("+  - task: say\n"), "{out}");
    assert!(out.contains("setting pipeline: child\ndone\n"), "{out}");
    assert!(out.contains("setting pipeline: other\ndone\n"), "{out}");
    for branch in ["a", "b"] {
        let name = format!("kid/branch:{branch}");
        assert!(
            out.contains(&format!("setting pipeline: {name}\ndone\n")),
            "{out}"
        );
        let kid = listed(url, &name);
        assert_eq!(
            kid["instance_vars"],
            serde_json::json!({ "branch": branch })
        );
    }
    // Set by a step: unpaused, not archived, and it runs.
    let set = listed(url, "child");
    assert_eq!(
        (&set["paused"], &set["archived"]),
        (&false.into(), &false.into())
    );
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "other/hello", "--watch"],
    ));
    assert!(out.contains("hi from a step"), "{out}");

    // The parent's next successful build no longer sets `other`: archived.
    write(&dir.path().join("parent.yml"), parent(false));
    ok(&client(url, &["set-pipeline", "-p", "parent", "-c", file]));
    let out = ok(&client(url, &["trigger-job", "-j", "parent/sp", "--watch"]));
    assert!(out.contains("no changes to apply.\n"), "{out}");
    let other = wait_for("other to be archived", Duration::from_secs(30), || {
        let p = listed(url, "other");
        (p["archived"] == true).then_some(p)
    });
    assert_eq!(other["paused"], true, "{other}");
    assert_eq!(listed(url, "child")["archived"], false);
    let table = ok(&client(url, &["pipelines"]));
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("other") && l.contains("true  ")),
        "{table}"
    );
    // Its jobs are refused, it cannot be unpaused; its builds are kept.
    refused(
        &client(url, &["trigger-job", "-j", "other/hello"]),
        "pipeline \"other\" is archived",
    );
    refused(
        &client(url, &["unpause-pipeline", "-p", "other"]),
        "is archived",
    );
    refused(
        &client(url, &["check-resource", "-r", "other/cfg"]),
        "is archived",
    );
    assert_eq!(job_builds(url, "other", "hello").len(), 1);
    // Set again by hand: unarchived, paused still (as Concourse).
    let child_file = dir.path().join("child.yml");
    write(&child_file, child("back by hand"));
    let child_file = child_file.to_str().unwrap();
    ok(&client(
        url,
        &["set-pipeline", "-p", "other", "-c", child_file],
    ));
    let other = listed(url, "other");
    assert_eq!(
        (&other["paused"], &other["archived"]),
        (&true.into(), &false.into())
    );
    ok(&client(url, &["unpause-pipeline", "-p", "other"]));
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "other/hello", "--watch"],
    ));
    assert!(out.contains("back by hand"), "{out}");

    // By hand, without asking (no terminal; -n): archived, refused.
    let out = ok(&client(url, &["archive-pipeline", "-p", "child", "-n"]));
    assert!(out.contains("archived 'child'"), "{out}");
    assert_eq!(listed(url, "child")["archived"], true);
    refused(
        &client(url, &["trigger-job", "-j", "child/hello"]),
        "is archived",
    );
    refused(
        &client(url, &["archive-pipeline", "-p", "nope"]),
        "not found",
    );
    // The parent's step sets it again: unarchived and, set by a step,
    // unpaused (Concourse's `paused AND NOT archived`).
    let out = ok(&client(url, &["trigger-job", "-j", "parent/sp", "--watch"]));
    assert!(out.contains("setting pipeline: child\ndone\n"), "{out}");
    let set = listed(url, "child");
    assert_eq!(
        (&set["paused"], &set["archived"]),
        (&false.into(), &false.into())
    );
}

#[test]
fn set_pipeline_steps_set_and_archive_child_pipelines_on_sqlite() {
    set_pipeline_steps_set_and_archive_child_pipelines(DbKind::Sqlite);
}

#[test]
fn set_pipeline_steps_set_and_archive_child_pipelines_on_postgres() {
    set_pipeline_steps_set_and_archive_child_pipelines(DbKind::Postgres);
}

/// An instanced pipeline: each instance's `((branch))` is its instance var.
const INSTANCED: &str = "resources:\n- name: m\n  type: mock\n  check_every: never\n  source: {initial_version: ((branch))-v0}\n\
jobs:\n- name: j\n  plan:\n  - get: m\n    trigger: true\n  - task: t\n    config: {platform: linux, run: {path: echo, args: ['on ((branch))']}}\n";

const M: Input = Input {
    name: "m",
    key: "version",
};

#[test]
fn two_instances_of_one_pipeline_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    // Archived pipelines are destroyed 2 seconds after (Concourse v8).
    let mut args = vec!["--archived-pipeline-retention-secs", "2"];
    if std::env::var_os("GANTRY_REQUIRE_RUNC").is_some() {
        args.extend(["--backend", "runc"]);
    }
    let node = quickstart(dir.path(), &db, &args);
    let url = &node.url;
    let file = dir.path().join("p.yml");
    write(&file, INSTANCED);
    let file = file.to_str().unwrap();
    // Either way fly names an instance.
    let out = ok(&client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "--instance-var",
            "branch=main",
            "-c",
            file,
        ],
    ));
    assert!(out.contains("pipeline p/branch:main set"), "{out}");
    ok(&client(
        url,
        &["set-pipeline", "-p", "p/branch:dev", "-c", file],
    ));
    let listed: Vec<(Value, Value)> = pipelines(url)
        .into_iter()
        .map(|p| (p["name"].clone(), p["instance_vars"].clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("p/branch:dev".into(), serde_json::json!({"branch": "dev"})),
            (
                "p/branch:main".into(),
                serde_json::json!({"branch": "main"})
            ),
        ]
    );
    let table = ok(&client(url, &["pipelines"]));
    assert!(
        table.contains("p/branch:dev") && table.contains("p/branch:main"),
        "{table}"
    );

    // Each instance has its own resource history, jobs and builds.
    for branch in ["main", "dev"] {
        let p = format!("p/branch:{branch}");
        ok(&client(url, &["unpause-pipeline", "-p", &p]));
        let from = format!("version:{branch}-v1");
        ok(&client(
            url,
            &["check-resource", "-r", &format!("{p}/m"), "--from", &from],
        ));
    }
    for branch in ["main", "dev"] {
        let escaped = format!("p%2Fbranch:{branch}");
        let build = wait_run_of(url, &escaped, "j", M, &format!("{branch}-v1"), "succeeded");
        let out = ok(&client(
            url,
            &["builds", "-j", &format!("p/branch:\"{branch}\"/j")],
        ));
        assert!(out.contains(&build["id"].to_string()), "{out}");
        assert_eq!(runs_of(url, &escaped, "j", M).len(), 1);
        let versions = ok(&client(
            url,
            &["resource-versions", "-r", &format!("p/branch:{branch}/m")],
        ));
        assert!(versions.contains(&format!("{branch}-v1")), "{versions}");
        assert!(
            !versions.contains(if branch == "main" { "dev-v" } else { "main-v" }),
            "{versions}"
        );
    }
    // The log of a build says its instance's var.
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "p/branch:dev/j", "--watch"],
    ));
    assert!(out.contains("on dev"), "{out}");
    // Concourse's query parameters name an instance in the API too.
    let p = api(url, "/api/v1/teams/main/pipelines/p?vars.branch=%22main%22");
    assert_eq!(p["name"], "p/branch:main", "{p}");
    // Archiving one leaves the other.
    ok(&client(url, &["archive-pipeline", "-p", "p/branch:dev"]));
    let states: Vec<Value> = pipelines(url)
        .into_iter()
        .map(|p| p["archived"].clone())
        .collect();
    assert_eq!(states, [Value::Bool(true), Value::Bool(false)]);
    // Past the retention, the archived one is destroyed, its builds kept.
    wait_for(
        "the archived instance to be destroyed",
        Duration::from_secs(30),
        || {
            let names: Vec<Value> = pipelines(url)
                .into_iter()
                .map(|p| p["name"].clone())
                .collect();
            (names == [Value::from("p/branch:main")]).then_some(())
        },
    );
    let out = ok(&client(url, &["builds", "-j", "p/branch:dev/j"]));
    assert!(out.contains("succeeded"), "{out}");
    refused(
        &client(url, &["set-pipeline", "-p", "p/branch", "-c", file]),
        "KEY:VALUE",
    );
}

/// Concourse's `testflight/fixtures/archive-pipeline-{1,2,3}.yml`: a `mock`
/// resource whose files hold the child pipeline (`normal-job`) and a var
/// file, and job `job` that gets it and, when `sets`, sets
/// `((pipeline_name))` from them.
fn archiving_parent(job: &str, sets: bool) -> String {
    let files = serde_json::json!({
        "pipeline.yml": "jobs:\n- name: normal-job\n  public: true\n  plan:\n  - task: a-task\n    config: {platform: linux, run: {path: echo, args: ['hello world']}}\n",
        "name.yml": "name: somebody\n",
    })
    .to_string();
    let mut p = format!(
        "resources:\n- name: some-resource\n  type: mock\n  check_every: never\n  source: {{initial_version: v1, create_files: {files}}}\n\
         jobs:\n- name: {job}\n  public: true\n  plan:\n  - get: some-resource\n"
    );
    if sets {
        p.push_str(
            "  - set_pipeline: ((pipeline_name))\n    file: some-resource/pipeline.yml\n    var_files: [some-resource/name.yml]\n    vars: {greetings: hello}\n",
        );
    }
    p
}

/// Waits until `get-pipeline -p child` fails as fly's does for an
/// archived pipeline (Concourse's config route answers 404): "pipeline
/// main/child not found", as for a pipeline that never was.
fn wait_not_found(url: &str, why: &str) {
    wait_for(why, Duration::from_secs(40), || {
        let out = client(url, &["get-pipeline", "-p", "child"]);
        let (_, stderr) = text(&out);
        (!out.status.success() && stderr.contains("pipeline main/child not found")).then_some(())
    });
}

/// Concourse's `testflight/automatic_archiving_test.go`: a child pipeline
/// is archived, and `get-pipeline` of it then says it is not found, when
/// the parent's job runs again without its `set_pipeline` step ("when the
/// step is removed from the parent pipeline config"), when the job is gone
/// from the parent ("when the job is removed ..."), and when the parent
/// is archived ("when the parent pipeline is archived").
fn archived_children_are_not_found(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let set_parent = |job: &str, sets: bool| {
        let file = dir.path().join("parent.yml");
        write(&file, archiving_parent(job, sets));
        let file = file.to_str().unwrap();
        let args = ["set-pipeline", "-p", "parent", "-c", file];
        let vars = ["-v", "pipeline_name=child"];
        ok(&client(url, &[&args[..], &vars[..]].concat()));
    };
    // Concourse's JustBeforeEach: the parent's `sp` sets the child.
    let sets_child = || {
        set_parent("sp", true);
        let out = ok(&client(url, &["trigger-job", "-j", "parent/sp", "--watch"]));
        assert!(out.contains("setting pipeline: child\ndone\n"), "{out}");
        let out = ok(&client(url, &["get-pipeline", "-p", "child"]));
        assert!(out.contains("normal-job"), "{out}");
    };
    set_parent("sp", true);
    ok(&client(url, &["unpause-pipeline", "-p", "parent"]));
    ok(&client(
        url,
        &["check-resource", "-r", "parent/some-resource"],
    ));
    sets_child();

    // The step removed: the job's next build archives the child.
    set_parent("sp", false);
    let out = ok(&client(url, &["trigger-job", "-j", "parent/sp", "--watch"]));
    assert!(!out.contains("setting pipeline"), "{out}");
    wait_not_found(url, "the child to be archived: its job no longer sets it");
    assert_eq!(listed(url, "child")["archived"], true);
    // Kept, though: set again by the step, it is back.
    sets_child();
    assert_eq!(listed(url, "child")["archived"], false);

    // The job removed from the parent: archived with no build.
    set_parent("sp-1", true);
    wait_not_found(url, "the child to be archived: its job is gone");

    // The parent archived: its child is archived too.
    sets_child();
    ok(&client(url, &["archive-pipeline", "-n", "-p", "parent"]));
    wait_not_found(url, "the child to be archived: its parent is");
    // A pipeline that never was says the same.
    let out = client(url, &["get-pipeline", "-p", "nowhere"]);
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("pipeline main/nowhere not found"),
        "{out:?}"
    );
}

#[test]
fn archived_children_are_not_found_on_sqlite() {
    archived_children_are_not_found(DbKind::Sqlite);
}

#[test]
fn archived_children_are_not_found_on_postgres() {
    archived_children_are_not_found(DbKind::Postgres);
}

/// A pipeline whose job `sp` writes a config (`normal-job` saying `hello
/// world`) and sets `self` from it with `instance_vars` naming the
/// `branch:main` instance; its own `normal-job` says `hello from the
/// first config`.
const SETS_SELF: &str = r#"
jobs:
- name: sp
  plan:
  - task: make
    config:
      platform: linux
      outputs: [{name: out}]
      run:
        path: sh
        args:
        - -c
        - |
          cat > out/pipeline.yml <<'EOF'
          jobs:
          - name: normal-job
            plan:
            - task: a-task
              config: {platform: linux, run: {path: echo, args: [hello world]}}
          EOF
  - set_pipeline: self
    file: out/pipeline.yml
    instance_vars: {branch: main}
- name: normal-job
  plan:
  - task: a-task
    config: {platform: linux, run: {path: echo, args: [hello from the first config]}}
"#;

/// Concourse's `testflight/set-pipeline-step_test.go` "set self" (its
/// fixture's job `sp` sets `self`), with `instance_vars`: the config is
/// stored (Concourse stores it; a whole pipeline is not refused for one
/// job's step) and its other jobs run. Its `sp` sets the build's own
/// instance when they name it; otherwise only that step errors, naming
/// both (Concourse quietly sets the build's own instance; Gantry does not
/// ignore the vars it was given).
fn set_pipeline_self_with_instance_vars(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    let file = dir.path().join("self.yml");
    write(&file, SETS_SELF);
    let file = file.to_str().unwrap();
    for instance in ["me/branch:dev", "me/branch:main"] {
        ok(&client(url, &["set-pipeline", "-p", instance, "-c", file]));
        ok(&client(url, &["unpause-pipeline", "-p", instance]));
    }
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "me/branch:dev/normal-job", "--watch"],
    ));
    assert!(out.contains("hello from the first config"), "{out}");

    // The `dev` instance's step names `main`: that step errors, the
    // pipeline stays as it was.
    let out = client(url, &["trigger-job", "-j", "me/branch:dev/sp", "--watch"]);
    let said = said(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(
            r#"set_pipeline: instance_vars: self is the build's own pipeline, instance and all ("me/branch:dev", not "me/branch:main")"#
        ),
        "{said}"
    );
    assert!(!said.contains("setting pipeline"), "{said}");
    let stored = ok(&client(url, &["get-pipeline", "-p", "me/branch:dev"]));
    assert_eq!(stored, SETS_SELF);

    // The `main` instance's names itself: set, as Concourse's "set self".
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "me/branch:main/sp", "--watch"],
    ));
    assert!(
        out.contains("setting pipeline: me/branch:main\ndone\n"),
        "{out}"
    );
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "me/branch:main/normal-job", "--watch"],
    ));
    assert!(out.contains("hello world"), "{out}");
}

#[test]
fn set_pipeline_self_with_instance_vars_errors_only_its_step_on_sqlite() {
    set_pipeline_self_with_instance_vars(DbKind::Sqlite);
}

#[test]
fn set_pipeline_self_with_instance_vars_errors_only_its_step_on_postgres() {
    set_pipeline_self_with_instance_vars(DbKind::Postgres);
}

/// Concourse's `testflight/fixtures/simple.yml` with a `mock` input `m`
/// (`check_every: never`) and a downstream job `down` taking `m` only
/// through `passed` of the job: `simple`, or `rename-simple` with
/// `old_name: simple` (Concourse's `fixtures/rename-simple.yml`).
fn simple_pipeline(renamed: bool) -> String {
    let (job, old) = if renamed {
        ("rename-simple", "  old_name: simple\n")
    } else {
        ("simple", "")
    };
    format!(
        "resources:\n- name: m\n  type: mock\n  check_every: never\n  source: {{initial_version: v1}}\n\
         jobs:\n- name: {job}\n{old}  serial: true\n  plan:\n  - get: m\n  - task: simple-task\n    \
         config: {{platform: linux, run: {{path: echo, args: ['Hello, world!']}}}}\n\
         - name: down\n  plan:\n  - get: m\n    passed: [{job}]\n  - task: t\n    \
         config: {{platform: linux, run: {{path: echo, args: [downstream]}}}}\n"
    )
}

/// Sets pipeline `p` from `text` (written under `dir`).
fn set(url: &str, dir: &std::path::Path, p: &str, text: &str) -> String {
    let file = dir.join(format!("{p}.yml"));
    write(&file, text);
    ok(&client(
        url,
        &["set-pipeline", "-p", p, "-c", file.to_str().unwrap()],
    ))
}

/// The build numbers of job `job` of pipeline `p`, oldest first.
fn numbers(url: &str, p: &str, job: &str) -> Vec<i64> {
    job_builds(url, p, job)
        .iter()
        .map(|b| b["build_number"].as_i64().unwrap())
        .collect()
}

/// Triggers job `job` of pipeline `p` by hand and waits for that build to
/// succeed (a build left waiting for its inputs fails the test with why);
/// answers it.
fn run_job(url: &str, p: &str, job: &str) -> Value {
    let before = job_builds(url, p, job).len();
    ok(&client(url, &["trigger-job", "-j", &format!("{p}/{job}")]));
    let at = format!("{p}/{job}");
    wait_until(
        &format!("a build of {at} to succeed"),
        Duration::from_secs(120),
        || match job_builds(url, p, job).get(before) {
            Some(b) if b["status"] == "succeeded" => Ok(b.clone()),
            Some(b)
                if ["failed", "errored", "aborted"]
                    .contains(&b["status"].as_str().unwrap_or("")) =>
            {
                panic!("{at}: {b}")
            }
            b => Err(format!(
                "{b:?}; why: {}",
                text(&client(url, &["why", "-j", &at])).0
            )),
        },
    )
}

/// The version of input `name` build `b` fetched.
fn fetched(url: &str, b: &Value, name: &'static str) -> String {
    let input = Input {
        name,
        key: "version",
    };
    input_of(url, b["id"].as_i64().unwrap(), input).unwrap_or_default()
}

/// Concourse's `testflight/rename_job_test.go` ("Renaming a job retains
/// job history"): a job renamed with `old_name` keeps its builds and their
/// numbers (`builds -j P/rename-simple` lists build 1; the next build is
/// 2), its paused flag, and the versions its builds used, which a
/// downstream job's `passed: [rename-simple]` finds.
fn a_renamed_job_keeps_its_builds(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let node = quickstart_runc(dir.path(), &db);
    let url = &node.url;
    set(url, dir.path(), "p", &simple_pipeline(false));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    ok(&client(url, &["check-resource", "-r", "p/m"]));
    ok(&client(url, &["trigger-job", "-j", "p/simple", "--watch"]));
    let listed = ok(&client(url, &["builds", "-j", "p/simple"]));
    assert!(listed.contains("p/simple"), "{listed}");
    ok(&client(url, &["pause-job", "-j", "p/simple"]));

    set(url, dir.path(), "p", &simple_pipeline(true));
    let listed = ok(&client(url, &["builds", "-j", "p/rename-simple"]));
    assert!(listed.contains("p/rename-simple"), "{listed}");
    assert_eq!(numbers(url, "p", "rename-simple"), [1]);
    let jobs = api(url, "/api/v1/teams/main/pipelines/p/jobs");
    let job = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "rename-simple")
        .unwrap_or_else(|| panic!("{jobs}"));
    assert_eq!(job["paused"], true, "{jobs}");
    ok(&client(url, &["unpause-job", "-j", "p/rename-simple"]));

    // The next build continues the numbers; `passed` finds the version
    // build 1 used under the old name.
    let second = run_job(url, "p", "rename-simple");
    assert_eq!(second["build_number"], 2, "{second}");
    assert_eq!(numbers(url, "p", "rename-simple"), [1, 2]);
    assert!(numbers(url, "p", "simple").is_empty());
    let down = run_job(url, "p", "down");
    assert_eq!(fetched(url, &down, "m"), "v1");

    // Setting the same config again renames nothing more.
    set(url, dir.path(), "p", &simple_pipeline(true));
    assert_eq!(numbers(url, "p", "rename-simple"), [1, 2]);

    // A job whose old name is still in the pipeline is refused, naming
    // the field; nothing is stored.
    let both = format!(
        "{}- name: again\n  old_name: down\n  plan: [{{task: t, config: {{platform: linux, run: {{path: echo}}}}}}]\n",
        simple_pipeline(true)
    );
    let file = dir.path().join("both.yml");
    write(&file, both);
    let out = client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
    );
    refused(
        &out,
        "jobs[again].old_name: job \"down\" is still in the pipeline",
    );
    assert_eq!(numbers(url, "p", "rename-simple"), [1, 2]);
}

#[test]
fn a_renamed_job_keeps_its_builds_on_sqlite() {
    a_renamed_job_keeps_its_builds(DbKind::Sqlite);
}

#[test]
fn a_renamed_job_keeps_its_builds_on_postgres() {
    a_renamed_job_keeps_its_builds(DbKind::Postgres);
}

/// Concourse's `testflight/fixtures/rename-resource.yml` (before the
/// rename, `some-resource` as `fixtures/resource-with-versions.yml`
/// names it), checked never: only the kept history can give its job a
/// version.
fn resource_pipeline(renamed: bool) -> String {
    let (name, old, get) = if renamed {
        (
            "some-new-resource",
            "  old_name: some-resource\n",
            "  - get: some-resource\n    resource: some-new-resource\n",
        )
    } else {
        ("some-resource", "", "  - get: some-resource\n")
    };
    format!(
        "resources:\n- name: {name}\n{old}  type: mock\n  check_every: never\n  source:\n    no_initial_version: true\n\
         jobs:\n- name: some-passing-job\n  plan:\n{get}  - task: print-fetched-stuff\n    config:\n      \
         platform: linux\n      inputs: [{{name: some-resource}}]\n      \
         run: {{path: sh, args: [-c, 'echo fetched version: $(cat some-resource/version)']}}\n"
    )
}

/// Concourse's `testflight/rename_resource_test.go` ("Renaming a resource
/// preserves version history"), on a node keeping a history per pipeline
/// resource (global resources off, Concourse's default) and on one
/// sharing histories by config (Gantry's default): the renamed resource
/// keeps its versions, its pin (with its comment) and its disabled
/// versions, and the next build of its job starts with no new check.
fn a_renamed_resource_keeps_its_versions(kind: DbKind, global: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let flag = format!("--global-resources={global}");
    let node = quickstart_runc_with(dir.path(), &db, &[&flag]);
    let url = &node.url;
    set(url, dir.path(), "p", &resource_pipeline(false));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));
    for v in ["guid1", "guid2", "guid3", "guid4"] {
        let from = format!("version:{v}");
        ok(&client(
            url,
            &["check-resource", "-r", "p/some-resource", "--from", &from],
        ));
    }
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "p/some-passing-job", "--watch"],
    ));
    assert!(out.contains("fetched version: guid4"), "{out}");
    // guid4 disabled, guid3 pinned: what the next build takes.
    ok(&client(
        url,
        &[
            "disable-resource-version",
            "-r",
            "p/some-resource",
            "-v",
            "version:guid4",
        ],
    ));
    ok(&client(
        url,
        &[
            "pin-resource",
            "-r",
            "p/some-resource",
            "-v",
            "version:guid3",
            "--comment",
            "kept",
        ],
    ));

    set(url, dir.path(), "p", &resource_pipeline(true));
    let versions = ok(&client(
        url,
        &["resource-versions", "-r", "p/some-new-resource"],
    ));
    let order: Vec<&str> = versions
        .lines()
        .filter_map(|l| {
            ["guid4", "guid3", "guid2", "guid1"]
                .into_iter()
                .find(|v| l.contains(v))
        })
        .collect();
    assert_eq!(order, ["guid4", "guid3", "guid2", "guid1"], "{versions}");
    let resources = ok(&client(url, &["resources", "-p", "p"]));
    assert!(resources.contains("(kept)"), "{resources}");
    // Pinned guid3 still: the build starts at once, with it.
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "p/some-passing-job", "--watch"],
    ));
    assert!(out.contains("fetched version: guid3"), "{out}");
    // Unpinned, the disabled guid4 stays disabled: guid3 again.
    ok(&client(
        url,
        &["unpin-resource", "-r", "p/some-new-resource"],
    ));
    let out = ok(&client(
        url,
        &["trigger-job", "-j", "p/some-passing-job", "--watch"],
    ));
    assert!(out.contains("fetched version: guid3"), "{out}");
}

#[test]
fn a_renamed_resource_keeps_its_versions_on_sqlite() {
    a_renamed_resource_keeps_its_versions(DbKind::Sqlite, false);
}

#[test]
fn a_renamed_resource_keeps_its_versions_on_postgres() {
    a_renamed_resource_keeps_its_versions(DbKind::Postgres, false);
}

#[test]
fn a_renamed_shared_resource_keeps_its_pin_and_disabled_versions_on_sqlite() {
    a_renamed_resource_keeps_its_versions(DbKind::Sqlite, true);
}

#[test]
fn a_renamed_shared_resource_keeps_its_pin_and_disabled_versions_on_postgres() {
    a_renamed_resource_keeps_its_versions(DbKind::Postgres, true);
}
