//! Reading typed fields out of a YAML document while collecting every
//! problem with its path, instead of stopping at the first (serde's derive
//! would stop there). Shared by the pipeline and the step parsers.
//!
//! A field held by a var (`((name))`) is a string until the var is filled;
//! while vars may stay unfilled (validation without `-v`/`-l`), and always
//! for build-local vars (`((.:name))`), such a field is not type-checked and
//! reads as absent.

use std::collections::BTreeMap;
use std::fmt::Display;

use serde_yaml::{Mapping, Value};

use super::vars::{find_vars, VarRef};

/// Free-form values (`params`, `source`, `vars`): string keys, any values.
pub type Params = BTreeMap<String, Value>;

/// Collects problems while reading a document.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// Every problem found, `path: message`.
    pub problems: Vec<String>,
    /// Whether unfilled vars are allowed (validation without vars).
    pub vars_may_be_unfilled: bool,
    /// What is accepted but not taken as written, `path: message`.
    pub warnings: Vec<String>,
}

/// `parent.key`, or `key` at the top.
pub(crate) fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// Short description of a value's YAML type for messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

impl Reader {
    /// Records a problem at a path.
    pub(super) fn problem(&mut self, at: &str, message: impl Display) {
        if at.is_empty() {
            self.problems.push(message.to_string());
        } else {
            self.problems.push(format!("{at}: {message}"));
        }
    }

    /// Records a warning at a path: something accepted but not taken as
    /// written (shown by `set-pipeline` and `validate-plan`).
    pub(super) fn warn(&mut self, at: &str, message: impl Display) {
        self.warnings.push(format!("{at}: {message}"));
    }

    /// Whether a value is a string holding vars that are filled later, so
    /// its type cannot be checked now.
    pub(super) fn deferred(&self, v: &Value) -> bool {
        let Value::String(s) = v else { return false };
        let vars = find_vars(s);
        !vars.is_empty()
            && (self.vars_may_be_unfilled
                || vars
                    .iter()
                    .any(|(_, body)| VarRef::parse(body).is_ok_and(|r| r.is_local())))
    }

    /// [`Self::deferred`] for a typed field (a boolean, a number, a list, a
    /// mapping): one held wholly by a build-local var (`((.:name))`) is a
    /// problem at `at`, since those are filled only inside strings when the
    /// step runs and the field would be lost.
    pub(super) fn deferred_typed(&mut self, v: &Value, at: &str) -> bool {
        if !self.deferred(v) {
            return false;
        }
        let Value::String(s) = v else { return true };
        let local = find_vars(s)
            .iter()
            .any(|(_, body)| VarRef::parse(body).is_ok_and(|r| r.is_local()));
        if local {
            self.problem(
                at,
                format!(
                    "{s:?}: a build-local var cannot stand for this whole field yet \
                     (Gantry fills them inside strings when the step runs)"
                ),
            );
        }
        true
    }

    /// A mapping, with its unknown keys reported (`what` names the thing
    /// for the message, e.g. "a resource").
    pub(super) fn mapping<'a>(
        &mut self,
        v: &'a Value,
        at: &str,
        what: &str,
        known: &[&str],
    ) -> Option<&'a Mapping> {
        match v {
            Value::Mapping(m) => {
                self.unknown_keys(m, at, what, known);
                Some(m)
            }
            _ => {
                self.problem(at, format!("{what} must be a mapping, not {}", kind_of(v)));
                None
            }
        }
    }

    /// Reports every key of `m` not in `known`.
    pub(super) fn unknown_keys(&mut self, m: &Mapping, at: &str, what: &str, known: &[&str]) {
        for k in m.keys() {
            let name = match k.as_str() {
                Some(s) => s.to_string(),
                None => format!("{k:?}"),
            };
            if !known.contains(&name.as_str()) {
                self.problem(
                    at,
                    format!(
                        "unknown field {name:?} ({what} takes: {})",
                        known.join(", ")
                    ),
                );
            }
        }
    }

    /// A required string field.
    pub(super) fn required_str(&mut self, m: &Mapping, key: &str, at: &str) -> String {
        match m.get(key) {
            None | Some(Value::Null) => {
                self.problem(at, format!("missing field {key}"));
                String::new()
            }
            Some(v) => self.str(v, &join(at, key)).unwrap_or_default(),
        }
    }

    /// An optional string field.
    pub(super) fn opt_str(&mut self, m: &Mapping, key: &str, at: &str) -> Option<String> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => self.str(v, &join(at, key)),
        }
    }

    /// A string value (vars inside it included).
    pub(super) fn str(&mut self, v: &Value, at: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.problem(at, format!("must be a string, not {}", kind_of(v)));
                None
            }
        }
    }

    /// An optional boolean field (absent: false).
    pub(super) fn bool(&mut self, m: &Mapping, key: &str, at: &str) -> bool {
        match m.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) if self.deferred_typed(v, &join(at, key)) => false,
            Some(v) => {
                self.problem(
                    &join(at, key),
                    format!("must be true or false, not {}", kind_of(v)),
                );
                false
            }
        }
    }

    /// An optional integer field.
    pub(super) fn int(&mut self, m: &Mapping, key: &str, at: &str) -> Option<i64> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64(),
            Some(v) if self.deferred_typed(v, &join(at, key)) => None,
            Some(v) => {
                self.problem(
                    &join(at, key),
                    format!("must be an integer, not {}", kind_of(v)),
                );
                None
            }
        }
    }

    /// An optional integer field that must be at least 1.
    pub(super) fn positive(&mut self, m: &Mapping, key: &str, at: &str) -> Option<u32> {
        let n = self.int(m, key, at)?;
        match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                self.problem(&join(at, key), format!("must be at least 1, not {n}"));
                None
            }
        }
    }

    /// An optional non-negative integer field.
    pub(super) fn non_negative(&mut self, m: &Mapping, key: &str, at: &str) -> Option<u32> {
        let n = self.int(m, key, at)?;
        match u32::try_from(n) {
            Ok(n) => Some(n),
            _ => {
                self.problem(&join(at, key), format!("must not be negative, not {n}"));
                None
            }
        }
    }

    /// An optional list of strings (absent: empty).
    pub(super) fn strings(&mut self, m: &Mapping, key: &str, at: &str) -> Vec<String> {
        let at = join(at, key);
        let items = match m.get(key) {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Sequence(s)) => s,
            Some(v) if self.deferred_typed(v, &at) => return Vec::new(),
            Some(v) => {
                self.problem(
                    &at,
                    format!("must be a list of strings, not {}", kind_of(v)),
                );
                return Vec::new();
            }
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| self.str(v, &format!("{at}[{i}]")))
            .collect()
    }

    /// An optional mapping of string keys to any values (absent: empty).
    pub(super) fn params(&mut self, m: &Mapping, key: &str, at: &str) -> Params {
        let at = join(at, key);
        match m.get(key) {
            None | Some(Value::Null) => Params::new(),
            Some(Value::Mapping(p)) => p
                .iter()
                .filter_map(|(k, v)| match k {
                    Value::String(k) => Some((k.clone(), v.clone())),
                    other => {
                        self.problem(&at, format!("key {other:?} must be a string"));
                        None
                    }
                })
                .collect(),
            Some(v) if self.deferred_typed(v, &at) => Params::new(),
            Some(v) => {
                self.problem(&at, format!("must be a mapping, not {}", kind_of(v)));
                Params::new()
            }
        }
    }

    /// An optional mapping of string keys to string values.
    pub(super) fn string_map(
        &mut self,
        m: &Mapping,
        key: &str,
        at: &str,
    ) -> BTreeMap<String, String> {
        let params = self.params(m, key, at);
        let at = join(at, key);
        params
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                other => {
                    self.problem(
                        &join(&at, &k),
                        format!("must be a string, not {}", kind_of(&other)),
                    );
                    None
                }
            })
            .collect()
    }
}
