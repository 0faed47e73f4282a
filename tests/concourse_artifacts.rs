//! End to end: Concourse's artifact routes as `fly execute` uses them (read
//! from `fly/commands/internal/executehelpers` and
//! `go-concourse/concourse/artifacts.go`). An input goes up as fly sends it:
//! `POST /api/v1/teams/:team/artifacts?platform=...`, the body a gzipped
//! tar made by the system's `tar` (as fly's `tgzfs.Compress` does where
//! `tar` exists), `Content-Type: application/octet-stream` and no
//! `Content-Encoding`; the answer is 201 with `atc.WorkerArtifact`
//! (integer `id`, `name`, `build_id`, `created_at`). An output comes back as
//! fly reads it: `GET .../artifacts/:artifact_id` by the integer id, the body
//! itself a gzipped tar (`application/octet-stream`, no `Content-Encoding`,
//! which Go's client would otherwise undo), extracted by `tar` and equal to
//! the directory sent. Gantry's own UUID download keeps answering a plain
//! tar; bodies that are neither gzip nor tar are refused with a JSON 4xx.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Uploads `body` as fly's `CreateArtifact` does: status and JSON answer.
fn create_artifact(url: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = http()
        .post(format!("{url}/api/v1/teams/main/artifacts?platform=linux"))
        .header("content-type", "application/octet-stream")
        .header("accept-encoding", "gzip")
        .header("user-agent", "Go-http-client/1.1")
        .body(body)
        .send()
        .expect("an upload answers");
    let status = resp.status().as_u16();
    let text = resp.text().unwrap();
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("upload answered {status} with no JSON ({e}): {text}"));
    (status, json)
}

/// Every file under `dir`: its path, contents and whether it is executable.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, bool)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::metadata(&path).unwrap();
            if meta.is_dir() {
                todo.push(path);
                continue;
            }
            let name = path.strip_prefix(dir).unwrap().display().to_string();
            let exec = meta.permissions().mode() & 0o111 != 0;
            out.insert(name, (std::fs::read(&path).unwrap(), exec));
        }
    }
    out
}

/// The JSON error of a refused upload.
fn refused(url: &str, body: Vec<u8>, what: &str) {
    let (status, json) = create_artifact(url, body);
    assert!((400..500).contains(&status), "{what}: {status} {json}");
    assert!(
        json["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{what}: {json}"
    );
}

#[test]
fn fly_uploads_an_input_and_downloads_it_back_sqlite() {
    fly_uploads_an_input_and_downloads_it_back(DbKind::Sqlite);
}

#[test]
fn fly_uploads_an_input_and_downloads_it_back_postgres() {
    fly_uploads_an_input_and_downloads_it_back(DbKind::Postgres);
}

/// On a quickstart node with a database of `kind` (the integer ids are a
/// column of each dialect's own).
fn fly_uploads_an_input_and_downloads_it_back(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let server = quickstart(dir.path(), &db, &[]);
    let url = &server.url;

    let input = dir.path().join("input");
    write(&input.join("hello.txt"), "hello\n");
    write(&input.join("nested/deeper/big.bin"), noise(300_000, 5));
    write(&input.join("empty"), "");
    write(&input.join("run.sh"), "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(input.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    let tgz = Command::new("tar")
        .args(["-czf", "-", "."])
        .current_dir(&input)
        .output()
        .unwrap();
    assert!(tgz.status.success(), "tar: {:?}", tgz);
    assert_eq!(tgz.stdout[..2], [0x1f, 0x8b]);

    // The answer decodes into atc.WorkerArtifact: every field, its type.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (status, first) = create_artifact(url, tgz.stdout.clone());
    assert_eq!(status, 201, "{first}");
    let id = first["id"].as_i64().unwrap_or_else(|| panic!("{first}"));
    assert!(id > 0, "{first}");
    assert_eq!(first["name"], "", "{first}");
    assert_eq!(first["build_id"], 0, "{first}");
    let created = first["created_at"].as_i64().unwrap();
    assert!((before - 5..=before + 60).contains(&created), "{first}");
    let handle = first["handle"].as_str().unwrap().to_string();
    let (status, second) = create_artifact(url, tgz.stdout.clone());
    assert_eq!(status, 201, "{second}");
    assert!(second["id"].as_i64().unwrap() > id, "{first} {second}");

    // Downloaded by the integer id as fly does: a gzipped tar body.
    let resp = http()
        .get(format!("{url}/api/v1/teams/main/artifacts/{id}"))
        .header("accept-encoding", "gzip")
        .header("user-agent", "Go-http-client/1.1")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/octet-stream");
    assert!(resp.headers().get("content-encoding").is_none());
    let body = resp.bytes().unwrap().to_vec();
    assert_eq!(body[..2], [0x1f, 0x8b]);
    let output = dir.path().join("output");
    std::fs::create_dir_all(&output).unwrap();
    let mut tar = Command::new("tar")
        .args(["-xzf", "-"])
        .current_dir(&output)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    tar.stdin.take().unwrap().write_all(&body).unwrap();
    assert!(tar.wait().unwrap().success());
    assert_eq!(files(&output), files(&input));

    // Gantry's own download by the UUID: a plain tar, as before.
    let resp = http()
        .get(format!("{url}/api/v1/teams/main/artifacts/{handle}"))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-tar");
    let plain = resp.bytes().unwrap();
    assert_eq!(&plain[257..262], b"ustar");

    // An integer id no artifact has: a JSON 404.
    let resp = http()
        .get(format!("{url}/api/v1/teams/main/artifacts/{}", id + 1000))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let json: Value = resp.json().unwrap();
    assert!(json["error"].is_string(), "{json}");

    // Neither gzip nor tar; gzip of something that is no tar.
    refused(url, noise(20_000, 9), "random bytes");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&noise(20_000, 11)).unwrap();
    refused(url, gz.finish().unwrap(), "gzipped random bytes");
}
