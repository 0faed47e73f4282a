//! AWS SSM Parameter Store and AWS Secrets Manager, end to end, against a
//! real AWS emulator (moto's server, from PyPI: `GANTRY_MOTO_SERVER`,
//! which scripts/test.sh installs in its venv) on loopback, every request
//! signed with SigV4. Each is the node's manager once, with the other as
//! the pipeline's var source: a mapping (SSM: parameters under the name;
//! Secrets Manager: a JSON secret) and a plain value from each; a value
//! changed in AWS read by the next build; AWS down: the build errors
//! naming the manager and the var, `/readyz` says so, and a build needing
//! no secret still runs.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;

use common::*;
use serde_json::{json, Value};

/// A moto server on loopback, killed when dropped.
struct Moto {
    child: Child,
    url: String,
}

impl Moto {
    /// Starts it, or panics saying why (`None`: not installed here and
    /// not required).
    fn start() -> Option<Moto> {
        let server = match std::env::var("GANTRY_MOTO_SERVER") {
            Ok(s) => s,
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("GANTRY_MOTO_SERVER is not set (scripts/test.sh sets it up): this test may not be skipped")
            }
            Err(_) => {
                eprintln!("skipped: GANTRY_MOTO_SERVER is not set");
                return None;
            }
        };
        let port = free_port();
        let child = Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let url = format!("http://127.0.0.1:{port}");
        let moto = Moto { child, url };
        wait_for("moto to answer", Duration::from_secs(60), || {
            reqwest::blocking::get(format!("{}/moto-api/", moto.url))
                .ok()
                .filter(|r| r.status().is_success())
        });
        Some(moto)
    }

    /// Calls `service`'s `action` (AWS's JSON protocol; moto takes the
    /// service from the signature's scope and checks no signature).
    fn call(&self, service: &str, target: &str, action: &str, body: Value) -> Value {
        let r = reqwest::blocking::Client::new()
            .post(format!("{}/", self.url))
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", format!("{target}.{action}"))
            .header(
                "authorization",
                format!("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=00"),
            )
            .body(body.to_string())
            .send()
            .unwrap();
        let status = r.status();
        let body: Value = r.json().unwrap_or(Value::Null);
        assert!(status.is_success(), "{service} {action}: {status} {body}");
        body
    }

    fn put_parameter(&self, name: &str, value: &str) {
        self.call(
            "ssm",
            "AmazonSSM",
            "PutParameter",
            json!({"Name": name, "Value": value, "Type": "SecureString", "Overwrite": true}),
        );
    }

    /// Creates secret `name`, or gives it a new value.
    fn put_secret(&self, name: &str, value: &str) {
        let r = reqwest::blocking::Client::new()
            .post(format!("{}/", self.url))
            .header("x-amz-target", "secretsmanager.DescribeSecret")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/secretsmanager/aws4_request, SignedHeaders=host, Signature=00",
            )
            .header("content-type", "application/x-amz-json-1.1")
            .body(json!({"SecretId": name}).to_string())
            .send()
            .unwrap();
        let (action, body) = if r.status().is_success() {
            (
                "PutSecretValue",
                json!({"SecretId": name, "SecretString": value}),
            )
        } else {
            ("CreateSecret", json!({"Name": name, "SecretString": value}))
        };
        self.call("secretsmanager", "secretsmanager", action, body);
    }

    /// Puts `value` at `name` in `manager`: a mapping (a JSON object) as
    /// parameters under the name in SSM, as one JSON secret in Secrets
    /// Manager.
    fn put(&self, manager: &str, name: &str, value: &Value) {
        match (manager, value) {
            ("ssm", Value::Object(fields)) => {
                for (k, v) in fields {
                    self.put_parameter(&format!("{name}/{k}"), v.as_str().unwrap());
                }
            }
            ("ssm", v) => self.put_parameter(name, v.as_str().unwrap()),
            (_, Value::Object(_)) => self.put_secret(name, &value.to_string()),
            (_, v) => self.put_secret(name, v.as_str().unwrap()),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pipeline: `((registry.password))` and `((deploy-key))` from the
/// node's manager, `((src:token))` and `((src:db.password))` from a var
/// source of type `SOURCE_TYPE`.
const PIPELINE: &str = r#"
var_sources:
- name: src
  type: SOURCE_TYPE
  config:
    region: us-east-1
    endpoint: ((aws_url))
    access_key: testing
    secret_key: testing
jobs:
- name: deploy
  plan:
  - task: show
    config:
      platform: linux
      params:
        PASS: ((registry.password))
        KEY: ((deploy-key))
        TOKEN: ((src:token))
        DB: ((src:db.password))
      run:
        path: sh
        args:
        - -c
        - |
          echo "pass=$PASS key=$KEY token=$TOKEN db=$DB"
          printf 'sha=%s\n' "$(printf %s "$PASS" | sha256sum | cut -d' ' -f1)"
          printf 'ksha=%s\n' "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"
          printf 'tsha=%s\n' "$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
          printf 'dsha=%s\n' "$(printf %s "$DB" | sha256sum | cut -d' ' -f1)"
- name: plain
  plan:
  - task: hello
    config:
      platform: linux
      run: {path: echo, args: [no secrets here]}
"#;

/// `node` (`ssm` or `secretsmanager`) as the node's manager and `source`
/// as the var source; with `down`, AWS is stopped at the end.
fn aws_managers(node: &str, source: &str, down: bool) {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let u = || uuid::Uuid::new_v4().simple().to_string();
    let (pass, key, token, db_pass) = (
        format!("pw-{}", u()),
        format!("key-{}", u()),
        format!("tok-{}", u()),
        format!("db-{}", u()),
    );
    // The node's manager: the pipeline's `registry` (a mapping) and the
    // team's `deploy-key`; the var source: the pipeline's `token` and the
    // team's `db` (a mapping).
    moto.put(
        node,
        "/concourse/main/p/registry",
        &json!({"password": pass, "user": "u"}),
    );
    moto.put(node, "/concourse/main/deploy-key", &json!(key));
    moto.put(source, "/concourse/main/p/token", &json!(token));
    moto.put(
        source,
        "/concourse/main/db",
        &json!({"password": db_pass, "user": "app"}),
    );

    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let config = dir.path().join("gantry.toml");
    write(
        &config,
        format!(
            "[web.credentials]\ncache_found_secs = 0\n\n[web.credentials.{node}]\nregion = \"us-east-1\"\nendpoint = \"{}\"\naccess_key = \"testing\"\nsecret_key = \"testing\"\n",
            moto.url
        ),
    );
    let q = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = &q.url;
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE.replace("SOURCE_TYPE", source));
    let set = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            file.to_str().unwrap(),
            "-v",
            &format!("aws_url={}", moto.url),
        ],
    );
    assert!(set.status.success(), "{}", said(&set));
    assert!(client(url, &["unpause-pipeline", "-p", "p"])
        .status
        .success());

    let shown = said(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    for (label, value) in [
        ("sha", &pass),
        ("ksha", &key),
        ("tsha", &token),
        ("dsha", &db_pass),
    ] {
        assert!(
            shown.contains(&format!("{label}={}", sha256_hex(value))),
            "{node}, {label}: {shown}"
        );
        assert!(!shown.contains(value.as_str()), "{value} shows: {shown}");
    }
    assert!(
        shown.contains("pass=((redacted)) key=((redacted)) token=((redacted)) db=((redacted))"),
        "{shown}"
    );

    // Changed in AWS: the next build reads it, no set-pipeline.
    let new_key = format!("key-{}", u());
    moto.put(node, "/concourse/main/deploy-key", &json!(new_key));
    let again = said(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        again.contains(&format!("ksha={}", sha256_hex(&new_key))),
        "{node}: {again}"
    );
    if !down {
        return;
    }

    // AWS down: the build errors naming the manager and the var.
    let _ = moto.child.kill();
    let _ = moto.child.wait();
    let stopped = client(url, &["trigger-job", "-j", "p/deploy", "--watch"]);
    let stopped_said = said(&stopped);
    assert!(!stopped.status.success(), "{stopped_said}");
    assert!(
        stopped_said.contains(&format!("the credential manager ({node}) failed"))
            && stopped_said.contains("((deploy-key))"),
        "{stopped_said}"
    );
    let (status, body) = readyz(url).expect("readyz answers");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("credentials") && body.contains(node),
        "{body}"
    );
    let plain = client(url, &["trigger-job", "-j", "p/plain", "--watch"]);
    assert!(plain.status.success(), "{}", said(&plain));
}

#[test]
fn ssm_as_the_nodes_manager_and_secrets_manager_as_a_var_source_and_aws_down() {
    aws_managers("ssm", "secretsmanager", true);
}

#[test]
fn secrets_manager_as_the_nodes_manager_and_ssm_as_a_var_source() {
    aws_managers("secretsmanager", "ssm", false);
}
