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
use crate::redact::Redactor;

/// The build-local vars of one build, shared by its steps.
#[derive(Debug, Clone, Default)]
pub struct LocalVars {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Each var's value by name.
    values: BTreeMap<String, Value>,
    /// Hides the values of the vars that are secrets: the build's, shared
    /// with its event sink.
    redactor: Redactor,
}

impl LocalVars {
    /// No vars: a new build.
    pub fn new() -> LocalVars {
        LocalVars::default()
    }

    /// No vars, their secrets hidden by the build's `redactor`.
    pub(crate) fn redacting(redactor: Redactor) -> LocalVars {
        let vars = LocalVars::default();
        vars.lock().redactor = redactor;
        vars
    }

    /// Sets `name` to `value`; `redact`: its text is hidden in the build
    /// log from now on (a value once secret stays hidden, as Concourse's
    /// tracker keeps it). A later value of the same name replaces the
    /// earlier, as in Concourse.
    pub fn set(&self, name: &str, value: Value, redact: bool) {
        let mut state = self.lock();
        if redact {
            state.redactor.add(&value);
        }
        state.values.insert(name.to_string(), value);
    }

    /// The vars as they are now, to fill a step about to run.
    pub fn snapshot(&self) -> Vars {
        Vars::from(self.lock().values.clone())
    }

    /// What hides the build's secrets (shared: it sees later ones too).
    pub(crate) fn redactor(&self) -> Redactor {
        self.lock().redactor.clone()
    }

    /// `text` with every secret value's text (and each string inside a
    /// secret mapping; a list is not a secret, as in Concourse) replaced
    /// by `((redacted))`.
    pub fn redact(&self, text: &str) -> String {
        self.lock().redactor.redact(text).into_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the maps consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
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
        // A value once secret stays hidden (Concourse's tracker).
        vars.set("token", Value::String("s3cret".into()), false);
        assert_eq!(shared.redact("s3cret"), "((redacted))");
        let snap = shared.snapshot();
        let var = crate::pipeline::vars::VarRef::parse(".:creds.user").unwrap();
        assert_eq!(
            snap.lookup(&var).unwrap(),
            Some(&Value::String("admin-user".into()))
        );
    }
}
