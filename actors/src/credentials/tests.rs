//! The credential cache and resolution, with a manager that counts its
//! calls (a fake of one component), and the built-in manager on SQLite
//! and PostgreSQL.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_yaml::Value;

use super::*;

/// Answers `value-of-NAME` for names starting `found`, nothing for the
/// others; fails transiently `failures` times first.
#[derive(Default)]
struct Counting {
    calls: AtomicU32,
    failures: AtomicU32,
    lease: Option<Duration>,
}

#[async_trait]
impl CredentialManager for Counting {
    fn name(&self) -> &str {
        "counting"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(ManagerError {
                reason: "connection reset".into(),
                transient: true,
            });
        }
        if name.starts_with("found") {
            Ok(Lookup::Found {
                value: Value::String(format!("value-of-{name}")),
                path: format!("/x/{name}"),
                lease: self.lease,
            })
        } else {
            Ok(Lookup::NotFound {
                tried: scope.concourse_paths("/concourse", name),
            })
        }
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

const SCOPE: SecretScope<'static> = SecretScope {
    team: "main",
    pipeline: Some("p"),
};

/// `names` resolved for [`SCOPE`], every one found.
async fn found(creds: &Credentials, names: &[&str]) -> Resolved {
    creds
        .resolve(SCOPE, &set(names), &SourceContext::default())
        .await
        .unwrap()
}

/// Why `names` are not all resolved for [`SCOPE`].
async fn refused(creds: &Credentials, names: &[&str]) -> String {
    creds
        .resolve(SCOPE, &set(names), &SourceContext::default())
        .await
        .unwrap_err()
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn found_values_are_cached_for_their_ttl_and_fill_vars() {
    let manager = Arc::new(Counting::default());
    let creds = Credentials::new(manager.clone(), CacheConfig::default());
    for _ in 0..1000 {
        let r = creds
            .resolve(
                SCOPE,
                &set(&["found-a", "found-b.field"]),
                &SourceContext::default(),
            )
            .await
            .unwrap();
        assert_eq!(r.redactor.redact("x value-of-found-a"), "x ((redacted))");
    }
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        2,
        "one call per var per TTL"
    );
    assert_eq!(creds.manager_calls(), 2);
    tokio::time::advance(Duration::from_secs(61)).await;
    found(&creds, &["found-a"]).await;
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        3,
        "asked again after the TTL"
    );
    creds.forget_team("main");
    found(&creds, &["found-a"]).await;
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        4,
        "asked again once forgotten"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_keeps_half_of_it_and_a_miss_ten_seconds() {
    let manager = Arc::new(Counting {
        lease: Some(Duration::from_secs(20)),
        ..Counting::default()
    });
    let creds = Credentials::new(manager.clone(), CacheConfig::default());
    found(&creds, &["found-a"]).await;
    tokio::time::advance(Duration::from_secs(9)).await;
    found(&creds, &["found-a"]).await;
    assert_eq!(manager.calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    found(&creds, &["found-a"]).await;
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        2,
        "half the lease passed"
    );

    let err = refused(&creds, &["missing"]).await;
    let _ = refused(&creds, &["missing"]).await;
    assert_eq!(manager.calls.load(Ordering::SeqCst), 3, "a miss is cached");
    assert_eq!(
        err.to_string(),
        "unfilled var ((missing)): the credential manager (counting) has none (tried /concourse/main/p/missing, /concourse/main/missing)"
    );
    tokio::time::advance(Duration::from_secs(11)).await;
    let _ = refused(&creds, &["missing"]).await;
    assert_eq!(manager.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_and_never_cached() {
    let manager = Arc::new(Counting::default());
    manager.failures.store(2, Ordering::SeqCst);
    let creds = Credentials::new(manager.clone(), CacheConfig::default());
    found(&creds, &["found-a"]).await;
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        3,
        "two failures, then found"
    );

    manager.failures.store(3, Ordering::SeqCst);
    let err = refused(&creds, &["found-b"]).await;
    assert!(
        err.to_string().contains(
            "var ((found-b)): the credential manager (counting) failed: connection reset"
        ),
        "{err}"
    );
    found(&creds, &["found-b"]).await;
    assert_eq!(
        manager.calls.load(Ordering::SeqCst),
        7,
        "the error was not kept"
    );
}

#[tokio::test]
async fn a_var_source_is_refused_by_name() {
    let creds = Credentials::new(Arc::new(Counting::default()), CacheConfig::default());
    let err = creds
        .resolve(
            SCOPE,
            &set(&["vault:token", "found-a"]),
            &SourceContext::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("var ((vault:token)): the pipeline declares no var source \"vault\""),
        "{err}"
    );
}

#[tokio::test]
async fn a_var_source_of_a_type_not_read_is_refused_by_name() {
    let creds = Credentials::new(Arc::new(Counting::default()), CacheConfig::default());
    let sourced = SourceContext {
        sources: vec![crate::pipeline::model::VarSource {
            name: "vault-src".into(),
            type_: "ssm".into(),
            config: Value::Null,
        }],
        job: Some("j".into()),
    };
    let err = creds
        .resolve(SCOPE, &set(&["vault-src:token"]), &sourced)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "var ((vault-src:token)): var source \"vault-src\" is of type \"ssm\", which this web node does not read"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_dummy_var_source_gives_its_configs_vars_redacted() {
    let creds = Credentials::new(Arc::new(Counting::default()), CacheConfig::default());
    let sourced = SourceContext {
        sources: vec![crate::pipeline::model::VarSource {
            name: "d".into(),
            type_: "dummy".into(),
            config: serde_yaml::from_str("vars: {token: dummy-t0ken, creds: {user: u1}}").unwrap(),
        }],
        job: None,
    };
    let r = creds
        .resolve(SCOPE, &set(&["d:token", "d:creds.user"]), &sourced)
        .await
        .unwrap();
    assert_eq!(
        r.redactor.redact("t=dummy-t0ken u1"),
        "t=((redacted)) ((redacted))"
    );
    let err = creds
        .resolve(SCOPE, &set(&["d:nope"]), &sourced)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("var source \"d\" (dummy) has no var \"nope\""),
        "{err}"
    );
}

async fn built_in_reads_the_pipeline_then_the_team(db: crate::db::Db) {
    let db = db
        .sealed_with(crate::sealer::Sealer::ephemeral(), None)
        .await
        .unwrap();
    let s = db.secrets();
    s.set("main", None, "token", "team-token").await.unwrap();
    s.set("main", Some("p"), "token", "pipeline-token")
        .await
        .unwrap();
    s.set("main", None, "creds", r#"{"user": "u", "password": "pw"}"#)
        .await
        .unwrap();
    let creds = Credentials::new(Arc::new(BuiltIn::new(db.clone())), CacheConfig::default());
    let r = creds
        .resolve(
            SCOPE,
            &set(&["token", "creds.password"]),
            &SourceContext::default(),
        )
        .await
        .unwrap();
    let var = |t: &str| VarRef::parse(t).unwrap();
    assert_eq!(
        r.vars.lookup(&var("token")).unwrap(),
        Some(&Value::String("pipeline-token".into()))
    );
    assert_eq!(
        r.vars.lookup(&var("creds.password")).unwrap(),
        Some(&Value::String("pw".into()))
    );
    let other = SecretScope {
        team: "main",
        pipeline: Some("q"),
    };
    let r = creds
        .resolve(other, &set(&["token"]), &SourceContext::default())
        .await
        .unwrap();
    assert_eq!(
        r.vars.lookup(&var("token")).unwrap(),
        Some(&Value::String("team-token".into()))
    );
    let err = creds
        .resolve(
            SecretScope {
                team: "other",
                pipeline: None,
            },
            &set(&["token"]),
            &SourceContext::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("(tried /concourse/other/token)"),
        "{err}"
    );
    creds.health().await.unwrap();
}

#[tokio::test]
async fn the_built_in_manager_reads_the_pipelines_secret_then_the_teams() {
    crate::db::test_pg::on_both(built_in_reads_the_pipeline_then_the_team).await;
}
