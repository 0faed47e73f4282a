//! End to end: anonymous sign-ins cannot exhaust a web node. Password
//! checks (argon2id, 19 MiB each) run on a bounded pool: a burst of
//! sign-ins with random names from many addresses leaves the node's
//! memory small, and a real user, from another address, still signs in
//! during it. The throttle is taken before the check: forty wrong
//! passwords at once for one name get only its allowance of checks, and
//! the user keeps signing in from where they signed in before.
//!
//! Each client is a loopback address of its own (127.0.0.0/8 is all
//! loopback): requests bind it as their source, as clients elsewhere
//! would be.

use crate::common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

use crate::people::{hash, ADMIN};

/// A client whose requests come from `from`.
fn client_from(from: &str) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(from.parse::<IpAddr>().unwrap())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// `POST /api/v1/sessions` as `user` with `password`: the status.
fn sign_in(client: &reqwest::blocking::Client, url: &str, user: &str, password: &str) -> u16 {
    client
        .post(format!("{url}/api/v1/sessions"))
        .json(&serde_json::json!({"username": user, "password": password}))
        .send()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A web node on `kind` with the local user alice (`alice pw`), a member
/// of team main.
fn node_with_alice(dir: &Path, kind: DbKind) -> (Server, TestDb) {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = hash(&home, "alice pw");
    let db = TestDb::new(kind);
    let web = start_web(
        dir,
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n[web.users]\nalice = \"{alice}\"\n"),
    );
    let out = gantry()
        .args(["--url", &web.url, "--token", ADMIN])
        .args(["set-team", "main", "--user", "alice", "--role", "member"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    (web, db)
}

/// 500 sign-ins, 50 at a time, each with a random user name, from 25
/// addresses: the node's memory stays small (its peak under 300 MiB),
/// every one is answered (wrong, wait, or busy: never an error), and
/// alice, from another address, signs in all the while.
fn a_burst_of_random_names(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (web, _db) = node_with_alice(dir, kind);
    let url = web.url.clone();
    let pid = web.child.id();
    let before = status_kib(pid, "VmRSS");

    let statuses: Arc<Mutex<BTreeMap<u16, usize>>> = Default::default();
    let burst_over = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let alice_url = url.clone();
    let (alice_over, alice_answered) = (burst_over.clone(), answered.clone());
    let alice = std::thread::spawn(move || {
        let client = client_from("127.0.0.2");
        // Once the burst is under way, and until it is over.
        while alice_answered.load(Ordering::SeqCst) < 50 && !alice_over.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut during = vec![];
        loop {
            let over = alice_over.load(Ordering::SeqCst);
            during.push((sign_in(&client, &alice_url, "alice", "alice pw"), over));
            if over {
                return during;
            }
        }
    });
    let burst: Vec<_> = (0..50)
        .map(|t| {
            let (url, statuses, answered) = (url.clone(), statuses.clone(), answered.clone());
            std::thread::spawn(move || {
                let client = client_from(&format!("127.0.1.{}", t % 25 + 1));
                for i in 0..10 {
                    let name = format!("u{t}-{i}-{}", rand::random::<u64>());
                    let status = sign_in(&client, &url, &name, "x");
                    *statuses.lock().unwrap().entry(status).or_default() += 1;
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in burst {
        t.join().unwrap();
    }
    burst_over.store(true, Ordering::SeqCst);
    let alice = alice.join().unwrap();

    let statuses = statuses.lock().unwrap().clone();
    assert_eq!(statuses.values().sum::<usize>(), 500, "{statuses:?}");
    assert!(
        statuses.keys().all(|s| [401, 429, 503].contains(s)),
        "only wrong, wait or busy: {statuses:?}"
    );
    assert!(
        statuses.get(&401).copied().unwrap_or(0) > 0,
        "some names were checked: {statuses:?}"
    );
    let mut during: BTreeMap<u16, usize> = BTreeMap::new();
    for (status, _) in alice.iter().filter(|(_, over)| !over) {
        *during.entry(*status).or_default() += 1;
    }
    assert!(
        during.get(&201).is_some_and(|n| *n > 0) && during.len() == 1,
        "alice's sign-ins during the burst: {during:?} (burst: {statuses:?})"
    );
    let peak = status_kib(pid, "VmHWM");
    let after = status_kib(pid, "VmRSS");
    eprintln!(
        "RSS before {} MiB, peak {} MiB, after {} MiB; burst {statuses:?}",
        before / 1024,
        peak / 1024,
        after / 1024
    );
    assert!(
        peak < 300 * 1024,
        "the node's peak RSS: {} MiB",
        peak / 1024
    );
    // The node still answers as before.
    let health = reqwest::blocking::get(format!("{url}/healthz")).unwrap();
    assert!(health.status().is_success());
}

#[test]
fn a_burst_of_anonymous_sign_ins_keeps_the_node_small_and_a_user_signs_in_sqlite() {
    a_burst_of_random_names(DbKind::Sqlite);
}

#[test]
fn a_burst_of_anonymous_sign_ins_keeps_the_node_small_and_a_user_signs_in_postgres() {
    a_burst_of_random_names(DbKind::Postgres);
}

/// Forty wrong passwords at once for alice get her allowance (5) of
/// checks, the rest wait; she still signs in from where she did before,
/// while a new place waits.
fn forty_wrong_passwords_at_once(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (web, _db) = node_with_alice(dir, kind);
    let url = web.url.clone();
    let home = client_from("127.0.0.3");
    assert_eq!(sign_in(&home, &url, "alice", "alice pw"), 201);

    let start = Arc::new(std::sync::Barrier::new(40));
    let guesses: Vec<_> = (0..40)
        .map(|i| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                let client = client_from("127.0.0.1");
                start.wait();
                sign_in(&client, &url, "alice", &format!("guess {i}"))
            })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for g in guesses {
        *statuses.entry(g.join().unwrap()).or_default() += 1;
    }
    let checked = statuses.get(&401).copied().unwrap_or(0);
    assert!(
        (1..=5).contains(&checked),
        "at most the allowance of 5 checked: {statuses:?}"
    );
    // The rest were not checked: they wait (429), or, past the address's
    // share of the pool, are told to try again (503).
    assert!(
        statuses.keys().all(|s| [401, 429, 503].contains(s)),
        "{statuses:?}"
    );
    // One at a time, from elsewhere, the guesses go on until the name
    // waits: five checked in all.
    let elsewhere = client_from("127.0.0.5");
    let mut more = 0;
    while sign_in(&elsewhere, &url, "alice", "one more guess") == 401 {
        more += 1;
        assert!(checked + more <= 5, "more than the allowance checked");
    }
    assert_eq!(checked + more, 5, "{statuses:?} then {more}");
    // The wait is said, with when to try again.
    let answer = client_from("127.0.0.4")
        .post(format!("{url}/api/v1/sessions"))
        .json(&serde_json::json!({"username": "alice", "password": "alice pw"}))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429, "a new place waits");
    assert!(answer.headers().contains_key("retry-after"));
    // Where she signed in before, the right password still signs her in.
    assert_eq!(sign_in(&home, &url, "alice", "alice pw"), 201);
}

#[test]
fn forty_wrong_passwords_at_once_get_the_allowance_and_the_user_signs_in_sqlite() {
    forty_wrong_passwords_at_once(DbKind::Sqlite);
}

#[test]
fn forty_wrong_passwords_at_once_get_the_allowance_and_the_user_signs_in_postgres() {
    forty_wrong_passwords_at_once(DbKind::Postgres);
}
