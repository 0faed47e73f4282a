//! Tests of reading and checking pipelines and plans: each kind of problem
//! is reported with its path, and valid documents come out typed.

use std::time::Duration;

use super::*;

const VALID: &str = r#"
task-config: &cfg
  platform: linux
  image_resource: {type: registry-image, source: {repository: busybox}}
  run: {path: echo, args: [hi]}
resources:
- name: repo
  type: git
  check_every: 30m
  source: {uri: https://example.com/repo.git, branch: ((branch))}
- name: image
  type: registry-image
  source: {repository: busybox}
resource_types:
- name: custom
  type: registry-image
  source: {repository: me/custom}
groups:
- name: all
  jobs: ["*"]
jobs:
- name: test
  serial: true
  build_log_retention: {builds: 10}
  plan:
  - in_parallel:
      limit: 2
      fail_fast: true
      steps:
      - get: repo
        trigger: true
        version: every
      - get: image
  - task: unit
    file: repo/ci/unit.yml
    image: image
    timeout: 1h30m
    attempts: 3
    input_mapping: {source: repo}
    container_limits: {memory: 1GB, cpu: 512}
  on_failure:
    task: notify
    config:
      <<: *cfg
- name: ship
  plan:
  - get: repo
    passed: [test]
  - load_var: version
    file: repo/version
  - across:
    - var: target
      values: [a, b]
      max_in_flight: all
    fail_fast: true
    put: image
    inputs: [repo]
    params: {tag: "((.:version))-((.:target))"}
  - try:
      do:
      - set_pipeline: self
        file: repo/ci/pipeline.yml
"#;

fn problems(yaml: &str) -> String {
    load(yaml, None).unwrap_err().join("\n")
}

fn pipeline_with(plan: &str) -> String {
    format!(
        "resources:\n- name: repo\n  type: git\njobs:\n- name: build\n  plan:\n{plan}- name: other\n  plan:\n  - get: repo\n"
    )
}

#[test]
fn a_valid_pipeline_comes_out_typed() {
    let Document::Pipeline(p) = load(VALID, None).unwrap() else {
        panic!("a pipeline")
    };
    assert_eq!(p.jobs.len(), 2);
    assert_eq!(p.ignored_keys, vec!["task-config"]);
    let test = p.job("test").unwrap();
    assert!(test.serial);
    assert_eq!(test.effective_max_in_flight(), Some(1));
    let StepKind::InParallel(par) = &test.plan[0].kind else {
        panic!("in_parallel")
    };
    assert_eq!(
        (par.limit, par.fail_fast, par.steps.len()),
        (Some(2), true, 2)
    );
    let unit = &test.plan[1];
    assert_eq!(unit.attempts, Some(3));
    assert_eq!(
        unit.timeout.as_ref().unwrap().duration,
        Some(Duration::from_secs(5400))
    );
    let StepKind::Task(t) = &unit.kind else {
        panic!("task")
    };
    assert_eq!(t.container_limits.unwrap().memory, Some(1 << 30));
    assert_eq!(t.input_mapping["source"], "repo");
    let notify = test.hooks.on_failure.as_ref().unwrap();
    let StepKind::Task(n) = &notify.kind else {
        panic!("task")
    };
    assert!(
        n.config.as_ref().unwrap().get("platform").is_some(),
        "merge key applied"
    );
    let ship = p.job("ship").unwrap();
    let across = ship.plan[2].across.as_ref().unwrap();
    assert_eq!(across.vars[0].max_in_flight, Some(MaxInFlight::All));
    assert!(
        matches!(&ship.plan[2].kind, StepKind::Put(put) if put.inputs == Some(PutInputs::Listed(vec!["repo".into()])))
    );
    assert!(matches!(
        p.job("nope"),
        Err(super::model::PipelineError::NoSuchJob { .. })
    ));
}

#[test]
fn a_bare_plan_is_accepted() {
    let plan = "- task: a\n  config: {platform: linux, run: {path: ls}}\n- get: x\n";
    assert!(matches!(load(plan, None), Ok(Document::Plan(s)) if s.len() == 2));
}

#[test]
fn an_undeclared_resource_is_named_with_its_path() {
    let all = problems(&pipeline_with(
        "  - get: repo\n  - put: nope\n  - get: src\n    resource: missing\n",
    ));
    assert!(
        all.contains("jobs[build].plan[1].put: unknown resource \"nope\" (declared: repo)"),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[2].resource: unknown resource \"missing\""),
        "{all}"
    );
}

#[test]
fn a_step_with_two_kinds_or_none_is_named() {
    let all = problems(&pipeline_with(
        "  - get: repo\n    put: repo\n  - timeout: 5m\n",
    ));
    assert!(
        all.contains(
            "jobs[build].plan[0]: a step has exactly one kind, this one has 2: put and get"
        ),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[1]: no step kind: a step needs one of"),
        "{all}"
    );
    assert!(all.contains("(found only: timeout)"), "{all}");
}

#[test]
fn duplicate_names_are_named() {
    let all = problems(
        "resources:\n- {name: r, type: git}\n- {name: r, type: git}\njobs:\n- name: a\n  plan: [{get: r}, {get: r}]\n- name: a\n  plan: []\n",
    );
    assert!(
        all.contains("jobs: jobs[0] and jobs[1] have the same name \"a\""),
        "{all}"
    );
    assert!(
        all.contains("resources: resources[0] and resources[1] have the same name \"r\""),
        "{all}"
    );
    assert!(
        all.contains("jobs[a].plan[1].get: repeated name \"r\""),
        "{all}"
    );
}

#[test]
fn unknown_keys_are_named_at_every_level() {
    let all = problems(
        "resources:\n- {name: repo, type: git, sorce: {}}\njobs:\n- name: build\n  bogus: 1\n  plan:\n  - get: repo\n    triger: true\n  - in_parallel: {steps: [], limt: 2}\n  - task: t\n    config: {platform: linux, run: {path: ls, shell: sh}, ouputs: []}\n  - across: [{var: x, values: [1], max: 2}]\n    do: []\n",
    );
    for expected in [
        "resources[repo]: unknown field \"sorce\"",
        "jobs[build]: unknown field \"bogus\"",
        "jobs[build].plan[0]: unknown field \"triger\" (a get step takes:",
        "jobs[build].plan[1].in_parallel: unknown field \"limt\"",
        "jobs[build].plan[2].config: unknown field \"ouputs\"",
        "jobs[build].plan[2].config.run: unknown field \"shell\"",
        "jobs[build].plan[3].across[0]: unknown field \"max\"",
    ] {
        assert!(all.contains(expected), "expected {expected:?} in:\n{all}");
    }
}

#[test]
fn wrong_types_are_named() {
    let all = problems(&pipeline_with(
        "  - get: repo\n    trigger: yes please\n    passed: other\n  - task: t\n    file: x/t.yml\n    privileged: 1\n    params: [a]\n",
    ));
    assert!(
        all.contains("jobs[build].plan[0].trigger: must be true or false, not a string"),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[0].passed: must be a list of strings, not a string"),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[1].privileged: must be true or false"),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[1].params: must be a mapping, not a list"),
        "{all}"
    );
}

#[test]
fn a_task_needs_exactly_one_of_file_and_config() {
    let all = problems(&pipeline_with(
        "  - get: repo\n  - task: none\n  - task: both\n    file: repo/t.yml\n    config: {platform: linux, run: {path: ls}}\n  - task: bad\n    config: {run: {}}\n",
    ));
    assert!(
        all.contains("jobs[build].plan[1].task: must specify either `file:` or `config:`"),
        "{all}"
    );
    assert!(
        all.contains(
            "jobs[build].plan[2].task: must specify one of `file:` or `config:`, not both"
        ),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[3].config: missing field platform"),
        "{all}"
    );
    assert!(
        all.contains("jobs[build].plan[3].config: missing field run.path"),
        "{all}"
    );
}

#[test]
fn modifiers_are_checked() {
    let all = problems(&pipeline_with(
        "  - get: repo\n    timeout: 5 minutes\n  - get: repo2\n    resource: repo\n    attempts: 0\n  - in_parallel: {limit: 0, steps: []}\n  - across: []\n    do: []\n  - across: [{var: v, values: x, max_in_flight: 0}, {var: v}]\n    do: []\n  - do: []\n    fail_fast: true\n",
    ));
    for expected in [
        "jobs[build].plan[0].timeout: invalid duration \"5 minutes\"",
        "jobs[build].plan[1].attempts: must be at least 1, not 0",
        "jobs[build].plan[2].in_parallel.limit: must be at least 1, not 0",
        "jobs[build].plan[3].across: no vars specified",
        "jobs[build].plan[4].across[0].values: must be a list",
        "jobs[build].plan[4].across[0].max_in_flight: must be at least 1, not 0",
        "jobs[build].plan[4].across[1]: repeated var name \"v\"",
        "jobs[build].plan[5]: unknown field \"fail_fast\"",
    ] {
        assert!(all.contains(expected), "expected {expected:?} in:\n{all}");
    }
}

#[test]
fn passed_must_name_a_job_that_uses_the_resource() {
    let all = problems(
        "resources:\n- {name: repo, type: git}\n- {name: other, type: git}\njobs:\n- name: a\n  plan: [{get: other}]\n- name: b\n  plan: [{get: repo, passed: [nope, a]}]\n",
    );
    assert!(
        all.contains("jobs[b].plan[0].passed: no job matches \"nope\""),
        "{all}"
    );
    assert!(
        all.contains("jobs[b].plan[0].passed: job \"a\" does not get or put resource \"repo\""),
        "{all}"
    );
}

#[test]
fn pipeline_level_checks_match_concourse() {
    let all = problems(
        "resources:\n- {name: unused, type: git}\n- {name: r}\ngroups:\n- {name: g, jobs: [x*], resources: [nope]}\nvar_sources:\n- {name: v, type: consul}\njobs:\n- name: a\n  build_logs_to_retain: 2\n  build_log_retention: {builds: 1}\n  plan: [{get: r, passed: [b]}]\n- name: b\n  plan: [{get: r, passed: [a]}]\n",
    );
    for expected in [
        "resources[r]: missing field type",
        "resources[unused]: resource is not used by any job",
        "groups[g].jobs: no job matches \"x*\"",
        "groups[g].resources: unknown resource \"nope\"",
        "jobs[a]: job belongs to no group",
        "var_sources[v].type: unknown credential manager type \"consul\"",
        "jobs[a]: can't use both build_log_retention and build_logs_to_retain",
        "jobs: the passed constraints form a cycle",
    ] {
        assert!(all.contains(expected), "expected {expected:?} in:\n{all}");
    }
    assert_eq!(
        problems("foo: bar\n"),
        "jobs: a pipeline must have at least one job"
    );
}

#[test]
fn vars_are_optional_for_validation_and_required_with_vars() {
    let doc = "jobs:\n- name: ((first))-job\n  plan:\n  - task: t\n    attempts: ((n))\n    timeout: ((t))\n    config: {platform: linux, run: {path: echo, args: [\"Hello, ((who))\"]}}\n";
    assert!(load(doc, None).is_ok());
    let mut vars = Vars::new();
    vars.set_flag("first=a").unwrap();
    let err = load(doc, Some(&vars)).unwrap_err().join("\n");
    for name in ["((n))", "((t))", "((who))"] {
        assert!(err.contains(&format!("unfilled var {name}")), "{err}");
    }
    vars.load_yaml("n: 2\nt: 90s\nwho: HAL\n").unwrap();
    let Document::Pipeline(p) = load(doc, Some(&vars)).unwrap() else {
        panic!("a pipeline")
    };
    let job = p.job("a-job").unwrap();
    assert_eq!(
        job.plan[0].attempts,
        Some(2),
        "a whole-value var keeps its type"
    );
    assert_eq!(
        job.plan[0].timeout.as_ref().unwrap().duration,
        Some(Duration::from_secs(90))
    );
}

#[test]
fn a_filled_var_of_the_wrong_type_is_reported() {
    let doc = "jobs:\n- name: j\n  plan:\n  - task: t\n    file: x/t.yml\n    attempts: ((n))\n";
    let mut vars = Vars::new();
    vars.set_flag("n=three").unwrap();
    let err = load(doc, Some(&vars)).unwrap_err().join("\n");
    assert!(
        err.contains("jobs[j].plan[0].attempts: must be an integer, not a string"),
        "{err}"
    );
}

#[test]
fn pipeline_load_fills_vars_and_finds_the_job() {
    let mut vars = Vars::new();
    vars.set_flag("branch=main").unwrap();
    let p = Pipeline::load(VALID, &vars).unwrap();
    assert_eq!(
        p.resource("repo").unwrap().source["branch"],
        serde_yaml::Value::String("main".into())
    );
    assert!(Pipeline::load(VALID, &Vars::new()).unwrap_err()[0].contains("unfilled var ((branch))"));
}

#[test]
fn bad_documents_are_one_problem() {
    assert!(load("a: [\n", None).unwrap_err()[0].starts_with("not valid YAML"));
    assert!(load("a: 1\na: 2\n", None).unwrap_err()[0].starts_with("not valid YAML"));
    assert!(load("", None).unwrap_err()[0].contains("empty document"));
    assert!(load("#@ load(\"x\")\njobs: []\n", None).unwrap_err()[0].contains("ytt template"));
    assert!(load("42\n", None).unwrap_err()[0].contains("not a number"));
}

#[test]
fn job_globs_follow_go_path_match() {
    use super::model::glob_match;
    assert!(glob_match("deploy-*", "deploy-dev"));
    assert!(glob_match("a?c", "abc"));
    assert!(!glob_match("a?c", "ac"));
    assert!(glob_match("\\*", "*"));
    assert!(!glob_match("build", "build-2"));
    assert!(glob_match("*", ""));
    assert!(glob_match("a*b*c", "a-b-b-c"));
    assert!(!glob_match("a*b*c", "a-b-b-d"));
    assert!(glob_match("*-?", "build-2"));
    assert!(glob_match("x\\", "x\\"));
    // Many stars against a long name that almost matches: a quick no
    // (backtracking to every star would take ages).
    let pattern = format!("{}b", "*a".repeat(30));
    let started = std::time::Instant::now();
    assert!(!glob_match(&pattern, &"a".repeat(128)));
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A pipeline of `n` jobs in one `passed` chain (`j0` to `j{n-1}`), and
/// `extra` added to the last job's plan.
fn chain(n: usize, extra: &str) -> String {
    let mut s = String::from("resources:\n- {name: r, type: mock, source: {}}\njobs:\n");
    for i in 0..n {
        let passed = if i == 0 {
            String::new()
        } else {
            format!(", passed: [j{}]", i - 1)
        };
        s += &format!("- name: j{i}\n  plan:\n  - {{get: r{passed}}}\n");
    }
    s + extra
}

#[test]
fn a_chain_of_ten_thousand_jobs_is_checked_and_looked_up() {
    let p = Pipeline::load(&chain(10_000, ""), &Vars::new()).unwrap();
    assert_eq!(p.jobs.len(), 10_000);
    assert_eq!(p.job("j9999").unwrap().name, "j9999");
    assert_eq!(p.jobs_matching("j42").len(), 1);
    assert_eq!(p.jobs_matching("j999?").len(), 10);
    assert!(p.resource("r").is_some() && p.resource("s").is_none());
    assert!(p.job("nope").is_err());
    // A chain closed into a cycle is found (walked without a call per job).
    let cyclic = chain(10_000, "").replacen("- {get: r}", "- {get: r, passed: [j9999]}", 1);
    let problems = Pipeline::load(&cyclic, &Vars::new())
        .unwrap_err()
        .join("\n");
    assert!(
        problems.contains("the passed constraints form a cycle"),
        "{problems}"
    );
}

#[test]
fn names_follow_the_rule_of_names_in_api_paths() {
    let long = "n".repeat(MAX_NAME + 1);
    let doc = format!(
        "resources:\n- {{name: \"r\\x07\", type: mock, source: {{}}}}\n\
         resource_types:\n- {{name: \"t\\n\", type: registry-image, source: {{}}}}\n\
         groups:\n- {{name: \"g\\e\", jobs: [\"*\"]}}\n\
         jobs:\n- name: \"bad\\x1b[31m\"\n  plan:\n  - {{get: \"r\\x07\"}}\n  - {{task: \"t\\r\", file: a/t.yml}}\n\
         - name: {long}\n  plan:\n  - {{put: \"p\\x00\", resource: \"r\\x07\"}}\n\
         - name: \"\"\n  plan: [{{task: \"a/b\", file: a/t.yml}}]\n\
         - name: \"  \"\n  plan: [{{load_var: \"..\", file: a/v.yml}}]\n\
         - name: \"evil\\u202Egnp\"\n  plan: [{{task: t, file: a/t.yml, across: [{{var: \"v\\u2066\", values: [1]}}]}}]\n\
         - name: \"../../x\"\n  plan: [{{task: t, file: a/t.yml}}]\n"
    );
    let problems = Pipeline::load(&doc, &Vars::new()).unwrap_err();
    for want in [
        "jobs[0].name: must not hold the control character U+001B",
        "jobs[1].name: is 129 bytes: the limit is 128",
        "resources[0].name: must not hold the control character U+0007",
        "resource_types[0].name: must not hold the control character U+000A",
        "groups[0].name: must not hold the control character U+001B",
        "jobs[0].plan[0].get: must not hold the control character U+0007",
        "jobs[0].plan[1].task: must not hold the control character U+000D",
        "jobs[1].plan[0].put: must not hold the control character U+0000",
        "jobs[2].name: must not be empty",
        "jobs[2].plan[0].task: must not hold '/' (a path separator)",
        "jobs[3].name: must not be only whitespace",
        "jobs[3].plan[0].load_var: \"..\" cannot be named in a path",
        "jobs[4].name: must not hold the invisible format character U+202E",
        "jobs[4].plan[0].across[0].var: must not hold the invisible format character U+2066",
        "jobs[5].name: must not hold '/' (a path separator)",
    ] {
        assert!(problems.iter().any(|p| p == want), "{want}: {problems:#?}");
    }
    // No problem's path carries a control or format character.
    assert!(
        problems
            .iter()
            .all(|p| !p.chars().any(|c| c.is_control() || c == '\u{202E}')),
        "{problems:#?}"
    );
    // Names Concourse only warns about (spaces, uppercase, symbols) are
    // set, with its warnings naming the field.
    let ok = "resources:\n- {name: my repo, type: mock, source: {}}\njobs:\n- name: Build (linux) ✓\n  plan:\n  - {get: my repo}\n";
    let (_, warnings) = Pipeline::load_warned(ok, &Vars::new()).unwrap();
    assert_eq!(
        warnings,
        [
            "jobs[0].name: 'Build (linux) ✓' is not a valid identifier: must start with a lowercase letter or a number",
            "resources[0].name: 'my repo' is not a valid identifier: illegal character ' '",
            "jobs[Build (linux) ✓].plan[0].get: 'my repo' is not a valid identifier: illegal character ' '",
        ]
    );
}

#[test]
fn lookups_by_name_stay_right_when_a_pipeline_changes() {
    let mut p = Pipeline::load(&chain(3, ""), &Vars::new()).unwrap();
    assert_eq!(p.job("j1").unwrap().name, "j1");
    p.jobs.remove(0);
    assert_eq!(p.job("j1").unwrap().name, "j1");
    assert!(p.job("j0").is_err());
}

#[test]
fn a_local_var_standing_for_a_whole_typed_field_is_refused_not_lost() {
    let job = |step: &str| {
        format!("jobs:\n- name: j\n  plan:\n  - load_var: v\n    file: a/f\n  - {step}\n")
    };
    for (step, at) in [
        ("{task: t, file: a/t.yml, params: ((.:p))}", "params"),
        ("{task: t, file: a/t.yml, attempts: ((.:n))}", "attempts"),
        ("{task: t, file: a/t.yml, tags: ((.:tags))}", "tags"),
    ] {
        let problems = Pipeline::load(&job(step), &Vars::new())
            .unwrap_err()
            .join("\n");
        assert!(
            problems.contains(at)
                && problems.contains("a build-local var cannot stand for this whole field"),
            "{step}: {problems}"
        );
    }
    // Inside strings, and as across values, they are filled when the step runs.
    for step in [
        "{task: t, file: a/t.yml, params: {P: ((.:p))}}",
        "{task: t, file: a/t.yml, across: [{var: x, values: ((.:list))}]}",
    ] {
        assert!(Pipeline::load(&job(step), &Vars::new()).is_ok(), "{step}");
    }
}

/// A `get`'s `version:` string other than `latest` or `every` is taken as
/// `latest`, as Concourse does, with a warning naming the step; `latest`,
/// `every` and a mapping warn of nothing, and a number is still refused.
#[test]
fn a_version_string_other_than_latest_or_every_is_latest_with_a_warning() {
    let doc = |v: &str| {
        format!(
            "resources:\n- {{name: r, type: git, source: {{uri: x}}}}\njobs:\n- name: j\n  plan:\n  - get: r\n    version: {v}\n"
        )
    };
    let (p, warnings) = Pipeline::load_warned(&doc("pinned-please"), &Vars::new()).unwrap();
    let StepKind::Get(get) = &p.job("j").unwrap().plan[0].kind else {
        panic!("a get")
    };
    assert_eq!(get.version, Some(VersionSpec::Latest));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with(
            "version: get \"r\": version \"pinned-please\" is neither latest nor every nor a version: it is treated as latest (as Concourse does)"
        ),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("treated as latest"), "{warnings:?}");
    let (_, w) = load_warned(&doc("pinned-please"), None);
    assert_eq!(w, warnings, "validation without vars warns the same");
    for fine in ["latest", "every", "{ref: abc}"] {
        let (_, warnings) = Pipeline::load_warned(&doc(fine), &Vars::new()).unwrap();
        assert!(warnings.is_empty(), "{fine}: {warnings:?}");
    }
    assert!(Pipeline::load(&doc("3"), &Vars::new()).is_err());
}
