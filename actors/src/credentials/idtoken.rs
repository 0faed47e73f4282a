//! The `idtoken` var source (Concourse 7.12's): `((SOURCE:token))` is a
//! short-lived OpenID Connect ID token the web node signs, so a job logs
//! in to a cloud that trusts the node's issuer with no stored secret.
//!
//! - The key: one ECDSA P-256 key for every web node sharing the
//!   database, made by `ring` on first use and stored sealed
//!   (`signing_keys`, migration 0034); tokens are ES256 JWTs signed with
//!   the `jsonwebtoken` crate (well kept; signing on `ring`).
//! - The issuer is the node's external URL; it serves
//!   `/.well-known/openid-configuration` and the key as JWKS
//!   (`/.well-known/jwks.json`), what a verifier fetches.
//! - Config, as Concourse's: `audience` (list, required), `subject_scope`
//!   (`team`, `pipeline` (the default), `instance` or `job`: the `sub`
//!   claim is the team, then each name down to it, joined by `/`),
//!   `expires_in` (a duration, default 1h, at most 24h) and `algorithm`
//!   (`ES256`; Concourse's default `RS256` is refused by name: `ring`
//!   cannot make RSA keys).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde::Serialize;
use serde_json::json;
use tokio::sync::OnceCell;

use crate::db::Db;
use crate::error::EngineError;

/// What the stored key is for.
const PURPOSE: &str = "idtoken";

/// The longest `expires_in`.
const MAX_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// The node's ID token issuer.
#[derive(Clone)]
pub(crate) struct IdTokens {
    db: Db,
    /// The node's external URL: configured, or set once the node knows
    /// the address it listens on.
    issuer: Arc<std::sync::OnceLock<String>>,
    key: Arc<OnceCell<Arc<SigningKey>>>,
}

struct SigningKey {
    kid: String,
    pkcs8: Vec<u8>,
    /// The public point's coordinates, base64url.
    x: String,
    y: String,
}

/// An `idtoken` var source's config, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IdTokenConfig {
    audience: Vec<String>,
    scope: SubjectScope,
    expires_in: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SubjectScope {
    Team,
    Pipeline,
    Instance,
    Job,
}

/// Who a token is for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    /// The team.
    pub team: &'a str,
    /// The pipeline.
    pub pipeline: &'a str,
    /// The pipeline's instance vars, as JSON (none: not an instance).
    pub instance: Option<&'a str>,
    /// The job (none: a check).
    pub job: Option<&'a str>,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: String,
    aud: &'a [String],
    iat: u64,
    nbf: u64,
    exp: u64,
    team: &'a str,
    pipeline: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<&'a str>,
}

impl IdTokenConfig {
    /// Reads a var source's `config`; every problem names the field.
    pub(crate) fn read(config: &serde_yaml::Value) -> Result<IdTokenConfig, String> {
        let map = match config {
            serde_yaml::Value::Mapping(m) => m.clone(),
            serde_yaml::Value::Null => Default::default(),
            _ => return Err("config: expected a mapping".into()),
        };
        let mut out = IdTokenConfig {
            audience: Vec::new(),
            scope: SubjectScope::Pipeline,
            expires_in: Duration::from_secs(3600),
        };
        for (k, v) in &map {
            let key = k.as_str().unwrap_or_default();
            match key {
                "audience" => {
                    out.audience = serde_yaml::from_value(v.clone())
                        .map_err(|_| "config.audience: expected a list of strings".to_string())?;
                }
                "subject_scope" => {
                    out.scope = match v.as_str() {
                        Some("team") => SubjectScope::Team,
                        Some("pipeline") => SubjectScope::Pipeline,
                        Some("instance") => SubjectScope::Instance,
                        Some("job") => SubjectScope::Job,
                        _ => return Err("config.subject_scope: expected team, pipeline, instance or job".into()),
                    }
                }
                "expires_in" => {
                    let text = v.as_str().unwrap_or_default();
                    let d = crate::go_duration::parse_non_negative(text).map_err(|e| {
                        format!("config.expires_in: {e}")
                    })?;
                    if d.is_zero() || d > MAX_EXPIRY {
                        return Err(format!(
                            "config.expires_in: {text:?}: expected more than 0 and at most 24h"
                        ));
                    }
                    out.expires_in = d;
                }
                "algorithm" => match v.as_str() {
                    Some("ES256") => {}
                    other => {
                        return Err(format!(
                            "config.algorithm: {other:?}: Gantry signs ID tokens with ES256 only (set algorithm: ES256)"
                        ))
                    }
                },
                other => return Err(format!("config: unknown field {other:?}")),
            }
        }
        if out.audience.is_empty() {
            return Err("config.audience: at least one audience is required".into());
        }
        Ok(out)
    }
}

impl IdTokens {
    /// Tokens issued as `issuer` (the node's external URL), signed with
    /// the key stored in `db`.
    pub(crate) fn new(db: Db, issuer: Option<&str>) -> IdTokens {
        let tokens = IdTokens {
            db,
            issuer: Arc::default(),
            key: Arc::default(),
        };
        if let Some(url) = issuer {
            tokens.default_issuer(url);
        }
        tokens
    }

    /// Sets the issuer unless it is set (the node's listening address,
    /// when no external URL is configured).
    pub(crate) fn default_issuer(&self, url: &str) {
        let _ = self.issuer.set(url.trim_end_matches('/').to_string());
    }

    /// The issuer, once known.
    fn issuer(&self) -> Result<&str, EngineError> {
        self.issuer.get().map(String::as_str).ok_or_else(|| {
            EngineError::Unavailable("the web node's external URL is not known yet".into())
        })
    }

    async fn key(&self) -> Result<Arc<SigningKey>, EngineError> {
        self.key
            .get_or_try_init(|| async {
                let secrets = self.db.secrets();
                if secrets.signing_key(PURPOSE).await?.is_none() {
                    let pkcs8 = EcdsaKeyPair::generate_pkcs8(
                        &ECDSA_P256_SHA256_FIXED_SIGNING,
                        &SystemRandom::new(),
                    )
                    .map_err(|_| EngineError::Invalid("making a signing key failed".into()))?;
                    let kid = uuid::Uuid::new_v4().simple().to_string();
                    secrets
                        .offer_signing_key(PURPOSE, &kid, pkcs8.as_ref())
                        .await?;
                }
                let (kid, pkcs8) = secrets
                    .signing_key(PURPOSE)
                    .await?
                    .ok_or_else(|| EngineError::Invalid("the signing key was not stored".into()))?;
                let pair = EcdsaKeyPair::from_pkcs8(
                    &ECDSA_P256_SHA256_FIXED_SIGNING,
                    &pkcs8,
                    &SystemRandom::new(),
                )
                .map_err(|e| EngineError::Invalid(format!("signing key {kid}: {e}")))?;
                // An uncompressed point: 0x04, X, Y.
                let point = pair.public_key().as_ref();
                let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                Ok(Arc::new(SigningKey {
                    x: b64.encode(&point[1..33]),
                    y: b64.encode(&point[33..65]),
                    kid,
                    pkcs8,
                }))
            })
            .await
            .cloned()
    }

    /// The OpenID provider metadata a verifier reads.
    pub(crate) fn discovery(&self) -> Result<serde_json::Value, EngineError> {
        let issuer = self.issuer()?;
        Ok(json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
            "claims_supported": ["iss", "sub", "aud", "iat", "nbf", "exp", "team", "pipeline", "job"],
        }))
    }

    /// The signing key's public half as a JWK Set.
    pub(crate) async fn jwks(&self) -> Result<serde_json::Value, EngineError> {
        let key = self.key().await?;
        Ok(json!({"keys": [{
            "kty": "EC",
            "crv": "P-256",
            "use": "sig",
            "alg": "ES256",
            "kid": key.kid,
            "x": key.x,
            "y": key.y,
        }]}))
    }

    /// A token for `subject` as `config` says.
    pub(crate) async fn token(
        &self,
        config: &IdTokenConfig,
        subject: Subject<'_>,
    ) -> Result<String, EngineError> {
        let key = self.key().await?;
        let now = u64::try_from(crate::db::now_ms() / 1000).unwrap_or(0);
        let mut sub = vec![subject.team];
        if config.scope != SubjectScope::Team {
            sub.push(subject.pipeline);
        }
        if matches!(config.scope, SubjectScope::Instance | SubjectScope::Job) {
            if let Some(i) = subject.instance {
                sub.push(i);
            }
        }
        if config.scope == SubjectScope::Job {
            sub.extend(subject.job);
        }
        let claims = Claims {
            iss: self.issuer()?,
            sub: sub.join("/"),
            aud: &config.audience,
            iat: now,
            nbf: now,
            exp: now + config.expires_in.as_secs(),
            team: subject.team,
            pipeline: subject.pipeline,
            job: subject.job,
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_ec_der(&key.pkcs8),
        )
        .map_err(|e| EngineError::Invalid(format!("signing an ID token: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Result<IdTokenConfig, String> {
        IdTokenConfig::read(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn configs_are_read_as_concourse_does_and_refused_by_field() {
        let c =
            config("{audience: [sts.amazonaws.com], subject_scope: job, expires_in: 10m}").unwrap();
        assert_eq!(c.expires_in, Duration::from_secs(600));
        assert!(config("{}").unwrap_err().contains("config.audience"));
        assert!(config("{audience: [a], algorithm: RS256}")
            .unwrap_err()
            .contains("ES256 only"));
        assert!(config("{audience: [a], expires_in: 48h}")
            .unwrap_err()
            .contains("at most 24h"));
        assert!(config("{audience: [a], subject_scope: world}")
            .unwrap_err()
            .contains("subject_scope"));
        assert!(config("{audience: [a], nope: 1}")
            .unwrap_err()
            .contains("unknown field \"nope\""));
    }

    async fn issued(db: Db) -> (IdTokens, String) {
        let db = db
            .sealed_with(crate::sealer::Sealer::ephemeral(), None)
            .await
            .unwrap();
        let tokens = IdTokens::new(db, Some("https://ci.example.com/"));
        let c = config("{audience: [sts.example.com, other], subject_scope: job, expires_in: 1s}")
            .unwrap();
        let subject = Subject {
            team: "main",
            pipeline: "p",
            instance: None,
            job: Some("deploy"),
        };
        let token = tokens.token(&c, subject).await.unwrap();
        (tokens, token)
    }

    /// The token verifies with a standard JWT library against the JWKS
    /// served, with the claims, and expires.
    #[tokio::test]
    async fn a_token_verifies_against_the_served_key_and_expires() {
        let (db, _d) = crate::db::test_db().await;
        let (tokens, token) = issued(db).await;
        let jwks: jsonwebtoken::jwk::JwkSet =
            serde_json::from_value(tokens.jwks().await.unwrap()).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        let jwk = jwks
            .find(header.kid.as_deref().unwrap())
            .expect("the kid is served");
        let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
        validation.set_audience(&["sts.example.com"]);
        validation.set_issuer(&["https://ci.example.com"]);
        validation.leeway = 0;
        let data = jsonwebtoken::decode::<serde_json::Value>(&token, &key, &validation).unwrap();
        assert_eq!(data.claims["sub"], "main/p/deploy");
        assert_eq!(data.claims["job"], "deploy");
        assert_eq!(
            tokens.discovery().unwrap()["jwks_uri"],
            "https://ci.example.com/.well-known/jwks.json"
        );
        // Another key does not verify it.
        let (db2, _d2) = crate::db::test_db().await;
        let (other, _) = issued(db2).await;
        let other_set: jsonwebtoken::jwk::JwkSet =
            serde_json::from_value(other.jwks().await.unwrap()).unwrap();
        let wrong = jsonwebtoken::DecodingKey::from_jwk(&other_set.keys[0]).unwrap();
        assert!(jsonwebtoken::decode::<serde_json::Value>(&token, &wrong, &validation).is_err());
        // It expires (1s): wait for the clock, with a deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match jsonwebtoken::decode::<serde_json::Value>(&token, &key, &validation) {
                Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::ExpiredSignature => break,
                _ if std::time::Instant::now() > deadline => panic!("the token never expired"),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Every node sharing the database signs with the one stored key.
    #[tokio::test]
    async fn nodes_sharing_a_database_share_one_key() {
        crate::db::test_pg::on_both(|db| async move {
            let db = db
                .sealed_with(crate::sealer::Sealer::ephemeral(), None)
                .await
                .unwrap();
            let a = IdTokens::new(db.clone(), Some("https://a"));
            let b = IdTokens::new(db.clone(), None);
            let (ka, kb) = (a.jwks().await.unwrap(), b.jwks().await.unwrap());
            assert_eq!(ka, kb);
            let raw: Vec<(String,)> = sqlx::query_as("SELECT pkcs8 FROM signing_keys")
                .fetch_all(db.pool())
                .await
                .unwrap();
            assert_eq!(raw.len(), 1);
            assert!(raw[0].0.starts_with("sealed:v2:"));
        })
        .await;
    }
}
