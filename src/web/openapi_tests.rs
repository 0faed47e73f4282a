use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::*;
use crate::web::auth;
use crate::web::routes::{document, ROUTES};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn doc() -> Value {
    serde_json::to_value(document()).expect("the document serializes")
}

/// Every operation of the document: (method, path) → operation.
fn operations(doc: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.insert((method.to_string(), path.clone()), op.clone());
            }
        }
    }
    out
}

#[test]
fn the_document_has_exactly_the_registered_routes() {
    let registered: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        registered.len(),
        ROUTES.len(),
        "a route is registered twice"
    );
    let documented: BTreeSet<(String, String)> = operations(&doc()).into_keys().collect();
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    assert!(
        undocumented.is_empty() && unregistered.is_empty(),
        "registered but not documented: {undocumented:?}; documented but not registered: {unregistered:?}"
    );
    assert!(registered.contains(&("get".into(), "/readyz".into())));
}

#[test]
fn every_error_answer_is_the_error_schema() {
    let doc = doc();
    let schema = &doc["components"]["schemas"][ERROR_SCHEMA];
    assert_eq!(schema["properties"]["error"]["type"], "string", "{schema}");
    assert_eq!(schema["required"], serde_json::json!(["error"]));
    let want = format!("#/components/schemas/{ERROR_SCHEMA}");
    let mut errors = 0;
    for ((method, path), op) in operations(&doc) {
        for (status, answer) in op["responses"].as_object().expect("responses") {
            if status.starts_with('4') || status.starts_with('5') {
                errors += 1;
                assert_eq!(
                    answer["content"]["application/json"]["schema"]["$ref"], want,
                    "{method} {path} {status}: {answer}"
                );
            }
        }
    }
    assert!(errors > ROUTES.len(), "only {errors} error answers");
    let create = &operations(&doc)[&("post".into(), "/api/v1/teams/{team}/builds".into())];
    assert_eq!(
        create["responses"]["400"]["content"]["application/json"]["schema"]["$ref"],
        want
    );
}

#[test]
fn operation_ids_are_unique_and_path_parameters_declared() {
    let mut ids = BTreeSet::new();
    for ((method, path), op) in operations(&doc()) {
        let id = op["operationId"].as_str().expect("operationId").to_string();
        assert!(ids.insert(id.clone()), "operationId {id} twice");
        let declared: BTreeSet<&str> = op["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter(|p| p["in"] == "path")
                    .filter_map(|p| p["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        let in_path: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        assert_eq!(declared, in_path, "{method} {path}");
    }
}

#[test]
fn open_operations_are_the_routes_the_middleware_lets_through() {
    for ((method, path), op) in operations(&doc()) {
        // Open: no token needed (`{}` among the alternatives; `/metrics`
        // also lists the bearer scheme, needed when configured so).
        let open = op["security"]
            .as_array()
            .is_some_and(|alternatives| alternatives.contains(&serde_json::json!({})));
        let example: String = path
            .split('/')
            .map(|s| if s.starts_with('{') { "x" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        assert_eq!(open, auth::is_open(&example), "{method} {path}");
        if !open {
            assert!(op["responses"].get("401").is_some(), "{method} {path}");
        }
    }
    assert_eq!(doc()["security"], serde_json::json!([{ BEARER: [] }]));
    assert_eq!(
        doc()["components"]["securitySchemes"][BEARER]["scheme"],
        "bearer"
    );
}

/// Every `$ref` in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves() {
    let doc = doc();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for r in found {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {r}"));
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "$ref {r} has no schema"
        );
    }
}

#[test]
fn a_builds_events_have_a_schema_for_each_event_type() {
    let doc = doc();
    let op = &doc["paths"]["/api/v1/builds/{id}/events"]["get"];
    let body = &op["responses"]["200"]["content"]["application/x-ndjson"]["schema"];
    assert_eq!(body["$ref"], "#/components/schemas/EventLine", "{body}");
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["EventLine"]["properties"]["event"]["$ref"], "#/components/schemas/BuildEvent",
        "{}",
        schemas["EventLine"]
    );
    // One alternative per event type, each naming its `type` tag.
    let mut tags = BTreeSet::new();
    for alt in schemas["BuildEvent"]["oneOf"]
        .as_array()
        .expect("BuildEvent is one of its event types")
    {
        let tag = &alt["properties"]["type"]["enum"][0];
        tags.insert(tag.as_str().expect("a type tag").to_string());
    }
    let want: BTreeSet<String> = [
        "status",
        "log",
        "waiting",
        "waiting_for_inputs",
        "selected_worker",
        "streaming",
        "transfer",
        "output",
        "plan",
        "node_started",
        "node_finished",
        "resource",
        "error",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(tags, want);
}
