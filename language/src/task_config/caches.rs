//! `caches`: directories a task keeps between its runs.
//!
//! A cache's `ttl` (Go duration syntax, at least `1s`, as in Concourse)
//! says how long a job's cache may go unused before it is dropped. A
//! one-off build's caches live only as long as the build (Concourse does
//! the same: `fly execute` never keeps them), which is within any ttl.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::paths::check_path;
use super::read::{entry, list, opt_scalar, Problems};
use crate::go_duration::{parse_go_duration, GoDuration};

/// A task cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCache {
    /// Directory: relative to the build dir, or absolute.
    pub path: String,
    /// How long the cache may go unused before it is dropped, as written
    /// (`24h`); none for the runtime's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

impl TaskCache {
    /// The ttl as a duration (it was checked when the config was read).
    pub fn ttl(&self) -> Option<Duration> {
        match parse_go_duration(self.ttl.as_deref()?) {
            Ok(GoDuration::NonNegative(d)) => Some(d),
            _ => None,
        }
    }
}

/// Reads `caches`; each needs a path, and a ttl of at least one second.
pub(super) fn read_caches(v: Option<&Value>, p: &mut Problems) -> Vec<TaskCache> {
    let mut caches = Vec::new();
    for (i, v) in list(v, "caches", p).iter().enumerate() {
        let at = format!("caches[{i}]");
        let Some(m) = entry(v, &at, &["path", "ttl"], p) else {
            continue;
        };
        let Some(path) = opt_scalar(m, "path", &at, p) else {
            p.push(format!("{at}: missing field path"));
            continue;
        };
        if let Err(e) = check_path(&path) {
            p.push(format!("cache path {path:?}: {e}"));
        }
        let ttl = match m.get("ttl") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => {
                check_ttl(s)
                    .map_err(|e| p.push(format!("{at}.ttl: {e}")))
                    .ok();
                Some(s.clone())
            }
            Some(other) => {
                p.push(format!(
                    "{at}.ttl: invalid cache ttl {}: give a duration such as 24h or 30m",
                    serde_yaml::to_string(other).unwrap_or_default().trim()
                ));
                None
            }
        };
        caches.push(TaskCache { path, ttl });
    }
    caches
}

/// Concourse's rule: a Go duration of at least one second.
fn check_ttl(ttl: &str) -> Result<(), String> {
    match parse_go_duration(ttl) {
        Err(e) => Err(format!("invalid cache ttl '{ttl}': {e}")),
        Ok(GoDuration::NonNegative(d)) if d >= Duration::from_secs(1) => Ok(()),
        Ok(_) => Err(format!("cache ttl must be at least 1s, got '{ttl}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caches(yaml: &str) -> (Vec<TaskCache>, Problems) {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut p = Vec::new();
        (read_caches(Some(&v), &mut p), p)
    }

    // Concourse's atc/task_test.go, "given a valid task config with cache ttl".
    #[test]
    fn ttl_is_read_as_in_concourse() {
        let (c, p) = caches("[{path: some-path, ttl: 24h}]");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c[0].ttl.as_deref(), Some("24h"));
        assert_eq!(c[0].ttl(), Some(Duration::from_secs(86400)));
        let (c, p) = caches("[{path: some-path}]");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c[0].ttl, None);
        let (_, p) = caches("[{path: some-path, ttl: 500ms}]");
        assert!(p[0].contains("cache ttl must be at least 1s"), "{p:?}");
        let (_, p) = caches("[{path: some-path, ttl: notaduration}]");
        assert!(p[0].contains("invalid cache ttl"), "{p:?}");
    }

    #[test]
    fn ttl_problems_name_the_cache() {
        let (_, p) = caches("[{path: a}, {path: b, ttl: -5m}, {path: c, ttl: 5}]");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("caches[1].ttl: cache ttl must be at least 1s"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with("caches[2].ttl: invalid cache ttl"),
            "{p:?}"
        );
    }

    #[test]
    fn a_cache_needs_a_path_inside_the_build_dir_or_absolute() {
        let (c, p) = caches("[{ttl: 1h}, {path: /var/cache}, {path: ../x}]");
        assert_eq!(c.len(), 2);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("caches[0]: missing field path"), "{p:?}");
        assert!(p[1].contains("cache path \"../x\""), "{p:?}");
    }
}
