//! Which vars a build needs from the credential manager: those its static
//! vars leave in what the build runs. A job build needs the vars of its
//! job, of the resources the job names and of the pipeline's resource
//! types; a check, those of its resource (or type) and of the types. A
//! var left elsewhere in the pipeline (another job's) is not looked up,
//! so it cannot fail this build, as in Concourse, where a var is
//! resolved by the step that uses it.

use std::collections::BTreeSet;

use serde_yaml::Value;

use crate::pipeline::vars::{interpolate_leaving, vars_of};
use crate::pipeline::{parse_yaml, Vars};

/// What a build runs of its pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Focus<'a> {
    /// A build of this job.
    Job(&'a str),
    /// A check of this resource.
    Resource(&'a str),
    /// A check of this resource type's image.
    ResourceType(&'a str),
}

/// The vars (each by its text) that a build of `focus` of the pipeline
/// `text` needs and `vars` does not give; empty when the pipeline needs
/// no credential. A pipeline that does not read is a problem of the
/// build's own making, told when its plan is made: here it needs nothing.
pub(crate) fn needed(text: &str, vars: &Vars, focus: Focus<'_>) -> BTreeSet<String> {
    let Ok(doc) = parse_yaml(text, "pipeline config") else {
        return BTreeSet::new();
    };
    let Ok((doc, left)) = interpolate_leaving(&doc, vars) else {
        return BTreeSet::new();
    };
    if left.is_empty() {
        return left;
    }
    let mut found = BTreeSet::new();
    let named = |section: &str, name: &str| -> Option<Value> {
        doc.get(section)?
            .as_sequence()?
            .iter()
            .find(|x| x.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
    };
    if let Some(types) = doc.get("resource_types") {
        vars_of(types, &mut found);
    }
    match focus {
        Focus::Job(job) => {
            if let Some(def) = named("jobs", job) {
                vars_of(&def, &mut found);
                let mut strings = BTreeSet::new();
                strings_of(&def, &mut strings);
                for r in doc
                    .get("resources")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                {
                    if r.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| strings.contains(n))
                    {
                        vars_of(r, &mut found);
                    }
                }
            }
        }
        Focus::Resource(name) => {
            if let Some(def) = named("resources", name) {
                vars_of(&def, &mut found);
            }
        }
        Focus::ResourceType(_) => {}
    }
    found.retain(|v| left.contains(v));
    found
}

/// Every string of a value (keys included).
fn strings_of<'a>(v: &'a Value, out: &mut BTreeSet<&'a str>) {
    match v {
        Value::String(s) => {
            out.insert(s);
        }
        Value::Sequence(items) => items.iter().for_each(|x| strings_of(x, out)),
        Value::Mapping(m) => m.iter().for_each(|(k, x)| {
            strings_of(k, out);
            strings_of(x, out);
        }),
        Value::Tagged(t) => strings_of(&t.value, out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPELINE: &str = r#"
resource_types:
- name: custom
  type: registry-image
  source: {repository: r, password: ((registry.password))}
resources:
- name: repo
  type: git
  source: {uri: "((repo-uri))", private_key: ((deploy-key))}
- name: other
  type: custom
  source: {token: ((other-token))}
jobs:
- name: build
  plan:
  - get: repo
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      params: {TOKEN: ((api.token)), V: ((version)), L: ((.:local))}
      run: {path: sh}
- name: other-job
  plan:
  - get: other
  - task: u
    config: {platform: linux, run: {path: ((elsewhere))}}
"#;

    #[test]
    fn a_job_needs_its_own_vars_its_resources_and_the_types() {
        let mut vars = Vars::new();
        vars.set_flag("version=1").unwrap();
        let need = needed(PIPELINE, &vars, Focus::Job("build"));
        let want: BTreeSet<String> = ["api.token", "deploy-key", "registry.password", "repo-uri"]
            .map(String::from)
            .into();
        assert_eq!(need, want);
        let need = needed(PIPELINE, &vars, Focus::Resource("other"));
        let want: BTreeSet<String> = ["other-token", "registry.password"]
            .map(String::from)
            .into();
        assert_eq!(need, want);
    }

    #[test]
    fn a_pipeline_with_every_var_given_needs_nothing() {
        let mut vars = Vars::new();
        vars.load_yaml("{registry: {password: p}, repo-uri: u, deploy-key: k, other-token: o, api: {token: t}, version: 1, elsewhere: e}")
            .unwrap();
        assert!(needed(PIPELINE, &vars, Focus::Job("build")).is_empty());
        assert!(needed("not: [valid", &vars, Focus::Job("build")).is_empty());
    }
}
