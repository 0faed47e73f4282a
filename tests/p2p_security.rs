//! End to end: peer-to-peer streaming between two real `gantry worker`
//! processes registered with a real `gantry web` (SQLite). A tap between
//! the workers and the web node records their registrations, as the web
//! node receives them, to learn each agent's token and stream key.
//!
//! A signed URL of worker A's volume is pulled by worker B (same bytes);
//! a forged signature, each field altered and an expired URL are refused
//! by A with 403 (directly) and fail B's pull with a 502 naming A's answer,
//! writing nothing; the p2p route without a signature is 403, every other
//! route still needs the bearer token; neither secret shows in the web
//! node's worker listing.
//!
//! A dump of the database (SQLite and PostgreSQL) holds neither secret,
//! and no string in it works as either: the agent refuses each as a
//! bearer token, and refuses a URL signed with each.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use gantry_wire::spec::Encoding;
use gantry_wire::stream_url::StreamGrant;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Registrations seen by the tap, by worker name.
type Seen = Arc<Mutex<HashMap<String, Value>>>;

/// Forwards the workers' calls to the web node at `web` (one request per
/// connection) and records every registration; returns its URL.
fn registration_tap(web: &str, seen: Seen) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the tap");
    let url = format!("http://{}", listener.local_addr().expect("tap address"));
    let web = web.trim_end_matches('/').to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            let (web, seen) = (web.clone(), seen.clone());
            std::thread::spawn(move || forward(conn, &web, &seen));
        }
    });
    url
}

/// Relays one request of a worker to the web node and its answer back.
fn forward(conn: TcpStream, web: &str, seen: &Seen) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone the connection"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (mut length, mut auth, mut secret) = (0usize, String::new(), None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((&header, ""));
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "authorization" => auth = value.trim().to_string(),
            "x-gantry-worker-secret" => secret = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    if path.ends_with("/register") {
        if let Ok(reg) = serde_json::from_slice::<Value>(&body) {
            let name = reg["name"].as_str().unwrap_or_default().to_string();
            seen.lock().unwrap().insert(name, reg);
        }
    }
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{web}{path}"))
        .header("authorization", auth)
        .header("content-type", "application/json");
    if let Some(secret) = secret {
        request = request.header("x-gantry-worker-secret", secret);
    }
    let answer = request.body(body).send();
    let (status, text) = match answer {
        Ok(r) => (r.status().as_u16(), r.text().unwrap_or_default()),
        Err(e) => (502, json!({ "error": e.to_string() }).to_string()),
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{text}",
        text.len()
    );
}

/// One worker as its registration tells it.
struct Agent {
    /// Its name.
    name: String,
    /// Base URL of its API.
    url: String,
    /// Its bearer token.
    token: String,
    /// Its stream key.
    key: String,
}

impl Agent {
    fn of(reg: &Value) -> Agent {
        let field = |f: &str| reg[f].as_str().unwrap_or_default().to_string();
        Agent {
            name: field("name"),
            url: field("agent_url"),
            token: field("agent_token"),
            key: field("stream_key"),
        }
    }
}

/// An HTTP client with a deadline, so a hung agent fails the test.
fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client")
}

/// Status and JSON (or `null`) of an answer.
fn answer(resp: reqwest::blocking::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Creates an empty volume on `agent`.
fn create_volume(agent: &Agent, handle: &str) {
    let resp = http()
        .post(format!("{}/volumes", agent.url))
        .bearer_auth(&agent.token)
        .json(&json!({"handle": handle, "strategy": {"type": "empty"}}))
        .send()
        .expect("create a volume");
    assert_eq!(resp.status().as_u16(), 201, "{:?}", resp.text());
}

/// Names of the entries of a volume on `agent` (its root excluded).
fn entries(agent: &Agent, handle: &str) -> Vec<String> {
    let resp = http()
        .get(format!("{}/volumes/{handle}/stream-out", agent.url))
        .query(&[("encoding", "raw")])
        .bearer_auth(&agent.token)
        .send()
        .expect("stream a volume out");
    assert_eq!(resp.status().as_u16(), 200);
    let bytes = resp.bytes().expect("the tar stream");
    let mut archive = tar::Archive::new(&bytes[..]);
    archive
        .entries()
        .expect("a tar stream")
        .map(|e| {
            let e = e.expect("an entry");
            String::from_utf8_lossy(&e.path_bytes()).into_owned()
        })
        .filter(|p| !matches!(p.as_str(), "" | "." | "./"))
        .collect()
}

/// Unix ms `secs` from now.
fn in_secs(secs: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64;
    now + secs * 1000
}

#[test]
fn only_signed_unexpired_urls_for_the_worker_stream_its_volumes_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir.path(), &db, "");
    let seen = Seen::default();
    let tap = registration_tap(&web.url, seen.clone());
    // Volumes are made by hand on the agents (no rows): no GC sweeps.
    let no_sweeps = ["--backend", "local", "--sweep-interval", "0"];
    let _wa = start_worker(dir.path(), &tap, "wa", &no_sweeps);
    let _wb = start_worker(dir.path(), &tap, "wb", &no_sweeps);
    let listing = wait_running(&web.url, 2).to_string();
    let (a, b) = wait_for("both registrations", Duration::from_secs(30), || {
        let seen = seen.lock().unwrap();
        Some((Agent::of(seen.get("wa")?), Agent::of(seen.get("wb")?)))
    });
    for agent in [&a, &b] {
        assert_eq!(
            agent.key.len(),
            64,
            "{}: a 32-byte hex stream key",
            agent.name
        );
        assert_ne!(agent.key, agent.token);
        assert!(listing.contains(&agent.url), "{listing}");
        assert!(
            !listing.contains(&agent.key),
            "stream key listed: {listing}"
        );
        assert!(
            !listing.contains(&agent.token),
            "agent token listed: {listing}"
        );
    }
    assert_ne!(a.key, b.key);

    // A's volume `src` holds `data/blob.bin` (2 MiB of noise) and `data/readme`.
    create_volume(&a, "src");
    create_volume(&a, "other");
    let blob = noise(2 << 20, 7);
    let mut tar = tar::Builder::new(Vec::new());
    for (name, body) in [
        ("data/blob.bin", &blob[..]),
        ("data/readme", b"hello from A"),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        tar.append_data(&mut h, name, body).unwrap();
    }
    let resp = http()
        .put(format!("{}/volumes/src/stream-in", a.url))
        .query(&[("encoding", "raw")])
        .bearer_auth(&a.token)
        .body(tar.into_inner().unwrap())
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);

    // A signed URL of `src/data`, pulled by B into `dst/copy`.
    let grant = StreamGrant {
        worker: a.name.clone(),
        volume: "src".into(),
        path: "data".into(),
        encoding: Encoding::Zstd,
        expires_ms: in_secs(120),
    };
    let url = grant.url(&a.url, &a.key);
    create_volume(&b, "dst");
    let pull = |volume: &str, url: &str| {
        answer(
            http()
                .put(format!("{}/volumes/{volume}/stream-from", b.url))
                .bearer_auth(&b.token)
                .json(&json!({"url": url, "path": "copy", "encoding": "zstd"}))
                .send()
                .unwrap(),
        )
    };
    let (status, body) = pull("dst", &url);
    assert_eq!(status, 200, "{body}");
    assert!(body["bytes"].as_u64().unwrap() > 0, "{body}");
    let copied = http()
        .get(format!("{}/volumes/dst/file", b.url))
        .query(&[("path", "copy/blob.bin")])
        .bearer_auth(&b.token)
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    assert_eq!(Sha256::digest(&copied), Sha256::digest(&blob));
    let mut listed = entries(&b, "dst");
    listed.sort();
    assert_eq!(listed, ["copy", "copy/blob.bin", "copy/readme"]);
    // The same URL works for a plain GET, without the bearer token.
    let resp = http().get(&url).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(!resp.bytes().unwrap().is_empty());

    // Refused: a forged signature, each field altered, an expired grant.
    let forged_sig = grant.url(&a.url, "not A's key");
    let for_b = StreamGrant {
        worker: b.name.clone(),
        ..grant.clone()
    }
    .url(&a.url, &a.key);
    let other_volume = url.replace("/p2p/volumes/src/", "/p2p/volumes/other/");
    let other_path = url.replace("&path=data&", "&path=data%2Fsub&");
    let other_encoding = url.replace("&encoding=zstd&", "&encoding=raw&");
    let later = format!("&expires={}&", grant.expires_ms + 3_600_000);
    let other_expiry = url.replace(&format!("&expires={}&", grant.expires_ms), &later);
    let expired = StreamGrant {
        expires_ms: in_secs(-5),
        ..grant.clone()
    }
    .url(&a.url, &a.key);
    let cases = [
        ("forged signature", forged_sig, "signature does not match"),
        ("worker", for_b, "for worker \"wb\""),
        ("volume", other_volume, "signature does not match"),
        ("path", other_path, "signature does not match"),
        ("encoding", other_encoding, "signature does not match"),
        ("expires", other_expiry, "signature does not match"),
        ("expired", expired, "expired"),
    ];
    for (i, (what, bad, why)) in cases.iter().enumerate() {
        assert_ne!(bad, &url, "{what}: the URL was not altered");
        let (status, body) = answer(http().get(bad).send().unwrap());
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(status, 403, "{what}: {body}");
        assert!(error.contains(why), "{what}: {error}");

        let victim = format!("victim{i}");
        create_volume(&b, &victim);
        let (status, body) = pull(&victim, bad);
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(status, 502, "{what}: {body}");
        assert!(
            error.starts_with("source worker answered 403 Forbidden: ") && error.contains(why),
            "{what}: {error}"
        );
        assert!(
            entries(&b, &victim).is_empty(),
            "{what}: B's volume was written"
        );
    }

    // The p2p route without a signature, and the other routes without the token.
    let (status, body) = answer(
        http()
            .get(format!("{}/p2p/volumes/src/stream-out", a.url))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("missing parameter"),
        "{body}"
    );
    for path in [
        "/volumes/src/stream-out",
        "/volumes/src/file?path=data/readme",
        "/p2p/volumes/src/file?path=data/readme",
        "/p2p/volumes",
    ] {
        let (status, body) = answer(http().get(format!("{}{path}", a.url)).send().unwrap());
        assert_eq!(status, 401, "{path}: {body}");
    }

    // The transfers were counted: A sent, B received; none is left running.
    let health = |agent: &Agent| -> Value {
        http()
            .get(format!("{}/health", agent.url))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let (ha, hb) = (health(&a), health(&b));
    assert!(ha["streams"]["out_max"].as_u64() >= Some(1), "{ha}");
    assert!(hb["streams"]["in_max"].as_u64() >= Some(1), "{hb}");
    wait_for("no streams in flight", Duration::from_secs(10), || {
        let (ha, hb) = (health(&a), health(&b));
        let idle = |h: &Value| h["streams"]["out_now"] == 0 && h["streams"]["in_now"] == 0;
        (idle(&ha) && idle(&hb)).then_some(())
    });
}

/// Every text of a dump of the web node's database, whole.
fn dump_database(dir: &std::path::Path, db: &TestDb) -> String {
    common::dump_database(&dir.join("web").join("gantry.db"), db)
}

/// Every word of `dump` that could be a secret: runs of token and base64
/// characters of 16 or more, and each part of them between `:` (a sealed
/// value's prefix) and JSON escapes.
fn candidate_secrets(dump: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let word = |c: char| c.is_ascii_alphanumeric() || "+/=_-.:".contains(c);
    for w in dump.split(|c: char| !word(c)) {
        for part in std::iter::once(w).chain(w.split(':')) {
            let part = part.trim_matches(|c: char| c == '.' || c == ':');
            if part.len() >= 16 {
                out.insert(part.to_string());
            }
        }
    }
    out
}

/// Sets a pipeline whose resource source holds a secret and whose vars
/// (`-v`) hold another, and triggers its job (a build whose plan holds
/// both); answers the two secrets once the build is stored.
fn set_pipeline_with_secrets(url: &str, dir: &std::path::Path) -> Vec<String> {
    let in_source = format!("source-secret-{}", uuid::Uuid::new_v4().simple());
    let in_vars = format!("var-secret-{}", uuid::Uuid::new_v4().simple());
    let file = dir.join("secrets.yml");
    std::fs::write(
        &file,
        format!(
            "resources:\n\
             - name: repo\n  type: git\n  source: {{uri: /nowhere, private_key: {in_source}}}\n\
             jobs:\n\
             - name: deploy\n  plan:\n  - task: say\n    config:\n      platform: linux\n      \
             params: {{PASSWORD: ((deploy_password))}}\n      run: {{path: \"true\"}}\n  - put: repo\n"
        ),
    )
    .unwrap();
    let set = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "secrets",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &format!("deploy_password={in_vars}"),
        ],
    );
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let unpause = client(url, &["unpause-pipeline", "-p", "secrets"]);
    assert!(
        unpause.status.success(),
        "{}",
        String::from_utf8_lossy(&unpause.stderr)
    );
    let trigger = client(url, &["trigger-job", "-j", "secrets/deploy"]);
    assert!(
        trigger.status.success(),
        "{}",
        String::from_utf8_lossy(&trigger.stderr)
    );
    // Read back through the API: the node opens what it sealed.
    let listed = client(url, &["get-pipeline", "-p", "secrets"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(&in_source),
        "get-pipeline shows the stored config"
    );
    vec![in_source, in_vars]
}

/// The agent token and stream key of a registered worker are sealed in the
/// database: its dump holds neither (as text or as hex), and no string in
/// it is taken by the agent as its token or signs a URL the agent takes.
/// So are a stored pipeline's config and vars and a build's plan.
fn a_dump_hands_over_no_working_agent_secret(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let web = start_web(dir.path(), &db, "");
    let seen = Seen::default();
    let tap = registration_tap(&web.url, seen.clone());
    let _wa = start_worker(
        dir.path(),
        &tap,
        "wa",
        &["--backend", "local", "--sweep-interval", "0"],
    );
    wait_running(&web.url, 1);
    let a = wait_for("the registration", Duration::from_secs(30), || {
        Some(Agent::of(seen.lock().unwrap().get("wa")?))
    });
    create_volume(&a, "src");
    let grant = |key: &str| {
        StreamGrant {
            worker: a.name.clone(),
            volume: "src".into(),
            path: ".".into(),
            encoding: Encoding::Raw,
            expires_ms: in_secs(120),
        }
        .url(&a.url, key)
    };
    let status_as = |token: &str| {
        http()
            .get(format!("{}/containers", a.url))
            .bearer_auth(token)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    // The real secrets work: what follows would catch a leaked one.
    assert_eq!(status_as(&a.token), 200);
    assert_eq!(http().get(grant(&a.key)).send().unwrap().status(), 200);

    let pipeline_secrets = set_pipeline_with_secrets(&web.url, dir.path());

    let dump = dump_database(dir.path(), &db);
    assert!(
        dump.contains("\"name\":\"wa\""),
        "the worker's row is dumped"
    );
    for secret in &pipeline_secrets {
        assert!(!dump.contains(secret.as_str()), "{secret} is in the dump");
    }
    // The worker's two secrets and the key check, then the pipeline's
    // config and vars and the build's plan.
    assert!(
        dump.matches("sealed:v2:").count() >= 6,
        "the plan, the pipeline's config and its vars are dumped sealed"
    );
    for (what, secret) in [("agent token", &a.token), ("stream key", &a.key)] {
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        for form in [secret.clone(), hex.clone(), hex.to_uppercase()] {
            assert!(!dump.contains(&form), "the {what} is in the dump");
        }
    }
    let candidates = candidate_secrets(&dump);
    assert!(
        candidates
            .iter()
            .any(|c| c.starts_with("sealed") || c.len() > 60),
        "the sealed values are among the candidates: {candidates:?}"
    );
    for c in &candidates {
        assert_eq!(status_as(c), 401, "{c:?} is taken as the agent token");
        let status = http().get(grant(c)).send().unwrap().status().as_u16();
        assert_eq!(status, 403, "a URL signed with {c:?} is taken");
    }
}

#[test]
fn a_sqlite_dump_hands_over_no_working_agent_token_or_stream_key() {
    a_dump_hands_over_no_working_agent_secret(DbKind::Sqlite);
}

#[test]
fn a_postgres_dump_hands_over_no_working_agent_token_or_stream_key() {
    a_dump_hands_over_no_working_agent_secret(DbKind::Postgres);
}
