//! End to end: the web node's OpenAPI document (`/api/v1/openapi.json`)
//! passes an independent OpenAPI validator, describes the error schema, and
//! every operation in it is served with one of its documented statuses;
//! every operation that needs a token refuses none, a wrong one and a
//! forged one with 401; the health routes answer without a token.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::Value;

const ADMIN: &str = "adm1n";

/// The validator's command (`GANTRY_OPENAPI_VALIDATOR`, which the test
/// script sets up), or `None` to skip, which fails under
/// `GANTRY_REQUIRE_RUNC` (the test script's runs).
fn validator() -> Option<String> {
    match std::env::var("GANTRY_OPENAPI_VALIDATOR") {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
                "GANTRY_OPENAPI_VALIDATOR is not set (scripts/test.sh sets it up): this test may not be skipped"
            );
            eprintln!("skipped: GANTRY_OPENAPI_VALIDATOR is not set");
            None
        }
    }
}

fn secured_web(dir: &std::path::Path) -> Server {
    start_web(
        dir,
        &TestDb::new(DbKind::Sqlite),
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    )
}

#[test]
fn the_openapi_document_validates_and_names_the_error_schema() {
    let Some(validator) = validator() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let web = secured_web(dir.path());
    // No token is needed for the document.
    let resp = reqwest::blocking::get(format!("{}/api/v1/openapi.json", web.url)).unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().unwrap();
    let file = dir.path().join("openapi.json");
    write(&file, &text);
    let out = Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("running {validator}: {e}"));
    assert!(
        out.status.success(),
        "{validator} refused the document:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let doc: Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let error = &doc["components"]["schemas"]["ErrorBody"];
    assert_eq!(error["properties"]["error"]["type"], "string", "{error}");
    let create = &doc["paths"]["/api/v1/teams/{team}/builds"]["post"];
    assert_eq!(
        create["responses"]["400"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorBody",
        "{create}"
    );
    assert_eq!(
        create["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/CreateBuild"
    );
    for route in ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"] {
        assert!(doc["paths"][route]["get"].is_object(), "{route} missing");
    }
    let hijack = &doc["paths"]["/api/v1/builds/{id}/hijack"]["get"];
    assert!(hijack["responses"]["101"].is_object(), "{hijack}");
}

/// A request to every operation of the document (path parameters filled
/// in, the admin token): none falls through to "no route", and each
/// answers a status its operation documents, errors as `{"error": ...}`.
#[test]
fn every_documented_operation_is_served_with_a_documented_status() {
    let dir = tempfile::tempdir().unwrap();
    let web = secured_web(dir.path());
    let doc: Value = reqwest::blocking::get(format!("{}/api/v1/openapi.json", web.url))
        .unwrap()
        .json()
        .unwrap();
    let http = reqwest::blocking::Client::new();
    let mut tried = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let url: String = path
                .split('/')
                .map(|s| if s.starts_with('{') { "4242" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            let req = request(&http, method, &format!("{}{url}", web.url));
            let resp = req.bearer_auth(ADMIN).send().unwrap();
            let status = resp.status().as_u16();
            if is_event_stream(&resp) {
                // A live feed never ends: its answer is its status.
                assert_eq!(status, 200, "{method} {path}");
                tried += 1;
                continue;
            }
            let body = resp.text().unwrap();
            assert!(
                !body.contains("no route"),
                "{method} {path} is documented but not served: {body}"
            );
            let documented = &op["responses"];
            let range = format!("{}XX", status / 100);
            assert!(
                documented.get(status.to_string()).is_some() || documented.get(&range).is_some(),
                "{method} {path} answered {status}, not documented: {body}"
            );
            if status >= 400 {
                let err: Value = serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("{method} {path}: {status} {body:?}: {e}"));
                assert!(err["error"].is_string(), "{method} {path}: {body}");
            }
            tried += 1;
        }
    }
    assert!(tried >= 25, "only {tried} operations");
    // A route that is not registered falls through, for contrast.
    let resp = http
        .get(format!("{}/api/v1/nothing-here", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert!(resp.text().unwrap().contains("no route"));
}

/// A request of `method` to `url`, with an empty JSON object as the body
/// of a POST.
fn request(
    http: &reqwest::blocking::Client,
    method: &str,
    url: &str,
) -> reqwest::blocking::RequestBuilder {
    match method {
        "get" => http.get(url),
        "put" => http.put(url),
        "delete" => http.delete(url),
        "post" => http
            .post(url)
            .header("content-type", "application/json")
            .body("{}"),
        other => panic!("unexpected method {other} for {url}"),
    }
}

fn is_event_stream(resp: &reqwest::blocking::Response) -> bool {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

#[test]
fn every_route_that_needs_a_token_refuses_none_and_a_wrong_one_with_401() {
    let dir = tempfile::tempdir().unwrap();
    let web = secured_web(dir.path());
    let doc: Value = reqwest::blocking::get(format!("{}/api/v1/openapi.json", web.url))
        .unwrap()
        .json()
        .unwrap();
    let http = reqwest::blocking::Client::new();
    let (mut protected, mut open) = (0, 0);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let url: String = path
                .split('/')
                .map(|s| if s.starts_with('{') { "4242" } else { s })
                .collect::<Vec<_>>()
                .join("/");
            let url = format!("{}{url}", web.url);
            let needs_token = !op["security"]
                .as_array()
                .is_some_and(|alternatives| alternatives.contains(&serde_json::json!({})));
            if !needs_token {
                open += 1;
                continue;
            }
            for token in [None, Some("not-a-token"), Some("gtk_0000_forged")] {
                let mut req = request(&http, method, &url);
                if let Some(t) = token {
                    req = req.bearer_auth(t);
                }
                let resp = req.send().unwrap();
                let status = resp.status().as_u16();
                let body = resp.text().unwrap();
                assert_eq!(status, 401, "{method} {path} with {token:?}: {body}");
                let err: Value = serde_json::from_str(&body).unwrap();
                assert!(err["error"].as_str().unwrap().contains("token"), "{body}");
            }
            protected += 1;
        }
    }
    println!("{protected} protected operations refused without a valid token; {open} open ones");
    assert!(protected >= 25, "only {protected} protected operations");
    // The open ones are the health routes, the document, info, metrics,
    // the dashboard's page and assets, the workers' registration and
    // heartbeats, a resource's webhook (its own token instead), the ID
    // token issuer's metadata and keys (`/.well-known/...`), and signing
    // in (`POST /api/v1/sessions`, the sign-in page, and the providers'
    // sign-ins and callbacks: OpenID Connect's and GitHub's; fly's
    // password grant, `POST /sky/issuer/token`, `GET /fly_success`, and
    // the local users' form of `GET /sky/login`), and `fly sync`'s
    // `GET /api/v1/cli`.
    assert_eq!(open, 34, "open operations");
}

#[test]
fn health_and_readiness_answer_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let web = secured_web(dir.path());
    for route in ["/healthz", "/readyz"] {
        let resp = reqwest::blocking::get(format!("{}{route}", web.url)).unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{route}");
        let body: Value = resp.json().unwrap();
        assert_eq!(body, serde_json::json!({"status": "ok"}), "{route}");
    }
    // Other routes still need the token.
    let resp = reqwest::blocking::get(format!("{}/api/v1/builds", web.url)).unwrap();
    assert_eq!(resp.status().as_u16(), 401);
}
