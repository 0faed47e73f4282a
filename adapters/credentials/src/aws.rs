//! AWS SSM Parameter Store and AWS Secrets Manager as credential
//! managers, as Concourse reads them (`atc/creds/ssm`,
//! `atc/creds/secretsmanager`): a var `NAME` of team `T`'s pipeline `P` is
//! looked up at the pipeline template (`/concourse/T/P/NAME`), then the
//! team template (`/concourse/T/NAME`), then under the shared path.
//!
//! - **SSM**: `GetParameter` with decryption gives a string; a name with
//!   no parameter but parameters under it (`/concourse/T/NAME/user`,
//!   `.../password`) is read with `GetParametersByPath` as a mapping of
//!   their names under it, so `((NAME.user))` works.
//! - **Secrets Manager**: `GetSecretValue`; a `SecretString` holding a
//!   JSON object is a mapping, any other string is the value; a
//!   `SecretBinary` must be a JSON object. A secret scheduled for deletion
//!   is not found, as in Concourse.
//!
//! Both speak AWS's JSON protocol over HTTPS, each request signed with
//! SigV4 by `object_store`'s [`AwsAuthorizer`] (already in the tree for S3
//! artifacts; the AWS SDK for Rust would add some hundred crates for two
//! calls). Credentials come from the config's keys, else the AWS chain as
//! `object_store` reads it: the environment (`AWS_ACCESS_KEY_ID`, ...),
//! web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`, as on
//! EKS), the ECS task role, EKS Pod Identity, then EC2 instance metadata.
//! Profiles in `~/.aws` and SSO are not read.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use gantry_actors::api::{CredentialManager, Lookup, ManagerError, SecretScope};
use object_store::aws::{AmazonS3Builder, AwsAuthorizer, AwsCredentialProvider};
use serde_json::{json, Value};

use crate::without_url;

/// How long one request to AWS may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The name asked by a health check: its absence is a healthy answer
/// (Concourse asks the same way).
const HEALTH_PROBE: &str = "/__gantry-health-check";

/// An AWS manager's settings: Concourse's `--aws-ssm-*` and
/// `--aws-secretsmanager-*` flags (`[web.credentials.ssm]`,
/// `[web.credentials.secretsmanager]`, or a var source's `config`).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsConfig {
    /// The region (`eu-west-1`).
    pub region: String,
    /// An access key id; none: the AWS credential chain (a var source
    /// must name one).
    #[serde(default)]
    pub access_key: Option<String>,
    /// Its secret.
    #[serde(default)]
    pub secret_key: Option<String>,
    /// A session token with them.
    #[serde(default)]
    pub session_token: Option<String>,
    /// Where the service answers instead of
    /// `https://SERVICE.REGION.amazonaws.com` (a VPC endpoint, an
    /// emulator).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The path of a pipeline's var; `{{.Team}}`, `{{.Pipeline}}` and
    /// `{{.Secret}}` are filled; empty: none. Default
    /// `/concourse/{{.Team}}/{{.Pipeline}}/{{.Secret}}`.
    #[serde(default = "default_pipeline_template")]
    pub pipeline_secret_template: String,
    /// The path of a team's var. Default `/concourse/{{.Team}}/{{.Secret}}`.
    #[serde(default = "default_team_template")]
    pub team_secret_template: String,
    /// A path tried last, for vars every team shares (`PATH/NAME`).
    #[serde(default)]
    pub shared_path: Option<String>,
}

impl std::fmt::Debug for AwsConfig {
    /// Never the secret key or the session token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsConfig")
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "(set)"))
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "(set)"),
            )
            .field("endpoint", &self.endpoint)
            .field("pipeline_secret_template", &self.pipeline_secret_template)
            .field("team_secret_template", &self.team_secret_template)
            .field("shared_path", &self.shared_path)
            .finish()
    }
}

fn default_pipeline_template() -> String {
    "/concourse/{{.Team}}/{{.Pipeline}}/{{.Secret}}".into()
}

fn default_team_template() -> String {
    "/concourse/{{.Team}}/{{.Secret}}".into()
}

impl AwsConfig {
    /// A var source's `config`, read; a field Gantry does not know is
    /// refused by name. A var source must carry its own keys: the web
    /// node's own AWS identity is the operator's, not a team's.
    pub fn from_var_source(type_: &str, config: &serde_yaml::Value) -> Result<AwsConfig, String> {
        let c: AwsConfig =
            serde_yaml::from_value(config.clone()).map_err(|e| format!("{type_} config: {e}"))?;
        if c.access_key.is_none() || c.secret_key.is_none() {
            return Err(format!(
                "{type_} config: a var source needs access_key and secret_key (the web node's own AWS identity is not lent to pipelines)"
            ));
        }
        Ok(c)
    }

    /// Checks what a node or a var source would fail on later.
    pub fn check(&self, type_: &str) -> Result<(), String> {
        if self.region.is_empty() {
            return Err(format!("{type_} region: must not be empty"));
        }
        if let Some(e) = &self.endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(format!(
                    "{type_} endpoint {e:?}: expected http:// or https://"
                ));
            }
        }
        if self.access_key.is_some() != self.secret_key.is_some() {
            return Err(format!(
                "{type_}: set access_key and secret_key together (or neither, for the AWS credential chain)"
            ));
        }
        for (field, t) in [
            ("pipeline_secret_template", &self.pipeline_secret_template),
            ("team_secret_template", &self.team_secret_template),
        ] {
            if !t.is_empty() && !t.contains("{{.Secret}}") {
                return Err(format!(
                    "{type_} {field} {t:?}: it must name {{{{.Secret}}}}"
                ));
            }
        }
        Ok(())
    }

    /// The paths tried for `name` of `scope`, in order.
    pub fn paths(&self, scope: SecretScope<'_>, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for t in [&self.pipeline_secret_template, &self.team_secret_template] {
            if t.is_empty() || (t.contains("{{.Pipeline}}") && scope.pipeline.is_none()) {
                continue;
            }
            out.push(
                t.replace("{{.Team}}", scope.team)
                    .replace("{{.Pipeline}}", scope.pipeline.unwrap_or_default())
                    .replace("{{.Secret}}", name),
            );
        }
        if let Some(shared) = &self.shared_path {
            out.push(format!("{}/{name}", shared.trim_end_matches('/')));
        }
        out
    }
}

/// One AWS service's JSON API: where it answers, how requests are signed.
struct AwsApi {
    /// `ssm` or `secretsmanager` (SigV4's service name).
    service: &'static str,
    /// `X-Amz-Target`'s prefix (`AmazonSSM`, `secretsmanager`).
    target: &'static str,
    region: String,
    endpoint: String,
    credentials: AwsCredentialProvider,
    http: reqwest::Client,
}

/// An error AWS answered: its type (`ParameterNotFound`) and message.
struct AwsError {
    status: u16,
    kind: String,
    message: String,
}

fn failure(reason: String, transient: bool) -> ManagerError {
    ManagerError { reason, transient }
}

impl AwsApi {
    fn new(
        config: &AwsConfig,
        service: &'static str,
        target: &'static str,
    ) -> Result<AwsApi, String> {
        config.check(service)?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The S3 builder is used for its credential chain alone (the bucket
        // is never asked): static keys, else the environment's chain.
        let mut chain = match &config.access_key {
            Some(_) => AmazonS3Builder::new(),
            None => AmazonS3Builder::from_env(),
        }
        .with_region(&config.region)
        .with_bucket_name("gantry-credentials");
        if let (Some(key), Some(secret)) = (&config.access_key, &config.secret_key) {
            chain = chain.with_access_key_id(key).with_secret_access_key(secret);
            if let Some(token) = &config.session_token {
                chain = chain.with_token(token);
            }
        }
        let credentials = chain
            .build()
            .map_err(|e| format!("{service}: AWS credentials: {e}"))?
            .credentials()
            .clone();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("{service} client: {e}"))?;
        Ok(AwsApi {
            service,
            target,
            region: config.region.clone(),
            endpoint: config
                .endpoint
                .clone()
                .unwrap_or_else(|| format!("https://{service}.{}.amazonaws.com", config.region)),
            credentials,
            http,
        })
    }

    /// Calls `action` with `body`: its answer, or the error AWS gave; a
    /// connection failure, a 5xx or throttling is a transient failure.
    async fn call(
        &self,
        action: &str,
        body: Value,
    ) -> Result<Result<Value, AwsError>, ManagerError> {
        let what = format!("{} {action}", self.service);
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| failure(format!("{what}: AWS credentials: {e}"), true))?;
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut signed = http::Request::builder()
            .method("POST")
            .uri(format!("{}/", self.endpoint.trim_end_matches('/')))
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", format!("{}.{action}", self.target))
            .body(object_store::client::HttpRequestBody::from(bytes.clone()))
            .map_err(|e| failure(format!("{what}: {e}"), false))?;
        AwsAuthorizer::new(&credential, self.service, &self.region).authorize(&mut signed, None);
        let resp = self
            .http
            .post(signed.uri().to_string())
            .headers(signed.headers().clone())
            .body(bytes)
            .send()
            .await
            .map_err(|e| failure(format!("{what}: {}", without_url(&e)), true))?;
        let status = resp.status().as_u16();
        let answer = crate::read_capped(resp, &what).await?;
        let body: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return Ok(Ok(body));
        }
        let kind = body["__type"]
            .as_str()
            .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
            .unwrap_or_default();
        let message = body["message"]
            .as_str()
            .or(body["Message"].as_str())
            .unwrap_or_default()
            .to_string();
        let throttled = kind.contains("Throttl") || kind == "TooManyRequestsException";
        if status >= 500 || throttled {
            return Err(failure(
                format!("{what}: AWS answered {status} {kind} {message}"),
                true,
            ));
        }
        Ok(Err(AwsError {
            status,
            kind,
            message,
        }))
    }
}

impl AwsError {
    fn refused(self, what: &str) -> ManagerError {
        failure(
            format!(
                "{what}: AWS refused ({} {}): {}",
                self.status, self.kind, self.message
            ),
            false,
        )
    }
}

/// AWS SSM Parameter Store: the manager.
pub struct Ssm {
    config: AwsConfig,
    api: AwsApi,
}

impl Ssm {
    /// A client of the Parameter Store `config` names (nothing is asked
    /// yet).
    pub fn new(config: AwsConfig) -> Result<Ssm, String> {
        let api = AwsApi::new(&config, "ssm", "AmazonSSM")?;
        Ok(Ssm { config, api })
    }

    /// The parameter `name`'s value, none when there is no such parameter.
    async fn parameter(&self, name: &str) -> Result<Option<String>, ManagerError> {
        let what = format!("reading parameter {name}");
        match self
            .api
            .call(
                "GetParameter",
                json!({"Name": name, "WithDecryption": true}),
            )
            .await?
        {
            Ok(body) => Ok(body["Parameter"]["Value"].as_str().map(str::to_string)),
            Err(e) if e.kind == "ParameterNotFound" => Ok(None),
            // A name SSM will not take (a var with a character it refuses)
            // names no parameter.
            Err(e) if e.kind == "ValidationException" => Ok(None),
            Err(e) => Err(e.refused(&what)),
        }
    }

    /// The parameters under `path`, by their names below it; none when
    /// there are none.
    async fn under(&self, path: &str) -> Result<Option<serde_yaml::Mapping>, ManagerError> {
        let path = match path.trim_end_matches('/') {
            "" => "/",
            p => p,
        };
        let what = format!("reading parameters under {path}");
        let mut found = serde_yaml::Mapping::new();
        let mut next: Option<String> = None;
        loop {
            let mut ask = json!({
                "Path": path, "Recursive": true, "WithDecryption": true, "MaxResults": 10,
            });
            if let Some(token) = &next {
                ask["NextToken"] = json!(token);
            }
            let body = match self.api.call("GetParametersByPath", ask).await? {
                Ok(body) => body,
                Err(e) if e.kind == "ValidationException" => return Ok(None),
                Err(e) => return Err(e.refused(&what)),
            };
            for p in body["Parameters"].as_array().into_iter().flatten() {
                let (Some(n), Some(v)) = (p["Name"].as_str(), p["Value"].as_str()) else {
                    continue;
                };
                let key = n
                    .strip_prefix(path)
                    .unwrap_or(n)
                    .trim_start_matches('/')
                    .to_string();
                found.insert(key.into(), v.into());
            }
            next = body["NextToken"].as_str().map(str::to_string);
            if next.is_none() {
                break;
            }
            if found.len() > 10_000 {
                return Err(failure(format!("{what}: over 10,000 parameters"), false));
            }
        }
        Ok((!found.is_empty()).then_some(found))
    }
}

#[async_trait]
impl CredentialManager for Ssm {
    fn name(&self) -> &str {
        "ssm"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        let paths = self.config.paths(scope, name);
        for path in &paths {
            let value = match self.parameter(path).await? {
                Some(v) => serde_yaml::Value::String(v),
                None => match self.under(path).await? {
                    Some(m) => serde_yaml::Value::Mapping(m),
                    None => continue,
                },
            };
            return Ok(Lookup::Found {
                value,
                path: path.clone(),
                lease: None,
            });
        }
        Ok(Lookup::NotFound { tried: paths })
    }

    async fn health(&self) -> Result<(), ManagerError> {
        self.parameter(HEALTH_PROBE).await.map(drop)
    }
}

/// AWS Secrets Manager: the manager.
pub struct SecretsManager {
    config: AwsConfig,
    api: AwsApi,
}

impl SecretsManager {
    /// A client of the Secrets Manager `config` names (nothing is asked
    /// yet).
    pub fn new(config: AwsConfig) -> Result<SecretsManager, String> {
        let api = AwsApi::new(&config, "secretsmanager", "secretsmanager")?;
        Ok(SecretsManager { config, api })
    }

    /// Secret `id`'s value, none when there is none (or it is scheduled
    /// for deletion).
    async fn secret(&self, id: &str) -> Result<Option<serde_yaml::Value>, ManagerError> {
        let what = format!("reading secret {id}");
        let body = match self
            .api
            .call("GetSecretValue", json!({"SecretId": id}))
            .await?
        {
            Ok(body) => body,
            Err(e)
                if e.kind == "ResourceNotFoundException"
                    || e.kind == "InvalidRequestException"
                    || e.kind == "ValidationException" =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e.refused(&what)),
        };
        if let Some(s) = body["SecretString"].as_str() {
            return Ok(Some(match serde_json::from_str::<Value>(s) {
                Ok(object @ Value::Object(_)) => to_yaml(object, &what)?,
                _ => serde_yaml::Value::String(s.to_string()),
            }));
        }
        if let Some(b) = body["SecretBinary"].as_str() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| failure(format!("{what}: SecretBinary: {e}"), false))?;
            return match serde_json::from_slice::<Value>(&bytes) {
                Ok(object @ Value::Object(_)) => to_yaml(object, &what).map(Some),
                _ => Err(failure(
                    format!("{what}: SecretBinary is not a JSON object"),
                    false,
                )),
            };
        }
        Err(failure(
            format!("{what}: the answer has neither SecretString nor SecretBinary"),
            false,
        ))
    }
}

fn to_yaml(v: Value, what: &str) -> Result<serde_yaml::Value, ManagerError> {
    serde_yaml::to_value(v).map_err(|e| failure(format!("{what}: {e}"), false))
}

#[async_trait]
impl CredentialManager for SecretsManager {
    fn name(&self) -> &str {
        "secretsmanager"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        let paths = self.config.paths(scope, name);
        for path in &paths {
            if let Some(value) = self.secret(path).await? {
                return Ok(Lookup::Found {
                    value,
                    path: path.clone(),
                    lease: None,
                });
            }
        }
        Ok(Lookup::NotFound { tried: paths })
    }

    async fn health(&self) -> Result<(), ManagerError> {
        self.secret(HEALTH_PROBE).await.map(drop)
    }
}

/// Makes an AWS manager of var source type `type_` (`ssm`,
/// `secretsmanager`), none for another type.
pub(crate) fn var_source(
    type_: &str,
    config: &serde_yaml::Value,
) -> Option<Result<Arc<dyn CredentialManager>, String>> {
    let made = match type_ {
        "ssm" => AwsConfig::from_var_source(type_, config)
            .and_then(Ssm::new)
            .map(|m| Arc::new(m) as Arc<dyn CredentialManager>),
        "secretsmanager" => AwsConfig::from_var_source(type_, config)
            .and_then(SecretsManager::new)
            .map(|m| Arc::new(m) as Arc<dyn CredentialManager>),
        _ => return None,
    };
    Some(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> AwsConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn paths_follow_concourses_templates_and_shared_path() {
        let c = config("{region: eu-west-1, shared_path: /shared/}");
        let scope = SecretScope {
            team: "main",
            pipeline: Some("p"),
        };
        assert_eq!(
            c.paths(scope, "key"),
            [
                "/concourse/main/p/key",
                "/concourse/main/key",
                "/shared/key"
            ]
        );
        let one_off = SecretScope {
            team: "main",
            pipeline: None,
        };
        assert_eq!(
            c.paths(one_off, "key"),
            ["/concourse/main/key", "/shared/key"]
        );
        let c = config("{region: r, pipeline_secret_template: '', team_secret_template: '/{{.Team}}-{{.Secret}}'}");
        assert_eq!(c.paths(scope, "k"), ["/main-k"]);
    }

    #[test]
    fn bad_configs_are_refused_by_field() {
        let bad = |yaml: &str| config(yaml).check("ssm").unwrap_err();
        assert!(bad("{region: ''}").contains("region"));
        assert!(bad("{region: r, endpoint: 'ftp://x'}").contains("endpoint"));
        assert!(bad("{region: r, access_key: a}").contains("secret_key"));
        assert!(bad("{region: r, team_secret_template: '/x'}").contains("team_secret_template"));
        assert!(serde_yaml::from_str::<AwsConfig>("{region: r, profile: p}")
            .unwrap_err()
            .to_string()
            .contains("profile"));
        let lent = AwsConfig::from_var_source("ssm", &serde_yaml::from_str("{region: r}").unwrap())
            .unwrap_err();
        assert!(lent.contains("access_key"), "{lent}");
    }

    #[test]
    fn a_config_shown_shows_no_secret_key_or_token() {
        let c =
            config("{region: r, access_key: AKIA1, secret_key: s3cr3t-k, session_token: t0k3n-x}");
        let shown = format!("{c:?}");
        assert!(shown.contains("AKIA1"), "{shown}");
        assert!(
            !shown.contains("s3cr3t-k") && !shown.contains("t0k3n-x"),
            "{shown}"
        );
    }
}
