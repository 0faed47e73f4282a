//! A scripted Kubernetes API server for tests, on loopback: the JSON API of
//! pods (create, get, list by label, delete), namespaces, `/version` and
//! SelfSubjectAccessReviews, and `pods/exec` over websockets with the v5
//! channel protocol — what the `kube` client speaks to a real cluster.
//!
//! Its fake kubelet really runs each exec: with bubblewrap on the host's own
//! userland (the pod's image is recorded, not pulled), the pod's `emptyDir`
//! volumes bind-mounted at their mount paths (which must lie under `/tmp`,
//! itself a directory of the pod), in the host's pid namespace so a second
//! exec can signal a process of the first, as containers of one pod can.
//! Tests script failures (an image that cannot be pulled, a pod that cannot
//! be scheduled, a permission refused) and read back what was asked.

#![allow(dead_code)]

mod exec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};

/// One exec opened through the API.
#[derive(Debug, Clone)]
pub struct ExecRecord {
    /// Its namespace.
    pub namespace: String,
    /// Its pod.
    pub pod: String,
    /// Its container.
    pub container: String,
    /// The command, as given.
    pub command: Vec<String>,
    /// Whether stdin was asked for.
    pub stdin: bool,
    /// Whether stdout was asked for.
    pub stdout: bool,
    /// Whether stderr was asked for.
    pub stderr: bool,
    /// Whether a TTY was asked for.
    pub tty: bool,
    /// Terminal sizes received on the resize channel, as (width, height).
    pub resizes: Vec<(u16, u16)>,
}

/// A pod the mock holds.
struct PodEntry {
    namespace: String,
    /// As the API returns it.
    object: Value,
    /// Its directory: `tmp/` (the container's /tmp) and `volumes/<name>/`.
    dir: PathBuf,
    /// Process groups of its execs still running.
    groups: Vec<i32>,
}

/// What the mock knows and was asked.
#[derive(Default)]
pub(crate) struct State {
    pods: BTreeMap<(String, String), PodEntry>,
    created: Vec<Value>,
    deleted: Vec<String>,
    execs: Vec<ExecRecord>,
    lists: Vec<(String, Option<String>)>,
    /// image -> (reason, message) of a container that cannot start.
    failing: BTreeMap<String, (String, String)>,
    /// image -> message of a pod that cannot be scheduled.
    unschedulable: BTreeMap<String, String>,
    denied: Vec<(String, String, String)>,
    version: u64,
    /// Secrets by (namespace, name): each field's bytes, as the API
    /// answers them (base64 in `data`).
    secrets: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// Whether the secrets API answers 503 (a cluster that is down).
    secrets_down: bool,
}

pub(crate) type Shared = Arc<Mutex<State>>;

/// The mock API server; dropping it stops it and kills what it started.
pub struct KubeMock {
    state: Shared,
    url: String,
    handle: actix_web::dev::ServerHandle,
    root: tempfile::TempDir,
}

impl KubeMock {
    /// Starts the API server on a free loopback port, in its own thread.
    pub fn start() -> KubeMock {
        let root = tempfile::Builder::new()
            .prefix("kube-mock")
            .tempdir_in("/var/tmp")
            .expect("a directory for the mock's pods");
        let state: Shared = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let st = state.clone();
        let pods_root = root.path().to_path_buf();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let data = web::Data::new((st, pods_root));
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .app_data(web::PayloadConfig::new(16 << 20))
                        .route("/version", web::get().to(version))
                        .route("/api/v1/namespaces/{ns}", web::get().to(namespace))
                        .route(
                            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                            web::post().to(access_review),
                        )
                        .route(
                            "/api/v1/namespaces/{ns}/secrets/{name}",
                            web::get().to(get_secret),
                        )
                        .route("/api/v1/namespaces/{ns}/pods", web::post().to(create_pod))
                        .route("/api/v1/namespaces/{ns}/pods", web::get().to(list_pods))
                        .route(
                            "/api/v1/namespaces/{ns}/pods/{name}",
                            web::get().to(get_pod),
                        )
                        .route(
                            "/api/v1/namespaces/{ns}/pods/{name}",
                            web::delete().to(delete_pod),
                        )
                        .route(
                            "/api/v1/namespaces/{ns}/pods/{name}/exec",
                            web::route().to(exec::exec),
                        )
                })
                .workers(1)
                .disable_signals()
                .bind(("127.0.0.1", 0))
                .expect("bind the mock API server");
                let port = server.addrs()[0].port();
                let server = server.run();
                tx.send((port, server.handle())).unwrap();
                let _ = server.await;
            });
        });
        let (port, handle) = rx.recv().expect("the mock API server started");
        KubeMock {
            state,
            url: format!("http://127.0.0.1:{port}"),
            handle,
            root,
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Stores secret `name` of namespace `ns` with `fields` (their text).
    pub fn put_secret(&self, ns: &str, name: &str, fields: &[(&str, &str)]) {
        self.state.lock().unwrap().secrets.insert(
            (ns.to_string(), name.to_string()),
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }

    /// Makes the secrets API answer 503 (`true`) or answer again.
    pub fn set_secrets_down(&self, down: bool) {
        self.state.lock().unwrap().secrets_down = down;
    }

    /// Writes a kubeconfig pointing at the mock with a bearer token and `namespace`.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: mock\n  cluster:\n    server: {}\nusers:\n- name: mock\n  user:\n    token: mock-token\ncontexts:\n- name: mock\n  context:\n    cluster: mock\n    user: mock\n    namespace: {namespace}\ncurrent-context: mock\n",
            self.url
        );
        std::fs::write(path, text).unwrap();
    }

    /// The `[[web.kubernetes]]` section of a web node whose worker `k8s`
    /// is the mock's namespace `ci`, heartbeating and swept every second
    /// (its kubeconfig written in `dir`).
    pub fn web_config(&self, dir: &Path) -> String {
        let kubeconfig = dir.join("kubeconfig");
        self.write_kubeconfig(&kubeconfig, "ci");
        format!(
            r#"
[[web.kubernetes]]
name = "k8s"
kubeconfig = "{}"
namespace = "ci"
default_image = "busybox:1.36"
heartbeat_interval_secs = 1
sweep_interval_secs = 1
start_timeout_secs = 10
"#,
            kubeconfig.display()
        )
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Every pod body received, in order.
    pub fn created_pods(&self) -> Vec<Value> {
        self.with(|s| s.created.clone())
    }

    /// The pods that exist now.
    pub fn pods(&self) -> Vec<Value> {
        self.with(|s| s.pods.values().map(|p| p.object.clone()).collect())
    }

    /// Names of the pods deleted, in order.
    pub fn deleted_pods(&self) -> Vec<String> {
        self.with(|s| s.deleted.clone())
    }

    /// Every exec opened, in order.
    pub fn execs(&self) -> Vec<ExecRecord> {
        self.with(|s| s.execs.clone())
    }

    /// Every list of pods: (namespace, labelSelector).
    pub fn pod_lists(&self) -> Vec<(String, Option<String>)> {
        self.with(|s| s.lists.clone())
    }

    /// Pods of `image` never start: their container waits with `reason`.
    pub fn fail_image(&self, image: &str, reason: &str, message: &str) {
        self.with(|s| {
            s.failing
                .insert(image.into(), (reason.into(), message.into()))
        });
    }

    /// Pods of `image` cannot be scheduled.
    pub fn unschedulable_image(&self, image: &str, message: &str) {
        self.with(|s| s.unschedulable.insert(image.into(), message.into()));
    }

    /// SelfSubjectAccessReviews of this (verb, resource, subresource) are refused.
    pub fn deny(&self, verb: &str, resource: &str, subresource: &str) {
        self.with(|s| {
            s.denied
                .push((verb.into(), resource.into(), subresource.into()))
        });
    }
}

impl Drop for KubeMock {
    fn drop(&mut self) {
        let groups: Vec<i32> = self.with(|s| {
            s.pods
                .values_mut()
                .flat_map(|p| std::mem::take(&mut p.groups))
                .collect()
        });
        for g in groups {
            // SAFETY: signalling a process group the mock started.
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
        // Sent at once; the server's thread finishes on its own.
        drop(self.handle.stop(false));
        let _ = &self.root;
    }
}

type Data = web::Data<(Shared, PathBuf)>;

/// A `Status` failure answer.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> HttpResponse {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code});
    HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap()).json(body)
}

async fn version() -> HttpResponse {
    HttpResponse::Ok().json(
        json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-gantry-mock",
        "gitCommit": "0", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"}),
    )
}

async fn namespace(path: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().json(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": path.into_inner()}, "status": {"phase": "Active"}}))
}

async fn access_review(data: Data, body: web::Json<Value>) -> HttpResponse {
    let mut review = body.into_inner();
    let attrs = &review["spec"]["resourceAttributes"];
    let key = |k: &str| attrs[k].as_str().unwrap_or("").to_string();
    let asked = (key("verb"), key("resource"), key("subresource"));
    let denied = data.0.lock().unwrap().denied.contains(&asked);
    review["status"] = json!({"allowed": !denied});
    HttpResponse::Created().json(review)
}

fn now() -> String {
    "2026-01-01T00:00:00Z".into()
}

async fn create_pod(data: Data, path: web::Path<String>, body: web::Json<Value>) -> HttpResponse {
    let ns = path.into_inner();
    let mut pod = body.into_inner();
    let Some(name) = pod["metadata"]["name"].as_str().map(String::from) else {
        return status(
            422,
            "Invalid",
            "Pod is invalid: metadata.name: Required value",
        );
    };
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for v in pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        if v.get("emptyDir").is_none() {
            return status(422, "Invalid", "the mock supports emptyDir volumes only");
        }
    }
    for c in &containers {
        for m in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let at = m["mountPath"].as_str().unwrap_or("");
            if !at.starts_with("/tmp/") {
                return status(
                    422,
                    "Invalid",
                    &format!("the mock mounts only under /tmp, not {at}"),
                );
            }
        }
        for e in c["env"].as_array().cloned().unwrap_or_default() {
            if e.get("valueFrom").is_some() {
                return status(422, "Invalid", "the mock does not support env valueFrom");
            }
        }
    }
    let (state, root) = (&data.0, &data.1);
    let mut s = state.lock().unwrap();
    s.created.push(pod.clone());
    let key = (ns.clone(), name.clone());
    if s.pods.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            &format!("pods \"{name}\" already exists"),
        );
    }
    let dir = root.join(&ns).join(&name);
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    for v in pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let vname = v["name"].as_str().unwrap_or("v");
        std::fs::create_dir_all(dir.join("volumes").join(vname)).unwrap();
    }
    s.version += 1;
    let image = containers
        .first()
        .and_then(|c| c["image"].as_str())
        .unwrap_or("")
        .to_string();
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    pod["metadata"]["namespace"] = json!(ns);
    pod["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
    pod["metadata"]["creationTimestamp"] = json!(now());
    pod["metadata"]["resourceVersion"] = json!(s.version.to_string());
    pod["status"] = if let Some((reason, message)) = s.failing.get(&image) {
        json!({"phase": "Pending", "containerStatuses": containers.iter().map(|c| json!({
            "name": c["name"], "image": c["image"], "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}}})).collect::<Vec<_>>()})
    } else if let Some(message) = s.unschedulable.get(&image) {
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": message}]})
    } else {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": containers.iter().map(|c| json!({
            "name": c["name"], "image": c["image"], "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": now()}}})).collect::<Vec<_>>()})
    };
    s.pods.insert(
        key,
        PodEntry {
            namespace: ns,
            object: pod.clone(),
            dir,
            groups: Vec::new(),
        },
    );
    HttpResponse::Created().json(pod)
}

async fn get_secret(data: Data, path: web::Path<(String, String)>) -> HttpResponse {
    use base64::Engine as _;
    let (ns, name) = path.into_inner();
    let s = data.0.lock().unwrap();
    if s.secrets_down {
        return status(503, "ServiceUnavailable", "the API server is unavailable");
    }
    match s.secrets.get(&(ns.clone(), name.clone())) {
        Some(fields) => {
            let encoded: serde_json::Map<String, Value> = fields
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
                    )
                })
                .collect();
            HttpResponse::Ok().json(json!({
                "kind": "Secret", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": ns},
                "type": "Opaque", "data": encoded,
            }))
        }
        None => status(404, "NotFound", &format!("secrets \"{name}\" not found")),
    }
}

async fn get_pod(data: Data, path: web::Path<(String, String)>) -> HttpResponse {
    let (ns, name) = path.into_inner();
    let s = data.0.lock().unwrap();
    match s.pods.get(&(ns, name.clone())) {
        Some(p) => HttpResponse::Ok().json(&p.object),
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

/// Whether `labels` match an equality selector (`a=b,c==d,e`).
fn matches(selector: &str, labels: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels[k.trim()].as_str() == Some(v.trim())
        } else {
            labels.get(term.trim()).is_some()
        }
    })
}

async fn list_pods(data: Data, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    let ns = path.into_inner();
    let query = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .unwrap_or_default();
    let selector = query
        .iter()
        .find(|(k, _)| k == "labelSelector")
        .map(|(_, v)| v.clone());
    let mut s = data.0.lock().unwrap();
    s.lists.push((ns.clone(), selector.clone()));
    let items: Vec<Value> = s
        .pods
        .values()
        .filter(|p| p.namespace == ns)
        .filter(|p| {
            selector
                .as_deref()
                .is_none_or(|sel| matches(sel, &p.object["metadata"]["labels"]))
        })
        .map(|p| p.object.clone())
        .collect();
    HttpResponse::Ok().json(json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": s.version.to_string()}, "items": items}))
}

async fn delete_pod(data: Data, path: web::Path<(String, String)>) -> HttpResponse {
    let (ns, name) = path.into_inner();
    let entry = {
        let mut s = data.0.lock().unwrap();
        let e = s.pods.remove(&(ns, name.clone()));
        if e.is_some() {
            s.deleted.push(name.clone());
        }
        e
    };
    let Some(entry) = entry else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    for g in &entry.groups {
        // SAFETY: signalling a process group the mock started.
        unsafe { libc::kill(-g, libc::SIGKILL) };
    }
    let _ = std::fs::remove_dir_all(&entry.dir);
    HttpResponse::Ok().json(entry.object)
}

/// What an exec needs of its pod: its directory, and its first (or named)
/// container's spec; or the answer refusing it.
pub(crate) fn exec_target(
    state: &Shared,
    ns: &str,
    name: &str,
    container: Option<&str>,
) -> Result<(PathBuf, Value), Box<HttpResponse>> {
    let s = state.lock().unwrap();
    let Some(p) = s.pods.get(&(ns.to_string(), name.to_string())) else {
        return Err(Box::new(status(
            404,
            "NotFound",
            &format!("pods \"{name}\" not found"),
        )));
    };
    if p.object["status"]["phase"] != "Running" {
        return Err(Box::new(status(
            400,
            "BadRequest",
            &format!("pod {name} is not running"),
        )));
    }
    let containers = p.object["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = match container {
        Some(c) => containers.into_iter().find(|x| x["name"] == c),
        None => containers.into_iter().next(),
    };
    match c {
        Some(c) => Ok((p.dir.clone(), c)),
        None => Err(Box::new(status(400, "BadRequest", "no such container"))),
    }
}

/// Records an exec; answers its index.
pub(crate) fn record_exec(state: &Shared, rec: ExecRecord) -> usize {
    let mut s = state.lock().unwrap();
    s.execs.push(rec);
    s.execs.len() - 1
}

/// Records a resize of exec `index`.
pub(crate) fn record_resize(state: &Shared, index: usize, size: (u16, u16)) {
    if let Some(e) = state.lock().unwrap().execs.get_mut(index) {
        e.resizes.push(size);
    }
}

/// Remembers a process group of pod `name` (killed with the pod).
pub(crate) fn add_group(state: &Shared, ns: &str, name: &str, group: i32) {
    if let Some(p) = state
        .lock()
        .unwrap()
        .pods
        .get_mut(&(ns.to_string(), name.to_string()))
    {
        p.groups.push(group);
    }
}
