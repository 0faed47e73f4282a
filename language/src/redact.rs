//! Redaction: every value a build read from a credential manager (or a
//! `load_var` without `reveal: true`) is replaced by `((redacted))` in
//! whatever the build writes (its events: task output, errors, step
//! names, plans), as Concourse's `credVarsTracker` does. A value is
//! redacted line by line, each line trimmed, and a line of one character
//! is not a secret (Concourse's rule: it would blank every `a`).

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use serde_yaml::Value;

/// What replaces a secret value (Concourse's text).
pub const REDACTED: &str = "((redacted))";

/// The secret texts of one build, shared by its event sink and its steps;
/// append-only: a value once secret stays hidden for the rest of the
/// build.
#[derive(Debug, Clone, Default)]
pub struct Redactor(Arc<RwLock<Texts>>);

#[derive(Debug, Default)]
struct Texts {
    /// Redaction is off on this node (`[web.credentials] redact = false`).
    off: bool,
    /// Each secret line, longest first (so a secret inside another is not
    /// half replaced), once.
    lines: Vec<String>,
}

impl Redactor {
    /// A redactor of no secret yet.
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// A redactor that hides nothing (redaction turned off on the node).
    pub fn off() -> Redactor {
        let r = Redactor::default();
        r.0.write().unwrap_or_else(|e| e.into_inner()).off = true;
        r
    }

    /// Hides `value` from now on, line by line: a string's text, and each
    /// string inside a mapping (see `secret_texts`: what Concourse
    /// redacts).
    pub fn add(&self, value: &Value) {
        if self.read().off {
            return;
        }
        let mut texts = Vec::new();
        secret_texts(value, &mut texts);
        let mut lines: Vec<String> = texts
            .iter()
            .flat_map(|t| t.split('\n'))
            .map(str::trim)
            .filter(|l| l.chars().count() > 1)
            .map(str::to_string)
            .collect();
        if lines.is_empty() {
            return;
        }
        let mut state = self.0.write().unwrap_or_else(|e| e.into_inner());
        lines.retain(|l| !state.lines.contains(l));
        state.lines.extend(lines);
        state
            .lines
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        state.lines.dedup();
    }

    /// Hides what `other` hides too.
    pub fn extend(&self, other: &Redactor) {
        let lines = other.read().lines.clone();
        let mut state = self.0.write().unwrap_or_else(|e| e.into_inner());
        if state.off {
            return;
        }
        state.lines.extend(lines);
        state
            .lines
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        state.lines.dedup();
    }

    /// Whether there is nothing to hide (then text goes through as it is).
    pub fn is_empty(&self) -> bool {
        self.read().lines.is_empty()
    }

    /// The length in bytes of the longest secret line (0: none).
    pub fn longest(&self) -> usize {
        self.read().lines.first().map_or(0, String::len)
    }

    /// `text` with every secret line replaced by [`REDACTED`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let state = self.read();
        let mut out = Cow::Borrowed(text);
        for line in &state.lines {
            if out.contains(line.as_str()) {
                out = Cow::Owned(out.replace(line.as_str(), REDACTED));
            }
        }
        out
    }

    /// Every string of a JSON value (keys included) redacted in place;
    /// answers whether anything changed.
    pub fn redact_json(&self, v: &mut serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => match self.redact(s) {
                Cow::Owned(r) => {
                    *s = r;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            serde_json::Value::Array(items) => {
                let mut changed = false;
                for x in items {
                    changed |= self.redact_json(x);
                }
                changed
            }
            serde_json::Value::Object(m) => {
                let mut changed = false;
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    let mut x = m.remove(&k).unwrap_or_default();
                    changed |= self.redact_json(&mut x);
                    let key = self.redact(&k).into_owned();
                    changed |= key != k;
                    m.insert(key, x);
                }
                changed
            }
            _ => false,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Texts> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether [`Redactor::add`] takes anything of `value` as secret (a list,
/// a number or a boolean it leaves shown, as Concourse does).
pub fn holds_secrets(value: &Value) -> bool {
    let mut texts = Vec::new();
    secret_texts(value, &mut texts);
    !texts.is_empty()
}

/// The texts of a value that are secret, as Concourse's tracker
/// (`vars/tracker.go`) takes them: a string, and each string inside a
/// mapping (at any depth of mappings). A list is not tracked, nor what is
/// inside it, nor a number or a boolean: Concourse prints them, and a
/// job that prints `across` values loaded from a list prints them here
/// too.
fn secret_texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Mapping(m) => m.values().for_each(|x| secret_texts(x, out)),
        Value::Tagged(t) => secret_texts(&t.value, out),
        Value::Number(_) | Value::Bool(_) | Value::Null | Value::Sequence(_) => {}
    }
}

/// Output held back until it can be redacted whole: a secret written in
/// two chunks is only found once both are here. Text goes out up to its
/// last line end; a line longer than [`HOLD_LIMIT`] goes out redacted, all
/// but its last `longest - 1` bytes (where a secret's head may wait for
/// its tail), so a line that never ends costs bounded memory.
#[derive(Debug, Default)]
pub struct HeldLines {
    pending: String,
}

/// The most a line is held back before its head goes out.
pub const HOLD_LIMIT: usize = 64 * 1024;

impl HeldLines {
    /// The redacted text that can go out after `text` arrived.
    pub fn push(&mut self, text: String, redactor: &Redactor) -> String {
        // The common case, no secret: the text goes on as it is, uncopied.
        if redactor.is_empty() && self.pending.is_empty() {
            return text;
        }
        self.pending.push_str(&text);
        let cut = self.pending.rfind('\n').map_or(0, |i| i + 1);
        if self.pending.len() - cut <= HOLD_LIMIT {
            // Whole lines are final: a secret line holds no line end.
            let rest = self.pending.split_off(cut);
            let out = std::mem::replace(&mut self.pending, rest);
            return redactor.redact(&out).into_owned();
        }
        // A long unended line: what is whole in it is replaced first, then
        // its last `longest - 1` bytes (the most a secret's unfinished
        // head can be) wait for the rest.
        let mut redacted = redactor.redact(&self.pending).into_owned();
        let mut cut = redacted.len() - redactor.longest().saturating_sub(1).min(redacted.len());
        while !redacted.is_char_boundary(cut) {
            cut -= 1;
        }
        self.pending = redacted.split_off(cut);
        redacted
    }

    /// What is still held, redacted (the output ended).
    pub fn finish(&mut self, redactor: &Redactor) -> String {
        redactor
            .redact(&std::mem::take(&mut self.pending))
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn values_are_redacted_line_by_line_and_one_character_lines_are_not() {
        let r = Redactor::new();
        let pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAK\n  x\n-----END KEY-----\n";
        r.add(&Value::String(pem.into()));
        r.add(&Value::String("s3cret".into()));
        let out = r.redact("key: -----BEGIN KEY-----\nMIIBOgIBAAJBAK\nx\ns3cret-s3cret");
        assert_eq!(
            out,
            "key: ((redacted))\n((redacted))\nx\n((redacted))-((redacted))"
        );
        assert_eq!(r.redact("nothing here"), "nothing here");
    }

    /// Concourse's tracker (`vars/tracker.go`, whose `track` is what
    /// `atc/exec/run_state_test.go`'s "fetched variables are tracked"
    /// specs read back): a mapping's strings are secrets, at any depth of
    /// mappings; its numbers and booleans are not.
    #[test]
    fn a_mapping_hides_its_strings_as_concourse_tracks_them() {
        let r = Redactor::new();
        r.add(&yaml(
            "{user: admin-user, pass: hunter2, port: 5432, on: true, db: {name: orders-db}}",
        ));
        let json = r#"{"user":"admin-user","pass":"hunter2","port":5432,"on":true,"db":{"name":"orders-db"}}"#;
        assert_eq!(
            r.redact(json),
            r#"{"user":"((redacted))","pass":"((redacted))","port":5432,"on":true,"db":{"name":"((redacted))"}}"#
        );
        assert_eq!(
            r.redact("login admin-user:hunter2 on 5432"),
            "login ((redacted)):((redacted)) on 5432"
        );
    }

    /// Concourse's tracker leaves a list alone (`track` has no case for
    /// one): a `load_var` of a list redacts none of its elements, so
    /// `across` over `((.:list))` prints the values (Concourse's
    /// `testflight/across_test.go` expects `running across static1
    /// dynamic1`), and neither does a mapping inside a list, nor a list
    /// inside a mapping.
    #[test]
    fn a_list_and_what_is_inside_it_are_not_secrets() {
        let r = Redactor::new();
        r.add(&yaml("[dynamic1, dynamic2, 4, {k: in-a-list}]"));
        r.add(&yaml("{branches: [main, release-1]}"));
        assert!(r.is_empty(), "nothing to hide");
        let text = "running across static1 dynamic1 4 in-a-list main release-1";
        assert_eq!(r.redact(text), text);
        // A string alone is still one (the `load_var` of a string).
        r.add(&Value::String("dynamic1".into()));
        assert_eq!(
            r.redact("running across static1 dynamic1"),
            "running across static1 ((redacted))"
        );
    }

    #[test]
    fn json_strings_and_keys_are_redacted_in_place() {
        let r = Redactor::new();
        r.add(&Value::String("tok-123".into()));
        let mut v = serde_json::json!({"a": ["x tok-123"], "tok-123": 1, "n": 2});
        assert!(r.redact_json(&mut v));
        assert_eq!(
            v,
            serde_json::json!({"a": ["x ((redacted))"], "((redacted))": 1, "n": 2})
        );
    }

    #[test]
    fn a_secret_split_across_chunks_is_still_redacted() {
        let r = Redactor::new();
        r.add(&Value::String("hunter2".into()));
        let mut held = HeldLines::default();
        let mut out = held.push("pass=hun".into(), &r);
        out += &held.push("ter2\nnext hu".into(), &r);
        out += &held.push("nter2".into(), &r);
        out += &held.finish(&r);
        assert_eq!(out, "pass=((redacted))\nnext ((redacted))");
    }

    #[test]
    fn a_line_that_never_ends_is_let_out_in_bounded_pieces() {
        let r = Redactor::new();
        r.add(&Value::String("hunter2".into()));
        let mut held = HeldLines::default();
        let mut out = String::new();
        let chunk = "a".repeat(HOLD_LIMIT / 4) + "hunter2";
        for _ in 0..16 {
            out += &held.push(chunk.clone(), &r);
            assert!(held.pending.len() <= HOLD_LIMIT + chunk.len());
        }
        out += &held.finish(&r);
        assert_eq!(out.matches(REDACTED).count(), 16, "every copy is hidden");
        assert!(!out.contains("hunter2"));
    }

    #[test]
    fn a_redactor_turned_off_hides_nothing() {
        let r = Redactor::off();
        r.add(&Value::String("hunter2".into()));
        r.extend(&{
            let other = Redactor::new();
            other.add(&Value::String("s3cret".into()));
            other
        });
        assert_eq!(r.redact("hunter2 s3cret"), "hunter2 s3cret");
    }

    #[test]
    fn without_secrets_text_goes_through_unheld() {
        let r = Redactor::new();
        let mut held = HeldLines::default();
        assert_eq!(held.push("partial".into(), &r), "partial");
        assert_eq!(held.finish(&r), "");
    }
}
