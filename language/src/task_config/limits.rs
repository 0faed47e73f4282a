//! `container_limits`: CPU shares and memory, read as Concourse reads them
//! (`atc/container_limits.go`), plus Gantry's `pids`.
//!
//! Memory is a number of bytes or a string of digits with an optional unit
//! `K`, `M` or `G`, optionally followed by `i` and/or `B`, in any case
//! (`1024`, `512MB`, `1GiB`, `1g`). Every unit is binary (`1KB` = 1024, as in
//! Concourse). Fractions (`1.5GB`) are refused, as Concourse refuses them.
//! CPU is a number of shares. A value of 0 means no limit (runc does not
//! set a limit of 0).

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::read::{entry, Problems};

/// `container_limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLimits {
    /// CPU shares (a relative weight against other containers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
    /// Memory in bytes; the container is killed when it uses more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Maximum processes (a Gantry extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
}

/// Reads `container_limits`.
pub(super) fn read_limits(v: Option<&Value>, p: &mut Problems) -> ContainerLimits {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return ContainerLimits::default();
    };
    let Some(m) = entry(v, "container_limits", &["cpu", "memory", "pids"], p) else {
        return ContainerLimits::default();
    };
    let mut field = |key: &str, read: fn(&Value) -> Result<u64, String>| match m.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => read(v)
            .map_err(|e| p.push(format!("container_limits.{key}: {e}")))
            .ok(),
    };
    ContainerLimits {
        cpu: field("cpu", cpu_shares),
        memory: field("memory", memory_bytes),
        pids: field("pids", pids),
    }
}

/// A memory limit: bytes as a number, or a string with a unit.
pub fn memory_bytes(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(_) => whole(v, "memory limit"),
        Value::String(s) => parse_memory(s),
        _ => Err(
            "could not parse container memory limit: give bytes or a size such as 512MB or 1GB"
                .into(),
        ),
    }
}

/// Parses Concourse's memory syntax: digits, then optionally `K`, `M` or
/// `G`, an optional `i` and an optional `B`, in any case; binary units.
pub(super) fn parse_memory(s: &str) -> Result<u64, String> {
    let refuse = || {
        format!("could not parse container memory limit {s:?} (give bytes or a size such as 512MB or 1GB)")
    };
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(refuse());
    }
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("memory limit {s:?} is too large"))?;
    let unit = unit.to_ascii_uppercase();
    let (prefix, rest) = unit.split_at(unit.len().min(1));
    let shift = match prefix {
        "" => return Ok(value),
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(refuse()),
    };
    if !matches!(rest, "" | "I" | "B" | "IB") {
        return Err(refuse());
    }
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("memory limit {s:?} is too large"))
}

/// CPU shares: a whole number (Concourse: "cpu limit must be an integer").
pub fn cpu_shares(v: &Value) -> Result<u64, String> {
    whole(v, "cpu limit")
}

/// The process limit (Gantry's own).
fn pids(v: &Value) -> Result<u64, String> {
    whole(v, "pids limit")
}

/// A non-negative whole number, written as an integer or as a float
/// without fraction (`1e9`).
fn whole(v: &Value, what: &str) -> Result<u64, String> {
    let refuse = || format!("{what} must be an integer, not {}", shown(v));
    let Value::Number(n) = v else {
        return Err(refuse());
    };
    if let Some(u) = n.as_u64() {
        return Ok(u);
    }
    match n.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => Ok(f as u64),
        _ => Err(format!(
            "{what} must be a whole number of at least 0, not {n}"
        )),
    }
}

/// A value as the user wrote it, for messages.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Concourse's atc/container_limits_test.go, ParseMemoryLimit.
    #[test]
    fn memory_parses_as_concourse_does() {
        let cases = [
            ("1024", 1024),
            ("1KB", 1024),
            ("1MB", 1048576),
            ("1GB", 1073741824),
            ("1KiB", 1024),
            ("1MiB", 1048576),
            ("1GiB", 1073741824),
            ("1kb", 1024),
            ("1kib", 1024),
            ("1K", 1024),
            ("1m", 1048576),
            ("1G", 1073741824),
            ("1Ki", 1024),
            ("512MB", 512 << 20),
        ];
        for (text, bytes) in cases {
            assert_eq!(parse_memory(text), Ok(bytes), "{text}");
        }
        for bad in [
            "invalid",
            "abc1000kb",
            "1.5GB",
            "1 GB",
            "1B",
            "1TB",
            "1GBB",
            "",
            "-1",
            "99999999999G",
        ] {
            assert!(parse_memory(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_memory("abc1000kb")
            .unwrap_err()
            .contains("could not parse container memory limit"));
    }

    fn limits(yaml: &str) -> (ContainerLimits, Problems) {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut p = Vec::new();
        (read_limits(Some(&v), &mut p), p)
    }

    // Concourse's atc/task_test.go, "when container limits are specified".
    #[test]
    fn limits_read_as_in_concourse() {
        let (l, p) = limits("{cpu: 1024, memory: 1KB}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!((l.cpu, l.memory), (Some(1024), Some(1024)));
        let (l, _) = limits("{cpu: 1024, memory: 209715200}");
        assert_eq!((l.cpu, l.memory), (Some(1024), Some(209715200)));
        let (l, _) = limits("{memory: 1KB}");
        assert_eq!((l.cpu, l.memory), (None, Some(1024)));
        let (l, _) = limits("{cpu: 355}");
        assert_eq!((l.cpu, l.memory), (Some(355), None));
        let (_, p) = limits("{cpu: 1024, memory: abc1000kb}");
        assert!(
            p[0].contains("could not parse container memory limit"),
            "{p:?}"
        );
        let (_, p) = limits("{cpu: str1ng-cpu-l1mit, memory: 20MB}");
        assert!(p[0].contains("cpu limit must be an integer"), "{p:?}");
    }

    #[test]
    fn numbers_must_be_whole_and_not_negative() {
        let (l, p) = limits("{memory: 1e9, pids: 100}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!((l.memory, l.pids), (Some(1_000_000_000), Some(100)));
        let (_, p) = limits("{cpu: -1, memory: 1.5, pids: true}");
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p.iter().any(|e| e.starts_with("container_limits.cpu")));
        assert!(p.iter().any(|e| e.starts_with("container_limits.memory")));
        assert!(p.iter().any(|e| e.starts_with("container_limits.pids")));
        let (_, p) = limits("{memory: [1]}");
        assert!(
            p[0].contains("could not parse container memory limit"),
            "{p:?}"
        );
    }
}
