//! The base resource types' scripts (`resource_types/{git,mock,time}`) run
//! directly on the host with `sh`, a JSON request on stdin, in temporary
//! directories, against real git repositories made here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// What a script did.
struct Ran {
    /// Its exit status.
    status: i32,
    /// stdout, parsed as JSON when it succeeded.
    out: Value,
    /// stderr.
    err: String,
}

/// Runs `resource_types/<kind>/<script> [arg]` with `request` on stdin.
fn script(kind: &str, script: &str, arg: Option<&Path>, request: &Value) -> Ran {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("resource_types")
        .join(kind)
        .join(script);
    let mut cmd = Command::new("sh");
    cmd.arg(&path);
    if let Some(arg) = arg {
        cmd.arg(arg);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let body = serde_json::to_vec(request).unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&body).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let status = output.status.code().unwrap_or(-1);
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    let out = if status == 0 {
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{kind}/{script}: stdout is not JSON ({e}): {output:?}"))
    } else {
        Value::Null
    };
    Ran { status, out, err }
}

/// Runs a script that must succeed; its JSON answer.
fn ok(kind: &str, name: &str, arg: Option<&Path>, request: Value) -> Value {
    let ran = script(kind, name, arg, &request);
    assert_eq!(ran.status, 0, "{kind}/{name} failed: {}", ran.err);
    ran.out
}

/// Runs git in `dir`; its trimmed stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Tess", "-c", "user.email=tess@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A bare repository `bare.git` (branch main) in `dir`, and a clone `work`
/// to commit from: commits a, b (touching `docs/`), c, tags v1.0 on a and
/// v1.1 on c.
struct Repo {
    bare: PathBuf,
    work: PathBuf,
    commits: Vec<String>,
}

impl Repo {
    fn new(dir: &Path) -> Repo {
        let bare = dir.join("bare.git");
        git(dir, &["init", "-q", "--bare", "-b", "main", "bare.git"]);
        git(dir, &["init", "-q", "-b", "main", "work"]);
        let work = dir.join("work");
        let mut repo = Repo {
            bare,
            work,
            commits: vec![],
        };
        repo.commit("src/a.txt", "a", "first");
        repo.commit("docs/b.md", "b", "docs");
        repo.commit("src/c.txt", "c", "third");
        git(&repo.work, &["tag", "v1.0", &repo.commits[0]]);
        git(&repo.work, &["tag", "v1.1", &repo.commits[2]]);
        let bare = repo.bare.to_str().unwrap().to_string();
        git(&repo.work, &["push", "-q", &bare, "main", "--tags"]);
        repo
    }

    fn commit(&mut self, file: &str, content: &str, message: &str) {
        let path = self.work.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        git(&self.work, &["add", "."]);
        git(&self.work, &["commit", "-q", "-m", message]);
        self.commits.push(git(&self.work, &["rev-parse", "HEAD"]));
    }

    fn uri(&self) -> &str {
        self.bare.to_str().unwrap()
    }
}

fn refs(shas: &[&String]) -> Value {
    Value::Array(shas.iter().map(|s| json!({ "ref": s })).collect())
}

#[test]
fn git_check_lists_the_latest_commit_then_every_newer_one_filtered_by_paths() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repo::new(dir.path());
    let c = &repo.commits;
    let source = json!({ "uri": repo.uri() });
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": source, "version": null })
        ),
        refs(&[&c[2]])
    );
    let file_uri = json!({ "uri": format!("file://{}", repo.uri()), "branch": "main" });
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": file_uri, "version": { "ref": c[0] } })
        ),
        refs(&[&c[0], &c[1], &c[2]])
    );
    let docs = json!({ "uri": repo.uri(), "paths": ["docs"] });
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": docs, "version": { "ref": c[0] } })
        ),
        refs(&[&c[1]])
    );
    assert_eq!(
        ok("git", "check", None, json!({ "source": docs })),
        refs(&[&c[1]])
    );
    let not_docs = json!({ "uri": repo.uri(), "ignore_paths": ["docs"] });
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": not_docs, "version": { "ref": c[0] } })
        ),
        refs(&[&c[0], &c[2]])
    );
    // A version that no longer exists: the latest commit again.
    let gone = json!({ "ref": "0123456789012345678901234567890123456789" });
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": source, "version": gone })
        ),
        refs(&[&c[2]])
    );
}

#[test]
fn git_check_with_a_tag_filter_reports_matching_tags() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repo::new(dir.path());
    let c = &repo.commits;
    let source = json!({ "uri": repo.uri(), "tag_filter": "v1.*" });
    assert_eq!(
        ok("git", "check", None, json!({ "source": source })),
        json!([{ "ref": "v1.1", "commit": c[2] }])
    );
    assert_eq!(
        ok(
            "git",
            "check",
            None,
            json!({ "source": source, "version": { "ref": "v1.0" } })
        ),
        json!([{ "ref": "v1.0", "commit": c[0] }, { "ref": "v1.1", "commit": c[2] }])
    );
    let none = json!({ "uri": repo.uri(), "tag_filter": "v2.*" });
    assert_eq!(
        ok("git", "check", None, json!({ "source": none })),
        json!([])
    );
}

#[test]
fn git_refuses_credentials_and_unknown_fields_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repo::new(dir.path());
    for (field, value) in [
        ("private_key", "KEY"),
        ("password", "pw"),
        ("fetch_tags", "x"),
    ] {
        let mut source = json!({ "uri": repo.uri() });
        source[field] = json!(value);
        let ran = script("git", "check", None, &json!({ "source": source }));
        assert_ne!(ran.status, 0);
        assert!(ran.err.contains(&format!("source.{field}")), "{}", ran.err);
    }
    let ran = script("git", "check", None, &json!({ "source": {} }));
    assert!(
        ran.status != 0 && ran.err.contains("source.uri is required"),
        "{}",
        ran.err
    );
    let dest = dir.path().join("x");
    let bad = json!({ "source": { "uri": repo.uri() }, "params": { "submodules": ["a"] } });
    let ran = script("git", "in", Some(&dest), &bad);
    assert!(
        ran.status != 0 && ran.err.contains("params.submodules"),
        "{}",
        ran.err
    );
}

#[test]
fn git_in_clones_at_the_ref_and_answers_its_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repo::new(dir.path());
    let c = &repo.commits;
    let dest = dir.path().join("get");
    let answer = ok(
        "git",
        "in",
        Some(&dest),
        json!({ "source": { "uri": repo.uri() }, "version": { "ref": c[1] }, "params": { "depth": 1 } }),
    );
    assert_eq!(answer["version"], json!({ "ref": c[1] }));
    let meta: std::collections::BTreeMap<String, String> = answer["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().into(),
                m["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(meta["commit"], c[1]);
    assert_eq!(meta["author"], "Tess");
    assert_eq!(meta["committer"], "Tess");
    assert_eq!(meta["branch"], "main");
    assert_eq!(meta["message"].trim(), "docs");
    assert!(!meta["author_date"].is_empty());
    assert_eq!(
        std::fs::read_to_string(dest.join(".git/ref")).unwrap(),
        format!("{}\n", c[1])
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("docs/b.md")).unwrap(),
        "b"
    );
    assert!(dest.join("src/a.txt").exists() && !dest.join("src/c.txt").exists());
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), c[1]);

    // Without a version: the branch's head.
    let latest = dir.path().join("latest");
    let answer = ok(
        "git",
        "in",
        Some(&latest),
        json!({ "source": { "uri": repo.uri() } }),
    );
    assert_eq!(answer["version"], json!({ "ref": c[2] }));
    assert!(latest.join("src/c.txt").exists());
}

#[test]
fn git_out_pushes_and_rebases_on_a_rejected_push() {
    let dir = tempfile::tempdir().unwrap();
    let mut repo = Repo::new(dir.path());
    let src = dir.path().join("put");
    let source = json!({ "uri": repo.uri(), "branch": "main" });
    ok(
        "git",
        "in",
        Some(&src.join("repo")),
        json!({ "source": source }),
    );
    std::fs::write(src.join("repo/new.txt"), "new").unwrap();
    git(&src.join("repo"), &["add", "."]);
    git(&src.join("repo"), &["commit", "-q", "-m", "from a build"]);
    let pushed = git(&src.join("repo"), &["rev-parse", "HEAD"]);
    let answer = ok(
        "git",
        "out",
        Some(&src),
        json!({ "source": source, "params": { "repository": "repo" } }),
    );
    assert_eq!(answer["version"], json!({ "ref": pushed }));
    let bare = repo.bare.clone();
    let head = |b: &Path| git(b, &["--git-dir", b.to_str().unwrap(), "rev-parse", "main"]);
    assert_eq!(head(&bare), pushed);

    // Someone else pushes meanwhile: without rebase the push is refused,
    // with rebase the commit lands on top.
    let git_dir = bare.to_str().unwrap().to_string();
    git(&repo.work, &["pull", "-q", "--rebase", &git_dir, "main"]);
    repo.commit("other.txt", "o", "elsewhere");
    git(&repo.work, &["push", "-q", &git_dir, "main"]);
    std::fs::write(src.join("repo/second.txt"), "2").unwrap();
    git(&src.join("repo"), &["add", "."]);
    git(
        &src.join("repo"),
        &["commit", "-q", "-m", "second from a build"],
    );
    let refused = script(
        "git",
        "out",
        Some(&src),
        &json!({ "source": source, "params": { "repository": "repo" } }),
    );
    assert_ne!(refused.status, 0);
    assert!(refused.err.contains("rebase"), "{}", refused.err);
    let answer = ok(
        "git",
        "out",
        Some(&src),
        json!({ "source": source, "params": { "repository": "repo", "rebase": true } }),
    );
    let landed = head(&bare);
    assert_eq!(answer["version"], json!({ "ref": landed }));
    let log = git(
        &bare,
        &["--git-dir", &git_dir, "log", "--format=%s", "-3", "main"],
    );
    assert_eq!(log, "second from a build\nelsewhere\nfrom a build");
}

/// Whether this process runs privileged as mock-resource tells it (root
/// mapped to the host's root), with `CAP_SYS_ADMIN` (Gantry's unprivileged
/// containers keep the host's uids): what the scripts run here see.
fn host_is_privileged() -> bool {
    let root = std::fs::read_to_string("/proc/self/uid_map")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().take(2).eq(["0", "0"]));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|c| u64::from_str_radix(c.trim(), 16).unwrap())
        .unwrap_or(0);
    root && caps & (1 << 21) != 0
}

/// `version` without its `privileged` field, which says `"true"` exactly
/// when this process is privileged (mock-resource's check and out).
fn without_privileged(mut version: Value) -> Value {
    let said = version.as_object_mut().unwrap().remove("privileged");
    let expected = host_is_privileged().then(|| json!("true"));
    assert_eq!(said, expected, "{version}");
    version
}

#[test]
fn mock_check_emits_initial_forced_or_given_versions_and_fails_on_request() {
    let check = |source: Value, version: Value| {
        let found = ok(
            "mock",
            "check",
            None,
            json!({ "source": source, "version": version }),
        );
        Value::Array(
            found
                .as_array()
                .unwrap()
                .iter()
                .cloned()
                .map(without_privileged)
                .collect(),
        )
    };
    assert_eq!(
        check(json!({}), Value::Null),
        json!([{ "version": "mock" }])
    );
    assert_eq!(
        check(json!({ "initial_version": "1.0" }), Value::Null),
        json!([{ "version": "1.0" }])
    );
    assert_eq!(
        check(json!({ "no_initial_version": true }), Value::Null),
        json!([])
    );
    assert_eq!(
        check(json!({}), json!({ "version": "7" })),
        json!([{ "version": "7" }])
    );
    assert_eq!(
        check(json!({ "force_version": "f" }), json!({ "version": "7" })),
        json!([{ "version": "f" }])
    );
    let failed = script(
        "mock",
        "check",
        None,
        &json!({ "source": { "check_failure": "the disk is gone", "log": "hello" } }),
    );
    assert_ne!(failed.status, 0);
    assert!(
        failed.err.contains("the disk is gone") && failed.err.contains("hello"),
        "{}",
        failed.err
    );
    let unknown = script(
        "mock",
        "check",
        None,
        &json!({ "source": { "intial_version": "x" } }),
    );
    assert!(
        unknown.status != 0 && unknown.err.contains("source.intial_version"),
        "{}",
        unknown.err
    );
}

#[test]
fn mock_in_writes_the_version_files_and_mirror_marker() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("get");
    let metadata = json!([{ "name": "who", "value": "me" }]);
    let answer = ok(
        "mock",
        "in",
        Some(&dest),
        json!({
            "source": { "create_files": { "a/b.txt": "hi START_VARxEND_VAR", "c.json": { "k": [1] } },
                        "mirror_self": true, "metadata": metadata },
            "version": { "version": "3" },
            "params": { "create_files_via_params": { "p.txt": "q" } }
        }),
    );
    assert_eq!(
        answer,
        json!({ "version": { "version": "3" }, "metadata": metadata })
    );
    let read = |p: &str| std::fs::read_to_string(dest.join(p)).unwrap();
    assert_eq!(read("version"), "3\n");
    assert_eq!(read("privileged"), format!("{}\n", host_is_privileged()));
    assert_eq!(read("a/b.txt"), "hi ((x))");
    assert_eq!(read("c.json"), r#"{"k":[1]}"#);
    assert_eq!(read("p.txt"), "q");
    assert_eq!(read("rootfs/.gantry-mirror-self"), "");
    let image: Value = serde_json::from_str(&read("metadata.json")).unwrap();
    assert_eq!(
        image,
        json!({ "env": ["MIRRORED_VERSION=3"], "user": "root" })
    );

    let escape = script(
        "mock",
        "in",
        Some(&dest),
        &json!({ "source": { "create_files": { "../out": "x" } }, "version": { "version": "1" } }),
    );
    assert!(
        escape.status != 0 && escape.err.contains("../out"),
        "{}",
        escape.err
    );
}

#[test]
fn mock_out_creates_the_version_from_params_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("v"), "from-file").unwrap();
    let out = |params: Value| {
        let mut answer = ok(
            "mock",
            "out",
            Some(dir.path()),
            json!({ "source": {}, "params": params }),
        );
        answer["version"] = without_privileged(answer["version"].take());
        answer
    };
    assert_eq!(
        out(json!({ "version": "9" })),
        json!({ "version": { "version": "9" }, "metadata": [] })
    );
    assert_eq!(
        out(json!({ "file": "v" }))["version"],
        json!({ "version": "from-file" })
    );
    // Neither: the empty version, as mock-resource answers.
    assert_eq!(out(json!({}))["version"], json!({ "version": "" }));
}

/// In a user namespace that does not map the host's root (as an
/// unprivileged Concourse container), `in` writes `privileged` as `false`
/// and `check` leaves its versions unmarked; skipped without `unshare`.
#[test]
fn mock_says_it_is_unprivileged_in_a_user_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("get");
    let path = |name: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("resource_types/mock")
            .join(name)
    };
    let run = |args: &[&std::ffi::OsStr], request: &str| {
        let mut child = Command::new("unshare")
            .arg("--user")
            .arg("sh")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.as_bytes())
            .unwrap();
        Some(child.wait_with_output().unwrap())
    };
    let Some(got) = run(
        &[path("in").as_os_str(), dest.as_os_str()],
        r#"{"source":{},"version":{"version":"1"}}"#,
    ) else {
        eprintln!("skipped: needs unshare");
        return;
    };
    if !got.status.success() && String::from_utf8_lossy(&got.stderr).contains("unshare") {
        eprintln!("skipped: no user namespaces here: {got:?}");
        return;
    }
    assert!(got.status.success(), "{got:?}");
    assert_eq!(
        std::fs::read_to_string(dest.join("privileged")).unwrap(),
        "false\n"
    );
    let checked = run(&[path("check").as_os_str()], r#"{"source":{}}"#).unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let versions: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(versions, json!([{ "version": "mock" }]));
}

/// Seconds since the epoch of an RFC 3339 time the scripts wrote.
fn epoch(time: &Value) -> i64 {
    let out = Command::new("date")
        .args(["-d", time.as_str().unwrap(), "+%s"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn time_check_emits_a_new_time_once_the_interval_has_passed() {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let source = json!({ "interval": "1h" });
    let first = ok(
        "time",
        "check",
        None,
        json!({ "source": source, "version": null }),
    );
    assert_eq!(first.as_array().unwrap().len(), 1, "{first}");
    assert!(epoch(&first[0]["time"]) >= before);
    // Within the interval: just the given version.
    let again = ok(
        "time",
        "check",
        None,
        json!({ "source": source, "version": first[0] }),
    );
    assert_eq!(again, json!([first[0]]));
    // Past it: the given version, then now.
    let old = json!({ "time": "2020-01-01T00:00:00Z" });
    let later = ok(
        "time",
        "check",
        None,
        json!({ "source": source, "version": old }),
    );
    assert_eq!(later[0], old);
    assert!(epoch(&later[1]["time"]) >= before, "{later}");

    let dir = tempfile::tempdir().unwrap();
    let answer = ok(
        "time",
        "in",
        Some(dir.path()),
        json!({ "source": source, "version": old }),
    );
    assert_eq!(answer["version"], old);
    let timestamp = std::fs::read_to_string(dir.path().join("timestamp")).unwrap();
    assert_eq!(timestamp, "2020-01-01 00:00:00 +0000 UTC");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("epoch")).unwrap(),
        "1577836800"
    );
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("input")).unwrap()).unwrap();
    assert_eq!(input["version"], old);
    let put = ok("time", "out", Some(dir.path()), json!({ "source": source }));
    assert!(epoch(&put["version"]["time"]) >= before);

    for (field, value) in [("start", "1PM"), ("interval", "often")] {
        let ran = script(
            "time",
            "check",
            None,
            &json!({ "source": { field: value } }),
        );
        assert!(
            ran.status != 0 && ran.err.contains(&format!("source.{field}")),
            "{}",
            ran.err
        );
    }
}
