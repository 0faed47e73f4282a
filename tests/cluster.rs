//! End to end: `gantry web` and two `gantry worker` processes on loopback
//! ports; both register, heartbeat and take work.

use crate::common;

use common::*;

fn web_and_two_workers_run_a_task(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let mut cmd = gantry();
    cmd.args([
        "web",
        "--open-api",
        "--listen",
        "127.0.0.1:0",
        "--registration-key",
        "k3y",
    ])
    .arg("--data-dir")
    .arg(dir.path().join("web"))
    .args(["--gc-interval", "1"]);
    if let Some(url) = &db.url {
        cmd.arg("--database-url").arg(url);
    }
    let web = Server::start(cmd, "API on ", dir.path().join("web.log"));
    let mut workers = Vec::new();
    for name in ["w1", "w2"] {
        workers.push(start_worker(dir.path(), &web.url, name, &[]));
    }
    let listed = wait_running(&web.url, 2);
    let mut names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["w1", "w2"]);

    write(&dir.path().join("in/msg"), "from the cluster\n");
    write(
        &dir.path().join("task.yml"),
        "platform: linux\ninputs: [{name: in}]\noutputs: [{name: out}]\nrun:\n  path: sh\n  args: [-c, 'cat in/msg; cp in/msg out/copy']\n",
    );
    let out = client(
        &web.url,
        &[
            "execute",
            "-c",
            dir.path().join("task.yml").to_str().unwrap(),
            "-i",
            &format!("in={}", dir.path().join("in").display()),
            "-o",
            &format!("out={}", dir.path().join("out").display()),
        ],
    );
    assert!(
        out.status.success(),
        "execute failed: {}\nweb log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        web.log_text()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the cluster\n");
    assert_eq!(
        std::fs::read(dir.path().join("out/copy")).unwrap(),
        b"from the cluster\n"
    );
    let builds: serde_json::Value =
        serde_json::from_slice(&client(&web.url, &["builds", "--json"]).stdout).unwrap();
    let worker = builds[0]["worker"].as_str().unwrap();
    assert!(["w1", "w2"].contains(&worker), "ran on {worker}");
    // Registration needs the key.
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/api/v1/workers/register", web.url))
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    drop(workers);
}

#[test]
fn web_and_two_workers_run_a_task_sqlite() {
    web_and_two_workers_run_a_task(DbKind::Sqlite);
}

#[test]
fn web_and_two_workers_run_a_task_postgres() {
    web_and_two_workers_run_a_task(DbKind::Postgres);
}
