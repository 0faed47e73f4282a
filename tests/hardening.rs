//! End to end: the hardening of the web node. No default or empty
//! registration key on a guarded node, and a worker acts only on itself;
//! registrations are bounded; every write route answers bad bodies with
//! JSON 4xx; slow bodies are cut off while other requests go on; the
//! quickstart makes its own key; YAML nested 100,000 deep is refused in
//! milliseconds of CPU.

use crate::common;

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use common::rusage;
use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "adm1n";
const KEY: &str = "k3y";

/// A `gantry web` with the admin token and `extra` config lines, and the
/// registration key `k3y` (as every test web node).
fn guarded_web(dir: &std::path::Path, extra: &str) -> Server {
    start_web(
        dir,
        &TestDb::new(DbKind::Sqlite),
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n{extra}"),
    )
}

/// Asserts an answer is a 4xx (or `status`, when given) with a JSON
/// `{"error": "..."}` body; returns the message.
fn json_error(resp: reqwest::blocking::Response, what: &str, status: Option<u16>) -> String {
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp.text().unwrap_or_default();
    match status {
        Some(s) => assert_eq!(code, s, "{what}: {body}"),
        None => assert!((400..500).contains(&code), "{what}: {code} {body}"),
    }
    assert!(
        content_type.starts_with("application/json"),
        "{what}: {code} answered {content_type:?}: {body:?}"
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {body:?}: {e}"));
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error string: {body}"))
        .to_string()
}

/// A registration as a worker sends it, with `name`.
fn registration(name: &str) -> Value {
    json!({
        "name": name,
        "agent_url": "http://127.0.0.1:9",
        "agent_token": "t",
        "platform": "linux",
        "version": env!("CARGO_PKG_VERSION"),
        "backend": "local",
        "incarnation": "i-1",
        "heartbeat_interval_secs": 30,
    })
}

fn admin_workers(http: &reqwest::blocking::Client, url: &str) -> Vec<Value> {
    http.get(format!("{url}/api/v1/workers"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json::<Vec<Value>>()
        .unwrap()
}

#[test]
fn a_guarded_node_refuses_to_start_without_a_key_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    for (listen, token, key) in [
        ("127.0.0.1:0", Some(ADMIN), None),
        ("127.0.0.1:0", Some(ADMIN), Some("gantry-dev-key")),
        ("127.0.0.1:0", Some(ADMIN), Some("")),
        ("0.0.0.0:0", Some(ADMIN), None),
    ] {
        let mut cmd = gantry();
        cmd.args(["web", "--listen", listen])
            .arg("--data-dir")
            .arg(dir.path().join("web"));
        if let Some(t) = token {
            cmd.args(["--admin-token", t]);
        }
        if let Some(k) = key {
            cmd.args(["--registration-key", k]);
        }
        let out = cmd.output().unwrap();
        let err = one_error_line(&out);
        assert!(
            err.contains("--registration-key"),
            "{listen} {key:?}: {err}"
        );
        // Nothing was written: no database was made.
        assert!(!dir.path().join("web").join("gantry.db").exists(), "{err}");
    }
}

#[test]
fn workers_need_the_key_and_a_worker_cannot_land_or_retire_another() {
    let dir = tempfile::tempdir().unwrap();
    let web = guarded_web(dir.path(), "");
    let http = reqwest::blocking::Client::new();
    let register = format!("{}/api/v1/workers/register", web.url);
    // The published default key, and no key, are refused.
    for key in [Some("gantry-dev-key"), None, Some("")] {
        let mut req = http.post(&register).json(&registration("evil"));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let e = json_error(req.send().unwrap(), &format!("key {key:?}"), Some(401));
        assert!(e.contains("registration key"), "{e}");
    }
    assert!(admin_workers(&http, &web.url).is_empty());

    let mut w1 = start_worker(dir.path(), &web.url, "w1", worker_backend());
    let _w2 = start_worker(dir.path(), &web.url, "w2", worker_backend());
    wait_for("two running workers", Duration::from_secs(60), || {
        let w = admin_workers(&http, &web.url);
        (w.iter().filter(|w| w["state"] == "running").count() == 2).then_some(())
    });
    // The key alone lands, retires or prunes no other worker.
    for action in ["land", "retire"] {
        for body in ["{}", r#"{"incarnation": "a-guess"}"#] {
            let resp = http
                .put(format!("{}/api/v1/workers/w2/{action}", web.url))
                .bearer_auth(KEY)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .unwrap();
            let e = json_error(resp, &format!("{action} with {body}"), Some(403));
            assert!(e.contains("only itself"), "{e}");
        }
    }
    let resp = http
        .post(format!("{}/api/v1/workers/prune", web.url))
        .bearer_auth(KEY)
        .json(&json!({"name": "w2"}))
        .send()
        .unwrap();
    json_error(resp, "prune with the key", Some(403));
    let w2 = admin_workers(&http, &web.url)
        .into_iter()
        .find(|w| w["name"] == "w2")
        .unwrap();
    assert_eq!(w2["state"], "running", "{w2}");

    // A worker lands itself (its incarnation proves it) on SIGTERM.
    // SAFETY: signalling a child this test started.
    unsafe { libc::kill(w1.child.id() as i32, libc::SIGTERM) };
    wait_for("w1 landed by itself", Duration::from_secs(30), || {
        let w = admin_workers(&http, &web.url);
        w.iter()
            .any(|w| w["name"] == "w1" && w["state"] == "landed")
            .then_some(())
    });
    let status = wait_child(&mut w1.child, Duration::from_secs(30));
    assert!(status.success(), "w1 exited with {status}");
    // The admin lands any worker.
    let resp = http
        .put(format!("{}/api/v1/workers/w2/land", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // The admin prunes a worker that is not running, by any name: the CLI
    // names it in the body, so even a name no URL could carry gets a clear
    // answer.
    let admin = |args: &[&str]| client_as(&web.url, ADMIN, args);
    let out = admin(&["prune-worker", "w1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let long = "n".repeat(100_000);
    let err = one_error_line(&admin(&["prune-worker", &long]));
    assert!(
        err.contains("404") && err.contains("worker"),
        "{}",
        &err[..err.len().min(300)]
    );
    assert!(err.len() < 2000, "the error repeats the whole name");
    assert!(admin_workers(&http, &web.url)
        .iter()
        .all(|w| w["name"] != "w1"));
}

#[test]
fn bad_registrations_are_refused_with_json_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let web = guarded_web(dir.path(), "");
    let http = reqwest::blocking::Client::new();
    let register = format!("{}/api/v1/workers/register", web.url);
    let mut huge_interval = registration("w");
    huge_interval["heartbeat_interval_secs"] = json!(i64::MAX);
    let mut unknown = registration("w");
    unknown["capabilities"] = json!(["root"]);
    let mut long_tag = registration("w");
    long_tag["tags"] = json!(["t".repeat(100_000)]);
    let json_bodies = [
        (
            "a 100 KB name",
            registration(&"n".repeat(100_000)),
            "worker name",
        ),
        ("a huge interval", huge_interval, "heartbeat_interval_secs"),
        ("an unknown field", unknown, "capabilities"),
        ("a 100 KB tag", long_tag, "tags"),
    ];
    for (what, body, named) in json_bodies {
        let resp = http
            .post(&register)
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .unwrap();
        let e = json_error(resp, what, Some(400));
        assert!(e.contains(named), "{what}: {e}");
        assert!(e.len() < 300, "{what}: the message repeats the input: {e}");
    }
    let good = serde_json::to_string(&registration("w")).unwrap();
    let raw_bodies = [
        ("a text body", "text/plain", good.clone(), 415),
        ("no content type", "", good, 415),
        (
            "truncated JSON",
            "application/json",
            r#"{"name": "w", "#.to_string(),
            400,
        ),
        (
            "not an object",
            "application/json",
            "[1, 2]".to_string(),
            400,
        ),
    ];
    for (what, content_type, body, status) in raw_bodies {
        let mut req = http.post(&register).bearer_auth(KEY).body(body);
        if !content_type.is_empty() {
            req = req.header("content-type", content_type);
        }
        json_error(req.send().unwrap(), what, Some(status));
    }
    // A heartbeat is bounded as well.
    let resp = http
        .post(format!("{}/api/v1/workers/w/heartbeat", web.url))
        .bearer_auth(KEY)
        .json(&json!({"incarnation": "i".repeat(100_000), "containers": 0, "volumes": 0}))
        .send()
        .unwrap();
    json_error(resp, "a heartbeat with a 100 KB incarnation", Some(400));
    assert!(
        admin_workers(&http, &web.url).is_empty(),
        "a refused registration was stored"
    );
    // The CLI refuses a bad name before it asks.
    let out = gantry()
        .args(["worker", "--name", "a/b", "--web", &web.url])
        .args(["--registration-key", KEY, "--listen", "127.0.0.1:0"])
        .arg("--work-dir")
        .arg(dir.path().join("bad"))
        .output()
        .unwrap();
    let err = one_error_line(&out);
    assert!(err.contains("worker name"), "{err}");
}

/// Fills a route's path parameters with values that exist or are at least
/// well formed.
fn fill(path: &str) -> String {
    path.split('/')
        .map(|s| match s {
            "{team}" => "main",
            "{name}" => "w",
            s if s.starts_with('{') => "4242",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn every_write_route_answers_bad_bodies_with_json_4xx() {
    let dir = tempfile::tempdir().unwrap();
    // Small limits, so an oversize body is quick to send.
    let web = guarded_web(
        dir.path(),
        "max_request_body_bytes = 65536\nmax_artifact_bytes = 65536\n",
    );
    let http = reqwest::blocking::Client::new();
    let doc: Value = http
        .get(format!("{}/api/v1/openapi.json", web.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let oversize = format!("{{\"x\": \"{}\"}}", "a".repeat(100_000));
    let bodies = [
        ("an oversize body", oversize.as_str()),
        ("truncated JSON", r#"{"name": "#),
        (
            "wrong types",
            r#"{"name": 5, "config": "x", "incarnation": [1], "expires_in_secs": "soon", "step": {}}"#,
        ),
        ("a string", r#""just a string""#),
    ];
    let mut routes = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in ["post", "put", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            routes += 1;
            // The workers' own routes take the registration key.
            let worker_route = ["/register", "/heartbeat", "/sweep", "/report"]
                .iter()
                .any(|r| path.ends_with(r));
            let token = if worker_route { KEY } else { ADMIN };
            let url = format!("{}{}", web.url, fill(path));
            for (what, body) in &bodies {
                let req = match method {
                    "post" => http.post(&url),
                    "put" => http.put(&url),
                    _ => http.delete(&url),
                };
                let resp = req
                    .bearer_auth(token)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .unwrap();
                let code = resp.status().as_u16();
                if *what == "an oversize body" && !path.contains("{id}") {
                    // Routes of a missing build answer 404 before reading.
                    assert!(
                        code == 413 || code == 400 || code == 404,
                        "{method} {path}: {what} answered {code}"
                    );
                }
                json_error(resp, &format!("{method} {path} with {what}"), None);
            }
        }
    }
    assert!(routes >= 15, "only {routes} write routes");
    // Query errors are JSON too.
    for query in ["limit=abc", "limit=0", "limit=100000", "bogus=1", "cursor="] {
        let resp = http
            .get(format!("{}/api/v1/builds?{query}", web.url))
            .bearer_auth(ADMIN)
            .send()
            .unwrap();
        json_error(resp, query, Some(400));
    }
    let resp = http
        .post(format!(
            "{}/api/v1/teams/main/artifacts?kind={}",
            web.url,
            "k".repeat(10_000)
        ))
        .bearer_auth(ADMIN)
        .body("x")
        .send()
        .unwrap();
    json_error(resp, "an artifact of a 10 KB kind", Some(400));
}

#[test]
fn tokens_teams_and_builds_refuse_values_out_of_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let web = guarded_web(dir.path(), "");
    let http = reqwest::blocking::Client::new();
    let token = |body: Value| {
        http.post(format!("{}/api/v1/teams/main/tokens", web.url))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .unwrap()
    };
    let e = json_error(
        token(json!({"expires_in_secs": i64::MAX})),
        "expiry",
        Some(400),
    );
    assert!(e.contains("expires_in_secs"), "{e}");
    let e = json_error(
        token(json!({"description": "d".repeat(70_000)})),
        "description",
        Some(400),
    );
    assert!(e.contains("description"), "{e}");
    let resp = http
        .put(format!("{}/api/v1/teams/x", web.url))
        .bearer_auth(ADMIN)
        .body("z".repeat(20 << 20))
        .send()
        .unwrap();
    json_error(resp, "a 20 MB team body", Some(413));
    let resp = http
        .put(format!("{}/api/v1/teams/x", web.url))
        .bearer_auth(ADMIN)
        .json(&json!({"members": ["a"]}))
        .send()
        .unwrap();
    json_error(resp, "a team body", Some(400));
    let task = json!({"platform": "linux", "run": {"path": "true"}});
    for (field, value) in [
        ("timeout_secs", json!(i64::MAX)),
        ("tags", json!(["t".repeat(100_000)])),
        ("image", json!("i".repeat(100_000))),
    ] {
        let mut body = json!({"config": task});
        body[field] = value;
        let resp = http
            .post(format!("{}/api/v1/teams/main/builds", web.url))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .unwrap();
        let e = json_error(resp, field, Some(400));
        assert!(e.contains(&field[..3]), "{field}: {e}");
    }
    // Nothing of it was stored.
    let tokens: Vec<Value> = http
        .get(format!("{}/api/v1/tokens", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(tokens.is_empty(), "{tokens:?}");
    let builds: Vec<Value> = http
        .get(format!("{}/api/v1/builds", web.url))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(builds.is_empty(), "{builds:?}");
}

/// Sends `head`, then the body a byte every `gap`, until the server
/// answers or closes; returns what it answered and when.
fn trickle(addr: &str, head: &str, gap: Duration) -> (String, Duration) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(gap)).unwrap();
    let started = Instant::now();
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(60) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if !answer.is_empty() {
                    break;
                }
                if conn.write_all(b" ").is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn a_slow_body_is_cut_off_while_other_requests_answer() {
    let dir = tempfile::tempdir().unwrap();
    let web = guarded_web(dir.path(), "request_body_timeout_secs = 2\n");
    let addr = web.url.trim_start_matches("http://").to_string();
    let head = format!(
        "POST /api/v1/workers/register HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{{"
    );
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || trickle(&addr, &head, Duration::from_millis(200)))
    };
    // Meanwhile the node answers others at once.
    let http = reqwest::blocking::Client::new();
    let mut slowest = Duration::ZERO;
    while !slow.is_finished() {
        let t = Instant::now();
        let resp = http.get(format!("{}/healthz", web.url)).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (answer, took) = slow.join().unwrap();
    println!("slow body cut off after {took:?}; slowest other request {slowest:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        answer.contains("application/json") && answer.contains("too slowly"),
        "{answer}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "cut off after {took:?}"
    );
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // A body at a normal pace is not cut off: it is read whole and judged
    // (its agent does not answer).
    let resp = http
        .post(format!("{}/api/v1/workers/register", web.url))
        .bearer_auth(KEY)
        .json(&registration("paced"))
        .send()
        .unwrap();
    let e = json_error(resp, "a paced registration", Some(503));
    assert!(e.contains("worker paced: its agent"), "{e}");
}

#[test]
fn quickstart_makes_a_key_of_its_own_for_outside_workers() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let qs = quickstart(dir.path(), &db, &[]);
    let key = std::fs::read_to_string(dir.path().join("data").join("registration-key")).unwrap();
    let key = key.trim();
    assert_eq!(key.len(), 64, "{key}");
    let http = reqwest::blocking::Client::new();
    let register = format!("{}/api/v1/workers/register", qs.url);
    let resp = http
        .post(&register)
        .bearer_auth("gantry-dev-key")
        .json(&registration("outside"))
        .send()
        .unwrap();
    json_error(resp, "the published key", Some(401));
    // The key is taken: what refuses this registration is its agent,
    // which does not answer.
    let resp = http
        .post(&register)
        .bearer_auth(key)
        .json(&registration("outside"))
        .send()
        .unwrap();
    let e = json_error(resp, "an unreachable agent", Some(503));
    assert!(
        e.contains("worker outside: its agent at http://127.0.0.1:9 does not answer"),
        "{e}"
    );
    // Its data dir, the embedded worker's work dir within, is private.
    assert_eq!(readable_by_others(&dir.path().join("data")), "");
}

/// What `find DIR -perm /o=r` lists: every entry under `dir` that other
/// users may read.
fn readable_by_others(dir: &std::path::Path) -> String {
    let out = std::process::Command::new("find")
        .arg(dir)
        .args(["-perm", "/o=r"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Gives every directory under `dir` mode 0755 and every file 0644, as an
/// install made before its files were private has them.
fn open_up(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode(dir, 0o755);
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            open_up(&entry.path());
        } else if kind.is_file() {
            mode(&entry.path(), 0o644);
        }
    }
}

#[test]
fn the_data_dir_is_private_after_start_and_an_open_install_is_tightened() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let data = dir.path().join("web");
    let web = start_web(dir.path(), &db, "");
    let listed: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for made in [
        "gantry.db",
        "gantry.db-wal",
        "gantry.db-shm",
        "secret.key",
        "artifacts",
    ] {
        assert!(listed.iter().any(|n| n == made), "{made} in {listed:?}");
    }
    assert_eq!(readable_by_others(&data), "");
    drop(web);

    // An install of before: everything readable by all, a stray file too.
    write(&data.join("artifacts").join("old-upload"), "x");
    open_up(&data);
    assert!(readable_by_others(&data).contains("gantry.db"));
    let _web = start_web(dir.path(), &db, "");
    assert_eq!(readable_by_others(&data), "");
}

#[test]
fn a_web_node_with_another_key_than_the_databases_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Postgres);
    let _first = start_web(&dir.path().join("a"), &db, "");
    // The same database, another key file (made at its start).
    let other = TestDb::at(db.url.clone().unwrap());
    let out = web_command(&dir.path().join("b"), &other, "", 0)
        .output()
        .unwrap();
    if let Some(key) = &other.key_file {
        let _ = std::fs::remove_file(key);
    }
    let err = failure_line(&out);
    assert!(
        err.contains("is not the key this database's secrets were sealed with")
            && err.contains("encryption_key_file"),
        "{err}"
    );
}

/// The YAML bombs, each with what its refusal must say: one anchor of
/// 8,000 items referenced 8,000 times (40 KB of text, 64 million nodes
/// once built), nested anchors (billion laughs) and 10,000 levels.
fn yaml_bombs() -> Vec<(&'static str, String, &'static str)> {
    let items = vec!["x"; 8_000].join(",");
    let aliases = vec!["*a"; 8_000].join(",");
    let quadratic = format!("a: &a [{items}]\nb: [{aliases}]\n");
    assert!(quadratic.len() < 50_000);
    let mut laughs = String::from("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..=9 {
        let refs = vec![format!("*l{}", i - 1); 10].join(", ");
        laughs += &format!("l{i}: &l{i} [{refs}]\n");
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    vec![
        (
            "the quadratic bomb",
            quadratic,
            "expands to more than 1000000 nodes after aliases (limit 1000000)",
        ),
        (
            "a billion laughs",
            laughs,
            "expands its aliases more than 100 times its own size",
        ),
        (
            "10,000 levels of YAML",
            deep,
            "nests deeper than 100 levels (limit 100)",
        ),
    ]
}

/// `/healthz` answered in a loop until `stop`: every answer's time.
fn poll_health(url: String, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Vec<Duration> {
    let http = reqwest::blocking::Client::new();
    let mut times = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let t0 = Instant::now();
        let resp = http.get(format!("{url}/healthz")).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        times.push(t0.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    times
}

#[test]
fn yaml_and_json_bombs_are_refused_naming_their_bound_while_the_node_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let web = guarded_web(dir.path(), "");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (url, stop) = (web.url.clone(), stop.clone());
        std::thread::spawn(move || poll_health(url, stop))
    };
    let http = reqwest::blocking::Client::new();
    let api = |method: &str, path: &str, body: String| {
        let url = format!("{}{path}", web.url);
        let req = match method {
            "post" => http.post(&url),
            "put" => http.put(&url),
            _ => http.delete(&url),
        };
        let token = if path.starts_with("/api/v1/workers/") && !path.ends_with("/prune") {
            KEY
        } else {
            ADMIN
        };
        req.bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap()
    };
    for (what, bomb, bound) in yaml_bombs() {
        // Every route that reads YAML: a pipeline set, a job's build and a
        // check build of a pipeline given whole.
        for (path, body) in [
            ("/api/v1/teams/main/pipelines/p", json!({ "config": bomb })),
            (
                "/api/v1/teams/main/builds",
                json!({ "pipeline": bomb, "job": "j" }),
            ),
            (
                "/api/v1/teams/main/builds",
                json!({ "pipeline": bomb, "check": "r" }),
            ),
        ] {
            let method = if path.contains("/pipelines/") {
                "put"
            } else {
                "post"
            };
            let e = json_error(api(method, path, body.to_string()), what, Some(400));
            assert!(e.contains(bound), "{path} with {what}: {e}");
        }
        // Every CLI verb that reads YAML, each as a pipeline, task or vars file.
        let file = dir.path().join("bomb.yml");
        write(&file, &bomb);
        let ok = dir.path().join("ok.yml");
        write(&ok, "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: \"true\"}}\n");
        let f = file.to_str().unwrap();
        for args in [
            vec!["validate-plan", f],
            vec!["validate-plan", ok.to_str().unwrap(), "-l", f],
            vec!["validate-task", f],
            vec!["execute", "-c", f],
            vec!["set-pipeline", "-p", "p", "-c", f],
            vec![
                "set-pipeline",
                "-p",
                "p",
                "-c",
                ok.to_str().unwrap(),
                "-l",
                f,
            ],
            vec!["run", "-p", f, "-j", "j"],
        ] {
            let e = one_error_line(&client_as(&web.url, ADMIN, &args));
            assert!(e.contains(bound), "gantry {args:?} with {what}: {e}");
        }
    }
    // JSON 10,000 levels deep, to every route: refused with a 400 (a typed
    // body at its first token, a route that takes no body at once). As a
    // free-form field (a task config, a var, a version), serde_json's
    // recursion limit refuses it.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let doc: Value = http
        .get(format!("{}/api/v1/openapi.json", web.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let mut sent = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        // An artifact's body is a tar, a webhook's the git server's own.
        if path.ends_with("/artifacts") || path.ends_with("/webhook") {
            continue;
        }
        for method in ["post", "put", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let what = format!("{method} {path} with 10,000 levels of JSON");
            json_error(api(method, &fill(path), deep.clone()), &what, Some(400));
            sent += 1;
        }
    }
    assert!(sent >= 25, "only {sent} routes");
    for (path, body) in [
        (
            "/api/v1/teams/main/builds",
            format!(r#"{{"config": {deep}}}"#),
        ),
        (
            "/api/v1/teams/main/pipelines/p",
            format!(r#"{{"config": "jobs: []", "vars": {{"v": {deep}}}}}"#),
        ),
        (
            "/api/v1/teams/main/pipelines/p/resources/r/check",
            format!(r#"{{"from": {deep}}}"#),
        ),
    ] {
        let method = if path.ends_with("/p") { "put" } else { "post" };
        let e = json_error(api(method, path, body), path, Some(400));
        assert!(e.contains("recursion limit exceeded"), "{path}: {e}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut times = poller.join().unwrap();
    times.sort();
    let p99 = times[times.len() * 99 / 100];
    assert!(times.len() >= 20, "{} answers", times.len());
    // The node did the work off its request threads: /healthz kept
    // answering (a few ms, p99 printed below). Work on a request thread
    // would stall it for seconds; the bound leaves room for a loaded
    // machine running other tests (a 100 ms bound failed at load 12).
    assert!(
        times[times.len() - 1] < Duration::from_millis(1000),
        "/healthz answers: {times:?}"
    );
    // Nothing was built: the node's peak resident memory stayed small.
    let status = std::fs::read_to_string(format!("/proc/{}/status", web.child.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    eprintln!(
        "/healthz: {} answers, p99 {p99:?}, slowest {:?}; peak RSS {} MiB",
        times.len(),
        times[times.len() - 1],
        peak_kib / 1024
    );
    assert!(peak_kib < 300 * 1024, "peak RSS {} MiB", peak_kib / 1024);
    // Nothing was stored.
    let pipelines = client_as(&web.url, ADMIN, &["pipelines", "--json"]);
    assert_eq!(String::from_utf8_lossy(&pipelines.stdout).trim(), "[]");
}

/// A document nested 100,000 levels deep (`x: [[[...]]]`, 200 KB), to
/// `set-pipeline`, a one-off build's pipeline and `validate-plan`:
/// refused naming the depth bound, at the 101st level, in milliseconds of
/// CPU. (Read whole first, libyaml's cost grows with the square of the
/// depth: 100,000 levels ran past the 30 s budget, and went on for a
/// minute after the answer.) The server's CPU time is read from
/// `/proc/PID/stat` around each request (in clock ticks, 10 ms each);
/// `validate-plan`'s from `wait4`.
fn deep_yaml_is_refused_while_read_in_milliseconds_of_cpu(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let deep = format!("x: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(deep.len() > 200_000);
    let bound = "nests deeper than 100 levels (limit 100)";
    let http = reqwest::blocking::Client::new();
    let pid = web.child.id();
    let pipelines = format!("{}/api/v1/teams/main/pipelines", web.url);
    let normal = "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: \"true\"}}\n";
    let before = rusage::cpu_of(pid);
    let resp = http
        .put(format!("{pipelines}/normal"))
        .bearer_auth(ADMIN)
        .json(&json!({ "config": normal }))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{}", resp.text().unwrap());
    eprintln!(
        "a normal set-pipeline: {:?} of the server's CPU",
        rusage::cpu_of(pid) - before
    );
    for (what, req) in [
        (
            "set-pipeline",
            http.put(format!("{pipelines}/deep"))
                .json(&json!({ "config": deep })),
        ),
        (
            "a one-off build",
            http.post(format!("{}/api/v1/teams/main/builds", web.url))
                .json(&json!({ "pipeline": deep, "job": "j" })),
        ),
    ] {
        let before = rusage::cpu_of(pid);
        let resp = req.bearer_auth(ADMIN).send().unwrap();
        let spent = rusage::cpu_of(pid) - before;
        let e = json_error(resp, what, Some(400));
        eprintln!("{what} 100,000 deep: {spent:?} of the server's CPU");
        assert!(e.contains(bound), "{what}: {e}");
        assert!(spent < Duration::from_secs(1), "{what}: {spent:?} of CPU");
    }
    let file = dir.path().join("deep.yml");
    write(&file, &deep);
    let mut child = gantry()
        .arg("validate-plan")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let spent = rusage::wait_spent(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!("validate-plan 100,000 deep: {:?} of CPU", spent.cpu);
    assert_eq!(spent.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(bound), "{stderr}");
    assert!(spent.cpu < Duration::from_secs(1), "{:?} of CPU", spent.cpu);
    // Nothing was stored but the normal pipeline.
    let listed = client_as(&web.url, ADMIN, &["pipelines", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn deep_yaml_is_refused_while_read_in_milliseconds_of_cpu_sqlite() {
    deep_yaml_is_refused_while_read_in_milliseconds_of_cpu(DbKind::Sqlite);
}

#[test]
fn deep_yaml_is_refused_while_read_in_milliseconds_of_cpu_postgres() {
    deep_yaml_is_refused_while_read_in_milliseconds_of_cpu(DbKind::Postgres);
}

/// Key rotation end to end, on a quickstart with runc: a pipeline whose
/// job prints a var given with `-v` runs; the key is replaced. The new
/// key alone is refused, naming where the old one goes. Given the old one
/// too, the node seals every stored secret again, and the job still runs
/// with its var. Then the new key alone serves. An old key file that
/// cannot be read is one line naming it.
#[test]
fn a_web_node_given_the_old_key_seals_everything_again_with_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let data = dir.path().join("data");
    let key = data.join("secret.key");
    let pipeline = dir.path().join("p.yml");
    let secret = format!("kept-{}", uuid::Uuid::new_v4().simple());
    write(
        &pipeline,
        "jobs:\n- name: j\n  plan:\n  - task: say\n    config:\n      platform: linux\n      \
         params: {WORD: ((word))}\n      run: {path: sh, args: [-c, 'echo said-$WORD']}\n",
    );
    let runs_with_secret = |url: &str| {
        let out = client(url, &["trigger-job", "-j", "p/j", "--watch"]);
        let said = String::from_utf8_lossy(&out.stdout).contains(&format!("said-{secret}"));
        assert!(
            out.status.success() && said,
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let q = quickstart_runc(dir.path(), &db);
    let set = client(
        &q.url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            pipeline.to_str().unwrap(),
            "-v",
            &format!("word={secret}"),
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let unpause = client(&q.url, &["unpause-pipeline", "-p", "p"]);
    assert!(unpause.status.success());
    runs_with_secret(&q.url);
    drop(q);

    // The key moves aside; the next start makes a new one.
    let old = dir.path().join("old.key");
    std::fs::rename(&key, &old).unwrap();
    let start = |extra: &[&str]| {
        gantry()
            .args([
                "quickstart",
                "--open-api",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&data)
            .args(extra)
            .output()
            .unwrap()
    };
    let err = failure_line(&start(&[]));
    assert!(err.contains("old_encryption_key_file"), "{err}");
    assert!(key.exists(), "the new key was made");

    let old_flag = old.to_str().unwrap();
    let q = quickstart_runc_with(dir.path(), &db, &["--old-encryption-key-file", old_flag]);
    runs_with_secret(&q.url);
    drop(q);
    let q = quickstart_runc(dir.path(), &db);
    runs_with_secret(&q.url);
    drop(q);

    let missing = dir.path().join("no-such.key");
    let err = failure_line(&start(&[
        "--old-encryption-key-file",
        missing.to_str().unwrap(),
    ]));
    assert!(err.contains("no-such.key"), "{err}");
}
