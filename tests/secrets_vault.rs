//! Vault as the credential manager, end to end, against the mock Vault of
//! `vault_mock` (Vault's HTTP API as its documentation gives it: no Vault
//! installs from the registries these machines reach): the node's manager
//! on a KV v2 mount in a namespace with a token, a pipeline's `vault` var
//! source on a KV v1 mount logging in with AppRole, a secret changed in
//! Vault read by the next build, and Vault down: the step errors naming
//! the manager and the var, `/readyz` says so, and builds that need no
//! secret still run.

use crate::common;
use crate::vault_mock::{VaultMock, ROOT_TOKEN};

use common::*;
use serde_json::json;

const PIPELINE: &str = r#"
var_sources:
- name: vault-src
  type: vault
  config:
    url: ((vault_url))
    namespace: ns1
    path_prefix: /kv1/concourse
    auth_backend: approle
    auth_params: {role_id: role-1, secret_id: ((approle_secret))}
jobs:
- name: deploy
  plan:
  - task: show
    config:
      platform: linux
      params:
        PASS: ((registry.password))
        KEY: ((deploy-key))
        TOKEN: ((vault-src:token))
      run:
        path: sh
        args:
        - -c
        - |
          echo "pass=$PASS key=$KEY token=$TOKEN"
          printf 'sha=%s\n' "$(printf %s "$PASS" | sha256sum | cut -d' ' -f1)"
          printf 'tsha=%s\n' "$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
- name: plain
  plan:
  - task: hello
    config:
      platform: linux
      run: {path: echo, args: [no secrets here]}
"#;

#[test]
fn vault_kv_v2_and_v1_token_and_approle_fill_builds_and_a_vault_down_is_named() {
    let vault = VaultMock::start(&[("concourse", 2), ("kv1", 1)], Some("ns1"));
    let u = || uuid::Uuid::new_v4().simple().to_string();
    let (pass, key, token) = (
        format!("pw-{}", u()),
        format!("key-{}", u()),
        format!("tok-{}", u()),
    );
    vault.put(
        "concourse/main/p/registry",
        json!({"password": pass, "user": "u"}),
    );
    vault.put("concourse/main/deploy-key", json!({"value": key}));
    vault.put("kv1/concourse/main/p/token", json!({"value": token}));
    vault.add_approle("role-1", "approle-secret-1");

    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let config = dir.path().join("gantry.toml");
    write(
        &config,
        format!(
            "[web.credentials]\ncache_found_secs = 0\n\n[web.credentials.vault]\nurl = \"{}\"\nclient_token = \"{ROOT_TOKEN}\"\nnamespace = \"ns1\"\n",
            vault.url()
        ),
    );
    let q = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = &q.url;
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    let set = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &format!("vault_url={}", vault.url()),
            "-v",
            "approle_secret=approle-secret-1",
        ],
    );
    assert!(set.status.success(), "{}", said(&set));
    assert!(client(url, &["unpause-pipeline", "-p", "p"])
        .status
        .success());

    let shown = said(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        shown.contains(&format!("sha={}", sha256_hex(&pass))),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("tsha={}", sha256_hex(&token))),
        "{shown}"
    );
    assert!(
        shown.contains("pass=((redacted)) key=((redacted)) token=((redacted))"),
        "{shown}"
    );
    for v in [&pass, &key, &token] {
        assert!(!shown.contains(v.as_str()), "{v} shows: {shown}");
    }

    // Changed in Vault: the next build reads it, no set-pipeline.
    let new_pass = format!("pw-{}", u());
    vault.put("concourse/main/p/registry", json!({"password": new_pass}));
    let again = said(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        again.contains(&format!("sha={}", sha256_hex(&new_pass))),
        "{again}"
    );

    // The node stores no secret of its own while Vault is its manager.
    let mut child = gantry()
        .args(["--url", url, "set-secret", "x"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"some value").unwrap();
    }
    let refused = child.wait_with_output().unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(err.contains("reads its secrets from vault"), "{err}");

    // Vault down: the step errors naming the manager and the var; readyz
    // says so; a build needing no secret still runs.
    vault.set_down(true);
    let down = client(url, &["trigger-job", "-j", "p/deploy", "--watch"]);
    let down_said = said(&down);
    assert!(!down.status.success(), "{down_said}");
    assert!(
        down_said.contains("the credential manager (vault) failed")
            && down_said.contains("((deploy-key))"),
        "{down_said}"
    );
    let ready = reqwest::blocking::get(format!("{url}/readyz")).unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let body = ready.text().unwrap();
    assert!(
        body.contains("credentials") && body.contains("vault"),
        "{body}"
    );
    let plain = client(url, &["trigger-job", "-j", "p/plain", "--watch"]);
    assert!(plain.status.success(), "{}", said(&plain));
    vault.set_down(false);
    wait_for(
        "readyz green again",
        std::time::Duration::from_secs(20),
        || {
            let r = reqwest::blocking::get(format!("{url}/readyz")).ok()?;
            (r.status().as_u16() == 200).then_some(())
        },
    );
}
