//! End to end on PostgreSQL: when the database stops, the web node's
//! `/readyz` turns 503 within 10 s; when it is back, the same web node
//! process turns ready again and runs a build, without a restart.
//!
//! The test runs its own PostgreSQL cluster (initdb into a temporary
//! directory, on a free port), so stopping it does not disturb the shared
//! server other tests use.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// A private PostgreSQL cluster owned by user `postgres`, stopped when
/// dropped.
struct PrivatePg {
    /// Holds the data directory (`data/`), the socket and the log.
    dir: tempfile::TempDir,
    /// `bin/` of the PostgreSQL installation.
    bin: PathBuf,
    /// The TCP port on 127.0.0.1.
    port: u16,
}

impl PrivatePg {
    /// Creates the cluster (trust authentication) and starts it.
    fn start() -> PrivatePg {
        let bin = pg_bin();
        let dir = tempfile::tempdir().expect("tempdir");
        let owned = Command::new("chown")
            .arg("postgres:")
            .arg(dir.path())
            .status()
            .expect("chown runs");
        assert!(owned.success(), "chown postgres {}", dir.path().display());
        let pg = PrivatePg {
            dir,
            bin,
            port: free_port(),
        };
        let out = pg.as_postgres(
            "initdb",
            &[
                "-D",
                pg.data().to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        assert!(out.status.success(), "initdb: {}", texts(&out));
        pg.run();
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `postgres://` URL of the cluster's `postgres` database.
    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a PostgreSQL program as user `postgres` (initdb and the server
    /// refuse root).
    fn as_postgres(&self, program: &str, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(program))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("runuser {program}: {e}"))
    }

    /// Starts the server and waits until it accepts connections.
    fn run(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let out = self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            texts(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server (`-m fast`: open connections are ended).
    fn stop(&self, mode: &str) -> Output {
        self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                self.data().to_str().unwrap(),
                "-m",
                mode,
                "-w",
                "stop",
            ],
        )
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        // Already stopped is fine.
        let _ = self.stop("immediate");
    }
}

/// `bin/` of the newest PostgreSQL installed under /usr/lib/postgresql.
fn pg_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server is installed (/usr/lib/postgresql)")
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("an initdb under /usr/lib/postgresql/*/bin")
        .1
}

fn texts(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Now, in unix milliseconds (the web node's clock: the same machine).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs a one-off task that prints `word`; panics with the logs if it fails.
fn build_prints(web: &Server, worker: &Server, dir: &Path, word: &str) {
    let task = dir.join(format!("{word}.yml"));
    write(
        &task,
        format!("platform: linux\nrun:\n  path: sh\n  args: [-c, 'echo {word}']\n"),
    );
    let out = client(&web.url, &["execute", "-c", task.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "build failed: {}\nweb log:\n{}\nworker log:\n{}",
        texts(&out),
        web.log_text(),
        worker.log_text()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{word}\n"));
}

#[test]
fn readiness_follows_the_database_and_the_node_recovers_by_itself() {
    if !runc_runs_here() {
        return;
    }
    let pg = PrivatePg::start();
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(pg.url());
    let mut web = start_web(dir.path(), &db, "");
    let pid = web.child.id();
    let worker = start_worker(dir.path(), &web.url, "w", worker_backend());
    wait_running(&web.url, 1);
    assert_eq!(readyz(&web.url).map(|r| r.0), Some(200));
    build_prints(&web, &worker, dir.path(), "before");

    let out = pg.stop("fast");
    assert!(out.status.success(), "pg_ctl stop: {}", texts(&out));
    let stopped = Instant::now();
    let (status, body) = wait_for("/readyz to turn 503", Duration::from_secs(10), || {
        readyz(&web.url).filter(|(status, _)| *status != 200)
    });
    let red_after = stopped.elapsed();
    assert!(
        red_after < Duration::from_secs(10),
        "red after {red_after:?}"
    );
    assert_eq!(status, 503, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    let why = body["error"].as_str().unwrap_or_default();
    assert!(why.contains("database"), "{body}");
    // Still alive, just not ready.
    let health = reqwest::blocking::get(format!("{}/healthz", web.url)).unwrap();
    assert_eq!(health.status().as_u16(), 200);
    eprintln!("/readyz turned 503 {red_after:?} after the database stopped: {why}");

    pg.run();
    let restarted = Instant::now();
    let back_ms = unix_ms();
    wait_for("/readyz to turn 200 again", Duration::from_secs(60), || {
        readyz(&web.url).filter(|(status, _)| *status == 200)
    });
    eprintln!(
        "/readyz turned 200 {:?} after the database was back",
        restarted.elapsed()
    );
    // The worker's heartbeats may have failed meanwhile (it may be marked
    // stalled, now or a moment later): wait for one taken after the
    // database came back, which starts its TTL afresh.
    wait_for(
        "a heartbeat of worker w after the database came back",
        Duration::from_secs(60),
        || {
            let w = worker_json(&web.url, "w")?;
            (w["state"] == "running" && w["last_heartbeat"].as_i64()? > back_ms).then_some(())
        },
    );
    build_prints(&web, &worker, dir.path(), "after");
    // The same web node process, never restarted.
    assert!(
        web.child.try_wait().unwrap().is_none(),
        "the web node exited:\n{}",
        web.log_text()
    );
    assert_eq!(web.child.id(), pid);
    drop(worker);
    drop(web);
}
