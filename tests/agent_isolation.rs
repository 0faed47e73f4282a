//! End to end under runc: the real binary (`gantry quickstart --backend
//! runc`, SQLite) runs tasks with `gantry execute`, and the kernel enforces
//! what the task config asks for: memory and pids limits, a hermetic
//! network, `run.user` and `run.dir`.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;

/// A quickstart on the runc backend, or `None` (test skipped) without runc.
fn runc_quickstart(dir: &Path, db: &TestDb) -> Option<Server> {
    if !runc_runs_here() {
        return None;
    }
    let server = quickstart(dir, db, &["--backend", "runc"]);
    assert_eq!(workers_json(&server.url)[0]["backend"], "runc");
    Some(server)
}

/// Writes `task` to `dir/name` and runs it with `gantry execute` and `extra` arguments.
fn execute(server: &Server, dir: &Path, name: &str, task: &str, extra: &[&str]) -> Output {
    let file = dir.join(name);
    write(&file, task);
    let mut args = vec!["execute", "-c", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    client(&server.url, &args)
}

/// stdout and stderr of a CLI run, for assertions and messages.
fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_task_over_its_memory_limit_is_killed_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let Some(server) = runc_quickstart(dir.path(), &db) else {
        return;
    };
    // `tail` keeps the whole (newline-free) 256 MiB in memory.
    let task = r#"
platform: linux
container_limits: {memory: 67108864}
run:
  path: sh
  args: [-c, 'echo started; head -c 268435456 /dev/zero | tail']
"#;
    let started = Instant::now();
    let out = execute(&server, dir.path(), "oom.yml", task, &[]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(
        out.status.code(),
        Some(137),
        "stdout {stdout}\nstderr {stderr}"
    );
    assert_eq!(stdout, "started\n");
    assert!(
        stderr.contains("task killed: out of memory (container memory limit 64 MiB)"),
        "stderr: {stderr}\nlog:\n{}",
        server.log_text()
    );
    assert!(started.elapsed() < Duration::from_secs(15));

    // A task within its limit is left alone, and says nothing of memory.
    let task = r#"
platform: linux
container_limits: {memory: 67108864}
run:
  path: sh
  args: [-c, 'head -c 16777216 /dev/zero | tail | wc -c; exit 4']
"#;
    let out = execute(&server, dir.path(), "fits.yml", task, &[]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(4), "stderr {stderr}");
    assert_eq!(stdout.trim(), "16777216");
    assert!(!stderr.contains("out of memory"), "{stderr}");
}

#[test]
fn a_pids_limit_stops_a_fork_bomb_and_the_worker_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let Some(server) = runc_quickstart(dir.path(), &db) else {
        return;
    };
    // 500 children that would each sleep 30 s; the failures are counted,
    // the ones that started are killed at the end.
    let task = r#"
platform: linux
container_limits: {pids: 64}
run:
  path: perl
  args:
  - -e
  - |
    my ($ok, $failed, @kids) = (0, 0);
    for (1 .. 500) {
      my $pid = fork();
      if (!defined $pid) { $failed++ }
      elsif ($pid == 0) { sleep 30; exit 0 }
      else { $ok++; push @kids, $pid }
    }
    print "started $ok failed $failed\n";
    kill 'KILL', @kids;
    waitpid($_, 0) for @kids;
"#;
    let started = Instant::now();
    let out = execute(&server, dir.path(), "bomb.yml", task, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "stdout {stdout}\nstderr {stderr}");
    let counts: Vec<u32> = stdout
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [ok, failed] = counts[..] else {
        panic!("unexpected output {stdout:?}");
    };
    assert!(ok < 64, "{ok} processes started under a limit of 64");
    assert_eq!(ok + failed, 500);
    assert!(started.elapsed() < Duration::from_secs(15));

    // The worker is still running and takes the next task.
    let workers = workers_json(&server.url);
    assert_eq!(workers[0]["state"], "running", "{workers}");
    let task = "platform: linux\nrun: {path: sh, args: [-c, 'echo still here']}\n";
    let out = execute(&server, dir.path(), "next.yml", task, &[]);
    assert!(out.status.success(), "{:?}", texts(&out));
    assert_eq!(texts(&out).0, "still here\n");
}

#[test]
fn only_non_hermetic_tasks_reach_a_listener_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let Some(server) = runc_quickstart(dir.path(), &db) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    // Accepts until told to stop; returns what each connection sent.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let acceptor = std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while stop_rx.try_recv().is_err() && Instant::now() < deadline {
            match listener.accept() {
                Ok((mut conn, _)) => {
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut text = String::new();
                    let _ = conn.read_to_string(&mut text);
                    got.push(text);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("accept failed: {e}"),
            }
        }
        got
    });

    let script = format!(
        "if echo hello-from-$0 > /dev/tcp/127.0.0.1/{port}; then echo connected; \
         else echo refused; fi; ls /sys/class/net"
    );
    let task = |hermetic: bool, name: &str| {
        format!(
            "platform: linux\nhermetic: {hermetic}\nrun:\n  path: bash\n  args: [-c, {script:?}, {name}]\n"
        )
    };
    let out = execute(&server, dir.path(), "open.yml", &task(false, "open"), &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "stderr {stderr}");
    assert_eq!(stdout.lines().next(), Some("connected"), "{stdout}");

    let out = execute(
        &server,
        dir.path(),
        "sealed.yml",
        &task(true, "sealed"),
        &[],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "stderr {stderr}");
    // Only a loopback interface, and it is up: the connection is refused
    // by the container's own 127.0.0.1, not unreachable.
    assert_eq!(stdout, "refused\nlo\n");
    assert!(stderr.contains("Connection refused"), "{stderr}");

    stop_tx.send(()).unwrap();
    let got = acceptor.join().unwrap();
    assert_eq!(got, vec!["hello-from-open\n".to_string()]);
}

#[test]
fn run_user_and_run_dir_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let Some(server) = runc_quickstart(dir.path(), &db) else {
        return;
    };
    write(&dir.path().join("src/sub/file.txt"), "x");
    let src = format!("src={}", dir.path().join("src").display());
    for (user, uid) in [("nobody", "65534"), ("4242", "4242")] {
        let task = format!(
            "platform: linux\ninputs: [{{name: src}}]\nrun:\n  path: sh\n  \
             args: [-c, 'id -u; pwd; ls']\n  user: {user:?}\n  dir: src/sub\n"
        );
        let out = execute(&server, dir.path(), "user.yml", &task, &["-i", &src]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "user {user}: {stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{stdout}");
        assert_eq!(lines[0], uid, "user {user}");
        assert!(
            lines[1].starts_with("/tmp/build/") && lines[1].ends_with("/src/sub"),
            "cwd {}",
            lines[1]
        );
        assert_eq!(lines[2], "file.txt");
    }
    // A user the image does not have is a clear error.
    let task = "platform: linux\nrun: {path: id, user: no-such-user}\n";
    let out = execute(&server, dir.path(), "bad.yml", task, &[]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no-such-user"), "{stderr}");
}
