//! Shared support of the end-to-end tests: the real `gantry` binary, a real
//! database (SQLite, or a fresh PostgreSQL database per test), real worker
//! processes on loopback ports, and waits on conditions with deadlines.

#![allow(dead_code)]

pub mod disk_db;
pub mod git;
pub mod job_suite;
pub mod nodes;
pub mod oci;
pub mod otlp;
pub mod pipelines;
pub mod registry;
pub mod rusage;
pub mod s3;
pub mod secrets;
pub mod workers;

pub use secrets::{dump_database, set_secret, sha256_hex};

pub use workers::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A finished command's stdout and stderr, as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` with `stdin` written to its standard input; its output.
pub fn output_with_stdin(mut cmd: Command, stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The binary under test.
pub fn gantry() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gantry"));
    // No trace export a test does not ask for (`tests/traces.rs` does).
    c.env_remove("GANTRY_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("RUST_LOG", "info");
    c
}

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    /// SQLite in the data dir (the default).
    Sqlite,
    /// A fresh database on the real PostgreSQL server.
    Postgres,
}

/// A database for one test; a PostgreSQL one is dropped at the end.
pub struct TestDb {
    /// `--database-url` to pass, `None` for the SQLite default.
    pub url: Option<String>,
    /// Name of the PostgreSQL database to drop.
    pg_name: Option<String>,
    /// The key that seals the database's secrets, which every web node
    /// on it must share (`--encryption-key-file`): none on SQLite (one
    /// node, its key in its data dir).
    pub key_file: Option<PathBuf>,
}

/// The shared key file of the web nodes on PostgreSQL database `name`
/// (made by the first node that starts).
fn shared_key_file(name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    std::env::temp_dir()
        .join("gantry-e2e-keys")
        .join(format!("{safe}.key"))
}

/// The PostgreSQL server the tests use (`GANTRY_TEST_PG`, default the local one).
fn pg_base() -> String {
    std::env::var("GANTRY_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn psql(sql: &str) -> Output {
    Command::new("psql")
        .arg(format!("{}/postgres", pg_base()))
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .output()
        .expect("psql runs (the test script installs postgresql-client)")
}

impl TestDb {
    /// A new database of the given kind. PostgreSQL must be up: the test
    /// script starts it; a test does not skip when it is down.
    pub fn new(kind: DbKind) -> TestDb {
        match kind {
            DbKind::Sqlite => TestDb {
                url: None,
                pg_name: None,
                key_file: None,
            },
            DbKind::Postgres => {
                let name = format!("gantry_e2e_{}", uuid::Uuid::new_v4().simple());
                let out = psql(&format!("CREATE DATABASE {name}"));
                assert!(
                    out.status.success(),
                    "creating PostgreSQL database failed (is PostgreSQL running?): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                // A test's database need not survive a crash of PostgreSQL:
                // commits do not wait for the WAL's fsync (what the tests
                // kill is Gantry, never the database server).
                let out = psql(&format!(
                    "ALTER DATABASE {name} SET synchronous_commit = off"
                ));
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                TestDb {
                    url: Some(format!("{}/{name}", pg_base())),
                    key_file: Some(shared_key_file(&name)),
                    pg_name: Some(name),
                }
            }
        }
    }
}

impl TestDb {
    /// The text of the one value `sql` answers on this PostgreSQL
    /// database (psql's unaligned output, trimmed).
    pub fn query_value(&self, sql: &str) -> String {
        let url = self.url.as_deref().expect("a PostgreSQL database");
        let out = Command::new("psql")
            .arg(url)
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-t", "-A", "-c", sql])
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A database the test manages itself (not dropped at the end).
    pub fn at(url: String) -> TestDb {
        TestDb {
            key_file: Some(shared_key_file(&url)),
            url: Some(url),
            pg_name: None,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = &self.pg_name {
            let _ = psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            if let Some(key) = &self.key_file {
                let _ = std::fs::remove_file(key);
            }
        }
    }
}

/// A server process (web, quickstart or worker) killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Its URL, when it serves the API.
    pub url: String,
    /// Its log file.
    pub log: PathBuf,
}

impl Server {
    /// Starts `cmd`, waits for it to print `prefix` followed by its URL on stdout.
    pub fn start(mut cmd: Command, prefix: &str, log: PathBuf) -> Server {
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("gantry starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let prefix = prefix.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(i) = line.find(&prefix) {
                    let _ = tx.send(line[i + prefix.len()..].trim().to_string());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "server did not announce its URL; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        Server { child, url, log }
    }

    /// A server that announces nothing (a worker).
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Server {
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("gantry starts");
        Server {
            child,
            url: String::new(),
            log,
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills the process with SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

/// Waits until `f` returns `Some`, polling, or panics with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    wait_until(what, timeout, || f().ok_or_else(String::new))
}

/// [`wait_for`] on a check that says why it does not hold yet: on timeout,
/// the panic names the last reason.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    // Soon at first, then less often: a long wait polls a few times a
    // second, not ten (each poll is requests, and often a CLI process, that
    // take CPU from what the test waits for on a loaded machine).
    let mut pause = Duration::from_millis(25);
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            if last.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}; last: {last}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Runs a client command against a server and returns its output.
pub fn client(url: &str, args: &[&str]) -> Output {
    gantry()
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .expect("gantry client runs")
}

/// Runs a client command with `token` (`GANTRY_TOKEN`) against a server.
pub fn client_as(url: &str, token: &str, args: &[&str]) -> Output {
    gantry()
        .env("GANTRY_TOKEN", token)
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .expect("gantry client runs")
}

/// Runs `gantry run ARGS` in `dir` against `url`.
pub fn gantry_run(url: &str, dir: &Path, args: &[&str]) -> Output {
    gantry()
        .current_dir(dir)
        .args(["--url", url, "run"])
        .args(args)
        .output()
        .expect("gantry runs")
}

/// A quickstart on runc (detected, unless `GANTRY_REQUIRE_RUNC` asks for
/// it, which is then checked).
pub fn quickstart_runc(dir: &Path, db: &TestDb) -> Server {
    quickstart_runc_with(dir, db, &[])
}

/// [`quickstart_runc`] with `extra` arguments.
pub fn quickstart_runc_with(dir: &Path, db: &TestDb, extra: &[&str]) -> Server {
    let required = std::env::var_os("GANTRY_REQUIRE_RUNC").is_some();
    let mut args = extra.to_vec();
    if required {
        args.extend(["--backend", "runc"]);
    }
    let server = quickstart(dir, db, &args);
    if required {
        assert_eq!(workers_json(&server.url)[0]["backend"], "runc");
    }
    server
}

/// A quickstart (web + embedded worker) on an ephemeral port.
pub fn quickstart(dir: &Path, db: &TestDb, extra: &[&str]) -> Server {
    let mut cmd = gantry();
    // An open API unless the test gives credentials of its own (the
    // default quickstart's admin is `tests/people.rs`'s).
    cmd.arg("quickstart")
        .arg("--open-api")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(extra);
    // Garbage collection every second (its rules and its worker's sweeps).
    if !extra.contains(&"--gc-interval") {
        cmd.args(["--gc-interval", "1"]);
    }
    if let Some(url) = &db.url {
        cmd.arg("--database-url").arg(url);
    }
    if let Some(key) = &db.key_file {
        cmd.arg("--encryption-key-file").arg(key);
    }
    let s = Server::start(cmd, "API on ", dir.join("quickstart.log"));
    wait_running(&s.url, 1);
    s
}

/// Writes a file, creating parent directories.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, contents).expect("write");
}

/// Deterministic pseudo-random bytes (xorshift), so big files are not all zeros.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A tar stream of one file `f` holding `data`.
pub fn one_file_tar(data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "f", data).unwrap();
    b.into_inner().unwrap()
}

/// Every regular file under `dir` with its contents, by relative path.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let p = e.path();
            if e.file_type().expect("type").is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// The one line a failing CLI printed on stderr.
pub fn one_error_line(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure, got success: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(
        err.lines().count(),
        1,
        "expected one line on stderr, got:\n{err}"
    );
    err
}

/// A `gantry web` on an ephemeral port, with an optional TOML config.
pub fn start_web(dir: &Path, db: &TestDb, config: &str) -> Server {
    start_web_at(dir, db, config, 0, "web.log")
}

/// A free loopback TCP port (for a server restarted on the same address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A `gantry web` on `port` (0: an ephemeral one) with an optional TOML
/// config, its data in `dir/web`, logging to `dir/LOG`.
pub fn start_web_at(dir: &Path, db: &TestDb, config: &str, port: u16, log: &str) -> Server {
    Server::start(web_command(dir, db, config, port), "API on ", dir.join(log))
}

/// The `gantry web` command [`start_web_at`] runs.
pub fn web_command(dir: &Path, db: &TestDb, config: &str, port: u16) -> Command {
    let cfg = dir.join("web.toml");
    write(&cfg, config);
    let mut cmd = gantry();
    cmd.args([
        "web",
        "--open-api",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .args(["--registration-key", "k3y"])
    .arg("--config")
    .arg(&cfg)
    .arg("--data-dir")
    .arg(dir.join("web"))
    // The garbage collector's rules run every second.
    .args(["--gc-interval", "1"]);
    if let Some(url) = &db.url {
        cmd.arg("--database-url").arg(url);
    }
    if let Some(key) = &db.key_file {
        cmd.arg("--encryption-key-file").arg(key);
    }
    cmd
}

/// The most of `spans` (start, end) that overlap at any instant.
pub fn most_at_once(spans: &[(u128, u128)]) -> i32 {
    let mut edges: Vec<(u128, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_by_key(|(t, d)| (*t, *d));
    let (mut now, mut most) = (0, 0);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most
}

/// The artifact id of build `build`'s first output, from its events.
pub fn output_artifact(url: &str, build: i64) -> String {
    let events = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("accept", "application/x-ndjson")
        .send()
        .unwrap()
        .text()
        .unwrap();
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"]["type"] == "output")
        .and_then(|e| e["event"]["artifact_id"].as_str().map(str::to_string))
        .expect("an output event")
}

/// `gantry builds --json`.
pub fn builds_json(url: &str) -> Vec<serde_json::Value> {
    let out = client(url, &["builds", "--json"]);
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Starts `gantry execute` in the background, its output captured to files.
pub fn spawn_execute(url: &str, dir: &Path, tag: &str, args: &[&str]) -> Child {
    spawn_client(url, dir, "execute", tag, args)
}

/// Starts `gantry run` in the background in `dir`, its output captured to
/// files.
pub fn spawn_run(url: &str, dir: &Path, tag: &str, args: &[&str]) -> Child {
    let mut child = gantry();
    child.current_dir(dir);
    spawn_with(child, url, dir, "run", tag, args)
}

/// Starts the client verb `verb` in the background, its stdout and stderr
/// captured to `dir/TAG.out` and `dir/TAG.err`.
fn spawn_client(url: &str, dir: &Path, verb: &str, tag: &str, args: &[&str]) -> Child {
    spawn_with(gantry(), url, dir, verb, tag, args)
}

fn spawn_with(
    mut cmd: Command,
    url: &str,
    dir: &Path,
    verb: &str,
    tag: &str,
    args: &[&str],
) -> Child {
    cmd.arg("--url")
        .arg(url)
        .arg(verb)
        .args(args)
        .stdout(std::fs::File::create(dir.join(format!("{tag}.out"))).expect("out file"))
        .stderr(std::fs::File::create(dir.join(format!("{tag}.err"))).expect("err file"))
        .spawn()
        .unwrap_or_else(|e| panic!("gantry {verb} starts: {e}"))
}

/// The build id `gantry run` announced on stderr (`build: N`).
pub fn run_build(err_file: &Path) -> Option<i64> {
    run_build_text(&std::fs::read_to_string(err_file).ok()?)
}

/// The build id in `build: N` of `gantry run`'s stderr text.
pub fn run_build_text(stderr: &str) -> Option<i64> {
    build_after(stderr, "build: ")
}

/// The build id on the first line of `text` that starts with `prefix`.
fn build_after(text: &str, prefix: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.trim().parse().ok())
}

/// Waits for a child with a deadline; kills it on timeout.
pub fn wait_child(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The build id `gantry execute` announced on stderr (`executing build N`).
pub fn announced_build(err_file: &Path) -> Option<i64> {
    announced_build_text(&std::fs::read_to_string(err_file).ok()?)
}

/// The last line a failing CLI printed on stderr (after progress lines such
/// as `executing build N`), which must start with `error:`.
pub fn failure_line(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure, got success: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("error: "),
        "expected an error line last, got:\n{err}"
    );
    last
}

/// The build id in `executing build N` of a CLI's stderr text.
pub fn announced_build_text(stderr: &str) -> Option<i64> {
    build_after(stderr, "executing build ")
}

/// Whether runc containers can run here (root and runc installed). Without
/// them a runc test is skipped, except when `GANTRY_REQUIRE_RUNC` is set (the
/// test script sets it), where skipping fails the test.
pub fn runc_runs_here() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && Path::new("/usr/sbin/runc").exists() {
        return true;
    }
    assert!(
        std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
        "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs root and /usr/sbin/runc"
    );
    eprintln!("skipped: needs root and /usr/sbin/runc");
    false
}

/// Mount points of the benchmarks' temporary directories.
pub fn bench_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("gantry-bench-"))
        .map(str::to_string)
        .collect()
}

/// Runs `gantry bench ARGS` with its temporary files under `tmp` and its
/// workers sweeping every second (so a run spans several sweeps); its
/// figures, the run having succeeded.
pub fn run_bench(tmp: &Path, args: &[&str]) -> Figures {
    let out = gantry()
        .env("TMPDIR", tmp)
        .env("GANTRY_WORKER_SWEEP_INTERVAL", "1")
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    Figures::of(&out)
}

/// A benchmark left no mount behind and nothing in its temporary directory
/// `tmp` (its `TMPDIR`).
pub fn assert_bench_left_nothing(tmp: &Path) {
    assert_eq!(bench_mounts(), Vec::<String>::new());
    let left: Vec<_> = std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Waits until the web node at `url` lists no container and no volume.
/// Waits until no container is left and exactly `n` volumes, each owned by
/// no build (image volumes, task caches), are.
pub fn wait_only_unowned_volumes(url: &str, n: usize, timeout: Duration) {
    wait_for(
        &format!("no containers and {n} volumes of no build"),
        timeout,
        || {
            let rows = |what: &str| -> Option<Vec<serde_json::Value>> {
                let out = client(url, &[what, "--json"]);
                serde_json::from_slice::<serde_json::Value>(&out.stdout)
                    .ok()?
                    .as_array()
                    .cloned()
            };
            let volumes = rows("volumes")?;
            let unowned = volumes.iter().all(|v| v["build_id"].is_null());
            (rows("containers")?.is_empty() && unowned && volumes.len() == n).then_some(())
        },
    );
}

pub fn wait_no_handles(url: &str, timeout: Duration) {
    wait_for("no containers or volumes left", timeout, || {
        let listed = |what: &str| -> Option<bool> {
            let rows: serde_json::Value =
                serde_json::from_slice(&client(url, &[what, "--json"]).stdout).ok()?;
            Some(rows.as_array()?.is_empty())
        };
        (listed("containers")? && listed("volumes")?).then_some(())
    });
}

/// A benchmark's `name: value` lines, each line checked to have that shape.
pub struct Figures {
    /// The benchmark's whole stdout, for failure messages.
    pub stdout: String,
    /// Each figure by name.
    values: std::collections::HashMap<String, String>,
}

impl Figures {
    /// Reads a benchmark's output; panics (with its stderr) if it failed.
    pub fn of(out: &Output) -> Figures {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let values = stdout
            .lines()
            .map(|l| {
                let (k, v) = l
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("not `name: value`: {l:?}"));
                (k.to_string(), v.to_string())
            })
            .collect();
        Figures { stdout, values }
    }

    /// The figure `name` as printed, if there is one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Every one of `names` is a positive number.
    pub fn assert_positive(&self, names: &[&str]) {
        for name in names {
            assert!(
                self.number(name) > 0.0,
                "{name} is not positive:\n{}",
                self.stdout
            );
        }
    }

    /// The figure `ratio` is `over / under`, within what printing each of
    /// the three rounded away (half a unit of its last printed digit: a
    /// small figure printed to 0.1 carries a large relative error).
    pub fn assert_ratio(&self, ratio: &str, over: &str, under: &str) {
        let (o, u) = (self.number(over), self.number(under));
        let want = o / u;
        let (eo, eu) = (self.rounding(over) / o, self.rounding(under) / u);
        // (o ± eo·o) / (u ∓ eu·u), at its widest.
        let spread = want * ((1.0 + eo) / (1.0 - eu) - 1.0);
        let tolerance = spread + self.rounding(ratio) + 1e-9;
        assert!(
            (self.number(ratio) - want).abs() <= tolerance,
            "{ratio} is not {over} / {under} (within {tolerance}):\n{}",
            self.stdout
        );
    }

    /// Half a unit of the last digit figure `name` is printed with.
    fn rounding(&self, name: &str) -> f64 {
        let text = self.get(name).unwrap_or_default();
        let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
        0.5 * 10f64.powi(-(decimals as i32))
    }

    /// The figure `name` as a number; panics naming it when absent or not one.
    pub fn number(&self, name: &str) -> f64 {
        let stdout = &self.stdout;
        self.get(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{stdout}"))
            .parse()
            .unwrap_or_else(|e| panic!("{name} is not a number ({e}):\n{stdout}"))
    }
}

/// `/readyz`'s status and body, or `None` when the node does not answer.
pub fn readyz(url: &str) -> Option<(u16, String)> {
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?
        .get(format!("{url}/readyz"))
        .send()
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().ok()?))
}

/// The value of the sample `series` (a metric's name, with its labels if
/// it has any) on the web node's `/metrics`.
pub fn metric(url: &str, series: &str) -> f64 {
    let text = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .unwrap_or_else(|| panic!("{series} in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The `--backend` flags of a worker under test: runc when the test script
/// requires it (`GANTRY_REQUIRE_RUNC`), the worker's default otherwise.
pub fn worker_backend() -> &'static [&'static str] {
    if std::env::var_os("GANTRY_REQUIRE_RUNC").is_some() {
        &["--backend", "runc"]
    } else {
        &[]
    }
}

/// A task that says it is ready, then runs until a file `finish` exists in
/// its working directory, the build directory (a hijacked process creates
/// it: `touch tmp/build/ID/finish` from `/`), for at most a minute.
pub const WAITING_TASK: &str = r#"
platform: linux
run:
  path: sh
  args:
  - -c
  - |
    echo ready
    i=0
    while [ ! -e finish ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
    echo finished
"#;

/// A command's stdout then stderr, as one text.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
