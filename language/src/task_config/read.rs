//! Reading fields out of a parsed YAML document while collecting every
//! problem (with its path in the document) instead of stopping at the first.

use serde_yaml::{Mapping, Value};

/// Every problem found so far, each naming where it is.
pub(super) type Problems = Vec<String>;

/// Reports each key of `m` not in `known` by name, prefixed with `at`
/// (the mapping's path; empty for the top level).
pub(super) fn unknown_fields(m: &Mapping, known: &[&str], at: &str, p: &mut Problems) {
    for k in m.keys() {
        let name = k
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{k:?}"));
        if !known.contains(&name.as_str()) {
            let prefix = if at.is_empty() {
                String::new()
            } else {
                format!("{at}: ")
            };
            p.push(format!(
                "{prefix}unknown field {name:?} (expected one of: {})",
                known.join(", ")
            ));
        }
    }
}

/// `v` as a mapping whose keys are all in `known`.
pub(super) fn entry<'a>(
    v: &'a Value,
    at: &str,
    known: &[&str],
    p: &mut Problems,
) -> Option<&'a Mapping> {
    match v.as_mapping() {
        Some(m) => {
            unknown_fields(m, known, at, p);
            Some(m)
        }
        None => {
            p.push(format!("{at} must be a mapping"));
            None
        }
    }
}

/// `v` as a list; absent or null is the empty list.
pub(super) fn list<'a>(v: Option<&'a Value>, at: &str, p: &mut Problems) -> &'a [Value] {
    match v {
        None | Some(Value::Null) => &[],
        Some(Value::Sequence(s)) => s,
        Some(_) => {
            p.push(format!("{at} must be a list"));
            &[]
        }
    }
}

/// A scalar as text: strings as written, numbers and booleans as YAML
/// wrote them (Concourse turns them into strings where it wants one).
pub(super) fn scalar(v: &Value, at: &str, p: &mut Problems) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => {
            p.push(format!("{at} must be a string"));
            String::new()
        }
    }
}

/// The scalar at `m[key]`, if present and not null.
pub(super) fn opt_scalar(m: &Mapping, key: &str, at: &str, p: &mut Problems) -> Option<String> {
    match m.get(key) {
        None | Some(Value::Null) => None,
        Some(v) => Some(scalar(v, &format!("{at}.{key}"), p)),
    }
}

/// `true` or `false` at `m[key]`; absent or null is false.
pub(super) fn flag(m: &Mapping, key: &str, at: &str, p: &mut Problems) -> bool {
    match m.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            let at = if at.is_empty() {
                key.to_string()
            } else {
                format!("{at}.{key}")
            };
            p.push(format!("{at} must be true or false"));
            false
        }
    }
}

/// The `name` of a list entry: required, not empty, without `/` (it names
/// an artifact, and by default a directory of the build).
pub(super) fn named(m: &Mapping, at: &str, p: &mut Problems) -> Option<String> {
    match opt_scalar(m, "name", at, p) {
        Some(n) if !n.is_empty() => {
            if n.contains('/') {
                p.push(format!("{at}: name {n:?} must not contain '/'"));
            }
            Some(n)
        }
        _ => {
            p.push(format!("{at}: missing field name"));
            None
        }
    }
}

/// A mapping as JSON (for values Concourse passes on as JSON: an image
/// resource's `source` and `params`). Keys must be scalars; they become
/// strings, as Concourse's YAML-to-JSON conversion makes them.
pub(super) fn json_object(
    v: &Value,
    at: &str,
    p: &mut Problems,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    match v {
        Value::Null => Some(serde_json::Map::new()),
        Value::Mapping(_) => match to_json(v, at, p)? {
            serde_json::Value::Object(o) => Some(o),
            _ => None,
        },
        _ => {
            p.push(format!("{at} must be a mapping"));
            None
        }
    }
}

/// A mapping key as text: Concourse's YAML-to-JSON conversion turns scalar
/// keys (numbers, booleans) into text; other keys have none.
pub(super) fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Any YAML value as JSON; reports (at its path) what JSON cannot hold.
pub(super) fn to_json(v: &Value, at: &str, p: &mut Problems) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    Some(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::String(s) => J::String(s.clone()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                J::from(u)
            } else if let Some(i) = n.as_i64() {
                J::from(i)
            } else {
                match n.as_f64().and_then(serde_json::Number::from_f64) {
                    Some(f) => J::Number(f),
                    None => {
                        p.push(format!("{at}: {n} is not a number JSON can hold"));
                        return None;
                    }
                }
            }
        }
        Value::Sequence(s) => J::Array(
            s.iter()
                .enumerate()
                .map(|(i, v)| to_json(v, &format!("{at}[{i}]"), p))
                .collect::<Option<_>>()?,
        ),
        Value::Mapping(m) => {
            let mut o = serde_json::Map::new();
            for (k, v) in m {
                let Some(key) = key_text(k) else {
                    p.push(format!("{at}: keys must be strings"));
                    return None;
                };
                let v = to_json(v, &format!("{at}.{key}"), p)?;
                o.insert(key, v);
            }
            J::Object(o)
        }
        Value::Tagged(t) => {
            p.push(format!("{at}: YAML tags ({}) are not supported", t.tag));
            return None;
        }
    })
}
