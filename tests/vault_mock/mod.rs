//! A Vault server for tests, on loopback: the parts of Vault's HTTP API a
//! credential manager speaks, as Vault's documentation gives them (no
//! Vault or Vault-compatible server installs from the registries these
//! machines reach):
//!
//! - KV v1 (`GET /v1/MOUNT/PATH`: `{"data": {...}, "lease_duration": N}`)
//!   and KV v2 (`GET /v1/MOUNT/data/PATH`: `{"data": {"data": {...},
//!   "metadata": {...}}}`) mounts, told apart by
//!   `GET /v1/sys/internal/ui/mounts/PATH` (`options.version`), as the
//!   Vault CLI and Concourse do;
//! - token auth (`X-Vault-Token`; a wrong one is 403 `permission denied`)
//!   and AppRole (`POST /v1/auth/approle/login` with `role_id` and
//!   `secret_id`, answering `auth.client_token` and its lease);
//! - namespaces (`X-Vault-Namespace` must name the mock's, when it has
//!   one) and `GET /v1/sys/health`;
//! - a switch that makes every request fail (503), as a sealed or
//!   unreachable Vault does.
//!
//! Missing secrets are 404 `{"errors": []}`. Tests write secrets straight
//! into the mock and count the reads it answered.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Map, Value};

/// The mock's root token.
pub const ROOT_TOKEN: &str = "vault-mock-root-token";

#[derive(Default)]
struct State {
    /// Mount path (`concourse/`) → KV version.
    mounts: BTreeMap<String, u8>,
    /// Full logical path (`concourse/main/p/x`) → the secret's data.
    secrets: BTreeMap<String, Map<String, Value>>,
    /// AppRole role id → secret id.
    roles: BTreeMap<String, String>,
    /// Tokens accepted.
    tokens: Vec<String>,
    /// The namespace every request must name, if any.
    namespace: Option<String>,
}

type Shared = Arc<(Mutex<State>, AtomicBool, AtomicU64)>;

/// A running mock Vault.
pub struct VaultMock {
    shared: Shared,
    url: String,
    handle: actix_web::dev::ServerHandle,
}

impl VaultMock {
    /// Starts one with the KV `mounts` given (`("concourse/", 2)`) and,
    /// when `namespace` is given, requiring it.
    pub fn start(mounts: &[(&str, u8)], namespace: Option<&str>) -> VaultMock {
        let shared: Shared = Arc::default();
        {
            let mut s = shared.0.lock().unwrap();
            for (m, v) in mounts {
                s.mounts.insert(format!("{}/", m.trim_matches('/')), *v);
            }
            s.tokens.push(ROOT_TOKEN.into());
            s.namespace = namespace.map(str::to_string);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let st = shared.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let data = web::Data::new(st);
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .route("/v1/sys/health", web::get().to(health))
                        .route(
                            "/v1/sys/internal/ui/mounts/{path:.*}",
                            web::get().to(mount_of),
                        )
                        .route("/v1/auth/approle/login", web::post().to(approle_login))
                        .route("/v1/{path:.*}", web::get().to(read))
                })
                .workers(1)
                .disable_signals()
                .bind(("127.0.0.1", 0))
                .expect("bind the mock Vault");
                let port = server.addrs()[0].port();
                let server = server.run();
                tx.send((port, server.handle())).unwrap();
                let _ = server.await;
            });
        });
        let (port, handle) = rx.recv().expect("the mock Vault started");
        VaultMock {
            shared,
            url: format!("http://127.0.0.1:{port}"),
            handle,
        }
    }

    /// Its address.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Writes secret `path` (`concourse/main/x`) with `data`.
    pub fn put(&self, path: &str, data: Value) {
        let Value::Object(map) = data else {
            panic!("a secret's data is an object")
        };
        self.state()
            .secrets
            .insert(path.trim_matches('/').to_string(), map);
    }

    /// Accepts AppRole `role_id` with `secret_id`.
    pub fn add_approle(&self, role_id: &str, secret_id: &str) {
        self.state()
            .roles
            .insert(role_id.to_string(), secret_id.to_string());
    }

    /// Makes every request fail with 503 (`true`) or answer again.
    pub fn set_down(&self, down: bool) {
        self.shared.1.store(down, Ordering::SeqCst);
    }

    /// Secret reads answered so far (found or not).
    pub fn reads(&self) -> u64 {
        self.shared.2.load(Ordering::SeqCst)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.0.lock().unwrap()
    }
}

impl Drop for VaultMock {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(handle.stop(false));
        });
    }
}

fn errors(status: u16, messages: &[&str]) -> HttpResponse {
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
        .json(json!({ "errors": messages }))
}

/// The refusal a request gets before it is served, if any: the mock is
/// down, the namespace is wrong, or (`token`) the token is unknown.
fn refused(req: &HttpRequest, shared: &Shared, token: bool) -> Option<HttpResponse> {
    if shared.1.load(Ordering::SeqCst) {
        return Some(errors(503, &["Vault is sealed"]));
    }
    let state = shared.0.lock().unwrap();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if state.namespace.is_some() && header("X-Vault-Namespace") != state.namespace {
        return Some(errors(403, &["permission denied"]));
    }
    if token && !header("X-Vault-Token").is_some_and(|t| state.tokens.contains(&t)) {
        return Some(errors(403, &["permission denied"]));
    }
    None
}

async fn health(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    if shared.1.load(Ordering::SeqCst) {
        return HttpResponse::ServiceUnavailable()
            .json(json!({"initialized": true, "sealed": true, "standby": false}));
    }
    let _ = req;
    HttpResponse::Ok().json(json!({"initialized": true, "sealed": false, "standby": false}))
}

/// The mount holding `path`, and its KV version.
fn mount(state: &State, path: &str) -> Option<(String, u8)> {
    let path = format!("{}/", path.trim_matches('/'));
    state
        .mounts
        .iter()
        .filter(|(m, _)| path.starts_with(m.as_str()))
        .max_by_key(|(m, _)| m.len())
        .map(|(m, v)| (m.clone(), *v))
}

async fn mount_of(
    req: HttpRequest,
    shared: web::Data<Shared>,
    path: web::Path<String>,
) -> HttpResponse {
    if let Some(r) = refused(&req, &shared, true) {
        return r;
    }
    let state = shared.0.lock().unwrap();
    match mount(&state, &path) {
        Some((m, v)) => HttpResponse::Ok().json(json!({
            "data": {"path": m, "type": "kv", "options": {"version": v.to_string()}}
        })),
        None => errors(403, &["preflight capability check returned 403, please ensure client's policies grant access to path"]),
    }
}

async fn approle_login(
    req: HttpRequest,
    shared: web::Data<Shared>,
    body: web::Json<Value>,
) -> HttpResponse {
    if let Some(r) = refused(&req, &shared, false) {
        return r;
    }
    let mut state = shared.0.lock().unwrap();
    let role = body["role_id"].as_str().unwrap_or_default();
    let secret = body["secret_id"].as_str().unwrap_or_default();
    if state.roles.get(role).map(String::as_str) != Some(secret) || secret.is_empty() {
        return errors(400, &["invalid role or secret ID"]);
    }
    let token = format!("approle-{}", uuid::Uuid::new_v4().simple());
    state.tokens.push(token.clone());
    HttpResponse::Ok().json(json!({
        "auth": {"client_token": token, "lease_duration": 3600, "renewable": true, "policies": ["default"]}
    }))
}

async fn read(
    req: HttpRequest,
    shared: web::Data<Shared>,
    path: web::Path<String>,
) -> HttpResponse {
    if let Some(r) = refused(&req, &shared, true) {
        return r;
    }
    shared.2.fetch_add(1, Ordering::SeqCst);
    let state = shared.0.lock().unwrap();
    let path = path.trim_matches('/').to_string();
    let Some((m, version)) = mount(&state, &path) else {
        return errors(404, &[]);
    };
    let rest = &path[m.len().min(path.len())..];
    if version == 2 {
        // KV v2 answers reads at MOUNT/data/PATH only.
        let Some(inner) = rest.strip_prefix("data/") else {
            return errors(404, &[]);
        };
        match state.secrets.get(&format!("{m}{inner}")) {
            Some(data) => HttpResponse::Ok().json(json!({
                "lease_duration": 0,
                "renewable": false,
                "data": {"data": data, "metadata": {"version": 1, "destroyed": false}},
            })),
            None => errors(404, &[]),
        }
    } else {
        match state.secrets.get(&path) {
            Some(data) => HttpResponse::Ok().json(json!({
                "lease_duration": 2764800,
                "renewable": false,
                "data": data,
            })),
            None => errors(404, &[]),
        }
    }
}
