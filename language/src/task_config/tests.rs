//! Tests of a whole task config: what is accepted, and that every problem
//! is reported with its name.

use super::*;

const VALID: &str = r#"
platform: linux
inputs:
- name: src
- name: other
  path: deps/other
  optional: true
outputs:
- name: result
caches:
- path: .cache
params:
  NUMBER: 42
  FLAG: true
  EMPTY:
  LIST: [1, 2]
run:
  path: sh
  args: [-c, "echo hi"]
  dir: src
  user: nobody
container_limits:
  memory: 67108864
"#;

#[test]
fn valid_config_parses_with_defaults_and_string_params() {
    let c = TaskConfig::from_yaml(VALID).unwrap();
    assert_eq!(c.platform, "linux");
    assert_eq!(c.inputs[0].path, "src");
    assert_eq!(c.inputs[1].path, "deps/other");
    assert!(c.inputs[1].optional);
    assert_eq!(c.outputs[0].path, "result");
    assert_eq!(c.params["NUMBER"], "42");
    assert_eq!(c.params["FLAG"], "true");
    assert_eq!(c.params["EMPTY"], "");
    assert_eq!(c.params["LIST"], "[1,2]");
    assert_eq!(c.run.args, vec!["-c", "echo hi"]);
    assert_eq!(c.container_limits.memory, Some(67108864));
}

fn problems(yaml: &str) -> Vec<String> {
    TaskConfig::from_yaml(yaml).unwrap_err()
}

#[test]
fn every_problem_is_reported_with_its_name() {
    let p = problems(
        "inputs:\n- path: x\n- name: a\n- name: a\noutputs:\n- {}\nrun: {args: []}\nbogus: 1\n",
    );
    let all = p.join("\n");
    assert!(all.contains("missing field platform"), "{all}");
    assert!(all.contains("missing field run.path"), "{all}");
    assert!(all.contains("inputs[0]: missing field name"), "{all}");
    assert!(all.contains("outputs[0]: missing field name"), "{all}");
    assert!(all.contains("duplicate input name \"a\""), "{all}");
    assert!(all.contains("unknown field \"bogus\""), "{all}");
    assert_eq!(p.len(), 6, "{all}");
}

#[test]
fn nested_unknown_fields_and_bad_paths_are_named() {
    let all = problems(
        "platform: linux\nrun: {path: sh, shell: bash}\ninputs: [{name: a, path: x/../../y}]\noutputs: [{name: o, path: ../up}]\n",
    )
    .join("\n");
    assert!(all.contains("run: unknown field \"shell\""), "{all}");
    assert!(all.contains("input path \"x/../../y\""), "{all}");
    assert!(all.contains("output path \"../up\""), "{all}");
}

#[test]
fn missing_run_and_non_mapping_are_errors() {
    assert!(problems("platform: linux\n")
        .join("")
        .contains("missing field run"));
    assert!(problems("- a\n").join("").contains("must be a mapping"));
    assert!(problems(": :\n  -").join("").contains("not valid YAML"));
}

/// A task.yml using every field Concourse knows.
const FULL: &str = r#"
platform: linux
image_resource:
  name: golang
  type: registry-image
  source: {repository: golang, tag: "1.22"}
  version: {digest: "sha256:abc"}
  params: {format: rootfs}
  tags: [linux]
rootfs_uri: raw:///srv/rootfs
inputs:
- {name: repo}
- {name: deps, path: /opt/deps, optional: true}
outputs:
- {name: binary, path: /output/bin}
- {name: repo}
caches:
- {path: .cache/go-build, ttl: 168h}
- {path: /root/.cache}
params:
  MODULE:
  COUNT: 3
  RATIO: 0.25
  ON: true
  CONFIG: {b: 2, a: [1, x]}
run:
  path: sh
  args: [-ec, "go build", 1, true]
  dir: repo
  user: root
container_limits: {cpu: 512, memory: 1GB}
"#;

#[test]
fn everything_concourse_accepts_is_read() {
    let c = TaskConfig::from_yaml(FULL).unwrap();
    let image = c.image_resource.as_ref().unwrap();
    assert_eq!(image.kind, "registry-image");
    assert_eq!(image.source["tag"], "1.22");
    assert_eq!(c.inputs[1].path, "/opt/deps");
    assert_eq!(c.outputs[0].path, "/output/bin");
    assert_eq!(c.outputs[1].path, "repo");
    assert_eq!(c.caches[0].ttl.as_deref(), Some("168h"));
    assert_eq!(c.caches[1].path, "/root/.cache");
    assert_eq!(c.params["MODULE"], "");
    assert_eq!(c.params["COUNT"], "3");
    assert_eq!(c.params["RATIO"], "0.25");
    assert_eq!(c.params["ON"], "true");
    assert_eq!(c.params["CONFIG"], r#"{"a":[1,"x"],"b":2}"#);
    assert_eq!(c.run.args, vec!["-ec", "go build", "1", "true"]);
    assert_eq!(c.container_limits.cpu, Some(512));
    assert_eq!(c.container_limits.memory, Some(1 << 30));
}

#[test]
fn a_config_survives_being_stored_and_read_again() {
    // A one-off build stores its config as JSON and the API validates what
    // the CLI sends: the serialized form must read back the same.
    let c = TaskConfig::from_yaml(FULL).unwrap();
    let json = serde_json::to_value(&c).unwrap();
    let doc = serde_yaml::to_value(&json).unwrap();
    assert_eq!(TaskConfig::from_value(&doc).unwrap(), c);
    let stored: TaskConfig = serde_json::from_value(json).unwrap();
    assert_eq!(stored, c);
}

#[test]
fn a_config_stored_before_image_resource_and_ttl_still_reads() {
    let old = serde_json::json!({
        "platform": "linux",
        "inputs": [{"name": "a", "path": "a"}],
        "caches": [{"path": "c"}],
        "run": {"path": "ls"},
        "container_limits": {"memory": 1024},
        "hermetic": false,
    });
    let c: TaskConfig = serde_json::from_value(old).unwrap();
    assert_eq!(c.image_resource, None);
    assert_eq!(c.caches[0].ttl, None);
}

#[test]
fn concourse_validation_rules_hold() {
    // From atc/task_test.go: extra keys, missing platform, unnamed inputs
    // and outputs (every one reported), inputs that are not mappings.
    let all = problems("platform: beos\nintputs: []\nrun: {path: a/file}\n").join("\n");
    assert!(all.contains("unknown field \"intputs\""), "{all}");
    let p = problems(
        "platform: beos\ninputs: [{name: c}, {name: ''}, {path: x}]\noutputs: [{name: c}, {}, {name: ''}]\nrun: {path: a/file}\n",
    );
    let all = p.join("\n");
    for at in ["inputs[1]", "inputs[2]", "outputs[1]", "outputs[2]"] {
        assert!(all.contains(&format!("{at}: missing field name")), "{all}");
    }
    assert_eq!(p.len(), 4, "{all}");
    let all =
        problems("platform: beos\ninputs: ['a/b/c']\noutputs: ['a/b/c']\nrun: {path: a/file}\n")
            .join("\n");
    assert!(all.contains("inputs[0] must be a mapping"), "{all}");
    assert!(all.contains("outputs[0] must be a mapping"), "{all}");
    assert!(TaskConfig::from_yaml("platform: beos\ninputs: []\nrun: {path: a/file}\n").is_ok());
}

#[test]
fn an_input_and_an_output_may_share_a_name_and_path() {
    // Concourse's pattern for changing an input in place.
    let c = TaskConfig::from_yaml(
        "platform: linux\ninputs: [{name: main}]\noutputs: [{name: main}]\nrun: {path: ls}\n",
    )
    .unwrap();
    assert_eq!(c.inputs[0].path, c.outputs[0].path);
}

#[test]
fn absolute_paths_are_accepted_but_not_the_root() {
    assert!(TaskConfig::from_yaml(
        "platform: linux\ninputs: [{name: a, path: /abs}]\noutputs: [{name: o, path: /out}]\ncaches: [{path: /c}]\nrun: {path: ls}\n"
    )
    .is_ok());
    let all =
        problems("platform: linux\noutputs: [{name: o, path: /}]\nrun: {path: ls}\n").join("\n");
    assert!(
        all.contains("output path \"/\": must not be the container's root"),
        "{all}"
    );
}

#[test]
fn problems_in_every_section_are_reported_together() {
    let p = problems(
        "platform: linux\nimage_resource: {source: {}}\ncaches: [{path: c, ttl: 1ms}]\ncontainer_limits: {memory: 1.5GB, cpu: x}\nparams: [A]\nrun: {path: ls, args: [[1]]}\nhermetic: yes\n",
    );
    let all = p.join("\n");
    for expected in [
        "image_resource: missing field type",
        "caches[0].ttl: cache ttl must be at least 1s",
        "container_limits.memory: could not parse container memory limit",
        "container_limits.cpu: cpu limit must be an integer",
        "params must be a mapping",
        "run.args[0] must be a string",
        "hermetic must be true or false",
    ] {
        assert!(all.contains(expected), "expected {expected:?} in {all}");
    }
    assert_eq!(p.len(), 7, "{all}");
}
