//! Kubernetes secrets as the credential manager, end to end, against the
//! project's Kubernetes API server mock: a var of team `main`'s pipeline
//! `p` is secret `p.NAME`, then `NAME`, of namespace `concourse-main`; a
//! secret changed in the cluster is read by the next build; the API down
//! errors the build naming the manager and the var.

use crate::common;
use crate::kube_mock::KubeMock;

use common::*;

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
      run:
        path: sh
        args:
        - -c
        - |
          echo "pass=$PASS key=$KEY"
          printf 'sha=%s\n' "$(printf %s "$PASS" | sha256sum | cut -d' ' -f1)"
          printf 'ksha=%s\n' "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"
"#;

#[test]
fn kubernetes_secrets_fill_builds_by_concourses_names() {
    let kube = KubeMock::start();
    let u = || uuid::Uuid::new_v4().simple().to_string();
    let (pass, key) = (format!("pw-{}", u()), format!("key-{}", u()));
    // The pipeline's secret (fields), then the team's (a `value`).
    kube.put_secret(
        "concourse-main",
        "p.registry",
        &[("password", &pass), ("user", "u")],
    );
    kube.put_secret("concourse-main", "deploy-key", &[("value", &key)]);

    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig, "default");
    let config = dir.path().join("gantry.toml");
    write(
        &config,
        format!(
            "[web.credentials]\ncache_found_secs = 0\n\n[web.credentials.kubernetes]\nkubeconfig = \"{}\"\n",
            kubeconfig.display()
        ),
    );
    let q = quickstart_runc_with(dir.path(), &db, &["--config", config.to_str().unwrap()]);
    let url = &q.url;
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    let set = client(
        url,
        &["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()],
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
        shown.contains(&format!("ksha={}", sha256_hex(&key))),
        "{shown}"
    );
    assert!(
        shown.contains("pass=((redacted)) key=((redacted))"),
        "{shown}"
    );
    assert!(!shown.contains(&pass) && !shown.contains(&key), "{shown}");

    let new_key = format!("key-{}", u());
    kube.put_secret("concourse-main", "deploy-key", &[("value", &new_key)]);
    let again = said(&client(url, &["trigger-job", "-j", "p/deploy", "--watch"]));
    assert!(
        again.contains(&format!("ksha={}", sha256_hex(&new_key))),
        "{again}"
    );

    kube.set_secrets_down(true);
    let down = client(url, &["trigger-job", "-j", "p/deploy", "--watch"]);
    let text = said(&down);
    assert!(!down.status.success(), "{text}");
    assert!(
        text.contains("the credential manager (kubernetes) failed")
            && text.contains("((deploy-key))"),
        "{text}"
    );
}
