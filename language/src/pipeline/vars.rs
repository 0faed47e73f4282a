//! Concourse's `((vars))`: finding them in a document and filling them.
//!
//! A var is `((name))`, `((name.field.sub))` (fields of a mapping value,
//! `"quoted.segments"` allowed) or `((source:name))`. Static values (`-v
//! NAME=VALUE`, `-l VARS.yml`) fill vars when a pipeline is set; the vars
//! they leave are the credential manager's, filled when a build needs them
//! ([`interpolate_leaving`] keeps them in place and names them; see
//! the engine's credential managers). The local source `.` (`((.:name))`) is filled by
//! `load_var` and `across` while the build runs, so interpolation leaves it
//! in place too.
//!
//! As in Concourse, a var that is the whole of a YAML string is replaced by
//! its value with its YAML type (a list stays a list, `3` stays a number); a
//! var inside a longer string is replaced by its text, which only strings and
//! numbers have.

use std::collections::BTreeMap;
use std::fmt;

use serde_yaml::{Mapping, Value};

/// A parsed var reference: `((source:path.field))`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct VarRef {
    /// The var source (`.` for build-local vars); none for a plain var.
    pub source: Option<String>,
    /// The var's name.
    pub path: String,
    /// Fields looked up, in order, in the var's (mapping) value.
    pub fields: Vec<String>,
    /// The text between the parentheses, as written (for messages).
    pub text: String,
}

impl VarRef {
    /// Parses the text between `((` and `))`.
    pub fn parse(text: &str) -> Result<VarRef, String> {
        let mut input = text;
        let mut source = None;
        if let Some(i) = find_unquoted(input, ':') {
            let s = &input[..i];
            if s.contains('"') {
                return Err(format!("invalid var (({text})): source must not be quoted"));
            }
            source = Some(s.to_string());
            input = &input[i + 1..];
        }
        let mut segments = Vec::new();
        let mut rest = Some(input);
        while let Some(r) = rest {
            let (seg, next) = match find_unquoted(r, '.') {
                Some(i) => (&r[..i], Some(&r[i + 1..])),
                None => (r, None),
            };
            let seg = seg
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(seg);
            if seg.is_empty() {
                return Err(format!("invalid var (({text})): empty field"));
            }
            segments.push(seg.to_string());
            rest = next;
        }
        let path = segments.remove(0);
        Ok(VarRef {
            source,
            path,
            fields: segments,
            text: text.to_string(),
        })
    }

    /// A build-local var (`((.:name))`), filled by `load_var` or `across`
    /// while the build runs.
    pub fn is_local(&self) -> bool {
        self.source.as_deref() == Some(".")
    }
}

impl fmt::Display for VarRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(({}))", self.text)
    }
}

fn find_unquoted(s: &str, wanted: char) -> Option<usize> {
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == wanted && !quoted {
            return Some(i);
        }
    }
    None
}

/// The vars of a string: each `((...))` whose text is a var name, with its
/// byte range (the parentheses included). Mirrors Concourse's pattern
/// `\(\((([-/\.\w\pL]+\:)?[-/\.:@"\w\pL]+)\)\)`.
pub fn find_vars(s: &str) -> Vec<(std::ops::Range<usize>, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = s[from..].find("((").map(|i| i + from) {
        let body_start = open + 2;
        let Some(close) = s[body_start..].find("))").map(|i| i + body_start) else {
            break;
        };
        let body = &s[body_start..close];
        if is_var_body(body) {
            found.push((open..close + 2, body.to_string()));
            from = close + 2;
        } else {
            from = open + 1;
        }
    }
    found
}

fn is_var_body(body: &str) -> bool {
    let name_char = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | '.');
    let path_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| name_char(c) || matches!(c, ':' | '@' | '"'))
    };
    match body.split_once(':') {
        Some((src, rest)) if !src.is_empty() && src.chars().all(name_char) => path_ok(rest),
        _ => path_ok(body),
    }
}

/// Whether a string holds at least one var.
#[cfg(test)]
pub fn has_vars(s: &str) -> bool {
    !find_vars(s).is_empty()
}

/// Whether a string is exactly one var (its value then keeps its YAML type).
#[cfg(test)]
pub fn whole_var(s: &str) -> Option<String> {
    match find_vars(s).as_slice() {
        [(range, body)] if range.start == 0 && range.end == s.len() => Some(body.clone()),
        _ => None,
    }
}

/// Static var values: what `-v` and `-l` give. Stored (with a job build's
/// plan) as a mapping of name to value.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Vars {
    /// Each var's value by name; `((name.field))` looks into these values.
    values: BTreeMap<String, Value>,
}

impl Vars {
    /// No vars.
    pub fn new() -> Vars {
        Vars::default()
    }

    /// Whether no var was given (then validation does not require vars).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Sets every var of `other` over these.
    pub fn extend(&mut self, other: &Vars) {
        for (k, v) in &other.values {
            self.values.insert(k.clone(), v.clone());
        }
    }

    /// Sets the var `name` (as it is, dots included) to `value`.
    pub fn insert(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_string(), value);
    }

    /// Sets a var; a dotted name (`a.b`) sets field `b` of var `a`.
    pub fn set(&mut self, name: &str, value: Value) {
        let mut parts = name.split('.');
        let top = parts.next().unwrap_or_default().to_string();
        let rest: Vec<&str> = parts.collect();
        if rest.is_empty() {
            self.values.insert(top, value);
            return;
        }
        let mut slot = self
            .values
            .entry(top)
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        for field in rest {
            if !slot.is_mapping() {
                *slot = Value::Mapping(Mapping::new());
            }
            let m = slot.as_mapping_mut().expect("a mapping");
            slot = m
                .entry(Value::String(field.to_string()))
                .or_insert(Value::Null);
        }
        *slot = value;
    }

    /// Applies a `-v NAME=VALUE` flag; the value is a string, as with `fly -v`.
    pub fn set_flag(&mut self, flag: &str) -> Result<(), String> {
        match flag.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                self.set(name.trim(), Value::String(value.to_string()));
                Ok(())
            }
            _ => Err(format!("-v {flag:?}: expected NAME=VALUE")),
        }
    }

    /// Applies a `-y NAME=YAML` flag: the value is read as YAML (a number,
    /// a boolean, a list, a mapping, ...), as with `fly -y`.
    pub fn set_yaml_flag(&mut self, flag: &str) -> Result<(), String> {
        match flag.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                let v = crate::bounded_yaml::parse_bounded_yaml(value, "-y value")
                    .map_err(|e| format!("-y {flag:?}: {e}"))?;
                self.set(name.trim(), v);
                Ok(())
            }
            _ => Err(format!("-y {flag:?}: expected NAME=YAML")),
        }
    }

    /// Adds the vars of a YAML vars file (a mapping of name to value); later
    /// files and `-v` flags override earlier values.
    pub fn load_yaml(&mut self, text: &str) -> Result<(), String> {
        let doc: Value = crate::bounded_yaml::parse_bounded_yaml(text, "vars file")
            .map_err(|e| e.to_string())?;
        match doc {
            Value::Null => Ok(()),
            Value::Mapping(m) => {
                for (k, v) in m {
                    match k {
                        Value::String(k) => {
                            self.values.insert(k, v);
                        }
                        other => return Err(format!("var name {other:?} is not a string")),
                    }
                }
                Ok(())
            }
            _ => Err("a vars file must be a mapping of NAME: value".into()),
        }
    }

    /// The value of a plain var, with its fields looked up.
    pub fn lookup(&self, var: &VarRef) -> Result<Option<&Value>, String> {
        self.lookup_at(&var.path, var)
    }

    /// The value of a var of a var source, kept as `source:name` by the
    /// credential manager's resolution, with its fields looked up.
    pub fn lookup_sourced(&self, var: &VarRef) -> Result<Option<&Value>, String> {
        match &var.source {
            Some(source) => self.lookup_at(&format!("{source}:{}", var.path), var),
            None => Ok(None),
        }
    }

    fn lookup_at(&self, key: &str, var: &VarRef) -> Result<Option<&Value>, String> {
        let Some(mut v) = self.values.get(key) else {
            return Ok(None);
        };
        for field in &var.fields {
            v = match v {
                Value::Mapping(m) => m
                    .get(field.as_str())
                    .ok_or_else(|| format!("var {var}: {:?} has no field {field:?}", var.path))?,
                _ => {
                    return Err(format!(
                        "var {var}: {:?} is not a mapping, so has no field {field:?}",
                        var.path
                    ))
                }
            };
        }
        Ok(Some(v))
    }
}

impl From<BTreeMap<String, Value>> for Vars {
    fn from(values: BTreeMap<String, Value>) -> Self {
        Vars { values }
    }
}

/// Fills every var of a document. Build-local vars (`((.:name))`) are left
/// for the build; any other var that cannot be filled is a problem naming it
/// (and where it is first used), each var once.
pub fn interpolate(doc: &Value, vars: &Vars) -> Result<Value, Vec<String>> {
    Filler::new(Some(vars), Locals::Keep).fill(doc)
}

/// Fills the vars of a document that `vars` gives and leaves the others
/// (and build-local vars) in place: what a credential manager fills when
/// a build needs them. Answers the document and the vars left, each once
/// by its text (`source:name.field`); a var `vars` has but cannot fill
/// (a missing field, a list inside a string) is still a problem.
pub fn interpolate_leaving(
    doc: &Value,
    vars: &Vars,
) -> Result<(Value, std::collections::BTreeSet<String>), Vec<String>> {
    let mut filler = Filler::new(Some(vars), Locals::Keep);
    filler.leave = Some(Default::default());
    let out = filler.value(doc, "");
    if filler.problems.is_empty() {
        Ok((out, filler.leave.unwrap_or_default()))
    } else {
        Err(filler.problems.into_values().collect())
    }
}

/// The vars of `doc` other than build-local ones, each once by its text.
pub fn vars_of(doc: &Value, out: &mut std::collections::BTreeSet<String>) {
    match doc {
        Value::String(s) => {
            for (_, body) in find_vars(s) {
                if !VarRef::parse(&body).is_ok_and(|r| r.is_local()) {
                    out.insert(body);
                }
            }
        }
        Value::Sequence(items) => items.iter().for_each(|x| vars_of(x, out)),
        Value::Mapping(m) => m.iter().for_each(|(k, v)| {
            vars_of(k, out);
            vars_of(v, out);
        }),
        Value::Tagged(t) => vars_of(&t.value, out),
        _ => {}
    }
}

/// Fills the build-local vars (`((.:name))`) of a document from `locals`
/// (the build's, or an `across` combination's); other vars stay in place.
/// With `strict`, a local var `locals` lacks is a problem naming it (what a
/// step about to run needs); without, it stays for later (an `across`
/// combination filling only its own vars).
pub fn interpolate_local(doc: &Value, locals: &Vars, strict: bool) -> Result<Value, Vec<String>> {
    let mode = if strict {
        Locals::Require(locals)
    } else {
        Locals::IfKnown(locals)
    };
    Filler::new(None, mode).fill(doc)
}

/// Fills a task config file read at run time (`task: ..., file: ...`), as
/// Concourse does: its plain vars from the step's `vars` (the pipeline's
/// vars do not reach it), its build-local vars from the build's; every var
/// must be filled.
pub fn interpolate_task_file(
    doc: &Value,
    task_vars: &Vars,
    locals: &Vars,
) -> Result<Value, Vec<String>> {
    Filler::new(Some(task_vars), Locals::Require(locals)).fill(doc)
}

/// What a [`Filler`] does with build-local vars.
#[derive(Clone, Copy)]
enum Locals<'a> {
    /// Leaves them in place (the pipeline's load).
    Keep,
    /// Fills the ones known, leaves the others.
    IfKnown(&'a Vars),
    /// Fills them all; one unknown is a problem.
    Require(&'a Vars),
}

struct Filler<'a> {
    /// Plain vars; `None` leaves them in place.
    vars: Option<&'a Vars>,
    /// Build-local vars.
    locals: Locals<'a>,
    /// One problem per var text, so a var used ten times is named once.
    problems: BTreeMap<String, String>,
    /// Some: plain vars `vars` lacks (and vars naming a source) stay in
    /// place, collected here, instead of being problems.
    leave: Option<std::collections::BTreeSet<String>>,
}

impl<'a> Filler<'a> {
    fn new(vars: Option<&'a Vars>, locals: Locals<'a>) -> Self {
        Filler {
            vars,
            locals,
            problems: BTreeMap::new(),
            leave: None,
        }
    }

    fn fill(mut self, doc: &Value) -> Result<Value, Vec<String>> {
        let out = self.value(doc, "");
        if self.problems.is_empty() {
            Ok(out)
        } else {
            Err(self.problems.into_values().collect())
        }
    }

    fn value(&mut self, v: &Value, at: &str) -> Value {
        match v {
            Value::String(s) => self.string(s, at),
            Value::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.value(x, &format!("{at}[{i}]")))
                    .collect(),
            ),
            Value::Mapping(m) => Value::Mapping(
                m.iter()
                    .map(|(k, x)| {
                        let key = k.as_str().map(str::to_string).unwrap_or_default();
                        let child = if at.is_empty() {
                            key
                        } else {
                            format!("{at}.{key}")
                        };
                        (self.value(k, at), self.value(x, &child))
                    })
                    .collect(),
            ),
            Value::Tagged(t) => Value::Tagged(Box::new(serde_yaml::value::TaggedValue {
                tag: t.tag.clone(),
                value: self.value(&t.value, at),
            })),
            other => other.clone(),
        }
    }

    fn string(&mut self, s: &str, at: &str) -> Value {
        let found = find_vars(s);
        if found.is_empty() {
            return Value::String(s.to_string());
        }
        let whole = found.len() == 1 && found[0].0 == (0..s.len());
        let mut out = String::new();
        let mut last = 0;
        for (range, body) in found {
            out.push_str(&s[last..range.start]);
            last = range.end;
            let text = &s[range.clone()];
            match self.resolve(&body, at) {
                None => out.push_str(text),
                Some(value) if whole => return value,
                Some(Value::String(v)) => out.push_str(&v),
                Some(Value::Number(n)) => out.push_str(&n.to_string()),
                Some(other) => {
                    let kind = match other {
                        Value::Bool(_) => "a boolean",
                        Value::Sequence(_) => "a list",
                        Value::Mapping(_) => "a mapping",
                        _ => "not a string",
                    };
                    self.problem(
                        &body,
                        format!("var (({body})) at {at} is {kind}: only strings and numbers can be put inside a longer string"),
                    );
                    out.push_str(text);
                }
            }
        }
        out.push_str(&s[last..]);
        Value::String(out)
    }

    /// The value of a var, or `None` when it stays in place (local, or a problem).
    fn resolve(&mut self, body: &str, at: &str) -> Option<Value> {
        let var = match VarRef::parse(body) {
            Ok(v) => v,
            Err(e) => {
                self.problem(body, format!("{e} (at {at})"));
                return None;
            }
        };
        if var.is_local() {
            let (locals, strict) = match self.locals {
                Locals::Keep => return None,
                Locals::IfKnown(l) => (l, false),
                Locals::Require(l) => (l, true),
            };
            return match locals.lookup(&var) {
                Ok(Some(v)) => Some(v.clone()),
                Ok(None) if !strict => None,
                Ok(None) => {
                    let at = if at.is_empty() { "the top" } else { at };
                    self.problem(
                        body,
                        format!("unfilled local var {var} (first used at {at}): no load_var or across set it before the step ran"),
                    );
                    None
                }
                Err(e) => {
                    self.problem(body, format!("{e} (at {at})"));
                    None
                }
            };
        }
        let vars = self.vars?;
        if var.source.is_some() {
            match vars.lookup_sourced(&var) {
                Ok(Some(v)) => return Some(v.clone()),
                Ok(None) => {}
                Err(e) => {
                    self.problem(body, format!("{e} (at {at})"));
                    return None;
                }
            }
        }
        if let (Some(left), Some(_)) = (&mut self.leave, &var.source) {
            // A var source's: filled when a build needs it.
            left.insert(body.to_string());
            return None;
        }
        if let Some(source) = &var.source {
            self.problem(
                body,
                format!("var {var} (at {at}) names var source {source:?}, which Gantry cannot read: give the value as a plain var with -v or -l"),
            );
            return None;
        }
        match vars.lookup(&var) {
            Ok(Some(v)) => Some(v.clone()),
            Ok(None) if self.leave.is_some() => {
                self.leave
                    .as_mut()
                    .expect("leaving")
                    .insert(body.to_string());
                None
            }
            Ok(None) => {
                self.problem(body, format!("unfilled var {var} (first used at {at})"));
                None
            }
            Err(e) => {
                self.problem(body, format!("{e} (at {at})"));
                None
            }
        }
    }

    fn problem(&mut self, body: &str, message: String) {
        self.problems.entry(body.to_string()).or_insert(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    fn vars(s: &str) -> Vars {
        let mut v = Vars::new();
        v.load_yaml(s).unwrap();
        v
    }

    #[test]
    fn a_whole_value_var_keeps_its_yaml_type() {
        let out = interpolate(
            &yaml("n: ((n))\nlist: ((l))\nflag: ((b))\nm: ((m))\n"),
            &vars("n: 3\nl: [a, b]\nb: true\nm: {k: v}\n"),
        )
        .unwrap();
        assert_eq!(out, yaml("n: 3\nlist: [a, b]\nflag: true\nm: {k: v}\n"));
    }

    #[test]
    fn vars_inside_strings_are_substituted_as_text() {
        let out = interpolate(
            &yaml("s: \"Hello, ((who))! ((n)) times, ((who)) again\"\n"),
            &vars("who: HAL\nn: 9000\n"),
        )
        .unwrap();
        assert_eq!(out, yaml("s: \"Hello, HAL! 9000 times, HAL again\"\n"));
    }

    #[test]
    fn fields_and_quoted_segments_are_looked_up() {
        let v = vars("creds: {user: me, \"a.b\": dotted, nested: {deep: 1}}\n");
        let out = interpolate(
            &yaml("u: ((creds.user))\nd: ((creds.\"a.b\"))\nn: x-((creds.nested.deep))\n"),
            &v,
        )
        .unwrap();
        assert_eq!(out, yaml("u: me\nd: dotted\nn: x-1\n"));
        let err = interpolate(&yaml("u: ((creds.nope))\n"), &v).unwrap_err();
        assert!(err[0].contains("has no field \"nope\""), "{err:?}");
    }

    #[test]
    fn each_unfilled_var_is_named_once_with_where_it_is_used() {
        let err = interpolate(
            &yaml("jobs:\n- name: ((a))-job\n  plan: [{task: ((b))}, {task: ((a))}]\n"),
            &vars("other: 1\n"),
        )
        .unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(
            err[0].contains("unfilled var ((a)) (first used at jobs[0].name)"),
            "{err:?}"
        );
        assert!(err[1].contains("unfilled var ((b))"), "{err:?}");
    }

    #[test]
    fn nested_documents_keys_included_are_filled() {
        let out = interpolate(
            &yaml("outer:\n  ((k)): [{inner: ((v))}]\n"),
            &vars("k: key\nv: [1, 2]\n"),
        )
        .unwrap();
        assert_eq!(out, yaml("outer:\n  key: [{inner: [1, 2]}]\n"));
    }

    #[test]
    fn local_vars_stay_and_other_sources_are_refused() {
        let out = interpolate(&yaml("a: ((.:x))\nb: ((.:\"local.var\"))\n"), &Vars::new()).unwrap();
        assert_eq!(out, yaml("a: ((.:x))\nb: ((.:\"local.var\"))\n"));
        let err = interpolate(&yaml("a: ((vault:secret))\n"), &Vars::new()).unwrap_err();
        assert!(err[0].contains("var source \"vault\""), "{err:?}");
    }

    #[test]
    fn local_vars_are_filled_at_run_time_and_an_unfilled_one_is_named() {
        let locals = vars("x: 1\nlist: [a, b]\n");
        let doc =
            yaml("a: ((.:x))\nb: v-((.:x))\nl: ((.:list))\nkeep: ((plain))\nlater: ((.:y))\n");
        let out = interpolate_local(&doc, &locals, false).unwrap();
        assert_eq!(
            out,
            yaml("a: 1\nb: v-1\nl: [a, b]\nkeep: ((plain))\nlater: ((.:y))\n")
        );
        let err = interpolate_local(&doc, &locals, true).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].starts_with("unfilled local var ((.:y)) (first used at later)"),
            "{err:?}"
        );
    }

    #[test]
    fn a_task_file_takes_its_step_vars_and_the_build_locals_only() {
        let doc = yaml("a: ((greeting))\nb: ((.:x))\nc: ((other))\n");
        let err =
            interpolate_task_file(&doc, &vars("greeting: hi\n"), &vars("x: 2\n")).unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].contains("unfilled var ((other))"), "{err:?}");
        let out = interpolate_task_file(&doc, &vars("greeting: hi\nother: o\n"), &vars("x: 2\n"))
            .unwrap();
        assert_eq!(out, yaml("a: hi\nb: 2\nc: o\n"));
    }

    #[test]
    fn a_list_inside_a_string_is_refused() {
        let err = interpolate(&yaml("a: x-((l))\n"), &vars("l: [1]\n")).unwrap_err();
        assert!(err[0].contains("is a list"), "{err:?}");
    }

    #[test]
    fn flags_set_strings_and_dotted_fields() {
        let mut v = Vars::new();
        v.set_flag("number=9000").unwrap();
        v.set_flag("creds.user=me").unwrap();
        assert!(v.set_flag("novalue").is_err());
        let out = interpolate(&yaml("n: ((number))\nu: ((creds.user))\n"), &v).unwrap();
        assert_eq!(out, yaml("n: \"9000\"\nu: me\n"));
    }

    /// `-y` reads its value as YAML (whole-value vars keep the type), `-v`
    /// keeps a string.
    #[test]
    fn yaml_flags_set_typed_values() {
        let mut v = Vars::new();
        v.set_yaml_flag("n=3").unwrap();
        v.set_yaml_flag("tags=[a, b]").unwrap();
        v.set_yaml_flag("src={uri: x}").unwrap();
        v.set_flag("s=3").unwrap();
        assert!(v.set_yaml_flag("novalue").is_err());
        assert!(v.set_yaml_flag("bad=[unclosed").is_err());
        let out = interpolate(
            &yaml(
                "n: ((n))
t: ((tags))
u: ((src.uri))
s: ((s))
",
            ),
            &v,
        )
        .unwrap();
        assert_eq!(
            out,
            yaml(
                "n: 3
t: [a, b]
u: x
s: \"3\"\n"
            )
        );
    }

    #[test]
    fn only_var_shaped_text_is_a_var() {
        assert_eq!(find_vars("((a)) ((not a var)) ((b.c))").len(), 2);
        assert_eq!(whole_var("((x))").as_deref(), Some("x"));
        assert_eq!(whole_var("((x))-y"), None);
        assert!(!has_vars("(( ))"));
    }
}
