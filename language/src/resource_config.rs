//! A resource resolved for running: its type down to a base type of the
//! workers, its source as JSON, and the hashes naming its versions
//! ([`ResourceConfig::key`]) and what `in` fetched
//! ([`ResourceConfig::cache_key`]).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::pipeline::{self, Pipeline};

/// A resource type: a base type the workers ship, or a pipeline's custom
/// type whose image another type fetches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResourceType {
    /// A base type (`mock`, `time`, `git`): scripts mounted by the worker.
    Base {
        /// Its name.
        name: String,
    },
    /// A type declared in the pipeline's `resource_types`.
    Custom {
        /// Its name.
        name: String,
        /// What fetches its image: the type, the source, the `in` params and
        /// a pinned version, if any.
        image: Box<ResourceConfig>,
        /// `params` of the image's `in`.
        params: Value,
        /// A version of the image to fetch instead of the latest.
        version: Option<Value>,
        /// `privileged: true`: its `check`, `in` and `out` run in
        /// privileged containers (only on workers allowing them). Not
        /// written when false, so the versions of an unprivileged type
        /// keep their key.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        privileged: bool,
    },
}

impl ResourceType {
    /// The base type at the bottom of the chain: what a worker must ship.
    pub fn base(&self) -> &str {
        match self {
            ResourceType::Base { name } => name,
            ResourceType::Custom { image, .. } => image.type_.base(),
        }
    }

    /// Whether a step using this type runs a privileged container: its own
    /// scripts, or those of a type below it that fetches its image on the
    /// same worker.
    pub fn needs_privileged(&self) -> bool {
        match self {
            ResourceType::Base { .. } => false,
            ResourceType::Custom {
                privileged, image, ..
            } => *privileged || image.type_.needs_privileged(),
        }
    }

    /// The type's name.
    pub fn name(&self) -> &str {
        match self {
            ResourceType::Base { name } | ResourceType::Custom { name, .. } => name,
        }
    }
}

/// A resource's type and source: what its scripts are given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceConfig {
    /// The type.
    pub type_: ResourceType,
    /// `source`, with the type's `defaults` under it.
    pub source: Value,
    /// The key of this config as the pipeline was set, before the
    /// credential manager filled its vars: versions stay with the config
    /// whatever the secrets' values are (and when they rotate). Never
    /// serialised.
    #[serde(skip)]
    pub key_as_set: Option<String>,
}

impl ResourceConfig {
    /// A config of a base type.
    pub fn base(type_: &str, source: Value) -> ResourceConfig {
        ResourceConfig {
            type_: ResourceType::Base {
                name: type_.to_string(),
            },
            source,
            key_as_set: None,
        }
    }

    /// The hash naming this config's versions: the type chain and source
    /// (as the pipeline was set, see [`ResourceConfig::key_as_set`]).
    pub fn key(&self) -> String {
        match &self.key_as_set {
            Some(key) => key.clone(),
            None => hash(&serde_json::to_value(self).unwrap_or(Value::Null)),
        }
    }

    /// The hash naming what `in` fetched for `version` with `params`.
    pub fn cache_key(&self, version: &Value, params: &Value) -> String {
        hash(&json!({"config": self.key(), "version": version, "params": params}))
    }
}

/// Hex SHA-256 of a JSON value's canonical text (object keys sorted by
/// serde_json's map, which is ordered).
fn hash(v: &Value) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(v.to_string()))
}

/// YAML params as JSON (keys of maps become strings).
pub fn params_json(params: &pipeline::Params) -> Result<Value, String> {
    serde_json::to_value(params).map_err(|e| format!("params are not JSON: {e}"))
}

/// Resolves type `name` of the pipeline: a declared resource type (its image
/// fetched by its own type, recursively) or a base type. A cycle of types
/// is an error naming it.
pub fn resolve_type(pipeline: &Pipeline, name: &str) -> Result<ResourceType, String> {
    resolve_type_in(pipeline, name, &mut Vec::new())
}

fn resolve_type_in(
    pipeline: &Pipeline,
    name: &str,
    seen: &mut Vec<String>,
) -> Result<ResourceType, String> {
    let Some(declared) = pipeline.resource_type(name) else {
        return Ok(ResourceType::Base {
            name: name.to_string(),
        });
    };
    if seen.iter().any(|s| s == name) {
        seen.push(name.to_string());
        return Err(format!(
            "resource types form a cycle: {}",
            seen.join(" -> ")
        ));
    }
    seen.push(name.to_string());
    // A type named like the base type it builds on (`type: git` named
    // `git`) is built on the base type, as in Concourse.
    let parent = if declared.type_ == name {
        ResourceType::Base {
            name: name.to_string(),
        }
    } else {
        resolve_type_in(pipeline, &declared.type_, seen)?
    };
    seen.pop();
    Ok(ResourceType::Custom {
        name: name.to_string(),
        image: Box::new(ResourceConfig {
            type_: parent,
            source: params_json(&declared.source)
                .map_err(|e| format!("resource type {name:?}: source: {e}"))?,
            key_as_set: pipeline.as_set.of_type(name),
        }),
        params: params_json(&declared.params)
            .map_err(|e| format!("resource type {name:?}: params: {e}"))?,
        version: None,
        privileged: declared.privileged,
    })
}

/// The config of resource `resource`: its type resolved, its source with
/// its type's `defaults` under it.
pub fn resource_config(
    pipeline: &Pipeline,
    resource: &pipeline::Resource,
) -> Result<ResourceConfig, String> {
    let at = |e: String| format!("resource {:?}: {e}", resource.name);
    let type_ = resolve_type(pipeline, &resource.type_).map_err(at)?;
    let mut source = params_json(&resource.source).map_err(|e| at(format!("source: {e}")))?;
    if let Some(declared) = pipeline.resource_type(&resource.type_) {
        let defaults = params_json(&declared.defaults).map_err(|e| at(format!("defaults: {e}")))?;
        if let (Value::Object(defaults), Value::Object(own)) = (defaults, &mut source) {
            for (k, v) in defaults {
                own.entry(k).or_insert(v);
            }
        }
    }
    Ok(ResourceConfig {
        type_,
        source,
        key_as_set: pipeline.as_set.of_resource(&resource.name),
    })
}

/// A task's `image_resource` resolved: the type that fetches the image
/// (a pipeline's custom type when there is one of that name, else a base
/// type), its source, `in` params and pinned version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageSource {
    /// The name shown for the fetch: `name`, else the type's.
    pub name: String,
    /// Type and source.
    pub config: ResourceConfig,
    /// `params` of `in`.
    pub params: Value,
    /// A version to fetch instead of the newest.
    pub version: Option<Value>,
}

impl ImageSource {
    /// The reference a worker that pulls images itself uses for a
    /// `registry-image` or `docker-image` source: `repository@digest` for a
    /// pinned `version: {digest: ...}`, else `repository:tag` (tag default
    /// `latest`). What a pulling worker cannot honour (credentials, mirrors,
    /// `params`) is refused by name.
    pub fn pull_reference(&self) -> Result<String, String> {
        let source = self.config.source.as_object().cloned().unwrap_or_default();
        for key in source.keys() {
            if !matches!(key.as_str(), "repository" | "tag") {
                return Err(format!(
                    "source.{key} cannot be used by a worker that pulls images itself (it pulls with its own credentials); only repository and tag"
                ));
            }
        }
        if self.params.as_object().is_some_and(|p| !p.is_empty()) {
            return Err("params cannot be used by a worker that pulls images itself".into());
        }
        let repository = source
            .get("repository")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .ok_or("source.repository is required")?;
        if let Some(digest) = self
            .version
            .as_ref()
            .and_then(|v| v.get("digest"))
            .and_then(Value::as_str)
        {
            return Ok(format!("{repository}@{digest}"));
        }
        let tag = match source.get("tag") {
            None => "latest".to_string(),
            Some(Value::String(t)) => t.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(other) => return Err(format!("source.tag {other} is not a tag")),
        };
        Ok(format!("{repository}:{tag}"))
    }

    /// Resolves `image_resource` against the pipeline's types (none for a
    /// one-off build: base types only).
    pub fn of(
        ir: &crate::task_config::ImageResource,
        pipeline: Option<&Pipeline>,
    ) -> Result<ImageSource, String> {
        let type_ = match pipeline {
            Some(p) => resolve_type(p, &ir.kind)?,
            None => ResourceType::Base {
                name: ir.kind.clone(),
            },
        };
        Ok(ImageSource {
            name: if ir.name.is_empty() {
                ir.kind.clone()
            } else {
                ir.name.clone()
            },
            config: ResourceConfig {
                type_,
                source: Value::Object(ir.source.clone()),
                key_as_set: None,
            },
            params: Value::Object(ir.params.clone().unwrap_or_default()),
            version: ir
                .version
                .as_ref()
                .map(|v| serde_json::to_value(v).unwrap_or(Value::Null)),
        })
    }
}

/// A pipeline loaded for a build: the vars `vars` (its static vars) leave
/// are filled from `creds` (the credential manager's), and the configs of
/// its resources and resource types keep the keys they had as the
/// pipeline was set ([`ResourceConfig::key_as_set`]).
pub fn load_with_credentials(
    text: &str,
    vars: &pipeline::Vars,
    creds: &pipeline::Vars,
) -> Result<Pipeline, Vec<String>> {
    let (as_set, left, _) = Pipeline::load_leaving(text, vars)?;
    if left.is_empty() || creds.is_empty() {
        return Ok(as_set);
    }
    let mut all = creds.clone();
    all.extend(vars);
    let (mut filled, _, _) = Pipeline::load_leaving(text, &all)?;
    let resources = as_set
        .resources
        .iter()
        .filter_map(|r| {
            resource_config(&as_set, r)
                .ok()
                .map(|c| (r.name.clone(), c.key()))
        })
        .collect();
    let types = as_set
        .resource_types
        .iter()
        .filter_map(|t| match resolve_type(&as_set, &t.name).ok()? {
            ResourceType::Custom { image, .. } => Some((t.name.clone(), image.key())),
            ResourceType::Base { .. } => None,
        })
        .collect();
    filled.as_set = as_set.as_set.with_keys(resources, types);
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipeline(yaml: &str) -> Pipeline {
        Pipeline::load(yaml, &Default::default()).unwrap()
    }

    #[test]
    fn custom_types_resolve_to_their_base_and_cycles_are_named() {
        let p = pipeline(
            "resource_types:\n- {name: a, type: b, source: {x: 1}}\n- {name: b, type: git, source: {uri: u}, defaults: {d: 1}}\nresources:\n- {name: r, type: b, source: {s: 2}}\njobs:\n- {name: j, plan: [{get: r}]}\n",
        );
        let t = resolve_type(&p, "a").unwrap();
        assert_eq!(t.base(), "git");
        assert_eq!(t.name(), "a");
        let r = resource_config(&p, p.resource("r").unwrap()).unwrap();
        assert_eq!(r.source, json!({"s": 2, "d": 1}));
        assert_eq!(r.type_.base(), "git");
        let p = pipeline(
            "resource_types:\n- {name: a, type: b}\n- {name: b, type: a}\njobs:\n- {name: j, plan: [{task: t, config: {platform: linux, run: {path: x}}}]}\n",
        );
        assert!(resolve_type(&p, "a").unwrap_err().contains("a -> b -> a"));
    }

    #[test]
    fn a_privileged_type_makes_its_steps_and_those_built_on_it_privileged() {
        let yaml = |privileged: bool| {
            format!(
                "resource_types:\n- {{name: a, type: b}}\n- {{name: b, type: git, privileged: {privileged}}}\njobs:\n- {{name: j, plan: [{{task: t, config: {{platform: linux, run: {{path: x}}}}}}]}}\n"
            )
        };
        let p = pipeline(&yaml(true));
        let b = resolve_type(&p, "b").unwrap();
        assert!(b.needs_privileged());
        // `a`'s image is fetched by `b`, on the same worker.
        let a = resolve_type(&p, "a").unwrap();
        assert!(matches!(
            a,
            ResourceType::Custom {
                privileged: false,
                ..
            }
        ));
        assert!(a.needs_privileged());
        assert!(!resolve_type(&p, "git").unwrap().needs_privileged());
        // An unprivileged type's key is what it was before the field.
        let plain = resolve_type(&pipeline(&yaml(false)), "b").unwrap();
        assert!(!plain.needs_privileged());
        assert!(!serde_json::to_string(&plain)
            .unwrap()
            .contains("privileged"));
    }

    #[test]
    fn keys_change_with_source_version_and_params() {
        let a = ResourceConfig::base("git", json!({"uri": "a"}));
        let b = ResourceConfig::base("git", json!({"uri": "b"}));
        assert_ne!(a.key(), b.key());
        assert_eq!(a.key(), a.clone().key());
        let v = json!({"ref": "1"});
        assert_ne!(
            a.cache_key(&v, &json!({})),
            a.cache_key(&json!({"ref": "2"}), &json!({}))
        );
        assert_ne!(
            a.cache_key(&v, &json!({})),
            a.cache_key(&v, &json!({"depth": 1}))
        );
        assert_eq!(a.key().len(), 64);
    }

    #[test]
    fn a_pulled_image_is_referenced_by_tag_or_pinned_digest() {
        let source = |src: Value, version: Option<Value>| ImageSource {
            name: "image".into(),
            config: ResourceConfig::base("registry-image", src),
            params: json!({}),
            version,
        };
        let s = source(json!({"repository": "alpine", "tag": 3.2}), None);
        assert_eq!(s.pull_reference().unwrap(), "alpine:3.2");
        let s = source(json!({"repository": "alpine"}), None);
        assert_eq!(s.pull_reference().unwrap(), "alpine:latest");
        let s = source(
            json!({"repository": "alpine", "tag": "3"}),
            Some(json!({"digest": "sha256:ab"})),
        );
        assert_eq!(s.pull_reference().unwrap(), "alpine@sha256:ab");
        let s = source(json!({"repository": "alpine", "username": "u"}), None);
        assert!(s.pull_reference().unwrap_err().contains("source.username"));
        let s = source(json!({"tag": "3"}), None);
        assert!(s.pull_reference().unwrap_err().contains("repository"));
    }
}
