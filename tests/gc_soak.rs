//! The garbage collector's soak test, end to end: a real web node and three
//! real runc workers (each sweeping every second) run 200 builds — job
//! builds with a resource `get`, task caches, outputs that move between
//! workers, a job that fails, and one-off builds with uploaded inputs and
//! downloaded outputs — some of them aborted at random. Meanwhile one worker
//! is killed with SIGKILL twice: restarted on its work dir the first time,
//! on a wiped machine (containers killed, mounts gone, work dir removed,
//! the worker pruned by force, as its name is pinned to the identity the
//! wipe lost) the second; and the web node is killed with SIGKILL and
//! restarted.
//!
//! Then, once it settles (a bounded wait on the conditions themselves):
//! for every worker the containers and volumes on its disk (and runc's
//! containers) are exactly its rows in the database, no row is left
//! `creating` or `destroying`, the web node's artifact store holds exactly
//! the artifacts the database says it does, and what the latest (failed)
//! build of the failing job owns is all still there. It prints the counts
//! it compared. On SQLite and on PostgreSQL.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::disk_db::*;
use common::*;

/// How many builds the soak runs (`GANTRY_SOAK_BUILDS` to change it).
fn builds_to_run() -> usize {
    std::env::var("GANTRY_SOAK_BUILDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// Builds in flight at once.
const IN_FLIGHT: usize = 6;

const WORKERS: [&str; 3] = ["w1", "w2", "w3"];

/// The web node's GC settings: every rule each second, short ages so that
/// the soak settles within its deadline; caches keep their defaults.
const WEB_CONFIG: &str = "[web.gc]\ninterval_secs = 1\nmissing_grace_secs = 2\n\
creating_limit_secs = 3\nbuild_artifacts_secs = 1\nunowned_artifact_secs = 5\n";

const PIPELINE: &str = r#"
resources:
- name: src
  type: mock
  source:
    initial_version: v1
    create_files: {data.txt: "soak data"}
jobs:
- name: make
  plan:
  - get: src
  - task: produce
    config:
      platform: linux
      inputs: [{name: src}]
      outputs: [{name: out}]
      caches: [{path: cache}]
      run:
        path: sh
        args: [-ec, 'cat src/data.txt > out/f; echo x >> cache/seen; sleep ((pause))']
  - task: consume
    config:
      platform: linux
      inputs: [{name: out}]
      run:
        path: sh
        args: [-ec, 'test "$(cat out/f)" = "soak data"']
- name: flaky
  plan:
  - get: src
  - task: fail
    config:
      platform: linux
      inputs: [{name: src}]
      outputs: [{name: left}]
      caches: [{path: c}]
      run:
        path: sh
        args: [-ec, 'echo partial > left/f; sleep ((pause)); exit 1']
"#;

const ONE_OFF: &str = "platform: linux\ninputs: [{name: in}]\noutputs: [{name: out}]\n\
run:\n  path: sh\n  args: [-ec, 'cp in/f out/f; sleep 0.2']\n";

/// A deterministic pseudo-random sequence (xorshift), so a failing soak can
/// be run again the same way.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What kind of build a client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Make,
    Flaky,
    OneOff,
}

/// A client following one build.
struct InFlight {
    child: Child,
    tag: String,
    kind: Kind,
    /// When to abort it, if it is to be aborted.
    abort_at: Option<Instant>,
    started: Instant,
}

/// The whole fleet under test.
struct Soak<'a> {
    dir: PathBuf,
    db: &'a TestDb,
    port: u16,
    web: Server,
    workers: BTreeMap<&'static str, Server>,
    /// Worker starts so far (each run of a worker logs to its own file).
    restarts: usize,
}

impl Soak<'_> {
    fn url(&self) -> String {
        self.web.url.clone()
    }

    fn work_dir(&self, worker: &str) -> PathBuf {
        self.dir.join(worker)
    }

    fn start_worker(&mut self, name: &'static str) {
        // Each run of a worker logs to its own file.
        self.restarts += 1;
        let log = self.dir.join(format!("{name}.log"));
        if log.exists() {
            let _ = std::fs::rename(&log, self.dir.join(format!("{name}.{}.log", self.restarts)));
        }
        let w = start_worker(&self.dir, &self.web.url, name, worker_backend());
        self.workers.insert(name, w);
    }

    /// SIGKILLs a worker; with `wipe`, its machine is wiped too (its
    /// containers killed, its mounts gone, its work dir removed) before it
    /// starts again.
    fn kill_and_restart_worker(&mut self, name: &'static str, wipe: bool) {
        self.workers.get_mut(name).expect("worker").kill();
        if wipe {
            wipe_machine(&self.work_dir(name));
            // The wiped machine lost the identity its name is pinned to:
            // the admin prunes the worker so it may register again.
            let out = client(&self.url(), &["prune-worker", name, "--force"]);
            assert!(
                out.status.success(),
                "prune-worker {name} --force: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.start_worker(name);
        wait_worker_state(&self.url(), name, "running", Duration::from_secs(60));
    }

    fn kill_and_restart_web(&mut self) {
        self.web.kill();
        self.web = start_web_at(&self.dir, self.db, WEB_CONFIG, self.port, "web2.log");
        wait_running(&self.url(), WORKERS.len());
    }

    /// Starts a client running a build of `kind`, numbered `n`.
    fn launch(&self, n: usize, kind: Kind, rng: &mut Rng) -> Child {
        let tag = format!("b{n}");
        let pause = format!("pause=0.{}", rng.below(8) + 1);
        let pipeline = self.dir.join("pipeline.yml");
        let url = self.url();
        match kind {
            Kind::Make | Kind::Flaky => {
                let job = if kind == Kind::Make { "make" } else { "flaky" };
                let args = ["-p", pipeline.to_str().unwrap(), "-j", job, "-v", &pause];
                spawn_run(&url, &self.dir, &tag, &args)
            }
            Kind::OneOff => {
                let input = self.dir.join("inputs").join(&tag);
                write(&input.join("f"), format!("input of {tag}\n"));
                let out = self.dir.join("outputs").join(&tag);
                let task = self.dir.join("one-off.yml");
                let args = [
                    "-c",
                    task.to_str().unwrap(),
                    "-i",
                    &format!("in={}", input.display()),
                    "-o",
                    &format!("out={}", out.display()),
                ];
                spawn_execute(&url, &self.dir, &tag, &args)
            }
        }
    }

    /// The build id the client `tag` announced, if it did yet.
    fn build_of(&self, tag: &str, kind: Kind) -> Option<i64> {
        let err = self.dir.join(format!("{tag}.err"));
        match kind {
            Kind::OneOff => announced_build(&err),
            _ => run_build(&err),
        }
    }
}

/// What a wiped machine no longer has: runc's containers (killed), the
/// mounts under the work dir, the work dir itself.
fn wipe_machine(work: &Path) {
    let runc_root = work.join("runc");
    for id in runc_ids(work) {
        let out = Command::new("runc")
            .arg("--root")
            .arg(&runc_root)
            .args(["delete", "--force", &id])
            .output()
            .expect("runc runs");
        // One a `runc` of the killed worker deleted meanwhile is gone too.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || runc_lost_a_container(&stderr),
            "runc delete {id}: {stderr}"
        );
    }
    let mut mounts = mounts_under(work);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let c = std::ffi::CString::new(m.as_str()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(r, 0, "umount {m}: {}", std::io::Error::last_os_error());
    }
    std::fs::remove_dir_all(work).expect("removing the work dir");
}

/// Each worker of the soak with its work dir.
fn soak_workers(soak: &Soak) -> Vec<(String, PathBuf)> {
    WORKERS
        .iter()
        .map(|w| (w.to_string(), soak.work_dir(w)))
        .collect()
}

/// What a build owns: its containers, volumes and artifacts.
fn owned_by(view: &DbView, build: i64) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let handles = view
        .rows(&format!(
            "SELECT handle, state FROM containers WHERE build_id = {build} UNION ALL \
             SELECT handle, state FROM volumes WHERE build_id = {build}"
        ))
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone()))
        .collect();
    let artifacts = view
        .rows(&format!(
            "SELECT id FROM artifacts WHERE build_id = {build}"
        ))
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    (handles, artifacts)
}

fn soak(kind: DbKind) {
    if !runc_runs_here() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let db = TestDb::new(kind);
    write(&dir.join("pipeline.yml"), PIPELINE);
    write(&dir.join("one-off.yml"), ONE_OFF);
    let port = free_port();
    let web = start_web_at(&dir, &db, WEB_CONFIG, port, "web1.log");
    let mut soak = Soak {
        dir: dir.clone(),
        db: &db,
        port,
        web,
        workers: BTreeMap::new(),
        restarts: 0,
    };
    for w in WORKERS {
        soak.start_worker(w);
    }
    wait_running(&soak.url(), WORKERS.len());

    let total = builds_to_run();
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut flying: Vec<InFlight> = Vec::new();
    let mut launched = 0;
    let mut exits: BTreeMap<&str, usize> = BTreeMap::new();
    let mut aborts_sent = 0;
    let began = Instant::now();
    // The faults, each once, at a quarter, half and three quarters.
    let faults = [total / 4, total / 2, 3 * total / 4];
    let mut faults_done = 0;
    while launched < total || !flying.is_empty() {
        if faults_done < faults.len() && launched >= faults[faults_done] {
            match faults_done {
                0 => soak.kill_and_restart_worker("w2", false),
                1 => soak.kill_and_restart_worker("w2", true),
                _ => soak.kill_and_restart_web(),
            }
            faults_done += 1;
        }
        while launched < total && flying.len() < IN_FLIGHT {
            let kind = match rng.below(5) {
                0 | 1 => Kind::Make,
                2 => Kind::Flaky,
                _ => Kind::OneOff,
            };
            let abort_at = (rng.below(100) < 15)
                .then(|| Instant::now() + Duration::from_millis(50 + rng.below(750)));
            let child = soak.launch(launched, kind, &mut rng);
            flying.push(InFlight {
                child,
                tag: format!("b{launched}"),
                kind,
                abort_at,
                started: Instant::now(),
            });
            launched += 1;
        }
        let mut still = Vec::new();
        for mut f in flying.drain(..) {
            if let Some(at) = f.abort_at {
                if Instant::now() >= at {
                    if let Some(build) = soak.build_of(&f.tag, f.kind) {
                        // It may have ended meanwhile: that is refused, and fine.
                        let _ = client(&soak.url(), &["abort-build", "-b", &build.to_string()]);
                        aborts_sent += 1;
                        f.abort_at = None;
                    }
                }
            }
            match f.child.try_wait().expect("try_wait") {
                Some(status) => {
                    let key = if status.success() {
                        "exit 0"
                    } else {
                        "exit non-zero"
                    };
                    *exits.entry(key).or_default() += 1;
                }
                None => {
                    assert!(
                        f.started.elapsed() < Duration::from_secs(300),
                        "client {} ({:?}) still running after 300 s; stderr:\n{}",
                        f.tag,
                        f.kind,
                        std::fs::read_to_string(dir.join(format!("{}.err", f.tag)))
                            .unwrap_or_default()
                    );
                    still.push(f);
                }
            }
        }
        flying = still;
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = soak.url();
    // Builds the web node was running when it was killed end on their own
    // (taken over, or errored); wait for them, with a deadline.
    let view = DbView::open(&dir, &db);
    wait_for("every build to end", Duration::from_secs(180), || {
        let running = view.rows(
            "SELECT CAST(COUNT(*) AS TEXT) FROM builds WHERE status IN ('pending', 'started')",
        );
        (running[0][0] == "0").then_some(())
    });
    // The last build of `flaky` fails after every fault: what it owns must
    // survive the collector.
    let out = gantry_run(
        &url,
        &dir,
        &["-p", "pipeline.yml", "-j", "flaky", "-v", "pause=0.1"],
    );
    assert!(!out.status.success(), "flaky succeeded");
    let last_failed = run_build_text(&String::from_utf8_lossy(&out.stderr)).expect("build id");
    let status = view.rows(&format!(
        "SELECT status FROM builds WHERE id = {last_failed}"
    ));
    assert_eq!(status[0][0], "failed");
    let (kept_handles, kept_artifacts) = owned_by(&view, last_failed);
    assert!(
        kept_handles.len() >= 2 && !kept_artifacts.is_empty(),
        "the failed build owns {kept_handles:?} and {kept_artifacts:?}"
    );
    assert!(
        kept_handles.values().all(|s| s == "created"),
        "{kept_handles:?}"
    );
    let soak_took = began.elapsed();

    // Settle: every difference goes within the deadline.
    let settle_began = Instant::now();
    let deadline = settle_began + Duration::from_secs(180);
    // Settled: the disks equal the database, and `/metrics` counts the
    // rows by state as the database has them, nothing creating or
    // destroying (read together: a late collection may mark a row between
    // two reads, and the next round must agree again).
    let metrics_agree = || -> Result<(), String> {
        for kind in ["containers", "volumes"] {
            let rows = view.rows(&format!("SELECT CAST(COUNT(*) AS TEXT) FROM {kind}"));
            let by_state = |state: &str| {
                metric(
                    &url,
                    &format!("gantry_gc_rows{{kind=\"{kind}\",state=\"{state}\"}}"),
                )
            };
            let listed = by_state("created") + by_state("failed");
            let moving = by_state("creating") + by_state("destroying");
            if listed.to_string() != rows[0][0] || moving != 0.0 {
                return Err(format!(
                    "{kind}: /metrics lists {listed} created or failed and {moving} creating or destroying, the database {}",
                    rows[0][0]
                ));
            }
        }
        Ok(())
    };
    let counts = loop {
        let settled = compare(&view, &soak_workers(&soak), &soak.dir.join("web/artifacts"))
            .and_then(|c| metrics_agree().map(|()| c));
        match settled {
            Ok(c) => break c,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the soak did not settle within 180 s; last difference: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let (handles_after, artifacts_after) = owned_by(&view, last_failed);
    assert_eq!(
        handles_after, kept_handles,
        "the latest failed build lost what it owned"
    );
    assert_eq!(artifacts_after, kept_artifacts);

    let statuses = view
        .rows("SELECT status, CAST(COUNT(*) AS TEXT) FROM builds GROUP BY status ORDER BY status");
    println!(
        "soak: {} builds in {:.0?} ({aborts_sent} aborts sent), settled in {:.1?}",
        total + 1,
        soak_took,
        settle_began.elapsed()
    );
    for s in &statuses {
        println!("soak: builds {}: {}", s[0], s[1]);
    }
    let errors = view.rows(
        "SELECT COALESCE(error, ''), CAST(COUNT(*) AS TEXT) FROM builds \
         WHERE status = 'errored' GROUP BY error ORDER BY COUNT(*) DESC",
    );
    for e in errors.iter().take(8) {
        println!(
            "soak: errored x{}: {}",
            e[1],
            e[0].lines().next().unwrap_or_default()
        );
    }
    for (k, n) in &exits {
        println!("soak: clients {k}: {n}");
    }
    for l in &counts.lines {
        println!("{l}");
    }
    println!(
        "soak: latest failed build {last_failed} kept {} containers and volumes and {} artifacts",
        kept_handles.len(),
        kept_artifacts.len()
    );
    let succeeded: usize = statuses
        .iter()
        .filter(|s| s[0] == "succeeded")
        .map(|s| s[1].parse::<usize>().unwrap())
        .sum();
    assert!(
        succeeded >= total / 4,
        "only {succeeded} builds succeeded: {statuses:?}"
    );
    drop(view);
    drop(soak);
}

#[test]
fn sqlite_soak_leaves_disk_equal_to_the_database() {
    soak(DbKind::Sqlite);
}

#[test]
fn postgres_soak_leaves_disk_equal_to_the_database() {
    soak(DbKind::Postgres);
}
