//! End to end: a web node keeping its artifacts on a real S3-compatible
//! server (`s3s-fs` on loopback, see `common/s3.rs`).
//! - The server is killed in the middle of an upload whose first part it
//!   has taken, then started again on the same port and data dir: the
//!   upload fails with a clear JSON error naming the store, `/readyz`
//!   turns 503 naming the artifact store and 200 again after the restart,
//!   downloads meanwhile fail clearly, earlier artifacts read back intact,
//!   no partial object is listed and no row was recorded for it.
//! - Bad artifact settings refuse to start with one line naming the fix.

use crate::common;

use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

use common::disk_db::DbView;
use common::s3::S3Server;
use common::*;

/// The key prefix of the store in the bucket.
const PREFIX: &str = "ci/gantry";

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// Uploads `tar` (plain) through `url`; its id.
fn upload(url: &str, tar: Vec<u8>) -> String {
    let kept: serde_json::Value = http()
        .post(format!("{url}/api/v1/teams/main/artifacts"))
        .body(tar)
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .expect("an upload");
    kept["id"].as_str().unwrap().to_string()
}

/// Downloads artifact `id` (plain tar) through `url`: its status and body.
fn download(url: &str, id: &str) -> (u16, Vec<u8>) {
    let resp = http()
        .get(format!("{url}/api/v1/teams/main/artifacts/{id}"))
        .send()
        .expect("a download answers");
    let status = resp.status().as_u16();
    (status, resp.bytes().unwrap().to_vec())
}

/// A request body that sends `data` up to `pause`, waits for a word on
/// `go`, then sends the rest.
struct PausedBody {
    data: Vec<u8>,
    at: usize,
    pause: usize,
    go: Option<mpsc::Receiver<()>>,
}

impl Read for PausedBody {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pause {
            if let Some(go) = self.go.take() {
                go.recv().map_err(std::io::Error::other)?;
            }
        }
        let end = if self.at < self.pause {
            self.pause
        } else {
            self.data.len()
        };
        let n = buf.len().min(end - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn an_outage_of_the_object_storage_mid_upload_fails_it_clearly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s3 = S3Server::start(dir.path());
    let db = TestDb::new(DbKind::Postgres);
    let (artifacts, table) = s3.web_config(PREFIX);
    let web = start_web(dir.path(), &db, &format!("[web]\n{artifacts}{table}"));
    // The store id the web nodes share is an object under the prefix.
    assert!(
        s3.list(PREFIX).contains(&format!("{PREFIX}/.store-id")),
        "{:?}",
        s3.list(PREFIX)
    );

    // Earlier artifacts, read back.
    let earlier: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            let tar = one_file_tar(&noise(300_000 + i * 1000, i as u64 + 1));
            (upload(&web.url, tar.clone()), tar)
        })
        .collect();
    for (id, tar) in &earlier {
        assert_eq!(download(&web.url, id), (200, tar.clone()));
    }
    assert_eq!(readyz(&web.url).map(|r| r.0), Some(200));
    let rows_before = DbView::open(dir.path(), &db)
        .rows("SELECT id FROM artifacts")
        .len();

    // An upload of 24 MiB (incompressible: three parts of 8 MiB), paused
    // after 20 MiB.
    let big = one_file_tar(&noise(24 << 20, 99));
    let (go, wait) = mpsc::channel();
    let body = PausedBody {
        pause: 20 << 20,
        at: 0,
        go: Some(wait),
        data: big,
    };
    let url = web.url.clone();
    let uploading = std::thread::spawn(move || {
        let resp = http()
            .post(format!("{url}/api/v1/teams/main/artifacts"))
            .body(reqwest::blocking::Body::new(body))
            .send()
            .expect("the upload is answered");
        let status = resp.status().as_u16();
        (status, resp.text().unwrap())
    });
    // The server has taken the upload's first part: kill it.
    wait_for(
        "the first part of the upload on the server",
        Duration::from_secs(60),
        || (s3.parts_on_disk() > 0).then_some(()),
    );
    s3.kill();
    go.send(()).unwrap();
    let (status, body) = uploading.join().unwrap();
    assert_eq!(status, 503, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = error["error"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the artifact store s3://gantry-artifacts/{PREFIX} failed storing artifact "
        )),
        "{message}"
    );

    // Not ready while the store is down, naming it; calls that need the
    // store fail clearly.
    let red = wait_for("/readyz to turn 503", Duration::from_secs(30), || {
        readyz(&web.url).filter(|(status, _)| *status == 503)
    });
    assert!(red.1.contains("artifact store:"), "{}", red.1);
    let (status, body) = download(&web.url, &earlier[0].0);
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(&format!(
                "the artifact store s3://gantry-artifacts/{PREFIX} failed reading artifact {}: ",
                earlier[0].0
            ))),
        "{error}"
    );

    // Back on the same port and data dir: ready again, nothing lost.
    s3.restart();
    wait_for("/readyz to turn 200", Duration::from_secs(30), || {
        readyz(&web.url).filter(|(status, _)| *status == 200)
    });
    for (id, tar) in &earlier {
        assert_eq!(download(&web.url, id), (200, tar.clone()), "artifact {id}");
    }
    let listed = s3.artifact_ids(PREFIX).unwrap();
    let want: std::collections::BTreeSet<String> =
        earlier.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(listed, want, "no partial object is listed");
    let rows_after = DbView::open(dir.path(), &db)
        .rows("SELECT id FROM artifacts")
        .len();
    assert_eq!(rows_after, rows_before, "no row for the failed upload");

    // And the store takes uploads again.
    let tar = one_file_tar(b"after the outage\n");
    let id = upload(&web.url, tar.clone());
    assert_eq!(download(&web.url, &id), (200, tar));
}

#[test]
fn bad_artifact_settings_refuse_to_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    for (config, says) in [
        (
            "[web]\nartifacts = \"s3:///prefix\"\n",
            "web.artifacts \"s3:///prefix\" names no bucket: use s3://BUCKET/PREFIX",
        ),
        (
            "[web]\nartifacts = \"gs://bucket/prefix\"\n",
            "unknown scheme \"gs\"; use s3://BUCKET/PREFIX",
        ),
        (
            "[web]\nartifacts = \"s3://bucket/p\"\nartifacts_dir = \"/srv/a\"\n",
            "both web.artifacts and web.artifacts_dir are set",
        ),
        (
            "[web.s3]\nregion = \"eu-west-1\"\n",
            "[web.s3] is set but web.artifacts is not",
        ),
        (
            "[web]\nartifacts = \"s3://bucket/p\"\n[web.s3]\nendpoint = \"http://192.0.2.1:9000\"\n",
            "is plain HTTP to another host: use https, or set web.s3.allow_http = true",
        ),
    ] {
        let out = web_command(dir.path(), &db, config, 0)
            .output()
            .expect("gantry runs");
        let line = failure_line(&out);
        assert!(line.contains(says), "{config}: {line}");
    }
}
