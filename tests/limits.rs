//! End to end: what a request may cost. An oversized JSON body and an
//! oversized upload (declared, or only found out while reading) get 413
//! with a JSON error and store nothing; a team creating builds faster than
//! its allowance gets 429 and no build.

use crate::common;

use std::time::Duration;

use common::*;

const CONFIG: &str = "[web]\nmax_request_body_bytes = 65536\n\
builds_per_team_per_minute = 3\nmax_artifact_bytes = 1048576\n";

fn build_count(url: &str) -> usize {
    builds_json(url).len()
}

/// The files in the web node's artifact store (temporary ones included).
fn stored(dir: &std::path::Path) -> Vec<String> {
    let mut all = Vec::new();
    for sub in ["web/artifacts", "web/artifacts/tmp"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            all.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    all
}

/// A tar of one file `big` of `size` incompressible bytes.
fn big_tar(size: usize) -> Vec<u8> {
    gantry_files::testing::tar_of(&[("big", &noise(size, 7))])
}

fn error_of(resp: reqwest::blocking::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().expect("a JSON error");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn oversized_bodies_get_413_and_build_floods_429_storing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, CONFIG);
    let url = &web.url;
    let _w = start_worker(dir, url, "w", worker_backend());
    wait_running(url, 1);
    let http = reqwest::blocking::Client::new();
    let builds = format!("{url}/api/v1/teams/main/builds");

    // A JSON body over the limit: 413, no build.
    let big = serde_json::json!({
        "config": {"platform": "linux", "run": {"path": "true"}},
        "padding": "x".repeat(100_000),
    });
    let (status, error) = error_of(http.post(&builds).json(&big).send().unwrap());
    assert_eq!(status, 413, "{error}");
    assert!(error.contains("65536"), "{error}");
    assert_eq!(build_count(url), 0);

    // An upload declaring more than the artifact limit: 413 before it is
    // read; one that declares nothing and turns out too large: 413 too.
    // Nothing is stored either way.
    let tar = big_tar(2 << 20);
    let upload = format!("{url}/api/v1/teams/main/artifacts");
    let (status, error) = error_of(http.post(&upload).body(tar.clone()).send().unwrap());
    assert_eq!(status, 413, "{error}");
    assert!(error.contains("1048576"), "{error}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        tar.chunks(64 << 10).map(|c| Ok(c.to_vec())).collect();
    let streamed = reqwest::blocking::Body::new(ChunkReader::new(chunks));
    let (status, error) = error_of(http.post(&upload).body(streamed).send().unwrap());
    assert_eq!(status, 413, "{error}");
    assert!(error.contains("too large"), "{error}");
    assert_eq!(stored(dir), Vec::<String>::new());

    // Three builds a minute: the fourth at once is refused with 429.
    let task = serde_json::json!({"config": {"platform": "linux", "run": {"path": "true"}}});
    for _ in 0..3 {
        let resp = http.post(&builds).json(&task).send().unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }
    let (status, error) = error_of(http.post(&builds).json(&task).send().unwrap());
    assert_eq!(status, 429, "{error}");
    assert!(error.contains("3 builds a minute"), "{error}");
    assert_eq!(build_count(url), 3);
    // The CLI says so in one line.
    write(&dir.join("t.yml"), "platform: linux\nrun: {path: 'true'}\n");
    let out = client(url, &["execute", "-c", dir.join("t.yml").to_str().unwrap()]);
    assert!(failure_line(&out).contains("429"));
    wait_for("the three builds to end", Duration::from_secs(60), || {
        builds_json(url)
            .iter()
            .all(|b| b["status"] == "succeeded")
            .then_some(())
    });
}

/// A body read in chunks with no declared length (chunked encoding).
struct ChunkReader {
    chunks: std::vec::IntoIter<Result<Vec<u8>, std::io::Error>>,
    current: std::io::Cursor<Vec<u8>>,
}

impl ChunkReader {
    fn new(chunks: Vec<Result<Vec<u8>, std::io::Error>>) -> Self {
        ChunkReader {
            chunks: chunks.into_iter(),
            current: std::io::Cursor::new(Vec::new()),
        }
    }
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            match self.chunks.next() {
                Some(chunk) => self.current = std::io::Cursor::new(chunk?),
                None => return Ok(0),
            }
        }
    }
}
