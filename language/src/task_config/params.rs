//! Task `params`: environment variables whose values may be any YAML type,
//! turned into text exactly as Concourse does (`atc.CoercedString` after its
//! YAML-to-JSON conversion): strings as written, null as empty, integers as
//! written, floats as Go's JSON encoder writes them, booleans as
//! `true`/`false`, lists and mappings as compact JSON with sorted keys.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::read::{key_text, to_json, Problems};

/// Reads `params`: a mapping of NAME to a value of any type.
pub(super) fn read_params(v: Option<&Value>, p: &mut Problems) -> BTreeMap<String, String> {
    let m = match v {
        None | Some(Value::Null) => return BTreeMap::new(),
        Some(Value::Mapping(m)) => m,
        Some(_) => {
            p.push("params must be a mapping of NAME: value".into());
            return BTreeMap::new();
        }
    };
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let Some(key) = key_text(k) else {
            p.push("params: keys must be strings".into());
            continue;
        };
        if let Some(text) = param_text(v, &format!("params.{key}"), p) {
            out.insert(key, text);
        }
    }
    out
}

/// A pipeline task step's `params` (which override its config's) as the
/// text the task's environment gets, read as the config's are.
pub fn params_text(
    params: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, String>, Vec<String>> {
    let m: serde_yaml::Mapping = params
        .iter()
        .map(|(k, v)| (Value::String(k.clone()), v.clone()))
        .collect();
    let mut problems = Vec::new();
    let out = read_params(Some(&Value::Mapping(m)), &mut problems);
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// One param value as the text the task's environment gets.
pub(super) fn param_text(v: &Value, at: &str, p: &mut Problems) -> Option<String> {
    match v {
        Value::Null => Some(String::new()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(_) | Value::Sequence(_) | Value::Mapping(_) => {
            Some(go_json(&to_json(v, at, p)?))
        }
        Value::Tagged(_) => to_json(v, at, p).map(|j| go_json(&j)),
    }
}

/// `v` as Go's `encoding/json` writes it: compact, keys sorted, `<`, `>`
/// and `&` escaped, floats in Go's format.
pub(super) fn go_json(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => go_float(f),
            _ => n.to_string(),
        },
        J::String(s) => go_string(s),
        J::Array(a) => {
            let items: Vec<String> = a.iter().map(go_json).collect();
            format!("[{}]", items.join(","))
        }
        J::Object(o) => {
            // serde_json's map is ordered by key, as Go sorts map keys.
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{}:{}", go_string(k), go_json(v)))
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

/// A JSON string with Go's HTML-safe escapes.
fn go_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// A float as Go's JSON encoder writes it: the shortest text that reads
/// back the same, without exponent from 1e-6 up to 1e21, else with one
/// (`1e+21`, `1e-7`).
pub(super) fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((m, exp)) if !exp.starts_with('-') => format!("{m}e+{exp}"),
            _ => e,
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(yaml: &str) -> String {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut p = Vec::new();
        let t = param_text(&v, "params.X", &mut p).unwrap();
        assert!(p.is_empty(), "{p:?}");
        t
    }

    // The cases of Concourse's atc/task_test.go, "decode task yaml".
    #[test]
    fn values_become_text_as_in_concourse() {
        assert_eq!(text("true"), "true");
        assert_eq!(text("1059262"), "1059262");
        assert_eq!(text("18446744073709551615"), "18446744073709551615");
        assert_eq!(text("1.8446744e+19"), "18446744000000000000");
        assert_eq!(text("\"1.8446744e+19\""), "1.8446744e+19");
        assert_eq!(text("1059262.123123123"), "1059262.123123123");
        assert_eq!(text("{foo: bar}"), r#"{"foo":"bar"}"#);
        assert_eq!(text("~"), "");
        assert_eq!(text("1"), "1");
    }

    #[test]
    fn nested_values_are_json_with_sorted_keys_and_go_escapes() {
        assert_eq!(text("[1, 2]"), "[1,2]");
        assert_eq!(text("{b: 1.0, a: [x, null]}"), r#"{"a":["x",null],"b":1}"#);
        assert_eq!(
            text("{html: '<a&b>'}"),
            r#"{"html":"\u003ca\u0026b\u003e"}"#
        );
        assert_eq!(text("-7"), "-7");
    }

    #[test]
    fn floats_take_go_json_form() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-7), "1.5e-7");
        assert_eq!(go_float(1e-6), "0.000001");
        assert_eq!(go_float(-2.5e22), "-2.5e+22");
        assert_eq!(go_float(0.0), "0");
    }

    #[test]
    fn what_json_cannot_hold_is_refused_by_name() {
        let v: Value = serde_yaml::from_str("{A: .inf, B: ok, [x]: y}").unwrap();
        let mut p = Vec::new();
        let got = read_params(Some(&v), &mut p);
        assert_eq!(got.get("B").map(String::as_str), Some("ok"));
        let all = p.join("\n");
        assert!(all.contains("params.A"), "{all}");
        assert!(all.contains("keys must be strings"), "{all}");
    }

    #[test]
    fn scalar_keys_become_text() {
        let v: Value = serde_yaml::from_str("{1: one, true: yes}").unwrap();
        let mut p = Vec::new();
        let got = read_params(Some(&v), &mut p);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(got["1"], "one");
        assert_eq!(got["true"], "yes");
    }
}
