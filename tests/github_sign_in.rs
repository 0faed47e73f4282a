//! End to end: people sign in through GitHub (`[web.github]`). GitHub
//! itself is out of reach here (no network but package registries), so a
//! stand-in answers GitHub's documented OAuth and REST endpoints: it
//! checks the client secret, the redirect URI and the PKCE verifier
//! against the challenge the node sent, as GitHub does, and says who the
//! token is and which organisations and teams they are in. The node makes
//! `github:LOGIN` of team red through the role given to `--github-team`,
//! refuses a code GitHub refuses, and an answer replayed signs no one in.
//! `fly login`'s browser flow through GitHub (`?fly_port=`) ends at
//! `/fly_success`, which hands fly a token of its own.

use crate::common;

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use common::*;
use sha2::Digest as _;

use crate::oidc::{begin, finish, no_redirects, stand_in, url_pairs, who};
use crate::people::ADMIN;

/// The challenge of the sign-in the stand-in may finish.
type Expected = Arc<Mutex<Option<String>>>;

/// A stand-in for github.com and api.github.com: the access token
/// `gho_good` for the code `good` (when the verifier matches `expected`),
/// GitHub's refusal for any other (and for `good` once used).
fn github(expected: Expected) -> String {
    stand_in(move |path, auth, body| {
        let route = path.split('?').next().unwrap_or_default();
        match route {
            "/login/oauth/access_token" => {
                let form = url_pairs(&String::from_utf8_lossy(body));
                let verifier = form.get("code_verifier").cloned().unwrap_or_default();
                let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(sha2::Sha256::digest(verifier.as_bytes()));
                let good = form.get("code").map(String::as_str) == Some("good")
                    && form.get("client_id").map(String::as_str) == Some("gh-client")
                    && form.get("client_secret").map(String::as_str) == Some("gh-secret")
                    && form
                        .get("redirect_uri")
                        .is_some_and(|r| r.ends_with("/auth/github/callback"))
                    && expected.lock().unwrap().as_deref() == Some(challenge.as_str());
                if good {
                    // GitHub takes a code once.
                    *expected.lock().unwrap() = None;
                }
                // GitHub answers a refused code with 200 and an error.
                match good {
                    true => r#"{"access_token":"gho_good","token_type":"bearer","scope":"read:org,read:user"}"#.to_string(),
                    false => r#"{"error":"bad_verification_code","error_description":"The code passed is incorrect or expired."}"#.to_string(),
                }
            }
            _ if auth != "Bearer gho_good" => r#"{"message":"Bad credentials"}"#.to_string(),
            "/user" => r#"{"login":"Alice","id":1}"#.to_string(),
            "/user/orgs" => r#"[{"login":"Acme"}]"#.to_string(),
            "/user/teams" => {
                r#"[{"slug":"ops","organization":{"login":"Acme"}},{"slug":"web","organization":{"login":"Other"}}]"#
                    .to_string()
            }
            _ => "{}".to_string(),
        }
    })
}

#[test]
fn a_github_team_member_signs_in_with_the_teams_role_and_a_refused_code_makes_no_session() {
    let expected: Expected = Default::default();
    let gh = github(expected.clone());
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir,
        &db,
        &format!(
            "[web]\nadmin_token = \"{ADMIN}\"\n[web.github]\nclient_id = \"gh-client\"\n\
             client_secret = \"gh-secret\"\nweb_url = \"{gh}\"\napi_url = \"{gh}\"\n"
        ),
    );
    let url = web.url.as_str();
    let out = gantry()
        .args(["--url", url, "--token", ADMIN])
        .args([
            "set-team",
            "red",
            "--github-team",
            "ACME:ops",
            "--role",
            "member",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let info: serde_json::Value = reqwest::blocking::get(format!("{url}/api/v1/info"))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(info["sign_in"]["github"], "GitHub", "{info}");

    // GitHub refuses the code: no session.
    let begun = begin(url, "github");
    *expected.lock().unwrap() = Some(begun.challenge.clone());
    let (status, error, session) = finish(url, "github", &begun, "stale", false);
    assert_eq!((status, session.as_deref()), (401, None), "{error}");
    assert_eq!(
        error,
        "GitHub refused the code (200 OK): The code passed is incorrect or expired."
    );

    // A good code: alice, in acme's team ops, is a member of red.
    let begun = begin(url, "github");
    *expected.lock().unwrap() = Some(begun.challenge.clone());
    let (status, error, session) = finish(url, "github", &begun, "good", false);
    assert_eq!(status, 302, "{error}");
    let token = session.expect("a session cookie");
    let me = who(url, &token);
    assert_eq!(
        (&me["user"], &me["team"], &me["role"]),
        (
            &serde_json::json!("github:alice"),
            &serde_json::json!("red"),
            &serde_json::json!("member")
        ),
        "{me}"
    );
    // The same answer again (cookie and all) is refused: GitHub takes a
    // code once.
    let (status, error, session) = finish(url, "github", &begun, "good", false);
    assert_eq!((status, session), (401, None), "{error}");
    fly_signs_in_through_github(url, &expected);
    // Taking the team's role away counts at the token's next request.
    let out = gantry()
        .args(["--url", url, "--token", ADMIN])
        .args(["set-team", "red", "--remove-group", "github:acme:ops"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let answer = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/user"))
        .bearer_auth(&token)
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
}

/// `fly login`'s browser flow through GitHub: the sign-in begun with fly's
/// port ends at `/fly_success`, which hands fly a token of alice's.
fn fly_signs_in_through_github(url: &str, expected: &Expected) {
    let fly_port = 4123;
    let answer = no_redirects()
        .get(format!("{url}/auth/github/login?fly_port={fly_port}"))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 302);
    let to = answer.headers()["location"].to_str().unwrap().to_string();
    let cookie = answer.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let q = url_pairs(to.split_once('?').unwrap().1);
    *expected.lock().unwrap() = Some(q["code_challenge"].clone());
    let back = no_redirects()
        .get(format!(
            "{url}/auth/github/callback?code=good&state={}",
            q["state"]
        ))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(back.status().as_u16(), 302);
    assert_eq!(
        back.headers()["location"],
        format!("/fly_success?fly_port={fly_port}").as_str()
    );
    let session = back
        .headers()
        .get_all("set-cookie")
        .iter()
        .find_map(|c| {
            let value = c.to_str().ok()?.strip_prefix("gantry_session=")?;
            value.split(';').next().map(str::to_string)
        })
        .expect("a session cookie");
    let handed = no_redirects()
        .get(format!("{url}/fly_success?fly_port={fly_port}"))
        .header("cookie", format!("gantry_session={session}"))
        .send()
        .unwrap();
    assert_eq!(handed.status().as_u16(), 302);
    let to = handed.headers()["location"].to_str().unwrap().to_string();
    let query = to
        .strip_prefix(&format!("http://127.0.0.1:{fly_port}/?"))
        .unwrap_or_else(|| panic!("{to}"));
    let token = url_pairs(query)["token"].clone();
    let token = token
        .strip_prefix("bearer ")
        .unwrap_or_else(|| panic!("{token}"));
    assert_ne!(token, session, "fly gets a sign-in of its own");
    let me = who(url, token);
    assert_eq!(
        (&me["user"], &me["team"]),
        (
            &serde_json::json!("github:alice"),
            &serde_json::json!("red")
        ),
        "{me}"
    );
}
