//! The `source`, `version` and `params` of the native image types, read as
//! concourse/registry-image-resource and concourse/docker-image-resource
//! read them. A field Gantry does not implement is refused by name, never
//! ignored.

use serde::Deserialize;
use serde_json::Value;

/// A registry image source, whichever type it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    /// `host[:port]/path` (Docker Hub when no host is given).
    pub repository: String,
    /// The tag to follow (`latest` when neither it nor a constraint is set).
    pub tag: Option<String>,
    /// A suffix of every tag (`-variant`).
    pub variant: Option<String>,
    /// Follow the newest tag matching this semver constraint instead of a tag.
    pub semver_constraint: Option<semver::VersionReq>,
    /// With a constraint: also pre-release versions.
    pub pre_releases: bool,
    /// Basic credentials (also for the registry's token flow).
    pub credentials: Option<(String, String)>,
    /// A mirror of Docker Hub, tried first for Docker Hub images.
    pub mirror: Option<Mirror>,
    /// PEM certificates trusted besides the system's.
    pub ca_certs: Vec<String>,
    /// The platform picked from an image index (the worker's by default).
    pub platform: Option<Platform>,
}

/// `registry_mirror`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// `host[:port]` of the mirror.
    pub host: String,
    /// Its credentials.
    pub credentials: Option<(String, String)>,
}

/// `platform` (`os`, `architecture`), in the OCI index's words.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    /// e.g. `linux`.
    #[serde(default = "linux")]
    pub os: String,
    /// e.g. `amd64`, `arm64`.
    #[serde(default = "host_arch")]
    pub architecture: String,
}

fn linux() -> String {
    "linux".into()
}

/// This host's architecture in OCI's words.
pub fn host_arch() -> String {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
    .to_string()
}

/// A tag given as a string or a number (`tag: 1.0` in YAML is a number).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Tag {
    Text(String),
    Number(serde_json::Number),
}

impl Tag {
    fn into_string(self) -> String {
        match self {
            Tag::Text(s) => s,
            Tag::Number(n) => n.to_string(),
        }
    }
}

/// concourse/registry-image-resource's source, as far as Gantry builds it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryImageSource {
    repository: String,
    #[serde(default)]
    tag: Option<Tag>,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    semver_constraint: Option<String>,
    #[serde(default)]
    pre_releases: bool,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    registry_mirror: Option<RegistryMirror>,
    #[serde(default)]
    ca_certs: Vec<String>,
    #[serde(default)]
    platform: Option<Platform>,
    /// Accepted: it only makes the resource's own logs louder.
    #[serde(default)]
    #[allow(dead_code)]
    debug: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryMirror {
    host: String,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// concourse/docker-image-resource's source fields for fetching images.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DockerImageSource {
    repository: String,
    #[serde(default)]
    tag: Option<Tag>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// A mirror URL (`https://host`), for Docker Hub images.
    #[serde(default)]
    registry_mirror: Option<String>,
    #[serde(default)]
    ca_certs: Vec<DomainCert>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainCert {
    #[allow(dead_code)]
    domain: String,
    cert: String,
}

/// The fields of each type's source that Gantry does not build, with what
/// they do: refused by name rather than ignored.
const NOT_BUILT: &[(&str, &str)] = &[
    ("aws_access_key_id", "ECR authentication"),
    ("aws_secret_access_key", "ECR authentication"),
    ("aws_session_token", "ECR authentication"),
    ("aws_region", "ECR authentication"),
    ("aws_ecr_registry_id", "ECR authentication"),
    ("aws_role_arn", "ECR authentication"),
    ("aws_role_arns", "ECR authentication"),
    ("content_trust", "Notary content trust"),
    ("insecure", "plain-HTTP registries"),
    ("insecure_registries", "plain-HTTP registries"),
    ("client_certs", "client certificates"),
    ("tag_regex", "tag regular expressions"),
    ("created_at_sort", "sorting tags by creation time"),
    ("azure_acr", "Azure ACR authentication"),
];

/// Refuses a field of `NOT_BUILT` by name.
fn refuse_not_built(value: &Value, what: &str) -> Result<(), String> {
    if let Some(map) = value.as_object() {
        for (field, does) in NOT_BUILT {
            if map.contains_key(*field) {
                return Err(format!(
                    "{what}: {field:?} ({does}) is not supported by Gantry's native {what}"
                ));
            }
        }
    }
    Ok(())
}

fn pair(user: Option<String>, pass: Option<String>) -> Option<(String, String)> {
    match (user, pass) {
        (Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => Some((u, p)),
        _ => None,
    }
}

impl Source {
    /// Reads the `source` of `resource_type` (`registry-image` or
    /// `docker-image`).
    pub fn parse(resource_type: &str, value: &Value) -> Result<Self, String> {
        let what = format!("{resource_type} source");
        refuse_not_built(value, &what)?;
        match resource_type {
            "registry-image" => {
                let s: RegistryImageSource =
                    serde_json::from_value(value.clone()).map_err(|e| format!("{what}: {e}"))?;
                let semver_constraint = match s.semver_constraint {
                    Some(c) => Some(semver::VersionReq::parse(&c).map_err(|e| {
                        format!("{what}: semver_constraint {c:?} is not a constraint: {e}")
                    })?),
                    None => None,
                };
                let tag = s.tag.map(Tag::into_string);
                if tag.is_some() && semver_constraint.is_some() {
                    return Err(format!(
                        "{what}: give either tag or semver_constraint, not both"
                    ));
                }
                Ok(Source {
                    repository: s.repository,
                    tag,
                    variant: s.variant.filter(|v| !v.is_empty()),
                    semver_constraint,
                    pre_releases: s.pre_releases,
                    credentials: pair(s.username, s.password),
                    mirror: s.registry_mirror.map(|m| Mirror {
                        host: m.host,
                        credentials: pair(m.username, m.password),
                    }),
                    ca_certs: s.ca_certs,
                    platform: s.platform,
                })
            }
            "docker-image" => {
                let s: DockerImageSource =
                    serde_json::from_value(value.clone()).map_err(|e| format!("{what}: {e}"))?;
                let mirror = match s.registry_mirror {
                    Some(url) => {
                        let host = url
                            .trim_start_matches("https://")
                            .trim_start_matches("http://")
                            .trim_end_matches('/')
                            .to_string();
                        Some(Mirror {
                            host,
                            credentials: None,
                        })
                    }
                    None => None,
                };
                Ok(Source {
                    repository: s.repository,
                    tag: s.tag.map(Tag::into_string),
                    credentials: pair(s.username, s.password),
                    mirror,
                    ca_certs: s.ca_certs.into_iter().map(|c| c.cert).collect(),
                    ..Source::default()
                })
            }
            other => Err(format!("{other:?} is not a native resource type")),
        }
    }

    /// The tag `check` follows: the tag (default `latest`), with the variant.
    pub fn followed_tag(&self) -> String {
        match (&self.tag, &self.variant) {
            (Some(t), Some(v)) => format!("{t}-{v}"),
            (Some(t), None) => t.clone(),
            (None, Some(v)) => v.clone(),
            (None, None) => "latest".into(),
        }
    }

    /// The OCI platform to pick from an index.
    pub fn platform(&self) -> Platform {
        self.platform.clone().unwrap_or_else(|| Platform {
            os: linux(),
            architecture: host_arch(),
        })
    }
}

/// A version of an image: its tag (if known) and digest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Version {
    /// The tag it was found under.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    /// `sha256:...`.
    pub digest: String,
}

/// `params` of `in` (`get`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    /// `rootfs` (default), `oci` (`image.tar`) or `oci-layout` (`oci/`).
    #[serde(default)]
    pub format: Option<String>,
    /// Write only the version's files, no image.
    #[serde(default)]
    pub skip_download: bool,
    /// docker-image: write `rootfs/` too (`rootfs: true`); Gantry always
    /// writes `rootfs/` for docker-image.
    #[serde(default)]
    pub rootfs: Option<bool>,
}

impl GetParams {
    /// Reads `params`, refusing what is not built by name.
    pub fn parse(resource_type: &str, value: &Value) -> Result<Self, String> {
        if value.is_null() {
            return Ok(GetParams::default());
        }
        if let Some(map) = value.as_object() {
            for field in ["save", "username", "password", "aws_access_key_id"] {
                if map.contains_key(field) {
                    return Err(format!(
                        "{resource_type} get params: {field:?} is not supported by Gantry's native {resource_type}"
                    ));
                }
            }
        }
        let p: GetParams = serde_json::from_value(value.clone())
            .map_err(|e| format!("{resource_type} get params: {e}"))?;
        if resource_type == "registry-image" && p.rootfs.is_some() {
            return Err("registry-image get params: unknown field \"rootfs\"".into());
        }
        match p.format.as_deref() {
            None | Some("rootfs") | Some("oci") | Some("oci-layout") => Ok(p),
            Some(other) => Err(format!(
                "{resource_type} get params: format {other:?}: must be one of rootfs, oci, oci-layout"
            )),
        }
    }
}

/// `params` of `out` (`put`) for registry-image.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutParams {
    /// Path (a glob is allowed) of an OCI image tarball, relative to the
    /// put's directory.
    pub image: String,
    /// Path of a file of whitespace-separated tags to push too.
    #[serde(default)]
    pub additional_tags: Option<String>,
    /// The version to push as a tag (with the variant appended).
    #[serde(default)]
    pub version: Option<String>,
}

impl PutParams {
    /// Reads `params`, refusing what is not built by name.
    pub fn parse(value: &Value) -> Result<Self, String> {
        if let Some(map) = value.as_object() {
            if map.contains_key("bump_aliases") {
                return Err("registry-image put params: \"bump_aliases\" is not supported by Gantry's native registry-image".into());
            }
        }
        serde_json::from_value(value.clone()).map_err(|e| format!("registry-image put params: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_registry_image_source_reads_concourses_fields_and_refuses_what_is_not_built() {
        let s = Source::parse(
            "registry-image",
            &json!({"repository": "127.0.0.1:5000/app", "tag": 1.0, "username": "u",
                    "password": "p", "ca_certs": ["PEM"], "platform": {"architecture": "arm64"}}),
        )
        .unwrap();
        assert_eq!(s.tag.as_deref(), Some("1.0"));
        assert_eq!(s.credentials, Some(("u".into(), "p".into())));
        assert_eq!(s.platform().os, "linux");
        assert_eq!(s.platform().architecture, "arm64");
        let e = Source::parse(
            "registry-image",
            &json!({"repository": "r", "aws_region": "x"}),
        )
        .unwrap_err();
        assert!(e.contains("\"aws_region\" (ECR authentication)"), "{e}");
        let e =
            Source::parse("registry-image", &json!({"repository": "r", "colour": 1})).unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let s = Source::parse(
            "registry-image",
            &json!({"repository": "r", "semver_constraint": "~1.2", "variant": "slim"}),
        )
        .unwrap();
        assert!(s
            .semver_constraint
            .unwrap()
            .matches(&semver::Version::new(1, 2, 9)));
        assert_eq!(
            Source::parse("registry-image", &json!({"repository": "r"}))
                .unwrap()
                .followed_tag(),
            "latest"
        );
    }

    #[test]
    fn a_docker_image_source_maps_onto_the_same_model_and_get_params_are_checked() {
        let s = Source::parse(
            "docker-image",
            &json!({"repository": "r", "ca_certs": [{"domain": "h:1", "cert": "PEM"}],
                    "registry_mirror": "https://m:5000/"}),
        )
        .unwrap();
        assert_eq!(s.ca_certs, ["PEM"]);
        assert_eq!(s.mirror.unwrap().host, "m:5000");
        let e = GetParams::parse("docker-image", &json!({"save": true})).unwrap_err();
        assert!(e.contains("\"save\""), "{e}");
        let e = GetParams::parse("registry-image", &json!({"format": "tgz"})).unwrap_err();
        assert!(e.contains("rootfs, oci, oci-layout"), "{e}");
        assert!(
            GetParams::parse("registry-image", &json!({"skip_download": true}))
                .unwrap()
                .skip_download
        );
    }
}
