//! `image_resource`: the image a task runs in, fetched by a resource (as
//! Concourse's `atc.ImageResource`: `type`, `source`, and optionally `name`,
//! `version`, `params`, `tags`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};
use serde_yaml::Value;

use super::read::{entry, json_object, list, opt_scalar, scalar, Problems};

/// An image fetched with a resource type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageResource {
    /// Name shown for the image's fetch (optional).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Resource type that fetches it (`registry-image`, `docker-image`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// The resource's source configuration.
    #[serde(default)]
    pub source: Map<String, Json>,
    /// A version to fetch instead of the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<BTreeMap<String, String>>,
    /// Parameters of the resource's `in` script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Json>>,
    /// Worker tags for fetching it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

const FIELDS: &[&str] = &["name", "type", "source", "version", "params", "tags"];

/// Reads `image_resource`; `type` is required.
pub(super) fn read_image_resource(v: Option<&Value>, p: &mut Problems) -> Option<ImageResource> {
    let v = v.filter(|v| !v.is_null())?;
    let at = "image_resource";
    let m = entry(v, at, FIELDS, p)?;
    let before = p.len();
    let name = opt_scalar(m, "name", at, p).unwrap_or_default();
    let kind = opt_scalar(m, "type", at, p).unwrap_or_default();
    if kind.is_empty() {
        p.push(format!(
            "{at}: missing field type (the resource type that fetches the image, e.g. registry-image)"
        ));
    }
    let source = m
        .get("source")
        .and_then(|v| json_object(v, &format!("{at}.source"), p))
        .unwrap_or_default();
    let version = match m.get("version") {
        None | Some(Value::Null) => None,
        Some(Value::Mapping(vm)) => Some(
            vm.iter()
                .map(|(k, v)| {
                    let k = scalar(k, &format!("{at}.version"), p);
                    let v = scalar(v, &format!("{at}.version.{k}"), p);
                    (k, v)
                })
                .collect(),
        ),
        Some(_) => {
            p.push(format!("{at}.version must be a mapping of strings"));
            None
        }
    };
    let params = match m.get("params") {
        None | Some(Value::Null) => None,
        Some(v) => json_object(v, &format!("{at}.params"), p),
    };
    let tags = list(m.get("tags"), &format!("{at}.tags"), p)
        .iter()
        .enumerate()
        .map(|(i, t)| scalar(t, &format!("{at}.tags[{i}]"), p))
        .collect();
    (p.len() == before).then_some(ImageResource {
        name,
        kind,
        source,
        version,
        params,
        tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Option<ImageResource>, Problems) {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut p = Vec::new();
        (read_image_resource(Some(&v), &mut p), p)
    }

    #[test]
    fn every_concourse_field_is_read() {
        let (r, p) = read(
            "{name: img, type: registry-image, source: {repository: golang, tag: 1}, version: {digest: 'sha256:x'}, params: {format: oci}, tags: [big]}",
        );
        assert!(p.is_empty(), "{p:?}");
        let r = r.unwrap();
        assert_eq!(
            (r.name.as_str(), r.kind.as_str()),
            ("img", "registry-image")
        );
        assert_eq!(r.source["repository"], "golang");
        assert_eq!(r.source["tag"], 1);
        assert_eq!(r.version.unwrap()["digest"], "sha256:x");
        assert_eq!(r.params.unwrap()["format"], "oci");
        assert_eq!(r.tags, vec!["big"]);
    }

    #[test]
    fn type_is_required_and_unknown_fields_are_named() {
        let (r, p) = read("{source: {}, privileged: true, version: [1]}");
        assert!(r.is_none());
        let all = p.join("\n");
        assert!(
            all.contains("image_resource: unknown field \"privileged\""),
            "{all}"
        );
        assert!(all.contains("image_resource: missing field type"), "{all}");
        assert!(
            all.contains("image_resource.version must be a mapping"),
            "{all}"
        );
        assert_eq!(p.len(), 3, "{all}");
    }

    #[test]
    fn it_serializes_as_task_yml_writes_it() {
        let (r, _) = read("{type: mock, source: {mirror_self: true}}");
        let json = serde_json::to_value(r.unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "mock", "source": {"mirror_self": true}})
        );
    }
}
