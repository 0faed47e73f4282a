//! The build-local vars of one build (`((.:name))`, Concourse's local var
//! scope of `atc/exec/build/vars.go`): `load_var` sets them while the build
//! runs and steps defined with them are filled from here when they are
//! about to run (see `steps/deferred.rs`). A value loaded without
//! `reveal: true` is a secret: [`LocalVars::redact`] hides it in any text
//! the engine writes to the build log.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_yaml::Value;

use crate::pipeline::Vars;

/// What replaces a secret value in the build log (Concourse's text).
pub(super) const REDACTED: &str = "((redacted))";

/// The build-local vars of one build, shared by its steps.
#[derive(Debug, Clone, Default)]
pub struct LocalVars {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Each var's value by name.
    values: BTreeMap<String, Value>,
    /// The names of the vars whose values are secrets.
    secret: BTreeMap<String, ()>,
}

impl LocalVars {
    /// No vars: a new build.
    pub fn new() -> LocalVars {
        LocalVars::default()
    }

    /// Sets `name` to `value`; `redact`: its text is hidden in the build
    /// log. A later value of the same name replaces the earlier, as in
    /// Concourse.
    pub fn set(&self, name: &str, value: Value, redact: bool) {
        let mut state = self.lock();
        state.values.insert(name.to_string(), value);
        if redact {
            state.secret.insert(name.to_string(), ());
        } else {
            state.secret.remove(name);
        }
    }

    /// The vars as they are now, to fill a step about to run.
    pub fn snapshot(&self) -> Vars {
        Vars::from(self.lock().values.clone())
    }

    /// `text` with every secret value's text (and each string inside a
    /// secret list or mapping) replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let state = self.lock();
        let mut secrets = Vec::new();
        for name in state.secret.keys() {
            if let Some(v) = state.values.get(name) {
                secret_texts(v, &mut secrets);
            }
        }
        // Longest first, so a secret inside another is not half-replaced.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut out = text.to_string();
        for s in secrets.iter().filter(|s| !s.is_empty()) {
            out = out.replace(s.as_str(), REDACTED);
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the maps consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The texts of a value a log could show: the scalars inside it, and the
/// whole as JSON when it is a list or mapping.
fn secret_texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Bool(_) | Value::Null => {}
        Value::Sequence(items) => {
            out.extend(serde_json::to_string(v).ok());
            items.iter().for_each(|x| secret_texts(x, out));
        }
        Value::Mapping(m) => {
            out.extend(serde_json::to_string(v).ok());
            m.values().for_each(|x| secret_texts(x, out));
        }
        Value::Tagged(t) => secret_texts(&t.value, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_revealed_values_are_not() {
        let vars = LocalVars::new();
        let shared = vars.clone();
        vars.set("token", Value::String("s3cret".into()), true);
        vars.set("version", Value::String("1.2.3".into()), false);
        vars.set(
            "creds",
            serde_yaml::from_str("{user: admin-user, pass: hunter2}").unwrap(),
            true,
        );
        assert_eq!(
            shared.redact("token=s3cret version=1.2.3 pass=hunter2"),
            "token=((redacted)) version=1.2.3 pass=((redacted))"
        );
        // Revealing a var again makes it plain.
        vars.set("token", Value::String("s3cret".into()), false);
        assert_eq!(shared.redact("s3cret"), "s3cret");
        let snap = shared.snapshot();
        let var = crate::pipeline::vars::VarRef::parse(".:creds.user").unwrap();
        assert_eq!(
            snap.lookup(&var).unwrap(),
            Some(&Value::String("admin-user".into()))
        );
    }
}
