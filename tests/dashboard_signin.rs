//! End to end, in headless Chromium: a local user signs in on the
//! dashboard's sign-in page (a secured node sends the page there), lands on
//! the dashboard as their team, triggers a job through the page's session
//! (its CSRF token), and signs out: the session cookie is gone and the API
//! refuses its token. A change without the CSRF token, and a form posted
//! from a page of another origin with the session's cookie, are refused and
//! change nothing.

use crate::common;

use std::io::{Read as _, Write as _};
use std::time::Duration;

use common::*;

use crate::dashboard_browser::cdp::Browser;
use crate::dashboard_browser::{chromium, screenshot_dir, text, text_settling};

use crate::people::ADMIN;

/// A page on another origin (another port) whose form posts to `target`
/// as soon as it loads; serves it to one request.
fn hostile_page(target: &str) -> (String, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let html = format!(
        "<!doctype html><html><body><form id=f method=POST action=\"{target}\">\
         <input name=x value=1></form><script>document.getElementById('f').submit()</script>\
         </body></html>"
    );
    let serve = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
            html.len()
        );
    });
    (url, serve)
}

/// The builds of red's job `p/j`, as the admin sees them.
fn job_builds(url: &str) -> usize {
    let builds: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/teams/red/pipelines/p/jobs/j/builds"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    builds.as_array().map_or(0, Vec::len)
}

/// The browser's cookie named `gantry_session`, if any (always
/// `HttpOnly`, `SameSite=Lax`).
pub(crate) fn session_cookie(browser: &mut Browser) -> Option<String> {
    let cookies = browser.call("Network.getAllCookies", serde_json::json!({}));
    cookies["cookies"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "gantry_session")
        .map(|c| {
            assert_eq!(c["httpOnly"], true, "{c}");
            assert_eq!(c["sameSite"], "Lax", "{c}");
            c["value"].as_str().unwrap().to_string()
        })
}

#[test]
fn a_local_user_signs_in_triggers_and_signs_out_in_chromium_and_cross_site_posts_are_refused() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let hash = crate::people::hash(&home, "alice pw");
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n[web.users]\nalice = \"{hash}\"\n"),
    );
    let url = web.url.as_str();
    crate::people::alice_in_red(dir, &home, url, "pipeline-operator");
    let shots = screenshot_dir();
    let mut browser = Browser::launch(&chromium, dir);

    // A secured node with no session sends the page to the sign-in page
    // (so the load ends elsewhere than asked: no `navigate`).
    browser.call(
        "Page.navigate",
        serde_json::json!({ "url": format!("{url}/") }),
    );
    wait_for("the sign-in page", Duration::from_secs(30), || {
        (text_settling(&mut browser, "location.pathname") == "/login").then_some(())
    });
    browser.screenshot(&shots.join("dashboard-signin.png"));
    // A wrong password says so in place.
    browser.eval(
        "document.getElementById('username').value = 'alice';\
         document.getElementById('password').value = 'wrong';\
         document.getElementById('submit').click()",
    );
    wait_for(
        "the wrong password's error",
        Duration::from_secs(30),
        || {
            (text(&mut browser, "document.getElementById('error').textContent")
                == "wrong user name or password")
                .then_some(())
        },
    );
    assert!(session_cookie(&mut browser).is_none());
    browser.eval(
        "document.getElementById('password').value = 'alice pw';\
         document.getElementById('submit').click()",
    );
    wait_for("the dashboard as team red", Duration::from_secs(90), || {
        let here = text_settling(&mut browser, "location.pathname");
        let viewer = text_settling(
            &mut browser,
            "document.getElementById('viewer')?.textContent",
        );
        let out = text_settling(
            &mut browser,
            "String(document.getElementById('signout')?.hidden)",
        );
        (here == "/" && viewer == "team red" && out == "false").then_some(())
    });
    let token = session_cookie(&mut browser).expect("the session cookie");
    browser.screenshot(&shots.join("dashboard-signed-in.png"));

    // The page triggers the job with its session's CSRF token.
    let status = browser.eval(
        "gantry.act('POST', '/api/v1/teams/red/pipelines/p/jobs/j/builds').then(r => r.status)",
    );
    assert_eq!(status, 200);
    assert_eq!(job_builds(url), 1);
    // Without the CSRF token: refused, nothing made.
    let refused = browser.eval(
        "fetch('/api/v1/teams/red/pipelines/p/jobs/j/builds', {method: 'POST'})\
         .then(r => r.json().then(b => r.status + ' ' + b.error))",
    );
    assert!(
        refused.as_str().unwrap().starts_with("403 ") && refused.as_str().unwrap().contains("CSRF"),
        "{refused}"
    );
    // A page of another origin posts a form with the cookie: refused.
    let (hostile, served) =
        hostile_page(&format!("{url}/api/v1/teams/red/pipelines/p/jobs/j/builds"));
    // Its form leaves it at once: no `navigate`, which waits for the page.
    browser.call("Page.navigate", serde_json::json!({ "url": hostile }));
    served.join().unwrap();
    wait_for(
        "the cross-site post's answer",
        Duration::from_secs(30),
        || {
            let body = text(&mut browser, "document.body?.innerText ?? ''");
            body.contains("another origin").then_some(())
        },
    );
    assert_eq!(job_builds(url), 1, "the cross-site post made a build");

    // Sign out: the cookie is cleared and the token refused.
    browser.navigate(&format!("{url}/"));
    wait_for("the sign-out button", Duration::from_secs(30), || {
        (text(
            &mut browser,
            "String(document.getElementById('signout')?.hidden)",
        ) == "false")
            .then_some(())
    });
    browser.eval("document.getElementById('signout').click()");
    wait_for("the sign-in page again", Duration::from_secs(30), || {
        (text_settling(&mut browser, "location.pathname") == "/login").then_some(())
    });
    assert!(
        session_cookie(&mut browser).is_none(),
        "the cookie is still set"
    );
    let answer = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .header("cookie", format!("gantry_session={token}"))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let answer = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
}
