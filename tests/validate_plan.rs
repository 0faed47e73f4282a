//! `gantry validate-plan`: accepts every pipeline of concourse/examples (and
//! some of Concourse's own testflight pipelines), names every problem of bad
//! ones with its path, and fails in one line on a bad file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn run(file: &Path, extra: &[&str]) -> Output {
    gantry()
        .arg("validate-plan")
        .arg(file)
        .args(extra)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every `.yml` under a directory, sorted.
fn yml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(yml_files(&p));
        } else if p.extension().is_some_and(|x| x == "yml") {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn validate(yaml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pipeline.yml");
    write(&f, yaml);
    let out = run(&f, &[]);
    (out.status.code().unwrap(), text(&out.stderr))
}

#[test]
fn accepts_every_pipeline_of_concourse_examples() {
    let dir = fixtures().join("concourse-examples");
    let mut checked = 0;
    for f in yml_files(&dir) {
        let rel = f.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
        // Not pipelines: a vars file and ytt templates (checked below).
        if rel == "vars-file.yml" || rel.starts_with("templates/") {
            continue;
        }
        let out = run(&f, &[]);
        assert!(
            out.status.success(),
            "{rel}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains(": valid pipeline ("),
            "{rel}: {}",
            text(&out.stdout)
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} pipelines found");
}

#[test]
fn accepts_some_of_concourses_testflight_pipelines() {
    let files = yml_files(&fixtures().join("concourse-testflight"));
    assert!(files.len() >= 10);
    for f in files {
        let out = run(&f, &[]);
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            text(&out.stderr)
        );
    }
}

#[test]
fn vars_are_filled_from_files_and_flags_and_required_once_given() {
    let dir = fixtures().join("concourse-examples");
    let pipeline = dir.join("pipeline-vars.yml");
    let vars_file = dir.join("vars-file.yml");
    let out = run(&pipeline, &["-l", vars_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).ends_with("pipeline-vars.yml: valid pipeline (2 jobs, 0 resources)\n"),
        "{}",
        text(&out.stdout)
    );

    let out = run(&pipeline, &["-v", "first=initial", "-v", "number=9000"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("unfilled var ((hello))"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = run(
        &dir.join("multi-branch/parent.yml"),
        &["-v", "instance_pipeline_name=multi-branch"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn ytt_templates_and_vars_files_are_named_for_what_they_are() {
    let dir = fixtures().join("concourse-examples");
    let out = run(&dir.join("templates/simple/template.yml"), &[]);
    assert!(one_error_line(&out).contains("a ytt template"));
    let out = run(&dir.join("vars-file.yml"), &[]);
    assert!(one_error_line(&out).contains("jobs: a pipeline must have at least one job"));
}

#[test]
fn rejects_each_problem_naming_it_with_its_path() {
    let base = |plan: &str| {
        format!("resources:\n- name: repo\n  type: git\njobs:\n- name: build\n  plan:\n  - get: repo\n{plan}")
    };
    let cases = [
        (
            base("  - put: nope\n"),
            "jobs[build].plan[1].put: unknown resource \"nope\"",
        ),
        (
            base("  - task: t\n    get: repo\n    file: repo/t.yml\n"),
            "jobs[build].plan[1]: a step has exactly one kind, this one has 2: task and get",
        ),
        (
            base("- name: build\n  plan: []\n"),
            "jobs: jobs[0] and jobs[1] have the same name \"build\"",
        ),
        (
            base("  - task: t\n    file: repo/t.yml\n    priviledged: true\n"),
            "jobs[build].plan[1]: unknown field \"priviledged\"",
        ),
        (
            base("  - task: t\n    file: repo/t.yml\n    timeout: 10 mins\n"),
            "jobs[build].plan[1].timeout: invalid duration \"10 mins\"",
        ),
        (
            base("  - get: again\n    resource: repo\n    passed: [tset]\n"),
            "jobs[build].plan[1].passed: no job matches \"tset\"",
        ),
        (
            base("  - task: t\n    file: repo/t.yml\n    attempts: 0\n"),
            "jobs[build].plan[1].attempts: must be at least 1, not 0",
        ),
        (
            base("  - task: t\n"),
            "jobs[build].plan[1].task: must specify either `file:` or `config:`",
        ),
    ];
    for (yaml, expected) in cases {
        let (code, err) = validate(&yaml);
        assert_eq!(code, 1, "{yaml}");
        assert!(
            err.contains(expected),
            "for\n{yaml}\nexpected {expected:?} in {err:?}"
        );
    }
}

#[test]
fn prints_every_problem_of_one_file_one_per_line() {
    let (code, err) = validate(
        "jobs:\n- name: a\n  plan:\n  - get: nope\n  - put: x\n    get: y\n  - do: []\n    bogus: 1\n- name: a\n",
    );
    assert_eq!(code, 1);
    for expected in [
        "jobs[a].plan[0].get: unknown resource \"nope\"",
        "jobs[a].plan[1]: a step has exactly one kind",
        "jobs[a].plan[2]: unknown field \"bogus\"",
        "jobs: jobs[0] and jobs[1] have the same name \"a\"",
    ] {
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    assert!(err.lines().all(|l| l.contains("pipeline.yml: ")), "{err}");
}

#[test]
fn a_bare_plan_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("plan.yml");
    write(
        &f,
        "- task: hello\n  config: {platform: linux, run: {path: echo, args: [hi]}}\n- try: {load_var: v, file: out/v}\n",
    );
    let out = run(&f, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("plan.yml: valid plan (2 steps)\n"));
}

#[test]
fn bad_yaml_and_a_missing_file_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yml");
    write(&f, "jobs: [\n  - name: a\n");
    let err = one_error_line(&run(&f, &[]));
    assert!(err.contains("bad.yml: not valid YAML"), "{err}");

    let out = gantry()
        .args(["validate-plan", "/does/not/exist.yml"])
        .output()
        .unwrap();
    let err = one_error_line(&out);
    assert!(err.contains("/does/not/exist.yml: cannot read"), "{err}");

    let out = gantry()
        .args(["validate-plan", "/does/not/exist.yml", "-l", "/no/vars.yml"])
        .output()
        .unwrap();
    assert!(one_error_line(&out).contains("cannot read vars file /no/vars.yml"));
}

/// What `gantry validate-plan` reads pipelines with, the language crate,
/// is built without a database or the engine: its dependency tree (normal
/// dependencies, this target) holds no sqlx, no actix and no
/// `gantry-actors`.
#[test]
fn the_language_crate_is_built_without_a_database() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path"])
        .arg(&manifest)
        .args(["-p", "gantry-language", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree: {}", text(&out.stderr));
    let tree = text(&out.stdout);
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The tree is the language crate's, and read whole.
    assert_eq!(names.first(), Some(&"gantry-language"), "{tree}");
    assert!(names.contains(&"serde_yaml"), "{tree}");
    let forbidden: Vec<&&str> = names
        .iter()
        .filter(|n| n.starts_with("sqlx") || n.starts_with("actix") || **n == "gantry-actors")
        .collect();
    assert!(
        forbidden.is_empty(),
        "gantry-language depends on {forbidden:?}:\n{tree}"
    );
}
