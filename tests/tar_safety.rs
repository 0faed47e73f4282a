//! End to end: malicious tar archives uploaded through the artifact API of
//! the real `gantry quickstart` binary (real database, runc containers).
//!
//! Every archive of the catalogue in `tests/malicious_tars/` is uploaded
//! plain and zstd-encoded to `POST /api/v1/teams/main/artifacts`. Each is
//! either refused with a 4xx JSON error naming the entry and the problem,
//! leaving nothing in `artifacts/` or `artifacts/tmp/`, or (duplicates,
//! in-volume symlink loops) accepted and then unpacked into a worker volume
//! by a real build whose task lists what it got. Throughout, a marker file
//! next to the data dir is never created, changed or hardlinked, and nothing
//! appears next to it.

use crate::common;
#[path = "malicious_tars/mod.rs"]
mod malicious_tars;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Duration;

use common::*;
use malicious_tars::{catalogue, Expect, Outside, RawTar};

/// The artifact size limit given to the server: small, so that "too large"
/// is cheap to reach with real data.
const LIMIT: u64 = 2 * 1024 * 1024;

/// Directories between the test's base dir and a worker volume's contents:
/// `data/worker/volumes/<handle>/data`.
const VOLUME_DEPTH: usize = 5;

/// Files (not directories) in the artifact store.
fn stored_artifacts(artifacts: &Path) -> BTreeSet<String> {
    std::fs::read_dir(artifacts)
        .expect("listing artifacts/")
        .map(|e| e.expect("an entry"))
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn tmp_entries(artifacts: &Path) -> Vec<String> {
    std::fs::read_dir(artifacts.join("tmp"))
        .expect("listing artifacts/tmp/")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Entries of the test's base directory (the data dir, the log, `outside`).
fn base_entries(base: &Path) -> BTreeSet<String> {
    std::fs::read_dir(base)
        .expect("listing the base dir")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Uploads `body`; returns the status and the JSON answer.
fn upload(
    http: &reqwest::blocking::Client,
    url: &str,
    body: Vec<u8>,
    encoding: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut req = http
        .post(format!("{url}/api/v1/teams/main/artifacts"))
        .body(body);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let resp = req.send().expect("the upload gets an answer");
    let status = resp.status().as_u16();
    let text = resp.text().expect("an answer body");
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("answer {status} is not JSON ({e}): {text}"));
    (status, json)
}

/// Runs a one-off build with the artifact `id` as input `in` through the API,
/// follows its events to the end and returns (status, exit status, stdout).
fn run_over(
    http: &reqwest::blocking::Client,
    url: &str,
    id: &str,
    script: &str,
) -> (String, Option<i64>, String) {
    let resp = http
        .post(format!("{url}/api/v1/teams/main/builds"))
        .json(&serde_json::json!({
            "config": {
                "platform": "linux",
                "inputs": [{"name": "in"}],
                "run": {"path": "sh", "args": ["-c", script]},
            },
            "inputs": {"in": id},
        }))
        .send()
        .expect("creating the build");
    assert_eq!(
        resp.status().as_u16(),
        201,
        "{}",
        resp.text().unwrap_or_default()
    );
    let created: serde_json::Value = resp.json().expect("JSON");
    let build = created["id"].as_i64().expect("a build id");
    let events = http
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("accept", "application/x-ndjson")
        .timeout(Duration::from_secs(120))
        .send()
        .expect("following the build's events");
    assert!(events.status().is_success());
    let mut stdout = String::new();
    let mut errors = Vec::new();
    for line in BufReader::new(events).lines() {
        let line = line.expect("an event line");
        let ev: serde_json::Value = serde_json::from_str(&line).expect("a JSON event");
        let ev = &ev["event"];
        match ev["type"].as_str() {
            Some("log") if ev["stream"] == "stdout" => {
                stdout.push_str(ev["data"].as_str().unwrap_or_default())
            }
            Some("log") => errors.push(ev["data"].as_str().unwrap_or_default().to_string()),
            Some("error") => errors.push(ev["message"].to_string()),
            Some("status")
                if !matches!(
                    ev["status"].as_str(),
                    Some("pending" | "started" | "running")
                ) =>
            {
                let status = ev["status"].as_str().unwrap_or_default().to_string();
                assert!(
                    status == "succeeded",
                    "build {build} {status}: {errors:?}\nstdout:\n{stdout}"
                );
                return (status, ev["exit_status"].as_i64(), stdout);
            }
            _ => {}
        }
    }
    panic!("the event stream of build {build} ended before the build did: {errors:?}");
}

/// Checks what the task saw of a contained archive.
fn check_contained(name: &str, listing: &str) {
    let lines: Vec<&str> = listing.lines().collect();
    let has = |want: &str| {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "{name}: the task's output lacks {want:?}:\n{listing}"
        )
    };
    match name {
        "duplicate entries" => {
            has("dup=two!");
            has("l=now a file");
            has("l is a regular file");
            has("x is a directory");
            has("x/inner=inner");
        }
        "symlink loop" => {
            has("a -> b");
            has("b -> a");
            has("self -> self");
            has("up -> ..");
            has("sub/up/f=plain");
            has("reading a: loop refused");
        }
        other => panic!("no checks for contained case {other:?}"),
    }
    // Nothing of the outside is visible in the task's tree.
    assert!(!listing.contains("marker"), "{name}: {listing}");
}

/// The task run over each accepted archive.
const LIST_SCRIPT: &str = r#"
cd in
ls -la . sub 2>/dev/null
for f in dup l x/inner sub/up/f; do
  [ -f "$f" ] && echo "$f=$(cat "$f")"
done
[ -f l ] && [ ! -L l ] && echo "l is a regular file"
[ -d x ] && [ ! -L x ] && echo "x is a directory"
if [ -L a ]; then cat a >/dev/null 2>&1 || echo "reading a: loop refused"; fi
find . -xdev | sort
"#;

fn malicious_archives_are_refused_or_contained(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let outside = Outside::create(base);
    let initial = outside.snapshot();
    let db = TestDb::new(kind);
    let limit = LIMIT.to_string();
    let server = quickstart(
        base,
        &db,
        &["--backend", "runc", "--max-artifact-bytes", &limit],
    );
    assert_eq!(
        workers_json(&server.url)[0]["backend"],
        "runc",
        "the tasks run in real containers"
    );
    let artifacts = base.join("data/artifacts");
    let base_before = base_entries(base);
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    let mut cases = catalogue(base, VOLUME_DEPTH);
    // Real data over the server's limit (3 MiB in one file), and a
    // zstd bomb: 64 MiB of one byte, a few KiB once compressed.
    cases.push(malicious_tars::Case {
        name: "3 MiB of real data over a 2 MiB limit",
        archive: RawTar::new()
            .file(b"big", &noise(3 * 1024 * 1024, 11))
            .finish(),
        expect: Expect::TooLarge,
    });
    // A stream over the limit whose contents are not: 6000 empty files,
    // 3 MiB of headers (caught while receiving, before anything is checked).
    let mut headers = RawTar::new();
    for i in 0..6000 {
        headers = headers.file(format!("empty-{i}").as_bytes(), b"");
    }
    cases.push(malicious_tars::Case {
        name: "3 MiB of headers of empty files",
        archive: headers.finish(),
        expect: Expect::TooLarge,
    });
    cases.push(malicious_tars::Case {
        name: "zstd bomb of 64 MiB",
        archive: RawTar::new().file(b"bomb", &vec![b'a'; 64 << 20]).finish(),
        expect: Expect::TooLarge,
    });
    assert!(cases.len() >= 10);

    let mut contained = Vec::new();
    let mut report = Vec::new();
    for case in &cases {
        // The bomb only makes sense compressed (plain, it is just big).
        let encodings: &[Option<&str>] = if case.name.starts_with("zstd bomb") {
            &[Some("zstd")]
        } else {
            &[None, Some("zstd")]
        };
        for &encoding in encodings {
            let body = match encoding {
                None => case.archive.clone(),
                Some(_) => malicious_tars::zstd(&case.archive),
            };
            let what = format!("{} ({})", case.name, encoding.unwrap_or("plain"));
            let before = stored_artifacts(&artifacts);
            let (status, json) = upload(&http, &server.url, body, encoding);
            match &case.expect {
                Expect::Refused(parts) => {
                    let error = json["error"].as_str().unwrap_or_default();
                    assert_eq!(status, 400, "{what}: {json}");
                    for part in parts {
                        assert!(error.contains(part), "{what}: {error:?} lacks {part:?}");
                    }
                    report.push(format!("refused {what}: {status} {error}"));
                }
                Expect::TooLarge => {
                    let error = json["error"].as_str().unwrap_or_default();
                    assert_eq!(status, 413, "{what}: {json}");
                    assert!(
                        error.contains(&format!("exceeds the limit of {LIMIT} bytes")),
                        "{what}: {error}"
                    );
                    report.push(format!("refused {what}: {status} {error}"));
                }
                Expect::Contained => {
                    assert_eq!(status, 201, "{what}: {json}");
                    let id = json["id"].as_str().expect("an artifact id").to_string();
                    report.push(format!("accepted {what}: {id}"));
                    contained.push((case.name, id));
                }
            }
            let after = stored_artifacts(&artifacts);
            if case.expect == Expect::Contained {
                assert_eq!(after.len(), before.len() + 1, "{what}: {after:?}");
            } else {
                assert_eq!(after, before, "{what}: a refused upload left a file");
            }
            assert_eq!(
                tmp_entries(&artifacts),
                Vec::<String>::new(),
                "{what}: tmp/"
            );
            outside.assert_untouched(&initial, &what);
            assert_eq!(
                base_entries(base),
                base_before,
                "{what}: next to the data dir"
            );
        }
    }

    // The accepted archives, unpacked into a worker volume by real builds.
    for (name, id) in &contained {
        let (_, exit, stdout) = run_over(&http, &server.url, id, LIST_SCRIPT);
        assert_eq!(exit, Some(0), "{name}");
        check_contained(name, &stdout);
        report.push(format!("task over {name}:\n{stdout}"));
        outside.assert_untouched(&initial, name);
        assert_eq!(
            base_entries(base),
            base_before,
            "{name}: next to the data dir"
        );
    }
    assert_eq!(
        contained.len(),
        4,
        "two contained archives, each plain and zstd"
    );

    // The builds leave nothing on the worker.
    wait_for("build cleanup", Duration::from_secs(30), || {
        let c: serde_json::Value =
            serde_json::from_slice(&client(&server.url, &["containers", "--json"]).stdout).ok()?;
        let v: serde_json::Value =
            serde_json::from_slice(&client(&server.url, &["volumes", "--json"]).stdout).ok()?;
        (c.as_array()?.is_empty() && v.as_array()?.is_empty()).then_some(())
    });
    outside.assert_untouched(&initial, "the end");
    eprintln!("{}", report.join("\n"));
}

#[test]
fn malicious_archives_are_refused_or_contained_sqlite() {
    malicious_archives_are_refused_or_contained(DbKind::Sqlite);
}

#[test]
fn malicious_archives_are_refused_or_contained_postgres() {
    malicious_archives_are_refused_or_contained(DbKind::Postgres);
}
