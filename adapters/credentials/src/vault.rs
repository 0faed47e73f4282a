//! HashiCorp Vault as a credential manager, as Concourse reads it
//! (`atc/creds/vault`): a var `NAME` of team `T`'s pipeline `P` is looked
//! up at each lookup template under the path prefix (by default
//! `/concourse/T/P/NAME`, then `/concourse/T/NAME`), then under the shared
//! path; a secret with a `value` field gives that field, otherwise its
//! whole data (so `((NAME.field))` reads a field).
//!
//! - **KV v1 and v2**: the mount holding a path is asked once
//!   (`sys/internal/ui/mounts/PATH`, as the Vault CLI does); a KV v2 read
//!   goes to `MOUNT/data/PATH` and its `data.data` is the secret. A KV v1
//!   secret's lease (`lease_duration`) is told to the cache.
//! - **Auth**: a `client_token`, or a login to `auth/BACKEND/login` with
//!   `auth_params` (AppRole: `role_id`, `secret_id`), kept for its lease
//!   and done again when it lapses or Vault refuses the token.
//! - **Namespaces** (`X-Vault-Namespace`) and a CA certificate (PEM).
//! - A connection failure, a timeout or a 5xx is transient (retried by the
//!   engine's cache, never cached); a 403 is not.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gantry_actors::api::{CredentialManager, Lookup, ManagerError, SecretScope};
use serde_json::Value;

use crate::without_url;
use tokio::sync::Mutex;

/// How long one request to Vault may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A Vault's settings: Concourse's names (`[web.credentials.vault]`, or a
/// var source's `config`).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    /// The server's address (`https://vault:8200`).
    pub url: String,
    /// Under which vars are looked up. Default `/concourse`.
    #[serde(default = "default_prefix")]
    pub path_prefix: String,
    /// The paths tried, in order, under the prefix: `{{.Team}}`,
    /// `{{.Pipeline}}` and `{{.Secret}}` are filled (a template naming the
    /// pipeline is skipped for a build of none). Default
    /// `/{{.Team}}/{{.Pipeline}}/{{.Secret}}`, `/{{.Team}}/{{.Secret}}`.
    #[serde(default = "default_templates")]
    pub lookup_templates: Vec<String>,
    /// A path under the prefix tried last, for secrets every team shares.
    #[serde(default)]
    pub shared_path: Option<String>,
    /// The Vault Enterprise namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// A PEM CA certificate the server's certificate must chain to.
    #[serde(default)]
    pub ca_cert: Option<String>,
    /// A token to read with.
    #[serde(default)]
    pub client_token: Option<String>,
    /// The auth backend to log in with instead (`approle`).
    #[serde(default)]
    pub auth_backend: Option<String>,
    /// What the login sends (`role_id`, `secret_id`).
    #[serde(default)]
    pub auth_params: BTreeMap<String, String>,
}

impl std::fmt::Debug for VaultConfig {
    /// Never the token or the login's params.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultConfig")
            .field("url", &self.url)
            .field("path_prefix", &self.path_prefix)
            .field("lookup_templates", &self.lookup_templates)
            .field("shared_path", &self.shared_path)
            .field("namespace", &self.namespace)
            .field("auth_backend", &self.auth_backend)
            .field("auth_params", &self.auth_params.keys().collect::<Vec<_>>())
            .field("client_token", &self.client_token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

fn default_prefix() -> String {
    "/concourse".into()
}

fn default_templates() -> Vec<String> {
    vec![
        "/{{.Team}}/{{.Pipeline}}/{{.Secret}}".into(),
        "/{{.Team}}/{{.Secret}}".into(),
    ]
}

impl VaultConfig {
    /// A var source's `config`, read; a field Gantry does not know is
    /// refused by name.
    pub fn from_var_source(config: &serde_yaml::Value) -> Result<VaultConfig, String> {
        serde_yaml::from_value(config.clone()).map_err(|e| format!("vault config: {e}"))
    }

    /// Checks what a node or a var source would fail on later.
    pub fn check(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!(
                "vault url {:?}: expected http:// or https://",
                self.url
            ));
        }
        if self.path_prefix.is_empty() {
            return Err("vault path_prefix: must not be empty".into());
        }
        if self.client_token.is_none() && self.auth_backend.is_none() {
            return Err("vault: set client_token or auth_backend (with auth_params)".into());
        }
        for t in &self.lookup_templates {
            if !t.contains("{{.Secret}}") {
                return Err(format!(
                    "vault lookup template {t:?}: it must name {{{{.Secret}}}}"
                ));
            }
        }
        Ok(())
    }
}

/// A Vault client: the manager.
pub struct Vault {
    config: VaultConfig,
    http: reqwest::Client,
    /// The token in use and when it lapses (none: never).
    token: Mutex<Option<(String, Option<Instant>)>>,
    /// Mount path and KV version by the first path asked under it.
    mounts: dashmap::DashMap<String, (String, u8)>,
}

/// What went wrong talking to Vault.
fn failure(reason: String, transient: bool) -> ManagerError {
    ManagerError { reason, transient }
}

impl Vault {
    /// A client of the Vault `config` names.
    pub fn new(config: VaultConfig) -> Result<Vault, String> {
        config.check()?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder().use_rustls_tls().timeout(TIMEOUT);
        if let Some(pem) = &config.ca_cert {
            let cert = reqwest::Certificate::from_pem(pem.as_bytes())
                .map_err(|e| format!("vault ca_cert: {e}"))?;
            http = http.add_root_certificate(cert);
        }
        let http = http.build().map_err(|e| format!("vault client: {e}"))?;
        Ok(Vault {
            config,
            http,
            token: Mutex::new(None),
            mounts: Default::default(),
        })
    }

    /// The logical paths (no leading `/`) tried for `name` of `scope`.
    pub fn paths(&self, scope: SecretScope<'_>, name: &str) -> Vec<String> {
        let prefix = self.config.path_prefix.trim_end_matches('/');
        let mut out = Vec::new();
        for t in &self.config.lookup_templates {
            if t.contains("{{.Pipeline}}") && scope.pipeline.is_none() {
                continue;
            }
            let path = t
                .replace("{{.Team}}", scope.team)
                .replace("{{.Pipeline}}", scope.pipeline.unwrap_or_default())
                .replace("{{.Secret}}", name);
            out.push(format!("{prefix}/{}", path.trim_start_matches('/')));
        }
        if let Some(shared) = &self.config.shared_path {
            out.push(format!("{prefix}/{}/{name}", shared.trim_matches('/')));
        }
        out
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = format!(
            "{}/v1/{}",
            self.config.url.trim_end_matches('/'),
            path.trim_start_matches('/')
        );
        let mut r = self.http.request(method, url);
        if let Some(ns) = &self.config.namespace {
            r = r.header("X-Vault-Namespace", ns);
        }
        r
    }

    /// Sends `r`, answering its status and JSON body; a connection
    /// failure or a 5xx is transient.
    async fn send(
        &self,
        r: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<(u16, Value), ManagerError> {
        let resp = r
            .send()
            .await
            .map_err(|e| failure(format!("{what}: {}", without_url(&e)), true))?;
        let status = resp.status().as_u16();
        let bytes = crate::read_capped(resp, what).await?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status >= 500 {
            return Err(failure(
                format!("{what}: Vault answered {status}{}", said(&body)),
                true,
            ));
        }
        Ok((status, body))
    }

    /// The token to read with: the configured one, or a login's (again
    /// once it lapsed, or when `renew`).
    async fn token(&self, renew: bool) -> Result<String, ManagerError> {
        let mut held = self.token.lock().await;
        if let Some(token) = &self.config.client_token {
            return Ok(token.clone());
        }
        if let (false, Some((t, lapses))) = (renew, held.as_ref()) {
            if lapses.is_none_or(|l| Instant::now() < l) {
                return Ok(t.clone());
            }
        }
        let backend = self.config.auth_backend.as_deref().unwrap_or("approle");
        let (status, body) = self
            .send(
                self.request(reqwest::Method::POST, &format!("auth/{backend}/login"))
                    .json(&self.config.auth_params),
                &format!("logging in to Vault ({backend})"),
            )
            .await?;
        let token = body["auth"]["client_token"]
            .as_str()
            .filter(|_| status == 200);
        let Some(token) = token else {
            return Err(failure(
                format!("logging in to Vault ({backend}): {status}{}", said(&body)),
                false,
            ));
        };
        // Logged in again a little before the lease lapses.
        let lapses = body["auth"]["lease_duration"]
            .as_u64()
            .filter(|s| *s > 0)
            .map(|s| Instant::now() + Duration::from_secs(s) * 9 / 10);
        *held = Some((token.to_string(), lapses));
        Ok(token.to_string())
    }

    /// A GET with the token, logging in again once if Vault refuses it.
    async fn get(&self, path: &str, what: &str) -> Result<(u16, Value), ManagerError> {
        let token = self.token(false).await?;
        let (status, body) = self
            .send(
                self.request(reqwest::Method::GET, path)
                    .header("X-Vault-Token", &token),
                what,
            )
            .await?;
        if status == 403 && self.config.client_token.is_none() {
            let token = self.token(true).await?;
            return self
                .send(
                    self.request(reqwest::Method::GET, path)
                        .header("X-Vault-Token", &token),
                    what,
                )
                .await;
        }
        Ok((status, body))
    }

    /// The mount holding `path` and its KV version (1 when Vault does not
    /// say), asked once per first path segment.
    async fn mount(&self, path: &str) -> Result<(String, u8), ManagerError> {
        let top = path.split('/').next().unwrap_or_default().to_string();
        if let Some(m) = self.mounts.get(&top) {
            return Ok(m.clone());
        }
        let (status, body) = self
            .get(
                &format!("sys/internal/ui/mounts/{path}"),
                "finding the secret's mount",
            )
            .await?;
        let found = match status {
            200 => {
                let mount = body["data"]["path"].as_str().unwrap_or(&top).to_string();
                let v2 = body["data"]["options"]["version"].as_str() == Some("2");
                (mount, if v2 { 2 } else { 1 })
            }
            // An older Vault: KV v1.
            404 => (format!("{top}/"), 1),
            _ => {
                return Err(failure(
                    format!(
                        "finding the mount of {path:?}: Vault answered {status}{}",
                        said(&body)
                    ),
                    false,
                ))
            }
        };
        self.mounts.insert(top, found.clone());
        Ok(found)
    }

    /// Reads secret `path` (no leading `/`): its data and lease, or none.
    async fn read(&self, path: &str) -> Result<Option<(Value, Option<Duration>)>, ManagerError> {
        let (mount, version) = self.mount(path).await?;
        let at = if version == 2 {
            let rest = path.strip_prefix(mount.as_str()).unwrap_or(path);
            format!("{}data/{rest}", mount)
        } else {
            path.to_string()
        };
        let (status, body) = self.get(&at, "reading a secret").await?;
        match status {
            200 => {}
            404 => return Ok(None),
            _ => {
                return Err(failure(
                    format!("reading {path:?}: Vault answered {status}{}", said(&body)),
                    false,
                ))
            }
        }
        if version == 2 {
            let data = &body["data"]["data"];
            // A deleted (not destroyed) version has no data.
            return Ok(data.is_object().then(|| (data.clone(), None)));
        }
        let lease = body["lease_duration"]
            .as_u64()
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        Ok(Some((body["data"].clone(), lease)))
    }
}

/// Vault's `errors`, after a colon, when it gave any.
fn said(body: &Value) -> String {
    match body["errors"].as_array() {
        Some(e) if !e.is_empty() => format!(
            ": {}",
            e.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        ),
        _ => String::new(),
    }
}

#[async_trait]
impl CredentialManager for Vault {
    fn name(&self) -> &str {
        "vault"
    }

    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        let paths = self.paths(scope, name);
        for path in &paths {
            let logical = path.trim_start_matches('/');
            if let Some((data, lease)) = self.read(logical).await? {
                let value = match data.get("value") {
                    Some(v) => v.clone(),
                    None => data,
                };
                let value = serde_yaml::to_value(value)
                    .map_err(|e| failure(format!("reading {path:?}: {e}"), false))?;
                return Ok(Lookup::Found {
                    value,
                    path: path.clone(),
                    lease,
                });
            }
        }
        Ok(Lookup::NotFound { tried: paths })
    }

    async fn health(&self) -> Result<(), ManagerError> {
        let (status, body) = self
            .send(
                self.request(reqwest::Method::GET, "sys/health"),
                "asking Vault's health",
            )
            .await?;
        if status == 200 {
            Ok(())
        } else {
            Err(failure(
                format!("Vault's health: {status}{}", said(&body)),
                true,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> VaultConfig {
        VaultConfig::from_var_source(&serde_yaml::from_str(yaml).unwrap()).unwrap()
    }

    #[test]
    fn paths_follow_concourses_templates_prefix_and_shared_path() {
        let v = Vault::new(config(
            "{url: 'http://v', client_token: t, shared_path: shared}",
        ))
        .unwrap();
        let scope = SecretScope {
            team: "main",
            pipeline: Some("p"),
        };
        assert_eq!(
            v.paths(scope, "x"),
            [
                "/concourse/main/p/x",
                "/concourse/main/x",
                "/concourse/shared/x"
            ]
        );
        let no_pipeline = SecretScope {
            team: "main",
            pipeline: None,
        };
        assert_eq!(
            v.paths(no_pipeline, "x"),
            ["/concourse/main/x", "/concourse/shared/x"]
        );
        let v = Vault::new(config(
            "{url: 'http://v', client_token: t, path_prefix: /secret, lookup_templates: ['/{{.Secret}}-{{.Team}}']}",
        ))
        .unwrap();
        assert_eq!(v.paths(scope, "x"), ["/secret/x-main"]);
    }

    #[test]
    fn a_config_shown_shows_no_token_or_login_param() {
        let c = config(
            "{url: 'http://v', client_token: s3cret-token, auth_params: {secret_id: s3cret-id}}",
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("secret_id"), "{shown}");
    }

    #[test]
    fn bad_configs_are_refused_by_field() {
        let bad = |yaml: &str| {
            VaultConfig::from_var_source(&serde_yaml::from_str(yaml).unwrap())
                .and_then(|c| c.check())
                .unwrap_err()
        };
        assert!(bad("{url: 'http://v'}").contains("client_token or auth_backend"));
        assert!(bad("{url: 'ftp://v', client_token: t}").contains("http://"));
        assert!(bad("{url: 'http://v', client_token: t, nope: 1}").contains("nope"));
        assert!(
            bad("{url: 'http://v', client_token: t, lookup_templates: ['/x']}")
                .contains("{{.Secret}}")
        );
    }
}
