//! End to end: signing in as fly does against Concourse, with the
//! requests fly sends (read from `fly/commands/login.go`, `status.go`,
//! `userinfo.go` and `fly/rc`) and the answers decoded into Concourse's
//! types as fly's Go decodes them (every field fly reads present, with
//! its JSON type; unknown fields ignored, as Go's decoder does).
//!
//! - `fly login -u -p`: `GET /api/v1/info` (fly compares the major.minor
//!   of `version` with its own), then Go's oauth2 password grant at
//!   `/sky/issuer/token` (client `fly` in basic auth; on an error it tries
//!   again with the client in the form), then `GET /api/v1/user` with
//!   `Authorization: bearer TOKEN` (the team must be among `teams`);
//!   `fly status` and `fly userinfo` read `/api/v1/user` the same way. The
//!   token then acts in each team its person has a role in, with that role.
//!   concoursepy signs in as a browser does: `/sky/login`'s form, posted,
//!   and the `skymarshal_auth` cookie.
//! - `fly login` (the browser): fly listens on a loopback port and opens
//!   `/login?fly_port=PORT`; the person signs in there and the browser
//!   ends at fly's listener with `?token=bearer%20TOKEN`, which fly sends
//!   back to `/fly_success?noop=true`. The test plays fly's listener with
//!   a loopback socket and the browser with an HTTP client.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::time::Duration;

use common::*;
use serde::Deserialize;

const ADMIN: &str = "adm1n";

/// Concourse's `atc.Info`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Info {
    version: String,
    worker_version: String,
    feature_flags: BTreeMap<String, bool>,
    external_url: String,
    cluster_name: String,
}

/// The token Go's oauth2 decodes (`internal/token.go`'s `tokenJSON`).
#[derive(Debug, Deserialize)]
struct Token {
    access_token: String,
    token_type: String,
    expires_in: i64,
}

/// An OAuth 2 error (RFC 6749 5.2), as Go's oauth2 reads it into its
/// `RetrieveError`.
#[derive(Debug, Deserialize)]
struct TokenError {
    error: String,
    error_description: String,
}

/// Concourse's `atc.UserInfo`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct UserInfo {
    sub: String,
    name: String,
    user_id: String,
    user_name: String,
    email: String,
    is_admin: bool,
    is_system: bool,
    teams: BTreeMap<String, Vec<String>>,
    connector: String,
    display_user_id: String,
}

/// A web node with the admin token and alice, a member of red and a
/// viewer of blue (and nothing of green).
fn node(dir: &std::path::Path) -> (Server, reqwest::blocking::Client) {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = crate::people::hash(&home, "alice pw");
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!(
            "[web]\nadmin_token = \"{ADMIN}\"\nconcourse_version = \"7.14.3\"\ncluster_name = \"gantry-ci\"\n\
             [web.users]\nalice = \"{alice}\"\n"
        ),
    );
    for (team, role) in [("red", "member"), ("blue", "viewer"), ("green", "owner")] {
        let user = if team == "green" { "bob" } else { "alice" };
        let out = client_as(
            &web.url,
            ADMIN,
            &["set-team", team, "--user", user, "--role", role],
        );
        assert!(out.status.success(), "{:?}", text(&out));
    }
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    (web, http)
}

/// fly's `GET /api/v1/user` with `token` (`bearer`, as fly saves it).
fn user_info(http: &reqwest::blocking::Client, url: &str, token: &str) -> UserInfo {
    let answer = http
        .get(format!("{url}/api/v1/user"))
        .header("Authorization", format!("bearer {token}"))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    answer.json().unwrap()
}

/// Go's oauth2 password grant as fly sends it; `in_header`: the client in
/// basic auth (its first try), else in the form (its second).
fn password_grant(
    http: &reqwest::blocking::Client,
    url: &str,
    password: &str,
    in_header: bool,
) -> reqwest::blocking::Response {
    let mut form = vec![
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", password),
        ("scope", "openid profile email federated:id groups"),
    ];
    let mut req = http.post(format!("{url}/sky/issuer/token"));
    if in_header {
        req = req.basic_auth("fly", Some("Zmx5"));
    } else {
        form.extend([("client_id", "fly"), ("client_secret", "Zmx5")]);
    }
    let body = serde_urlencoded::to_string(&form).unwrap();
    req.header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .unwrap()
}

#[test]
fn fly_logs_in_with_a_password_and_its_token_acts_in_each_of_its_teams() {
    let dir = tempfile::tempdir().unwrap();
    let (web, http) = node(dir.path());
    let url = web.url.as_str();

    // fly's target validation: Concourse's info, the configured release.
    let info: Info = http
        .get(format!("{url}/api/v1/info"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(info.version, "7.14.3");
    assert_eq!(info.worker_version, "2.5");
    assert_eq!(info.cluster_name, "gantry-ci");
    assert_eq!(info.external_url, url);
    assert_eq!(info.feature_flags.get("global_resources"), Some(&true));
    assert!(info.feature_flags.contains_key("build_rerun"), "{info:?}");
    let raw: serde_json::Value = http
        .get(format!("{url}/api/v1/info"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(raw["gantry_version"], env!("CARGO_PKG_VERSION"), "{raw}");

    // A wrong password: the status and OAuth error Go's oauth2 reports,
    // on both of its tries.
    for in_header in [true, false] {
        let wrong = password_grant(&http, url, "nope", in_header);
        assert_eq!(wrong.status().as_u16(), 401);
        let wrong: TokenError = wrong.json().unwrap();
        assert_eq!(wrong.error, "access_denied", "{wrong:?}");
        assert!(!wrong.error_description.is_empty());
    }
    // Not fly's client.
    let stranger = http
        .post(format!("{url}/sky/issuer/token"))
        .basic_auth("someone", Some("else"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("grant_type=password&username=alice&password=alice+pw")
        .send()
        .unwrap();
    assert_eq!(stranger.status().as_u16(), 401);
    let stranger: TokenError = stranger.json().unwrap();
    assert_eq!(stranger.error, "invalid_client");

    // `fly login -u alice -p 'alice pw'`, the client in the form too.
    let by_form: Token = password_grant(&http, url, "alice pw", false)
        .json()
        .unwrap();
    assert!(by_form.access_token.starts_with("gtk_"), "{by_form:?}");
    let answer = password_grant(&http, url, "alice pw", true);
    assert_eq!(answer.status().as_u16(), 200);
    assert_eq!(
        answer.headers().get("cache-control").unwrap(),
        "no-store",
        "RFC 6749 5.1"
    );
    let token: Token = answer.json().unwrap();
    assert!(token.token_type.eq_ignore_ascii_case("bearer"), "{token:?}");
    assert!(token.expires_in > 0, "{token:?}");
    assert_ne!(token.access_token, by_form.access_token);
    let token = token.access_token;

    // fly's verifyTeamExists, `fly status` and `fly userinfo`.
    let me = user_info(&http, url, &token);
    assert_eq!(me.user_name, "alice");
    assert!(!me.is_admin);
    assert_eq!(me.connector, "local");
    assert_eq!(me.teams.get("red"), Some(&vec!["member".to_string()]));
    assert_eq!(me.teams.get("blue"), Some(&vec!["viewer".to_string()]));
    assert!(!me.teams.contains_key("green"), "{me:?}");

    // The one token, in each team, with alice's role there.
    let send = |method: &str, path: &str, body: Option<&str>| -> u16 {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = http
            .request(method, format!("{url}{path}"))
            .header("Authorization", format!("bearer {token}"));
        if let Some(body) = body {
            req = req
                .header("Content-Type", "application/x-yaml")
                .header("X-Concourse-Config-Version", "")
                .body(body.to_string());
        }
        req.send().unwrap().status().as_u16()
    };
    let pipeline = "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: echo}}\n";
    for team in ["red", "blue"] {
        assert_eq!(
            send("GET", &format!("/api/v1/teams/{team}/pipelines"), None),
            200,
            "{team}"
        );
        assert_eq!(
            send("GET", &format!("/api/v1/teams/{team}"), None),
            200,
            "{team}"
        );
    }
    let set = |team: &str| {
        send(
            "PUT",
            &format!("/api/v1/teams/{team}/pipelines/p/config"),
            Some(pipeline),
        )
    };
    assert_eq!(set("red"), 201, "a member of red sets its pipelines");
    assert_eq!(set("blue"), 403, "a viewer of blue does not");
    assert_eq!(send("GET", "/api/v1/teams/blue/pipelines/p", None), 404);
    assert_eq!(send("GET", "/api/v1/teams/red/pipelines/p", None), 200);
    let green = send("GET", "/api/v1/teams/green/pipelines", None);
    assert!(green == 403 || green == 404, "no role in green: {green}");
    concoursepy_signs_in(&http, url);
}

/// concoursepy's `Api.auth`: reads `/sky/login`'s form, posts `login` and
/// `password` to the path it finds (`"/sky/issuer/auth/local..."`), and
/// takes the token from the `skymarshal_auth` cookie (`"Bearer TOKEN"`).
fn concoursepy_signs_in(http: &reqwest::blocking::Client, url: &str) {
    let page = http.get(format!("{url}/sky/login")).send().unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let page = page.text().unwrap();
    let at = page
        .find("\"/sky/issuer/auth/local")
        .expect("the form's path");
    let path = page[at + 1..].split('"').next().unwrap();
    let post = |password: &str| {
        http.post(format!("{url}{path}"))
            .form(&[("login", "alice"), ("password", password)])
            .send()
            .unwrap()
    };
    assert_eq!(
        post("nope").status().as_u16(),
        401,
        "raise_for_status raises"
    );
    let answer = post("alice pw");
    assert_eq!(answer.status().as_u16(), 302);
    let cookie = answer
        .headers()
        .get_all("set-cookie")
        .iter()
        .find_map(|c| {
            c.to_str()
                .ok()?
                .strip_prefix("skymarshal_auth=")
                .map(str::to_string)
        })
        .expect("the skymarshal_auth cookie");
    // `cookies_dict[key].split('"')[1].split()[1]`
    let quoted = cookie
        .split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("{cookie}"));
    let token = quoted.split_whitespace().nth(1).unwrap();
    assert_eq!(user_info(http, url, token).user_name, "alice");
    // Gantry's own pages do not take it as a session.
    let me = http
        .get(format!("{url}/api/v1/user"))
        .header(
            "Cookie",
            format!("skymarshal_auth={}", cookie.split(';').next().unwrap()),
        )
        .send()
        .unwrap();
    assert_eq!(me.status().as_u16(), 401);
}

/// fly's loopback listener (`listenForTokenCallback`): takes the first
/// request's `token` and, for a browser's navigation
/// (`Upgrade-Insecure-Requests`), sends it back to `/fly_success?noop=true`.
fn fly_listener(target: String) -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut navigation = false;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            if header.trim().is_empty() {
                break;
            }
            navigation |= header
                .to_ascii_lowercase()
                .starts_with("upgrade-insecure-requests:");
        }
        let target_path = line.split(' ').nth(1).unwrap_or_default();
        let query = target_path
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or_default();
        let token = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .unwrap()
            .into_iter()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v)
            .unwrap_or_default();
        let answer = if navigation {
            format!("HTTP/1.1 302 Found\r\nLocation: {target}/fly_success?noop=true\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        } else {
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
        };
        stream.write_all(answer.as_bytes()).unwrap();
        tx.send(token).unwrap();
    });
    (port, rx)
}

#[test]
fn fly_logs_in_through_the_browser_and_gets_a_token_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (web, http) = node(dir.path());
    let url = web.url.clone();
    let (port, tokens) = fly_listener(url.clone());

    // fly opens `/login?fly_port=PORT`: the sign-in page, whose script
    // goes on to `/fly_success?fly_port=PORT` once signed in.
    let page = http
        .get(format!("{url}/login?fly_port={port}"))
        .send()
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let page = page.text().unwrap();
    assert!(page.contains("/fly_success?fly_port="), "{page}");
    // Not signed in yet, `/fly_success` sends the browser to sign in.
    let early = http
        .get(format!("{url}/fly_success?fly_port={port}"))
        .send()
        .unwrap();
    assert_eq!(early.status().as_u16(), 302);
    assert_eq!(
        early.headers()["location"],
        format!("/login?fly_port={port}").as_str()
    );
    // The page's form: the session as a cookie.
    let signed_in = http
        .post(format!("{url}/api/v1/sessions"))
        .json(&serde_json::json!({"username": "alice", "password": "alice pw", "cookie": true}))
        .send()
        .unwrap();
    assert_eq!(signed_in.status().as_u16(), 201);
    let cookie = signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|c| c.to_str().ok()?.split(';').next().map(str::to_string))
        .find(|c| c.starts_with("gantry_session="))
        .unwrap();
    let browser_token = cookie.trim_start_matches("gantry_session=").to_string();

    // The browser follows the redirects, as a browser navigates.
    let browser = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let done = browser
        .get(format!("{url}/fly_success?fly_port={port}"))
        .header("Cookie", &cookie)
        .header("Upgrade-Insecure-Requests", "1")
        .send()
        .unwrap();
    assert_eq!(done.status().as_u16(), 200);
    assert!(
        done.url().as_str().ends_with("/fly_success?noop=true"),
        "{}",
        done.url()
    );
    assert!(done.text().unwrap().contains("fly has its token"));

    // fly's listener got `bearer TOKEN`, which fly splits at the space.
    let got = tokens.recv_timeout(Duration::from_secs(10)).unwrap();
    let (kind, token) = got.split_once(' ').unwrap();
    assert!(kind.eq_ignore_ascii_case("bearer"), "{got}");
    assert_ne!(token, browser_token, "fly gets a sign-in of its own");
    let me = user_info(&http, &url, token);
    assert_eq!(me.user_name, "alice");
    assert_eq!(me.teams.get("red"), Some(&vec!["member".to_string()]));
    // Signing the browser out leaves fly's token working.
    let out = http
        .delete(format!("{url}/api/v1/sessions/current"))
        .bearer_auth(&browser_token)
        .send()
        .unwrap();
    assert_eq!(out.status().as_u16(), 200);
    assert_eq!(user_info(&http, &url, token).user_name, "alice");
}
