//! The built-in credential manager end to end: a pipeline reads its
//! secrets (`gantry set-secret`) as `((vars))` when a build needs them,
//! a secret changed is what the next build reads (no `set-pipeline`), a
//! var the manager lacks errors the build naming the paths tried, and no
//! value ever shows: not in `gantry watch`, the events API, the server's
//! log, `gantry secrets`, nor in a dump of the database.

use crate::common;

use common::*;

fn ok(out: &std::process::Output) -> String {
    let text = said(out);
    assert!(out.status.success(), "{text}");
    text
}

/// The job's task prints every secret (with `set -x` too) and the SHA-256
/// of the registry password, which the test compares with its own.
const PIPELINE: &str = r#"
jobs:
- name: deploy
  plan:
  - task: show
    config:
      platform: linux
      params:
        PASS: ((registry.password))
        KEY: ((deploy-key))
        TOKEN: ((api-token))
        CLIENT: ((oauth))
        CLIENT_ID: ((oauth.client_id))
        VERSION: ((version))
      run:
        path: sh
        args:
        - -c
        - |
          set -x
          echo "pass=$PASS token=$TOKEN id=$CLIENT_ID version=$VERSION"
          echo "$KEY"
          echo "$CLIENT"
          printf 'sha=%s\n' "$(printf %s "$PASS" | sha256sum | cut -d' ' -f1)"
- name: broken
  plan:
  - task: needs-more
    config:
      platform: linux
      params: {X: ((no-such-secret))}
      run: {path: "true"}
"#;

fn secrets_fill_builds_and_never_show(kind: DbKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(kind);
    let q = quickstart_runc(dir.path(), &db);
    let url = &q.url;
    let u = || uuid::Uuid::new_v4().simple().to_string();
    let pass = format!("reg-pass-{}", u());
    let key_lines = [format!("MIIEpAIBAAKCAQEA{}", u()), format!("q8x{}Zk", u())];
    let key = format!(
        "-----BEGIN RSA PRIVATE KEY-----\n{}\n{}\n-----END RSA PRIVATE KEY-----\n",
        key_lines[0], key_lines[1]
    );
    let token = format!("tok-{}", u());
    let (client_id, client_secret) = (format!("cid-{}", u()), format!("cs-{}", u()));
    let oauth = format!(r#"{{"client_id": "{client_id}", "client_secret": "{client_secret}"}}"#);

    set_secret(url, &["registry"], &format!(r#"{{"password": "{pass}"}}"#));
    set_secret(url, &["deploy-key"], &key);
    set_secret(url, &["api-token", "-p", "p"], &token);
    // A team secret of the same name is shadowed by the pipeline's.
    set_secret(url, &["api-token"], "team-token-not-used");
    set_secret(url, &["oauth"], &oauth);

    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    let f = file.to_str().unwrap();
    ok(&client(
        url,
        &["set-pipeline", "-p", "p", "-c", f, "-v", "version=1.2.3"],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "p"]));

    let shown = ok(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        shown.contains(&format!("sha={}", sha256_hex(&pass))),
        "{shown}"
    );
    assert!(shown.contains("version=1.2.3"), "{shown}");
    assert!(
        shown.contains("pass=((redacted)) token=((redacted)) id=((redacted))"),
        "{shown}"
    );
    assert!(
        shown.contains("((redacted))\n((redacted))\n((redacted))"),
        "the key, line by line: {shown}"
    );

    // Rotated in the manager: the next build reads the new value.
    let new_pass = format!("reg-pass-{}", u());
    set_secret(
        url,
        &["registry"],
        &format!(r#"{{"password": "{new_pass}"}}"#),
    );
    let again = ok(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        again.contains(&format!("sha={}", sha256_hex(&new_pass))),
        "{again}"
    );

    // A var nobody stored errors the build, naming it and where it looked.
    let broken = client(url, &["trigger-job", "-j", "p/broken", "--watch"]);
    let said = said(&broken);
    assert!(!broken.status.success(), "{said}");
    assert!(said.contains("((no-such-secret))"), "{said}");
    assert!(
        said.contains("/concourse/main/p/no-such-secret, /concourse/main/no-such-secret"),
        "{said}"
    );

    // Names and scopes are listed, never a value.
    let listed = ok(&client(url, &["secrets", "--json"]));
    assert!(
        listed.contains("\"deploy-key\"") && listed.contains("\"pipeline\": \"p\""),
        "{listed}"
    );

    let values: Vec<&str> = vec![
        &pass,
        &new_pass,
        &key_lines[0],
        &key_lines[1],
        &token,
        &client_id,
        &client_secret,
    ];
    let mut events = String::new();
    let builds: serde_json::Value = reqwest::blocking::get(format!(
        "{url}/api/v1/teams/main/pipelines/p/jobs/deploy/builds"
    ))
    .unwrap()
    .json()
    .unwrap();
    for b in builds.as_array().unwrap() {
        let id = b["id"].as_i64().unwrap();
        events += &reqwest::blocking::Client::new()
            .get(format!("{url}/api/v1/builds/{id}/events"))
            .header("accept", "application/x-ndjson")
            .send()
            .unwrap()
            .text()
            .unwrap();
    }
    assert!(events.contains("((redacted))"), "{events}");
    drop(q);
    let log = std::fs::read_to_string(dir.path().join("quickstart.log")).unwrap();
    let dump = dump_database(dir.path(), &db);
    for v in values {
        for (what, text) in [
            ("the watch", &shown),
            ("the watch", &again),
            ("the events API", &events),
            ("the server log", &log),
            ("the secrets list", &listed),
            ("the database dump", &dump),
        ] {
            assert!(!text.contains(v), "{v} shows in {what}");
        }
    }
}

/// Every text of a dump of the quickstart's database; the secrets in it
/// are sealed.
fn dump_database(dir: &std::path::Path, db: &TestDb) -> String {
    let text = common::dump_database(&dir.join("data").join("gantry.db"), db);
    assert!(text.contains("sealed:v2:"), "the secrets are dumped sealed");
    text
}

#[test]
fn secrets_fill_builds_and_never_show_on_sqlite() {
    secrets_fill_builds_and_never_show(DbKind::Sqlite);
}

#[test]
fn secrets_fill_builds_and_never_show_on_postgres() {
    secrets_fill_builds_and_never_show(DbKind::Postgres);
}

/// An `idtoken` var source: the task gets an ES256 JWT the web node
/// signed (redacted when printed whole); put together from its three
/// parts, it verifies with a standard JWT library against the key the
/// node serves, with the node as issuer, the audience asked and the job
/// as subject.
#[test]
fn an_idtoken_var_source_gives_a_token_that_verifies_against_the_served_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let q = quickstart_runc(dir.path(), &db);
    let url = &q.url;
    let file = dir.path().join("login.yml");
    write(
        &file,
        r#"
var_sources:
- name: idtoken
  type: idtoken
  config: {audience: [sts.example.com], subject_scope: job, expires_in: 10m}
jobs:
- name: login
  plan:
  - task: show
    config:
      platform: linux
      params: {TOKEN: ((idtoken:token))}
      run:
        path: sh
        args:
        - -c
        - |
          echo "whole=$TOKEN"
          for i in 1 2 3; do echo "part$i=$(echo "$TOKEN" | cut -d. -f$i)"; done
"#,
    );
    ok(&client(
        url,
        &["set-pipeline", "-p", "cloud", "-c", file.to_str().unwrap()],
    ));
    ok(&client(url, &["unpause-pipeline", "-p", "cloud"]));
    let shown = ok(&client(
        url,
        &["trigger-job", "-j", "cloud/login", "--watch"],
    ));
    assert!(shown.contains("whole=((redacted))"), "{shown}");
    let part = |i: usize| {
        shown
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("part{i}=")))
            .unwrap_or_else(|| panic!("part {i} in {shown}"))
            .to_string()
    };
    let token = format!("{}.{}.{}", part(1), part(2), part(3));

    let discovery: serde_json::Value =
        reqwest::blocking::get(format!("{url}/.well-known/openid-configuration"))
            .unwrap()
            .json()
            .unwrap();
    assert_eq!(discovery["issuer"], url.as_str());
    let jwks: jsonwebtoken::jwk::JwkSet =
        reqwest::blocking::get(discovery["jwks_uri"].as_str().unwrap())
            .unwrap()
            .json()
            .unwrap();
    let kid = jsonwebtoken::decode_header(&token).unwrap().kid.unwrap();
    let key = jsonwebtoken::DecodingKey::from_jwk(jwks.find(&kid).unwrap()).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&["sts.example.com"]);
    validation.set_issuer(&[url.as_str()]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(&token, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["sub"], "main/cloud/login");
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 600);
    // A token signed otherwise does not verify.
    let forged = format!(
        "{}.{}.{}",
        part(1),
        part(2),
        part(3).chars().rev().collect::<String>()
    );
    assert!(jsonwebtoken::decode::<serde_json::Value>(&forged, &key, &validation).is_err());
}
