//! End to end, in headless Chromium: people act from the dashboard with
//! their role. A pipeline operator signs in on the sign-in page, opens a
//! pipeline, triggers a job from its page and watches the build's log
//! arrive while it runs, pins a resource version (with a comment) and sees
//! the next triggered build take it, and aborts a running build from its
//! page; an action that fails says why in place. A viewer signs in and is
//! shown no action button on any page (and the API refuses the action
//! anyway). Screenshots at desktop and phone widths go to
//! `target/test-screenshots/`. A resource's page shows a fetched
//! version's metadata; a job's page reads its builds past the newest 50 a
//! page at a time.

use crate::common;

use std::time::Duration;

use common::*;

use crate::dashboard_browser::cdp::Browser;
use crate::dashboard_browser::{chromium, screenshot_dir, text};

use crate::people::ADMIN;

/// A job `j` that gets a `mock` resource `r` (whose `in` tells metadata),
/// prints its version, a green line and six ticks a second apart; a job
/// `slow` that waits 5 minutes.
pub(crate) const PIPELINE: &str = r#"
resources:
- name: r
  type: mock
  check_every: never
  source: {initial_version: v0, metadata: [{name: commit, value: abc123}]}
jobs:
- name: j
  plan:
  - get: r
  - task: show
    config:
      platform: linux
      inputs: [{name: r}]
      run:
        path: sh
        args: [-c, 'echo "version=$(cat r/version)"; printf "\033[32mgreen-ok\033[0m plain\n"; for i in 1 2 3 4 5 6; do echo "tick-$i"; sleep 1; done']
- name: slow
  plan:
  - task: wait
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo waiting-to-be-aborted; sleep 300']}
"#;

/// Signs `user` in on the sign-in page; waits for the dashboard.
fn sign_in(browser: &mut Browser, url: &str, user: &str, password: &str) {
    browser.navigate(&format!("{url}/login"));
    browser.eval(&format!(
        "document.getElementById('username').value = {user:?};\
         document.getElementById('password').value = {password:?};\
         document.getElementById('submit').click()"
    ));
    wait_for(
        &format!("{user} on the dashboard"),
        Duration::from_secs(30),
        || (browser.try_text("location.pathname").as_deref() == Some("/")).then_some(()),
    );
}

/// Clicks the element `selector` names once it is there.
fn click(browser: &mut Browser, selector: &str) {
    let js = format!(
        "(() => {{ const e = document.querySelector({selector:?}); if (!e || e.disabled) return 'no'; e.click(); return 'yes'; }})()"
    );
    wait_for(
        &format!("{selector} to click"),
        Duration::from_secs(30),
        || (browser.try_text(&js).as_deref() == Some("yes")).then_some(()),
    );
}

/// Waits until the text of `selector` satisfies `ok`; answers it.
fn wait_text(
    browser: &mut Browser,
    what: &str,
    selector: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let js = format!("document.querySelector({selector:?})?.textContent ?? ''");
    wait_for(what, Duration::from_secs(90), || {
        browser.try_text(&js).filter(|t| ok(t))
    })
}

/// The action buttons the page shows.
fn buttons(browser: &mut Browser) -> Vec<String> {
    let list =
        browser.eval("[...document.querySelectorAll('button.action')].map(b => b.dataset.action)");
    serde_json::from_value(list).unwrap()
}

/// The build the result line of a trigger links to.
fn linked_build(browser: &mut Browser, result: &str) -> i64 {
    let href = wait_text(browser, "the build's link", &format!("{result} a"), |t| {
        t.starts_with("build")
    });
    assert!(href.contains('#'), "{href}");
    let link = text(
        browser,
        &format!("document.querySelector('{result} a').getAttribute('href')"),
    );
    link.trim_start_matches("/builds/").parse().unwrap()
}

/// The version of `r` build `id` was given.
fn input_version(url: &str, id: i64) -> serde_json::Value {
    let r: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{id}/resources"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    r["inputs"][0]["version"].clone()
}

/// Renders the page at phone width, saves a screenshot, and goes back.
fn phone_shot(browser: &mut Browser, name: &str) {
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
    );
    // Nothing wider than the screen but what scrolls in its own box.
    let wide = browser.eval("document.documentElement.scrollWidth");
    assert!(
        wide.as_i64().unwrap() <= 390,
        "{name} is {wide}px wide at phone width"
    );
    browser.screenshot(&screenshot_dir().join(name));
    browser.call(
        "Emulation.clearDeviceMetricsOverride",
        serde_json::json!({}),
    );
}

#[test]
fn people_act_from_the_dashboard_with_their_role_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = crate::people::hash(&home, "alice pw");
    let bob = crate::people::hash(&home, "bob pw");
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!(
            "[web]\nadmin_token = \"{ADMIN}\"\n[web.users]\nalice = \"{alice}\"\nbob = \"{bob}\"\n"
        ),
    );
    let url = web.url.as_str();
    let _worker = common::workers::start_worker(dir, url, "w1", worker_backend());
    let admin = |args: &[&str]| {
        let out = client_as(url, ADMIN, args);
        assert!(out.status.success(), "{args:?}: {}", text_of(&out));
    };
    admin(&[
        "set-team",
        "main",
        "--user",
        "alice",
        "--role",
        "pipeline-operator",
    ]);
    admin(&["set-team", "main", "--user", "bob", "--role", "viewer"]);
    write(&dir.join("p.yml"), PIPELINE);
    admin(&[
        "set-pipeline",
        "-p",
        "p",
        "-c",
        dir.join("p.yml").to_str().unwrap(),
    ]);
    admin(&["unpause-pipeline", "-p", "p"]);
    // Two versions of r, v2 the newest.
    let http = reqwest::blocking::Client::new();
    for v in ["v1", "v2"] {
        let check: serde_json::Value = http
            .post(format!(
                "{url}/api/v1/teams/main/pipelines/p/resources/r/check"
            ))
            .bearer_auth(ADMIN)
            .json(&serde_json::json!({"from": {"version": v}}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let id = check["id"].as_i64().unwrap();
        wait_for("the check", Duration::from_secs(60), || {
            let b: serde_json::Value = http
                .get(format!("{url}/api/v1/builds/{id}"))
                .bearer_auth(ADMIN)
                .send()
                .unwrap()
                .json()
                .unwrap();
            (b["status"] == "succeeded").then_some(())
        });
    }
    let shots = screenshot_dir();
    let mut browser = Browser::launch(&chromium, dir);
    sign_in(&mut browser, url, "alice", "alice pw");

    // The pipeline's page offers what a pipeline operator may do: pause,
    // not archive (a member's).
    browser.navigate(&format!("{url}/teams/main/pipelines/p"));
    wait_text(&mut browser, "the graph", "#pipeline-graph", |t| {
        t.contains("slow")
    });
    wait_for("the pipeline's buttons", Duration::from_secs(30), || {
        (buttons(&mut browser) == ["pausePipeline"]).then_some(())
    });

    // Trigger j from its page; its log arrives while it runs.
    browser.navigate(&format!("{url}/teams/main/pipelines/p/jobs/j"));
    click(&mut browser, "#job-actions [data-action=triggerJob]");
    let first = linked_build(&mut browser, "#job-result");
    browser.navigate(&format!("{url}/builds/{first}"));
    let live = wait_text(
        &mut browser,
        "a line of the running build",
        "#steps [data-step=show] > pre.log",
        |t| t.contains("tick-1"),
    );
    assert!(!live.contains("tick-6"), "the log came all at once: {live}");
    assert_eq!(
        text(
            &mut browser,
            "document.getElementById('build-status').textContent"
        ),
        "started"
    );
    browser.screenshot(&shots.join("actions-build-running.png"));
    wait_text(&mut browser, "the build to succeed", "#build-status", |t| {
        t == "succeeded"
    });
    let log = text(
        &mut browser,
        "document.querySelector('#steps [data-step=show] > pre.log').textContent",
    );
    assert!(
        log.contains("version=v2") && log.contains("tick-6"),
        "{log}"
    );
    assert_eq!(
        buttons(&mut browser),
        Vec::<String>::new(),
        "no abort once finished"
    );
    // Colours are drawn, their codes not shown.
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#steps [data-step=show] > pre.log .ansi-32')?.textContent"
        ),
        "green-ok"
    );
    assert!(
        !log.contains('\u{1b}') && log.contains("green-ok plain"),
        "{log:?}"
    );
    // The raw log, as the link downloads it (with the session's cookie),
    // is what the API serves.
    assert_eq!(
        text(
            &mut browser,
            "document.getElementById('build-download').getAttribute('href')"
        ),
        format!("/api/v1/builds/{first}/log")
    );
    let downloaded = text(
        &mut browser,
        "fetch(document.getElementById('build-download').href).then(r => r.text())",
    );
    let raw = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{first}/log"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(downloaded, raw);
    assert!(raw.contains("\u{1b}[32mgreen-ok"), "{raw:?}");

    // Pin v1 with a comment; the next build takes it.
    browser.navigate(&format!("{url}/teams/main/pipelines/p/resources/r"));
    wait_text(&mut browser, "r's versions", "#resource-versions", |t| {
        t.contains("v1")
    });
    // The version the first build got shows what its `in` told of it; one
    // never fetched shows none.
    wait_text(
        &mut browser,
        "v2's metadata",
        r#"#resource-versions [data-version='{"version":"v2"}'] .version-meta"#,
        |t| t.contains("commit abc123"),
    );
    assert_eq!(
        text(
            &mut browser,
            r#"String(document.querySelector(`#resource-versions [data-version='{"version":"v1"}'] .version-meta`))"#
        ),
        "null"
    );
    browser.eval("document.getElementById('pin-comment').value = 'v2 breaks the build'");
    click(
        &mut browser,
        r#"#resource-versions [data-version='{"version":"v1"}'] [data-action=pinResourceVersion]"#,
    );
    wait_text(&mut browser, "the pin's result", "#resource-result", |t| {
        t.starts_with("pinned")
    });
    let pin = wait_text(&mut browser, "the pin shown", "#resource-pin", |t| {
        t.contains("v1")
    });
    assert!(pin.contains("v2 breaks the build"), "{pin}");
    browser.screenshot(&shots.join("actions-resource-pinned.png"));
    phone_shot(&mut browser, "actions-resource-phone.png");
    browser.navigate(&format!("{url}/teams/main/pipelines/p/jobs/j"));
    click(&mut browser, "#job-actions [data-action=triggerJob]");
    let second = linked_build(&mut browser, "#job-result");
    assert_ne!(first, second);
    wait_text(
        &mut browser,
        "the second build listed, succeeded",
        &format!("#job-builds [data-build=\"{second}\"]"),
        |t| t.contains("succeeded"),
    );
    assert_eq!(
        input_version(url, first),
        serde_json::json!({"version": "v2"})
    );
    assert_eq!(
        input_version(url, second),
        serde_json::json!({"version": "v1"})
    );
    // Who triggered each is shown.
    let row = text(
        &mut browser,
        &format!("document.querySelector('#job-builds [data-build=\"{second}\"]').textContent"),
    );
    assert!(row.contains("alice"), "{row}");
    browser.screenshot(&shots.join("actions-job.png"));
    phone_shot(&mut browser, "actions-job-phone.png");
    // The resource's page lists the builds that used each version.
    browser.navigate(&format!("{url}/teams/main/pipelines/p/resources/r"));
    let used = |browser: &mut Browser, v: &str| {
        wait_text(
            browser,
            &format!("the builds of {v}"),
            &format!(r#"#resource-versions [data-version='{{"version":"{v}"}}'] .version-builds"#),
            |t| !t.is_empty(),
        )
    };
    assert_eq!(used(&mut browser, "v1"), "j #2");
    assert_eq!(used(&mut browser, "v2"), "j #1");

    // Abort a running build from its page.
    browser.navigate(&format!("{url}/teams/main/pipelines/p/jobs/slow"));
    click(&mut browser, "#job-actions [data-action=triggerJob]");
    let slow = linked_build(&mut browser, "#job-result");
    browser.navigate(&format!("{url}/builds/{slow}"));
    wait_text(
        &mut browser,
        "the slow build running",
        "#steps [data-step=wait] > pre.log",
        |t| t.contains("waiting-to-be-aborted"),
    );
    click(&mut browser, "#build-actions [data-action=abortBuild]");
    wait_text(&mut browser, "the abort's result", "#build-result", |t| {
        t.starts_with("aborting")
    });
    wait_text(&mut browser, "the build aborted", "#build-status", |t| {
        t == "aborted"
    });

    // Left open for the end: an action on a pipeline gone meanwhile.
    browser.navigate(&format!("{url}/teams/main/pipelines/p/jobs/j"));
    wait_for("the trigger button", Duration::from_secs(30), || {
        buttons(&mut browser)
            .contains(&"triggerJob".to_string())
            .then_some(())
    });

    // A viewer: the same pages, no button; the API refuses anyway.
    let mut viewer = Browser::launch(&chromium, dir);
    sign_in(&mut viewer, url, "bob", "bob pw");
    for (page, loaded, what) in [
        ("/teams/main/pipelines/p", "#pipeline-graph", "slow"),
        ("/teams/main/pipelines/p/jobs/j", "#job-builds", "succeeded"),
        (
            "/teams/main/pipelines/p/resources/r",
            "#resource-versions",
            "v1",
        ),
        (&*format!("/builds/{slow}"), "#build-status", "aborted"),
    ] {
        viewer.navigate(&format!("{url}{page}"));
        wait_text(&mut viewer, page, loaded, |t| t.contains(what));
        assert_eq!(buttons(&mut viewer), Vec::<String>::new(), "{page}");
    }
    assert_eq!(
        text(
            &mut viewer,
            "String(document.getElementById('pin-comment'))"
        ),
        "null"
    );
    viewer.screenshot(&shots.join("actions-viewer.png"));
    let refused = viewer.eval(
        "gantry.act('POST', '/api/v1/teams/main/pipelines/p/jobs/j/builds').then(r => r.status)",
    );
    assert_eq!(refused, 403);

    // An action that fails says why in place.
    admin(&["destroy-pipeline", "-p", "p"]);
    click(&mut browser, "#job-actions [data-action=triggerJob]");
    let said = wait_text(&mut browser, "the trigger's error", "#job-result", |t| {
        !t.is_empty() && !t.ends_with('…')
    });
    assert!(said.contains("not found"), "{said}");
    assert_eq!(
        text(
            &mut browser,
            "document.getElementById('job-result').className"
        ),
        "result error"
    );
}

fn text_of(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A follower of a page's feed: an open connection that has had its first
/// snapshot.
fn follow_feed(url: &str, path: &str) -> std::net::TcpStream {
    use std::io::{BufRead as _, Write as _};
    let addr = url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {ADMIN}\r\naccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the feed ended");
        if line.starts_with("data: ") {
            assert!(
                line.contains("\"page\":{") && line.contains("\"pipeline\":{"),
                "{line}"
            );
            return conn;
        }
    }
}

/// `gantry_db_queries_total` and `gantry_dashboard_page_snapshots_total`.
fn counts(url: &str) -> (f64, f64) {
    (
        metric(url, "gantry_db_queries_total"),
        metric(url, "gantry_dashboard_page_snapshots_total"),
    )
}

#[test]
fn fifty_tabs_on_a_pipeline_page_cost_the_database_what_one_does() {
    // Two nodes alike, each on a database of its own, measured over the
    // same minute: one followed by one tab, the other by fifty. What a
    // node does on its own (its collector, its heartbeat) goes on in both.
    const WINDOW: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write(&dir.join("p.yml"), PIPELINE);
    let node = |name: &str| {
        let home = dir.join(name);
        let db = TestDb::new(DbKind::Postgres);
        let web = start_web(&home, &db, &format!("[web]\nadmin_token = \"{ADMIN}\"\n"));
        let file = dir.join("p.yml");
        let out = client_as(
            &web.url,
            ADMIN,
            &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
        );
        assert!(out.status.success(), "{}", text_of(&out));
        // The database outlives its node.
        (db, web)
    };
    let (_one_db, one) = node("one");
    let (_fifty_db, fifty) = node("fifty");
    let page = "/api/v1/teams/main/pipelines/p/feed";
    let one_tab = follow_feed(&one.url, page);
    let fifty_tabs: Vec<_> = (0..50).map(|_| follow_feed(&fifty.url, page)).collect();
    let (one_q0, one_s0) = counts(&one.url);
    let (fifty_q0, fifty_s0) = counts(&fifty.url);
    std::thread::sleep(WINDOW);
    let (one_q1, one_s1) = counts(&one.url);
    let (fifty_q1, fifty_s1) = counts(&fifty.url);
    let (one_q, one_s) = (one_q1 - one_q0, one_s1 - one_s0);
    let (fifty_q, fifty_s) = (fifty_q1 - fifty_q0, fifty_s1 - fifty_s0);
    println!("one tab: {one_q} statements, {one_s} snapshots; fifty: {fifty_q} statements, {fifty_s} snapshots");
    assert!(one_s >= 50.0, "one snapshot a second: {one_s}");
    assert!(
        fifty_s <= one_s + 1.0,
        "{fifty_s} snapshots for fifty tabs, {one_s} for one"
    );
    // The same snapshots, so the same statements, but for what each node
    // does on its own meanwhile (tens a second), which varies a little.
    assert!(
        fifty_q <= one_q * 1.05,
        "{fifty_q} statements for fifty tabs, {one_q} for one"
    );
    // The page's publisher ends with its last follower.
    drop((one_tab, fifty_tabs));
    wait_for(
        "the page's publisher to end",
        Duration::from_secs(10),
        || {
            let (_, a) = counts(&fifty.url);
            std::thread::sleep(Duration::from_millis(1500));
            let (_, b) = counts(&fifty.url);
            (a == b).then_some(())
        },
    );
}

#[test]
fn a_jobs_page_reads_its_builds_past_the_newest_fifty() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, &format!("[web]\nadmin_token = \"{ADMIN}\"\n"));
    let url = web.url.as_str();
    write(&dir.join("p.yml"), PIPELINE);
    let out = client_as(
        url,
        ADMIN,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            dir.join("p.yml").to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text_of(&out));
    // The pipeline stays paused: its 53 builds are held pending (no worker
    // needed), the newest 50 on the live list.
    let http = reqwest::blocking::Client::new();
    let ids: Vec<i64> = (0..53)
        .map(|_| {
            let b: serde_json::Value = http
                .post(format!("{url}/api/v1/teams/main/pipelines/p/jobs/j/builds"))
                .bearer_auth(ADMIN)
                .send()
                .unwrap()
                .json()
                .unwrap();
            b["id"].as_i64().unwrap()
        })
        .collect();
    let mut browser = Browser::launch(&chromium, dir);
    browser.navigate(&format!(
        "{url}/teams/main/pipelines/p/jobs/j#token={ADMIN}"
    ));
    let rows = |browser: &mut Browser, table: &str| -> Vec<i64> {
        let list = browser.eval(&format!(
            "[...document.querySelectorAll('#{table} tr[data-build]')].map(r => +r.dataset.build)"
        ));
        serde_json::from_value(list).unwrap()
    };
    wait_for("the newest 50 builds", Duration::from_secs(60), || {
        (rows(&mut browser, "job-builds").len() == 50).then_some(())
    });
    let newest: Vec<i64> = ids.iter().rev().take(50).copied().collect();
    assert_eq!(rows(&mut browser, "job-builds"), newest);
    click(&mut browser, "#job-more");
    wait_for("the 3 older builds", Duration::from_secs(60), || {
        (rows(&mut browser, "job-older").len() == 3).then_some(())
    });
    let oldest: Vec<i64> = ids.iter().take(3).rev().copied().collect();
    assert_eq!(rows(&mut browser, "job-older"), oldest);
    let older = text(
        &mut browser,
        "document.getElementById('job-older').textContent",
    );
    assert!(older.contains("pending") && older.contains("#1"), "{older}");
    // No page after the last.
    assert_eq!(
        browser.eval("document.getElementById('job-more').hidden"),
        serde_json::json!(true)
    );
}
