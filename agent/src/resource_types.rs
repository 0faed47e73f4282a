//! The base resource types every worker ships: `git`, `mock` and `time`,
//! Concourse resource types written as POSIX `sh` + `jq` scripts
//! (`resource_types/<name>/{check,in,out}` in the repository, embedded in
//! the binary).
//!
//! At start the agent writes them to `WORK_DIR/resource-types/<name>/`
//! (mode 0755, every start, each file replaced by a rename so a container
//! already mounting the directory sees the new scripts) and advertises the
//! types whose tools the host has (`jq` for all, `git` for `git`): they run
//! in the worker's default image, the host's own `/usr`. A container whose
//! spec names a `resource_type` gets that directory read-only at
//! [`RESOURCE_DIR`].

use std::path::{Path, PathBuf};

use super::error::AgentError;

/// Where a container finds its resource type's scripts.
pub const RESOURCE_DIR: &str = "/opt/resource";

/// A base resource type: its scripts and the host tools they need.
struct BaseType {
    /// Its name (`git`, `mock`, `time`).
    name: &'static str,
    /// `check`, `in` and `out`, by file name.
    scripts: [(&'static str, &'static str); 3],
    /// Executables the scripts need besides POSIX `sh` and coreutils.
    needs: &'static [&'static str],
}

/// Includes the three scripts of `resource_types/<name>/`.
macro_rules! scripts {
    ($name:literal) => {
        [
            (
                "check",
                include_str!(concat!("../../resource_types/", $name, "/check")),
            ),
            (
                "in",
                include_str!(concat!("../../resource_types/", $name, "/in")),
            ),
            (
                "out",
                include_str!(concat!("../../resource_types/", $name, "/out")),
            ),
        ]
    };
}

/// Every base type, sorted by name.
const BASE_TYPES: &[BaseType] = &[
    BaseType {
        name: "git",
        scripts: scripts!("git"),
        needs: &["jq", "git"],
    },
    BaseType {
        name: "mock",
        scripts: scripts!("mock"),
        needs: &["jq"],
    },
    BaseType {
        name: "time",
        scripts: scripts!("time"),
        needs: &["jq"],
    },
];

/// The base resource types this worker offers, installed on disk.
#[derive(Debug, Clone)]
pub struct ResourceTypes {
    /// `WORK_DIR/resource-types`.
    root: PathBuf,
    /// The offered types, sorted.
    names: Vec<String>,
}

impl ResourceTypes {
    /// No type offered (a backend that cannot run them).
    pub fn none(work_dir: &Path) -> Self {
        ResourceTypes {
            root: work_dir.join("resource-types"),
            names: Vec::new(),
        }
    }

    /// Writes the scripts of every type whose tools `found` says the host
    /// has under `WORK_DIR/resource-types` and offers those types; logs one
    /// warning naming what is missing for the others. Blocking.
    pub fn install(work_dir: &Path, found: impl Fn(&str) -> bool) -> std::io::Result<Self> {
        let mut types = ResourceTypes::none(work_dir);
        let mut missing: Vec<String> = Vec::new();
        for base in BASE_TYPES {
            let absent: Vec<&str> = base.needs.iter().copied().filter(|t| !found(t)).collect();
            if !absent.is_empty() {
                missing.push(format!("{} (needs {})", base.name, absent.join(", ")));
                continue;
            }
            write_scripts(&types.root.join(base.name), &base.scripts)?;
            types.names.push(base.name.to_string());
        }
        if !missing.is_empty() {
            tracing::warn!(
                "base resource types not offered, their tools are not on this host's PATH: {}",
                missing.join("; ")
            );
        }
        Ok(types)
    }

    /// The offered types, sorted (as advertised in the registration).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The directory of an offered type; a type this worker does not offer
    /// is a 400 naming it.
    pub fn dir(&self, name: &str) -> Result<PathBuf, AgentError> {
        if self.names.iter().any(|n| n == name) {
            return Ok(self.root.join(name));
        }
        let offered = if self.names.is_empty() {
            "none".to_string()
        } else {
            self.names.join(", ")
        };
        Err(AgentError::BadRequest(format!(
            "resource type {name:?} is not offered by this worker (offered: {offered})"
        )))
    }

    /// Where a type's directory is, offered or not (a container recovered
    /// after a restart keeps its mount even if the type went away).
    pub fn dir_unchecked(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// Writes `scripts` into `dir`, mode 0755, each through a temporary file
/// renamed over the old one.
fn write_scripts(dir: &Path, scripts: &[(&str, &str)]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for (name, body) in scripts {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn types_are_offered_only_with_their_tools_and_written_executable() {
        let work = tempfile::tempdir().unwrap();
        let all = ResourceTypes::install(work.path(), |_| true).unwrap();
        assert_eq!(all.names(), ["git", "mock", "time"]);
        for name in ["git", "mock", "time"] {
            for script in ["check", "in", "out"] {
                let path = work.path().join("resource-types").join(name).join(script);
                let meta = std::fs::metadata(&path).unwrap();
                assert_eq!(meta.permissions().mode() & 0o777, 0o755, "{path:?}");
                let body = std::fs::read_to_string(&path).unwrap();
                assert!(body.starts_with("#!/bin/sh\n"), "{path:?}");
            }
        }
        // Rewritten at every start (an edited script is replaced).
        let check = work.path().join("resource-types/mock/check");
        std::fs::write(&check, "stale").unwrap();
        ResourceTypes::install(work.path(), |_| true).unwrap();
        assert!(std::fs::read_to_string(&check)
            .unwrap()
            .contains("mock resource"));

        let no_git = ResourceTypes::install(work.path(), |t| t != "git").unwrap();
        assert_eq!(no_git.names(), ["mock", "time"]);
        let err = no_git.dir("git").unwrap_err().to_string();
        assert!(
            err.contains("\"git\"") && err.contains("mock, time"),
            "{err}"
        );
        let no_jq = ResourceTypes::install(work.path(), |t| t != "jq").unwrap();
        assert!(no_jq.names().is_empty());
        assert!(no_jq.dir("mock").unwrap_err().to_string().contains("none"));
        assert_eq!(
            all.dir("time").unwrap(),
            work.path().join("resource-types/time")
        );
    }
}
