//! End to end: people sign in through an OpenID provider (`[web.oidc]`).
//!
//! The provider is a real one: `oidc-provider` from npm (a certified
//! OpenID Connect implementation, `tests/oidc/provider.mjs`, installed by
//! the test script), with its own sign-in and consent forms. Headless
//! Chromium signs in through them: the dashboard as the team the groups
//! claim gives, a triggered job, signing out; then `gantry login` takes
//! its token on a loopback callback. Tokens no real provider would issue
//! (forged, expired, for another issuer, audience or nonce) come from a
//! small issuer of the test's own, whose keys the node reads the same way:
//! each is refused with a clear error and leaves no session, and an
//! answer replayed signs no one in.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::*;

use crate::dashboard_browser::cdp::Browser;
use crate::dashboard_browser::{chromium, screenshot_dir};
use crate::dashboard_signin::session_cookie;
use crate::people::ADMIN;

/// The installed `oidc-provider` package (`GANTRY_OIDC_PROVIDER`, else
/// where the test script installs it).
fn provider_package() -> PathBuf {
    let dir = std::env::var_os("GANTRY_OIDC_PROVIDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/oidc-provider/node_modules/oidc-provider")
        });
    let entry = dir.join("lib/index.js");
    assert!(
        entry.is_file(),
        "no oidc-provider at {}: run ./scripts/test.sh, which installs it from npm",
        dir.display()
    );
    entry
}

/// The real provider on `port`, for a node whose callback is on
/// `web_port`, with `accounts` (login → groups).
fn start_provider(dir: &Path, port: u16, web_port: u16, accounts: &str) -> Server {
    let mut cmd = Command::new("node");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/provider.mjs"))
        .env("OIDC_PROVIDER_MODULE", provider_package())
        .env("PORT", port.to_string())
        .env(
            "REDIRECT_URIS",
            format!("http://127.0.0.1:{web_port}/auth/oidc/callback"),
        )
        .env("ACCOUNTS", accounts);
    Server::start(cmd, "listening ", dir.join("provider.log"))
}

/// `gantry ARGS` as the admin.
fn admin(url: &str, args: &[&str]) -> String {
    let mut all = vec!["--url", url, "--token", ADMIN];
    all.extend(args);
    let out = gantry().args(&all).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "gantry {args:?}: {stderr}");
    stdout
}

/// Red's job `p/j` (no worker needed to trigger it), and the provider's
/// group `red-ops` (`oidc:red-ops`) as red's pipeline-operators.
fn red_ops(dir: &Path, url: &str) {
    admin(
        url,
        &[
            "set-team",
            "red",
            "--oidc-group",
            "red-ops",
            "--role",
            "pipeline-operator",
        ],
    );
    let file = dir.join("p.yml");
    write(
        &file,
        "resources:\n- name: r\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
         jobs:\n- name: j\n  plan:\n  - get: r\n",
    );
    admin(
        url,
        &[
            "set-pipeline",
            "--team",
            "red",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
        ],
    );
}

fn oidc_config(issuer: &str) -> String {
    format!(
        "[web]\nadmin_token = \"{ADMIN}\"\n[web.oidc]\nissuer = \"{issuer}\"\nclient_id = \"gantry\"\n\
         client_secret = \"gantry-secret\"\ndisplay_name = \"Test IdP\"\n"
    )
}

/// Polls `expr` in the page until it gives `want`.
fn wait_text(browser: &mut Browser, what: &str, expr: &str, want: &str) {
    wait_for(what, Duration::from_secs(30), || {
        (browser.try_text(expr).as_deref() == Some(want)).then_some(())
    });
}

/// On the provider's pages: fills its sign-in form as `login` when it
/// shows, and agrees on its consent page, until the page is where
/// `arrived` says (the page it came from must not count: the click that
/// leaves it may not have taken effect at the first look).
fn through_provider(
    browser: &mut Browser,
    issuer: &str,
    login: &str,
    what: &str,
    arrived: impl Fn(&str) -> bool,
) {
    wait_for(
        &format!("the provider's pages to lead to {what}"),
        Duration::from_secs(60),
        || {
            let here = browser.try_text("location.href")?;
            if !here.starts_with(issuer) && arrived(&here) {
                return Some(());
            }
            if !here.starts_with(issuer) {
                return None;
            }
            let form = browser.try_text(
                "document.querySelector('input[name=login]') ? 'login' : \
                 (document.querySelector('input[name=prompt][value=consent]') ? 'consent' : '')",
            )?;
            match form.as_str() {
                "login" => {
                    browser.try_text(&format!(
                        "document.querySelector('input[name=login]').value = '{login}';\
                         document.querySelector('input[name=password]').value = 'any';\
                         document.querySelector('input[name=login]').form.submit(); ''"
                    ));
                }
                "consent" => {
                    browser.try_text(
                        "document.querySelector('input[name=prompt][value=consent]').form.submit(); ''",
                    );
                }
                _ => {}
            }
            None
        },
    );
}

#[test]
fn a_person_signs_in_through_a_real_provider_in_chromium_and_with_gantry_login() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (web_port, idp_port) = (free_port(), free_port());
    let idp = start_provider(
        dir,
        idp_port,
        web_port,
        r#"{"alice": ["red-ops", "other"]}"#,
    );
    let issuer = idp.url.clone();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web_at(dir, &db, &oidc_config(&issuer), web_port, "web.log");
    let url = web.url.clone();
    red_ops(dir, &url);
    let shots = screenshot_dir();
    let mut browser = Browser::launch(&chromium, dir);

    // The sign-in page offers the provider; through its own forms, alice
    // lands on the dashboard as the team her group gives.
    browser.call(
        "Page.navigate",
        serde_json::json!({ "url": format!("{url}/") }),
    );
    wait_text(
        &mut browser,
        "the sign-in page",
        "location.pathname",
        "/login",
    );
    wait_text(
        &mut browser,
        "the provider's button",
        "document.getElementById('provider').hidden ? '' : document.getElementById('provider-link').textContent",
        "Sign in with Test IdP",
    );
    // No local users here: no password form.
    assert_eq!(
        browser
            .try_text("String(document.getElementById('signin').hidden)")
            .as_deref(),
        Some("true")
    );
    browser.screenshot(&shots.join("oidc-signin.png"));
    browser.try_text("document.getElementById('provider-link').click(); ''");
    // The dashboard itself, not the sign-in page the click leaves.
    let dashboard = format!("{url}/");
    through_provider(&mut browser, &issuer, "alice", "the dashboard", |here| {
        here == dashboard
    });
    // What the page shows, said if the wait fails. (It failed now and
    // then in full runs: the provider's pages were left unfilled, as the
    // wait for them ended at once while the click had not yet left
    // `/login`, which began with the dashboard's URL.)
    let mut seen = String::new();
    wait_until("the dashboard as team red", Duration::from_secs(90), || {
        let page = browser.try_text(
            "location.href + ' | viewer=' + document.getElementById('viewer')?.textContent \
             + ' | signout hidden=' + document.getElementById('signout')?.hidden \
             + ' | ' + (document.body?.innerText ?? '').slice(0, 300)",
        );
        seen = page.clone().unwrap_or_default();
        let viewer = browser.try_text("document.getElementById('viewer')?.textContent");
        let out = browser.try_text("String(document.getElementById('signout')?.hidden)");
        match (viewer, out) {
            (Some(v), Some(o)) if v == "team red" && o == "false" => Ok(()),
            _ => Err(format!("the page: {seen}")),
        }
    });
    browser.screenshot(&shots.join("oidc-signed-in.png"));
    let token = session_cookie(&mut browser).expect("the session cookie");
    let me = who(&url, &token);
    assert_eq!(me["user"], "oidc:alice", "{me}");
    assert_eq!(me["role"], "pipeline-operator", "{me}");
    assert_eq!(me["team"], "red", "{me}");

    // She triggers the job from the page (its CSRF token).
    let status = browser.eval(
        "gantry.act('POST', '/api/v1/teams/red/pipelines/p/jobs/j/builds').then(r => r.status)",
    );
    assert_eq!(status, 200);
    let builds: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/teams/red/pipelines/p/jobs/j/builds"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(builds.as_array().unwrap().len(), 1);
    assert_eq!(builds[0]["created_by"], "user:oidc:alice", "{builds}");

    // Signing out clears the cookie; the token is refused.
    browser.eval("document.getElementById('signout').click()");
    wait_text(
        &mut browser,
        "the sign-in page again",
        "location.pathname",
        "/login",
    );
    assert!(
        session_cookie(&mut browser).is_none(),
        "the cookie is still set"
    );
    let answer = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);

    // `gantry login` without -u prints the sign-in URL and takes the token
    // on its loopback callback, which the browser is sent to.
    let mut login = gantry()
        .env("HOME", &home)
        .env_remove("GANTRY_TOKEN")
        .env_remove("GANTRY_TARGET")
        .args(["login", "-c", &url, "-n", "red", "-t", "idp"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(login.stdout.take().unwrap()).lines();
    let said = lines.next().unwrap().unwrap();
    assert_eq!(said, "sign in with Test IdP in a browser on this machine:");
    let sign_in_url = lines.next().unwrap().unwrap().trim().to_string();
    assert!(
        sign_in_url.starts_with(&format!("{url}/auth/oidc/login?cli_port=")),
        "{sign_in_url}"
    );
    browser.call("Page.navigate", serde_json::json!({ "url": sign_in_url }));
    let cli_port = sign_in_url
        .split("cli_port=")
        .nth(1)
        .and_then(|rest| rest.split('&').next())
        .expect("the CLI's port")
        .to_string();
    let cli_page = format!("http://127.0.0.1:{cli_port}/");
    through_provider(
        &mut browser,
        &issuer,
        "alice",
        "gantry login's page",
        |here| here.starts_with(&cli_page),
    );
    wait_text(
        &mut browser,
        "gantry login's page",
        "document.body?.innerText ?? ''",
        "Signed in: gantry login has the token. You may close this tab.",
    );
    let status = wait_child(&mut login, Duration::from_secs(30));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    login
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "gantry login: {err}");
    assert_eq!(
        rest,
        ["target idp saved: oidc:alice is pipeline-operator of team red"]
    );
    let rc = home.join(".gantryrc");
    assert_eq!(
        std::fs::metadata(&rc).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let status_out = gantry()
        .env("HOME", &home)
        .env_remove("GANTRY_TOKEN")
        .args(["-t", "idp", "status"])
        .output()
        .unwrap();
    assert_eq!(
        text(&status_out).0.trim(),
        "signed in: user oidc:alice, pipeline-operator of team red"
    );
}

/// `/auth/PROVIDER/login` called `n` times, 16 at a time, by no one in
/// particular: how many were not sent on to the provider (302).
fn anonymous_sign_in_starts(url: &str, provider: &str, n: usize) -> usize {
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let url = format!("{url}/auth/{provider}/login");
            std::thread::spawn(move || {
                let client = no_redirects();
                (t..n)
                    .step_by(16)
                    .filter(|_| {
                        client
                            .get(&url)
                            .send()
                            .map_or(true, |r| r.status().as_u16() != 302)
                    })
                    .count()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

#[test]
fn twenty_thousand_anonymous_sign_in_starts_leave_a_real_sign_in_working() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (web_port, idp_port) = (free_port(), free_port());
    let idp = start_provider(dir, idp_port, web_port, r#"{"alice": ["red-ops"]}"#);
    let issuer = idp.url.clone();
    // PostgreSQL, shared by web nodes (the table of sign-ins under way
    // they once shared is what a loop on these routes filled).
    let db = TestDb::new(DbKind::Postgres);
    // GitHub's sign-in starts without reaching GitHub: a stand-in that is
    // never called.
    let config = format!(
        "{}[web.github]\nclient_id = \"gh\"\nclient_secret = \"gh-secret\"\n\
         web_url = \"http://127.0.0.1:9\"\napi_url = \"http://127.0.0.1:9\"\n",
        oidc_config(&issuer)
    );
    let web = start_web_at(dir, &db, &config, web_port, "web.log");
    let url = web.url.clone();
    red_ops(dir, &url);

    let started = std::time::Instant::now();
    let refused = anonymous_sign_in_starts(&url, "oidc", 10_000)
        + anonymous_sign_in_starts(&url, "github", 10_000);
    eprintln!("20000 anonymous sign-in starts in {:?}", started.elapsed());
    assert_eq!(refused, 0, "every anonymous start is sent to its provider");

    // A person then signs in through the real provider.
    let mut browser = Browser::launch(&chromium, dir);
    browser.call(
        "Page.navigate",
        serde_json::json!({ "url": format!("{url}/auth/oidc/login?team=red") }),
    );
    let dashboard = format!("{url}/");
    through_provider(&mut browser, &issuer, "alice", "the dashboard", |here| {
        here == dashboard
    });
    let token = wait_for("the session cookie", Duration::from_secs(30), || {
        session_cookie(&mut browser)
    });
    let me = who(&url, &token);
    assert_eq!(me["user"], "oidc:alice", "{me}");
    assert_eq!(me["team"], "red", "{me}");
}

/// An issuer of the test's own: its metadata, one published RSA key
/// (`kid` "k1"), and a token endpoint answering, for each code, the ID
/// token the test put there.
struct FakeIssuer {
    url: String,
    tokens: Arc<Mutex<BTreeMap<String, String>>>,
    key_pem: Vec<u8>,
    other_pem: Vec<u8>,
}

/// Who `token` is (`GET /api/v1/user`).
pub(crate) fn who(url: &str, token: &str) -> serde_json::Value {
    reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(token)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// A stand-in HTTP server on loopback: each request's path (with its
/// query), `Authorization` header and body go to `answer`, whose JSON is
/// answered with 200. Answers its URL.
pub(crate) fn stand_in(answer: impl Fn(&str, &str, &[u8]) -> String + Send + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap_or_default();
            let (mut length, mut auth) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = line["authorization:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            let path = first.split_whitespace().nth(1).unwrap_or_default();
            let json = answer(path, &auth, &body);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
                json.len()
            );
        }
    });
    url
}

/// An RSA key made by openssl: its PEM and its JWK modulus.
fn rsa_key(dir: &Path, name: &str) -> (Vec<u8>, String) {
    let path = dir.join(format!("{name}.pem"));
    let ok = Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&path)
        .arg("2048")
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = Command::new("openssl")
        .args(["rsa", "-noout", "-modulus", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    let hex = hex.trim().trim_start_matches("Modulus=");
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    (std::fs::read(&path).unwrap(), n)
}

impl FakeIssuer {
    fn start(dir: &Path) -> FakeIssuer {
        let (key_pem, n) = rsa_key(dir, "published");
        let (other_pem, _) = rsa_key(dir, "forger");
        let tokens: Arc<Mutex<BTreeMap<String, String>>> = Default::default();
        let served = tokens.clone();
        let metadata: Arc<Mutex<String>> = Default::default();
        let jwks = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": n, "e": "AQAB"}
        ]})
        .to_string();
        let told = metadata.clone();
        let url = stand_in(move |path, _auth, body| match path {
            "/.well-known/openid-configuration" => told.lock().unwrap().clone(),
            "/jwks" => jwks.clone(),
            "/token" => {
                let form = url_pairs(&String::from_utf8_lossy(body));
                let code = form.get("code").cloned().unwrap_or_default();
                // A code is taken once, as a real provider takes it
                // (RFC 6749 4.1.2): a second exchange gets no token.
                let token = served.lock().unwrap().remove(&code).unwrap_or_default();
                serde_json::json!({"id_token": token, "access_token": "at", "token_type": "Bearer"})
                    .to_string()
            }
            _ => "{}".to_string(),
        });
        *metadata.lock().unwrap() = serde_json::json!({
            "issuer": url,
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "jwks_uri": format!("{url}/jwks"),
        })
        .to_string();
        FakeIssuer {
            url,
            tokens,
            key_pem,
            other_pem,
        }
    }

    /// The claims of a good ID token for `user` of this sign-in.
    fn claims(&self, user: &str, nonce: &str) -> serde_json::Value {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        serde_json::json!({
            "iss": self.url, "aud": "gantry", "sub": format!("sub-{user}"),
            "iat": now, "exp": now + 300, "nonce": nonce,
            "preferred_username": user, "groups": ["red-ops"],
        })
    }

    /// `claims` signed RS256 with the published key (`forged`: another).
    fn sign(&self, claims: &serde_json::Value, forged: bool) -> String {
        let pem = if forged {
            &self.other_pem
        } else {
            &self.key_pem
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some("k1".into());
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem).unwrap();
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }
}

/// The pairs of a query string or form body.
pub(crate) fn url_pairs(query: &str) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

/// A sign-in begun on the node: its state, nonce (OpenID Connect's),
/// PKCE challenge and browser cookie.
pub(crate) struct Begun {
    pub(crate) state: String,
    nonce: String,
    pub(crate) challenge: String,
    cookie: String,
}

pub(crate) fn no_redirects() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Begins a sign-in through `provider` (`oidc`, `github`) to team red.
pub(crate) fn begin(url: &str, provider: &str) -> Begun {
    let answer = no_redirects()
        .get(format!("{url}/auth/{provider}/login?team=red"))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 302);
    let to = answer.headers()["location"].to_str().unwrap().to_string();
    let cookie = answer.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_string();
    let q = url_pairs(to.split_once('?').unwrap().1);
    assert_eq!(q["code_challenge_method"], "S256");
    Begun {
        state: q["state"].clone(),
        nonce: q.get("nonce").cloned().unwrap_or_default(),
        challenge: q["code_challenge"].clone(),
        cookie,
    }
}

/// The callback with `code` for `begun` (with its cookie unless
/// `other_browser`): status, error message (if JSON) and whether a
/// session cookie was set.
pub(crate) fn finish(
    url: &str,
    provider: &str,
    begun: &Begun,
    code: &str,
    other_browser: bool,
) -> (u16, String, Option<String>) {
    let mut req = no_redirects().get(format!(
        "{url}/auth/{provider}/callback?code={code}&state={}",
        begun.state
    ));
    if !other_browser {
        req = req.header("cookie", &begun.cookie);
    }
    let answer = req.send().unwrap();
    let status = answer.status().as_u16();
    let session = answer.headers().get_all("set-cookie").iter().find_map(|c| {
        let value = c.to_str().unwrap().strip_prefix("gantry_session=")?;
        let value = value.split(';').next().unwrap_or_default();
        (!value.is_empty()).then(|| value.to_string())
    });
    let body: serde_json::Value = answer.json().unwrap_or_default();
    (
        status,
        body["error"].as_str().unwrap_or_default().to_string(),
        session,
    )
}

/// What a case is, the ID token the provider answers for it, and the
/// status and part of the error the node must answer.
type Case<'a> = (&'a str, Box<dyn Fn(&Begun) -> String + 'a>, u16, &'a str);

#[test]
fn forged_expired_misaddressed_and_replayed_sign_ins_are_refused_and_leave_no_session() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let issuer = FakeIssuer::start(dir);
    // PostgreSQL here (the browser's test is on SQLite).
    let db = TestDb::new(DbKind::Postgres);
    let web = start_web_at(dir, &db, &oidc_config(&issuer.url), 0, "web.log");
    let url = web.url.as_str();
    red_ops(dir, url);
    let sessions =
        || db.query_value("SELECT COUNT(*) FROM api_tokens WHERE user_name LIKE 'oidc:%'");

    let cases: Vec<Case> = vec![
        (
            "forged (another key)",
            Box::new(|b: &Begun| issuer.sign(&issuer.claims("alice", &b.nonce), true)),
            401,
            "signature does not verify",
        ),
        (
            "expired",
            Box::new(|b: &Begun| {
                let mut c = issuer.claims("alice", &b.nonce);
                c["exp"] = serde_json::json!(c["iat"].as_u64().unwrap() - 3600);
                issuer.sign(&c, false)
            }),
            401,
            "has expired",
        ),
        (
            "signed with a shared key",
            Box::new(|b: &Begun| {
                let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
                header.kid = Some("k1".into());
                let key = jsonwebtoken::EncodingKey::from_secret(b"gantry-secret");
                jsonwebtoken::encode(&header, &issuer.claims("alice", &b.nonce), &key).unwrap()
            }),
            401,
            "shared key",
        ),
        (
            "unsigned (alg none)",
            Box::new(|b: &Begun| {
                let enc = |v: serde_json::Value| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
                };
                format!(
                    "{}.{}.",
                    enc(serde_json::json!({"alg": "none", "kid": "k1"})),
                    enc(issuer.claims("alice", &b.nonce))
                )
            }),
            401,
            "not a signed JWT",
        ),
        (
            "the wrong nonce",
            Box::new(|_: &Begun| issuer.sign(&issuer.claims("alice", "another-sign-in"), false)),
            401,
            "nonce",
        ),
        (
            "an unknown issuer",
            Box::new(|b: &Begun| {
                let mut c = issuer.claims("alice", &b.nonce);
                c["iss"] = serde_json::json!("https://issuer.example");
                issuer.sign(&c, false)
            }),
            401,
            "issuer is unknown",
        ),
        (
            "another client's",
            Box::new(|b: &Begun| {
                let mut c = issuer.claims("alice", &b.nonce);
                c["aud"] = serde_json::json!("someone-else");
                issuer.sign(&c, false)
            }),
            401,
            "another client",
        ),
        (
            "a person with no role",
            Box::new(|b: &Begun| {
                let mut c = issuer.claims("mallory", &b.nonce);
                c["groups"] = serde_json::json!(["nobody"]);
                issuer.sign(&c, false)
            }),
            403,
            "oidc:mallory has no role in team red",
        ),
    ];
    for (i, (what, token, status, message)) in cases.iter().enumerate() {
        let begun = begin(url, "oidc");
        let code = format!("code-{i}");
        issuer
            .tokens
            .lock()
            .unwrap()
            .insert(code.clone(), token(&begun));
        let (got, error, session) = finish(url, "oidc", &begun, &code, false);
        assert_eq!(got, *status, "{what}: {error}");
        assert!(
            error.contains(message),
            "{what}: {error:?} should say {message:?}"
        );
        assert!(session.is_none(), "{what} set a session cookie");
        assert_eq!(sessions(), "0", "{what} made a token");
    }

    // Another browser than the one that began the sign-in.
    let begun = begin(url, "oidc");
    issuer.tokens.lock().unwrap().insert(
        "good".into(),
        issuer.sign(&issuer.claims("alice", &begun.nonce), false),
    );
    let (got, error, session) = finish(url, "oidc", &begun, "good", true);
    assert_eq!((got, session), (400, None), "{error}");
    assert!(error.contains("another browser"), "{error}");
    // That left the state to the browser that began the sign-in.
    let (got, error, session) = finish(url, "oidc", &begun, "good", false);
    assert_eq!(got, 302, "{error}");
    assert!(session.is_some(), "the right browser signs in");
    assert_eq!(sessions(), "1");

    // A good token signs in once; the same answer replayed is refused.
    let begun = begin(url, "oidc");
    issuer.tokens.lock().unwrap().insert(
        "good".into(),
        issuer.sign(&issuer.claims("alice", &begun.nonce), false),
    );
    let (got, error, session) = finish(url, "oidc", &begun, "good", false);
    assert_eq!(got, 302, "{error}");
    let token = session.expect("a session cookie");
    let me = who(url, &token);
    assert_eq!(me["user"], "oidc:alice", "{me}");
    assert_eq!(me["role"], "pipeline-operator", "{me}");
    assert_eq!(sessions(), "2");
    // Replayed, cookie and all: the node keeps nothing of a sign-in under
    // way, so it is the provider, which takes a code once, that refuses.
    let (got, error, session) = finish(url, "oidc", &begun, "good", false);
    assert_eq!((got, session), (401, None), "{error}");
    assert_eq!(sessions(), "2");
    // A cookie the node did not seal (or altered) opens nothing.
    let mut forged = begin(url, "oidc");
    forged.cookie.push('A');
    let (got, error, session) = finish(url, "oidc", &forged, "good", false);
    assert_eq!((got, session), (400, None), "{error}");
    assert!(error.contains("unknown or was already used"), "{error}");
    assert_eq!(sessions(), "2");

    // A sign-in begun on one node finishes on another sharing the
    // database (and so its key): nothing of it is kept on the first.
    std::fs::create_dir_all(dir.join("second")).unwrap();
    let shared_store = format!(
        "[web]\nartifacts_dir = \"{}\"\n",
        dir.join("web/artifacts").display()
    );
    let other_node = start_web_at(
        &dir.join("second"),
        &db,
        &oidc_config(&issuer.url).replacen("[web]\n", &shared_store, 1),
        0,
        "web.log",
    );
    let begun = begin(url, "oidc");
    issuer.tokens.lock().unwrap().insert(
        "elsewhere".into(),
        issuer.sign(&issuer.claims("alice", &begun.nonce), false),
    );
    let (got, error, session) = finish(&other_node.url, "oidc", &begun, "elsewhere", false);
    assert_eq!(got, 302, "{error}");
    assert!(session.is_some(), "signed in through the other node");
    assert_eq!(sessions(), "3");
    drop(other_node);

    // The provider's refusal is said as such.
    let begun = begin(url, "oidc");
    let answer = no_redirects()
        .get(format!(
            "{url}/auth/oidc/callback?error=access_denied&error_description=no%20thanks&state={}",
            begun.state
        ))
        .header("cookie", &begun.cookie)
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let body: serde_json::Value = answer.json().unwrap();
    assert_eq!(
        body["error"],
        "the provider refused the sign-in: access_denied (no thanks)"
    );

    // A node told another issuer than the provider says it is refuses to
    // send anyone there.
    let other = dir.join("other");
    let lying = start_web_at(
        &other,
        &TestDb::new(DbKind::Sqlite),
        &oidc_config(&issuer.url.replace("127.0.0.1", "localhost")),
        0,
        "web.log",
    );
    let answer = no_redirects()
        .get(format!("{}/auth/oidc/login", lying.url))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 502);
    let body: serde_json::Value = answer.json().unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("says its issuer is"),
        "{body}"
    );
}
