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
