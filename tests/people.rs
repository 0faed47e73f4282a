//! End to end: people. Local users (`[web.users]`, argon2id hashes made by
//! `gantry hash-password`) sign in with `gantry login -u/-p` to a team
//! where `gantry set-team --user --role` gave them a role; the token is
//! saved as a target in `~/.gantryrc` (owner-only), and two targets act
//! side by side with their own roles. An owner of `main` is the admin. A
//! wrong password saves nothing; signing out revokes the token at once.

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::*;

pub(crate) const ADMIN: &str = "adm1n";

/// `gantry ARGS` with `HOME` at `home`, `stdin` written to its input.
fn as_person(home: &Path, args: &[&str], stdin: &str) -> Output {
    let mut cmd = gantry();
    cmd.env("HOME", home)
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_TEAM")
        .env_remove("GANTRY_TARGET")
        .args(args);
    output_with_stdin(cmd, stdin)
}

/// A job `p/j` of team red (no worker needed to trigger it), and user
/// `alice` with `role` in red, set up by the admin.
pub(crate) fn alice_in_red(dir: &Path, home: &Path, url: &str, role: &str) {
    let admin = |args: &[&str]| {
        let mut all = vec!["--url", url, "--token", ADMIN];
        all.extend(args);
        ok(&as_person(home, &all, ""))
    };
    admin(&["set-team", "red", "--user", "alice", "--role", role]);
    let file = dir.join("p.yml");
    write(
        &file,
        "resources:\n- name: r\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
         jobs:\n- name: j\n  plan:\n  - get: r\n",
    );
    admin(&[
        "set-pipeline",
        "--team",
        "red",
        "-p",
        "p",
        "-c",
        file.to_str().unwrap(),
    ]);
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub(crate) fn hash(home: &Path, password: &str) -> String {
    let hash = ok(&as_person(
        home,
        &["hash-password"],
        &format!("{password}\n"),
    ));
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    hash
}

#[test]
fn local_users_sign_in_with_their_role_and_two_targets_act_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (alice, bob) = (hash(&home, "alice pw"), hash(&home, "bob pw"));
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!(
            "[web]\nadmin_token = \"{ADMIN}\"\n[web.users]\nalice = \"{alice}\"\nbob = \"{bob}\"\n"
        ),
    );
    let url = web.url.as_str();
    alice_in_red(dir, &home, url, "pipeline-operator");
    ok(&as_person(
        &home,
        &[
            "--url", url, "--token", ADMIN, "set-team", "main", "--user", "bob",
        ],
        "",
    ));
    let file = dir.join("p.yml");

    // Alice signs in to red with -p; bob with the password on standard
    // input and no team (main, where he is an owner).
    let said = ok(&as_person(
        &home,
        &[
            "login", "-c", url, "-n", "red", "-t", "r", "-u", "alice", "-p", "alice pw",
        ],
        "",
    ));
    assert_eq!(
        said,
        "target r saved: alice is pipeline-operator of team red"
    );
    let said = ok(&as_person(
        &home,
        &["login", "-c", url, "-t", "m", "-u", "bob"],
        "bob pw\n",
    ));
    assert_eq!(said, "target m saved: bob is owner of team main");
    let rc = home.join(".gantryrc");
    let mode = std::fs::metadata(&rc).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "~/.gantryrc is {mode:o}");
    let targets = ok(&as_person(&home, &["targets", "--json"], ""));
    assert!(
        targets.contains("\"r\"") && targets.contains("\"m\"") && !targets.contains("gtk_"),
        "{targets}"
    );

    // Side by side, each with its role.
    assert_eq!(
        ok(&as_person(&home, &["-t", "r", "status"], "")),
        "signed in: user alice, pipeline-operator of team red"
    );
    assert_eq!(
        ok(&as_person(&home, &["status", "--target", "m"], "")),
        "signed in: user bob, admin"
    );
    let listed = ok(&as_person(&home, &["-t", "r", "pipelines", "--json"], ""));
    assert!(listed.contains("\"p\""), "{listed}");
    let out = as_person(
        &home,
        &[
            "-t",
            "r",
            "set-pipeline",
            "-p",
            "q",
            "-c",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(line.contains("setPipeline needs the role member"), "{line}");
    ok(&as_person(
        &home,
        &["-t", "r", "unpause-pipeline", "-p", "p"],
        "",
    ));
    let teams = ok(&as_person(&home, &["-t", "m", "teams"], ""));
    assert!(
        teams.contains("alice=pipeline-operator") && teams.contains("bob=owner"),
        "{teams}"
    );
    // The audit log names the person.
    let log = ok(&as_person(&home, &["-t", "m", "audit", "--json"], ""));
    let log: serde_json::Value = serde_json::from_str(&log).unwrap();
    assert!(
        log.as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "user:alice" && e["action"] == "signIn" && e["team"] == "red"),
        "{log:#}"
    );
    assert!(
        log.as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "user:alice"
                && e["action"] == "unpausePipeline"
                && e["team"] == "red"),
        "{log:#}"
    );

    // A wrong password, an unknown user, and a team with no role for
    // the user: one line each, nothing saved.
    let before = std::fs::read_to_string(&rc).unwrap();
    for (args, want) in [
        (
            vec!["-u", "alice", "-p", "nope", "-n", "red"],
            "wrong user name or password",
        ),
        (
            vec!["-u", "mallory", "-p", "alice pw"],
            "wrong user name or password",
        ),
        (
            vec!["-u", "alice", "-p", "alice pw", "-n", "main"],
            "no role in team main",
        ),
    ] {
        let mut all = vec!["login", "-c", url, "-t", "x"];
        all.extend(args);
        let out = as_person(&home, &all, "");
        assert!(!out.status.success());
        let line = one_error_line(&out);
        assert!(line.contains(want), "{line}");
    }
    assert_eq!(std::fs::read_to_string(&rc).unwrap(), before);
    // Five wrong passwords in a row for a name: the next sign-in waits,
    // even with the right one; four do not.
    let bob_with = |password: &str| {
        as_person(
            &home,
            &["login", "-c", url, "-t", "x", "-u", "bob", "-p", password],
            "",
        )
    };
    let wrong_times = |n: usize| {
        for _ in 0..n {
            let line = one_error_line(&bob_with("no"));
            assert!(line.contains("wrong user name or password"), "{line}");
        }
    };
    wrong_times(4);
    assert!(
        bob_with("bob pw").status.success(),
        "a right password forgets the wrong ones"
    );
    wrong_times(5);
    let line = one_error_line(&bob_with("bob pw"));
    assert!(
        line.contains("429") && line.contains("too many wrong passwords"),
        "{line}"
    );

    // Signing out revokes the token at once and forgets the target.
    let rc_text: serde_yaml::Value = serde_yaml::from_str(&before).unwrap();
    let token = rc_text["targets"]["r"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    // Concourse's `UserInfo`, as `fly userinfo` decodes it.
    let me: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(&token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(me["user_name"], "alice", "{me}");
    assert_eq!(me["display_user_id"], "alice", "{me}");
    assert_eq!(me["is_admin"], false, "{me}");
    assert_eq!(me["connector"], "local", "{me}");
    assert_eq!(
        me["teams"],
        serde_json::json!({"red": ["pipeline-operator"]}),
        "{me}"
    );
    let admin: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(admin["is_admin"], true, "{admin}");
    assert_eq!(
        admin["teams"],
        serde_json::json!({"main": ["owner"]}),
        "{admin}"
    );
    assert_eq!(
        ok(&as_person(&home, &["logout", "-t", "r"], "")),
        "target r signed out"
    );
    let refused = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let out = as_person(&home, &["-t", "r", "status"], "");
    assert!(!out.status.success());
    assert!(one_error_line(&out).contains("unknown target \"r\""));
    assert_eq!(
        ok(&as_person(&home, &["-t", "m", "status"], "")),
        "signed in: user bob, admin"
    );

    // A role changed or taken away counts at once for a signed-in user.
    ok(&as_person(
        &home,
        &[
            "login", "-c", url, "-n", "red", "-t", "r2", "-u", "alice", "-p", "alice pw",
        ],
        "",
    ));
    ok(&as_person(
        &home,
        &[
            "-t", "m", "set-team", "red", "--user", "alice", "--role", "viewer",
        ],
        "",
    ));
    assert_eq!(
        ok(&as_person(&home, &["-t", "r2", "status"], "")),
        "signed in: user alice, viewer of team red"
    );
    let out = as_person(&home, &["-t", "r2", "unpause-pipeline", "-p", "p"], "");
    assert!(one_error_line(&out).contains("needs the role pipeline-operator"));
    ok(&as_person(
        &home,
        &["-t", "m", "set-team", "red", "--remove-user", "alice"],
        "",
    ));
    let out = as_person(&home, &["-t", "r2", "status"], "");
    assert!(!out.status.success());
    assert!(
        one_error_line(&out).contains("401"),
        "{}",
        one_error_line(&out)
    );
}

#[test]
fn a_users_table_with_a_bad_hash_stops_the_node_naming_the_user() {
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let out = web_command(
        dir.path(),
        &db,
        "[web]\nadmin_token = \"a\"\n[web.users]\ncarol = \"hunter2\"\n",
        0,
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("carol") && err.contains("hash-password"),
        "{err}"
    );
}

#[test]
fn an_open_node_ignores_a_session_cookie_another_node_left() {
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let web = start_web(dir.path(), &db, "");
    let answer = reqwest::blocking::Client::new()
        .get(format!("{}/api/v1/builds", web.url))
        .header("cookie", "gantry_session=gtk_0123456789abcdef_stale")
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
}

#[test]
fn a_node_no_one_could_sign_in_to_refuses_to_start_unless_asked_to_be_open() {
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let out = gantry()
        .args([
            "web",
            "--listen",
            "127.0.0.1:0",
            "--registration-key",
            "k3y",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("web"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = one_error_line(&out);
    assert!(
        err.contains("no one could sign in") && err.contains("--open-api"),
        "{err}"
    );
    // No database was made for a node that did not start.
    assert!(!dir.path().join("web/gantry.db").exists());
    // Asked to be open, on loopback, it answers anyone.
    let open = start_web(dir.path(), &db, "");
    let info: serde_json::Value = reqwest::blocking::get(format!("{}/api/v1/info", open.url))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(info["sign_in"]["open"], true, "{info}");
}

#[test]
fn the_default_quickstart_is_closed_makes_an_admin_and_saves_the_clis_target() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let data = dir.path().join("data");
    let start = || {
        let mut cmd = gantry();
        cmd.env("HOME", &home)
            .env_remove("GANTRY_TOKEN")
            .args(["quickstart", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&data);
        Server::start(cmd, "API on ", dir.path().join("quickstart.log"))
    };
    let qs = start();
    let url = qs.url.clone();
    // The admin's password, owner-only, in the data dir.
    let file = data.join("admin-password");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let password = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert!(password.len() >= 32, "{password}");
    // Anonymous callers get the open routes only.
    let http = reqwest::blocking::Client::new();
    let status = |path: &str| {
        http.get(format!("{url}{path}"))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status("/api/v1/builds"), 401);
    assert_eq!(status("/api/v1/workers"), 401);
    assert_eq!(status("/api/v1/info"), 200);
    assert_eq!(status("/healthz"), 200);
    let info: serde_json::Value = http
        .get(format!("{url}/api/v1/info"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(info["sign_in"]["password"], true, "{info}");
    assert_eq!(info["sign_in"]["open"], false, "{info}");
    // The CLI on this machine acts as the admin with no extra step: the
    // target saved for the node's URL.
    let rc = home.join(".gantryrc");
    assert_eq!(
        std::fs::metadata(&rc).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let said = ok(&as_person(&home, &["--url", &url, "status"], ""));
    assert_eq!(said, "signed in: user admin, admin");
    wait_for(
        "the embedded worker, listed through the CLI",
        Duration::from_secs(60),
        || {
            let workers = ok(&as_person(&home, &["--url", &url, "workers", "--json"], ""));
            workers.contains("\"running\"").then_some(())
        },
    );
    // The admin signs in with the password, as in a browser.
    let answer = http
        .post(format!("{url}/api/v1/sessions"))
        .json(&serde_json::json!({"username": "admin", "password": password}))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
    let browser: serde_json::Value = answer.json().unwrap();
    let browser = browser["token"].as_str().unwrap().to_string();
    let saved_token = || {
        let rc = std::fs::read_to_string(&rc).unwrap();
        let rc: serde_yaml::Value = serde_yaml::from_str(&rc).unwrap();
        rc["targets"]["quickstart"]["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = saved_token();
    // A restart keeps the password, and saves a new token in place of the
    // first, which no longer works; the browser's session is kept.
    drop(qs);
    let again = start();
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), password);
    let said = ok(&as_person(&home, &["--url", &again.url, "status"], ""));
    assert_eq!(said, "signed in: user admin, admin");
    assert_ne!(saved_token(), first);
    let user = |token: &str| {
        http.get(format!("{}/api/v1/user", again.url))
            .bearer_auth(token)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(user(&first), 401, "the first start's token was revoked");
    assert_eq!(user(&saved_token()), 200);
    assert_eq!(
        user(&browser),
        200,
        "a password sign-in is not the saved token"
    );
}
