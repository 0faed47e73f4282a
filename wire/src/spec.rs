//! Specifications the engine hands to a worker: what volume, container or
//! process to create. They are plain data, serialisable, so that the agent's
//! HTTP API can carry them unchanged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a new volume gets its initial contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum VolumeStrategy {
    /// An empty directory.
    Empty,
    /// A copy-on-write child of another volume on the same worker.
    Cow {
        /// Handle of the parent volume.
        parent: String,
    },
    /// A directory imported from a host path on the worker.
    Import {
        /// Absolute path on the worker host.
        path: String,
    },
}

/// A volume to create on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    /// Handle chosen by the web node before it asks (the database row exists first).
    pub handle: String,
    /// Where the initial contents come from.
    pub strategy: VolumeStrategy,
    /// Whether the volume is used by privileged containers (ownership kept as root).
    #[serde(default)]
    pub privileged: bool,
    /// Free-form properties, used to find volumes again (e.g. a cache key).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// The root filesystem of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RootfsSpec {
    /// The worker's configured default image.
    Default,
    /// A directory on the worker (`raw:///ABS/PATH`).
    Raw {
        /// Absolute path of the directory on the worker.
        path: String,
    },
    /// A volume on the same worker whose contents are the root filesystem.
    Volume {
        /// Handle of the volume.
        handle: String,
    },
    /// An image the worker pulls itself from a registry (a runtime whose
    /// [`crate::runtime::Worker::pulls_images`] says so: Kubernetes).
    Image {
        /// `repository:tag` or `repository@digest`.
        reference: String,
    },
}

impl RootfsSpec {
    /// Parses a task's `rootfs_uri` (`raw:///ABS/PATH`); `None` means the default image.
    pub fn from_uri(uri: Option<&str>) -> Result<Self, String> {
        match uri {
            None => Ok(RootfsSpec::Default),
            Some(u) => match u.strip_prefix("raw://") {
                Some(path) if path.starts_with('/') => Ok(RootfsSpec::Raw {
                    path: path.to_string(),
                }),
                Some(_) => Err(format!(
                    "rootfs_uri {u:?}: a raw:// uri needs an absolute path, e.g. raw:///srv/rootfs"
                )),
                None => Err(format!(
                    "rootfs_uri {u:?}: unsupported scheme (supported: raw:///ABS/PATH)"
                )),
            },
        }
    }
}

/// A volume bind-mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    /// Handle of the volume on the same worker.
    pub volume: String,
    /// Absolute path inside the container.
    pub path: String,
    /// Mount read-only.
    #[serde(default)]
    pub readonly: bool,
}

/// Kernel-enforced resource limits; `None` means unlimited (or the worker's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Memory limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// CPU shares (relative weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Maximum number of processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

/// A container to create on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Handle chosen by the web node before it asks (the database row exists first).
    pub handle: String,
    /// Root filesystem.
    pub rootfs: RootfsSpec,
    /// Volumes mounted into the container.
    #[serde(default)]
    pub mounts: Vec<MountSpec>,
    /// Environment given to every process (`KEY=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Resource limits.
    #[serde(default)]
    pub limits: ResourceLimits,
    /// Only loopback networking when true.
    #[serde(default)]
    pub hermetic: bool,
    /// Free-form properties (build id, step name...), shown by `gantry containers`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// A base resource type the worker ships (`git`, `mock`, `time`): its
    /// scripts (`check`, `in`, `out`) are mounted read-only at
    /// `/opt/resource`. A worker that does not advertise the type refuses
    /// the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// Privileged: every capability, every device, no masked paths (a
    /// `privileged: true` task). Only a worker started with
    /// `--allow-privileged` creates one; any other refuses it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

/// A process to run in a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Process id chosen by the caller, so that it can `attach` again later.
    pub id: String,
    /// Executable path (looked up in `PATH` when not absolute).
    pub path: String,
    /// Arguments after the executable.
    #[serde(default)]
    pub args: Vec<String>,
    /// Working directory inside the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Extra environment (`KEY=VALUE`), after the container's.
    #[serde(default)]
    pub env: Vec<String>,
    /// User to run as; the image's default (root) when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Allocate a TTY of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<WindowSize>,
    /// The whole of its stdin, given with its start (a resource script's
    /// request): the worker writes it and closes stdin itself, so the
    /// process never waits on a caller that went away between starting it
    /// and feeding it (a web node that died). Not with a TTY, nor with
    /// input streamed separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WindowSize {
    /// Columns.
    pub columns: u16,
    /// Rows.
    pub rows: u16,
}

/// The encoding of a tar stream between two parties.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// zstd-compressed tar (the default).
    #[default]
    Zstd,
    /// gzip-compressed tar.
    Gzip,
    /// Plain tar.
    Raw,
}

impl Encoding {
    /// The name used on the wire (`Content-Encoding`, query strings).
    pub fn as_str(&self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
            Encoding::Raw => "raw",
        }
    }

    /// Parses a wire name; `identity` and the empty string mean raw.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "zstd" => Some(Encoding::Zstd),
            "gzip" | "x-gzip" => Some(Encoding::Gzip),
            "raw" | "identity" | "" => Some(Encoding::Raw),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootfs_uri_accepts_raw_absolute_paths_only() {
        assert_eq!(RootfsSpec::from_uri(None).unwrap(), RootfsSpec::Default);
        assert_eq!(
            RootfsSpec::from_uri(Some("raw:///srv/root")).unwrap(),
            RootfsSpec::Raw {
                path: "/srv/root".into()
            }
        );
        assert!(RootfsSpec::from_uri(Some("raw://relative")).is_err());
        assert!(RootfsSpec::from_uri(Some("docker:///busybox")).is_err());
    }

    #[test]
    fn encoding_names_round_trip() {
        for e in [Encoding::Zstd, Encoding::Gzip, Encoding::Raw] {
            assert_eq!(Encoding::parse(e.as_str()), Some(e));
        }
        assert_eq!(Encoding::parse("brotli"), None);
    }
}
