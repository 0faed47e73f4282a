//! Which pipeline, instances included (Concourse's `atc.PipelineRef` and
//! fly's `flaghelpers.PipelineFlag`): `NAME`, or `NAME/K:V,K2:V2` for the
//! instance of pipeline `NAME` with instance vars `K`, `K2`. A value is
//! YAML (`n:1` is the number 1; quote it, `k:"a,b"`, to keep `,` or `:`);
//! a dotted key (`a.b:c`) sets a field. The text form is canonical: keys
//! sorted, each value as JSON, unquoted when it reads back as the same
//! string. A pipeline's identity is its team and this text: it is what
//! is stored as the pipeline's name, and what builds and `-p` name.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::EngineError;

/// A pipeline, or an instance of an instanced pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineRef {
    /// The pipeline's name.
    pub name: String,
    /// Its instance vars (a non-empty object), for an instance.
    pub instance_vars: Option<Map<String, Value>>,
}

fn invalid(text: &str, why: impl fmt::Display) -> EngineError {
    EngineError::Invalid(format!("pipeline {text:?}: {why}"))
}

impl PipelineRef {
    /// Parses `NAME` or `NAME/K:V,...`, the name checked.
    pub fn parse(text: &str) -> Result<PipelineRef, EngineError> {
        let (name, vars) = match text.split_once('/') {
            None => (text, None),
            Some((name, vars)) => (
                name,
                Some(parse_instance_vars(vars).map_err(|e| invalid(text, e))?),
            ),
        };
        PipelineRef::new(name, vars)
    }

    /// Pipeline `name` with `instance_vars` (none, or an empty object: not
    /// an instance).
    pub fn new(
        name: &str,
        instance_vars: Option<Map<String, Value>>,
    ) -> Result<PipelineRef, EngineError> {
        check_pipeline_name(name)?;
        let r = PipelineRef {
            name: name.to_string(),
            instance_vars: instance_vars.filter(|v| !v.is_empty()),
        };
        // Within the bound of a name in the API's paths, so an instance a
        // step sets can be named there too.
        let text = r.to_string();
        if text.len() > crate::pipeline::MAX_NAME {
            return Err(invalid(
                &text,
                format_args!(
                    "its name with its instance vars is {} bytes: the limit is {}",
                    text.len(),
                    crate::pipeline::MAX_NAME
                ),
            ));
        }
        Ok(r)
    }

    /// The instance vars as vars of the pipeline's config (they fill its
    /// `((vars))` over any other).
    pub fn vars(&self) -> Vec<(String, serde_yaml::Value)> {
        self.instance_vars
            .iter()
            .flatten()
            .map(|(k, v)| {
                let yaml = serde_yaml::to_value(v).expect("JSON converts to YAML");
                (k.clone(), yaml)
            })
            .collect()
    }
}

/// `k:v,k2:v2` (canonical: sorted flattened keys, JSON values, unquoted
/// when they read back as the same string).
pub fn instance_vars_text(vars: &Map<String, Value>) -> String {
    let mut pairs = Vec::new();
    flatten("", vars, &mut pairs);
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs
        .into_iter()
        .map(|(k, v)| {
            let json = v.to_string();
            match v {
                Value::String(s) if !needs_quotes(s) => format!("{k}:{s}"),
                _ => format!("{k}:{json}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for PipelineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.instance_vars {
            None => f.write_str(&self.name),
            Some(vars) => write!(f, "{}/{}", self.name, instance_vars_text(vars)),
        }
    }
}

fn flatten<'a>(prefix: &str, map: &'a Map<String, Value>, out: &mut Vec<(String, &'a Value)>) {
    for (k, v) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) if !inner.is_empty() => flatten(&key, inner, out),
            _ => out.push((key, v)),
        }
    }
}

/// Whether string `s` must be written quoted (Concourse's
/// `instanceVarValueRequiresQuoting`): it would not read back as itself.
fn needs_quotes(s: &str) -> bool {
    if s.contains([',', ':', ' ', '/', '"', '\'']) || s.is_empty() {
        return true;
    }
    !matches!(serde_yaml::from_str::<Value>(s), Ok(Value::String(back)) if back == s)
}

/// The index of the first `stop` in `s` outside quotes (and, with
/// `nested`, outside `{}` and `[]`).
fn find_unquoted(s: &str, stop: char, nested: bool) -> Option<usize> {
    let (mut quote, mut depth) = (None, 0i32);
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '{' | '[' if nested => depth += 1,
                '}' | ']' if nested => depth -= 1,
                _ if c == stop && depth == 0 => return Some(i),
                _ => {}
            },
        }
    }
    None
}

/// Parses `k:v,k2:v2` (fly's `unmarshalInstanceVars`).
pub(super) fn parse_instance_vars(text: &str) -> Result<Map<String, Value>, String> {
    let mut vars = Map::new();
    let mut rest = text;
    while let Some(colon) = find_unquoted(rest, ':', false) {
        let key = rest[..colon].trim();
        rest = &rest[colon + 1..];
        let (raw, more) = match find_unquoted(rest, ',', true) {
            Some(comma) => (&rest[..comma], Some(&rest[comma + 1..])),
            None => (rest, None),
        };
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("instance var {key:?}: give KEY:VALUE"));
        }
        let value: Value = crate::bounded_yaml::parse_yaml_value(raw, "instance var value")
            .map_err(|e| format!("instance var {key:?}: invalid value {raw:?}: {e}"))?;
        set_dotted(&mut vars, key, value);
        match more {
            Some(more) => rest = more,
            None => {
                rest = "";
                break;
            }
        }
    }
    if vars.is_empty() || !rest.trim().is_empty() {
        return Err("instance vars are written KEY:VALUE(,KEY:VALUE)".into());
    }
    Ok(vars)
}

/// Sets `key` (dotted: a field of a field) of `vars` to `value`.
pub fn set_dotted(vars: &mut Map<String, Value>, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("split yields one part");
    let mut slot = vars;
    for part in parts {
        let entry = slot
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        slot = entry.as_object_mut().expect("an object");
    }
    slot.insert(last.to_string(), value);
}

/// The rule of [`JobRef::new`] for a pipeline's name.
pub fn check_pipeline_name(name: &str) -> Result<(), EngineError> {
    let bad = |why: &str| {
        Err(EngineError::Invalid(format!(
            "pipeline name {name:?}: {why}"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 128 {
        return bad("it is longer than 128 characters");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return bad(&format!(
            "{c:?} is not allowed (use letters, digits, '-', '_' and '.')"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or a digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(text: &str) -> String {
        PipelineRef::parse(text).unwrap().to_string()
    }

    #[test]
    fn refs_read_as_fly_writes_them_and_print_canonically() {
        assert_eq!(canonical("p"), "p");
        let r = PipelineRef::parse("p/branch:main,n:1").unwrap();
        assert_eq!(r.name, "p");
        assert_eq!(
            r.instance_vars,
            json!({"branch": "main", "n": 1}).as_object().cloned()
        );
        // Keys sorted; values that would read back otherwise are quoted.
        assert_eq!(canonical("p/z:1,a:x"), "p/a:x,z:1");
        assert_eq!(canonical("p/v:\"1\""), "p/v:\"1\"");
        assert_eq!(canonical("p/v:\"a,b\",w:'c:d'"), "p/v:\"a,b\",w:\"c:d\"");
        assert_eq!(canonical("p/v:true"), "p/v:true");
        // Dotted keys set fields; flow values keep their commas.
        let r = PipelineRef::parse("p/a.b:1,l:[1,2]").unwrap();
        assert_eq!(
            r.instance_vars,
            json!({"a": {"b": 1}, "l": [1, 2]}).as_object().cloned()
        );
        assert_eq!(r.to_string(), "p/a.b:1,l:[1,2]");
        // The canonical text reads back as itself.
        for text in ["p/a.b:1,l:[1,2]", "p/v:\"a,b\",w:\"c:d\"", "p/v:\"1\""] {
            assert_eq!(canonical(text), text);
        }
    }

    #[test]
    fn bad_refs_are_named() {
        let long = format!("p/a:{}", "x".repeat(130));
        // A value nested 100,000 deep is refused while read (in a path,
        // a `?vars.` query, a build's `pipeline_name`).
        let deep = format!("p/a:{}", "[".repeat(100_000));
        for (text, want) in [
            (deep.as_str(), "nests deeper than 100 levels"),
            ("p/", "KEY:VALUE"),
            ("p/novalue", "KEY:VALUE"),
            ("p/:v", "give KEY:VALUE"),
            ("bad name/a:b", "is not allowed"),
            ("p/a:[", "invalid value"),
            (long.as_str(), "the limit is 128"),
        ] {
            let e = PipelineRef::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn instance_vars_become_vars() {
        let r = PipelineRef::parse("p/branch:main,a.b:1").unwrap();
        let vars = r.vars();
        assert_eq!(vars[0].0, "a");
        assert_eq!(
            vars[1],
            (
                "branch".to_string(),
                serde_yaml::Value::String("main".into())
            )
        );
    }
}
