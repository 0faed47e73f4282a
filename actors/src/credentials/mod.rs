//! Credential managers: where a pipeline's vars come from when its static
//! vars (`set-pipeline -v/-l`) leave them, as in Concourse. A var left is
//! looked up when a build needs it, not when the pipeline is set, so a
//! secret changed in the manager is what the next build reads:
//!
//! - [`CredentialManager`]: one manager of the node (the built-in one,
//!   [`BuiltIn`], secrets in Gantry's own database, sealed; others are
//!   adapters), asked for a var of a team's pipeline and answering the
//!   value or the paths it tried;
//! - [`Credentials`]: the node's manager behind a cache (a value found is
//!   kept for half its lease or [`CacheConfig::found`], a var not found for
//!   [`CacheConfig::not_found`], an error never) and retries of transient
//!   errors; it resolves the vars a build needs ([`needs`]) into [`Vars`]
//!   the build's plan is made with, and a [`Redactor`] that hides their
//!   values wherever the build writes;
//! - `crate::redact`: the redaction itself.
//!
//! A var that cannot be found errors the build, naming the var and the
//! paths tried, never a value. A var of a pipeline's `var_sources`
//! (`((source:name))`) comes from that source: an `idtoken` source's
//! token ([`idtoken`]), a `dummy` source's config, or a manager the
//! adapters make ([`VarSourceTypes`]: vault, ssm, secretsmanager); a
//! source of another type is refused by name.

pub(crate) mod bench;
mod builtin;
pub(crate) mod idtoken;
pub(crate) mod needs;
mod stored;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use dashmap::DashMap;
use serde_yaml::Value;

use crate::error::EngineError;
use crate::pipeline::vars::VarRef;
use crate::pipeline::Vars;

pub(crate) use crate::redact::Redactor;
pub(crate) use builtin::BuiltIn;
pub(crate) use stored::NeedsCredentials;

/// Whose var is looked up: a team's pipeline, or the team's alone (a
/// one-off build names no pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretScope<'a> {
    /// The team.
    pub team: &'a str,
    /// The pipeline, when the build has one.
    pub pipeline: Option<&'a str>,
}

impl SecretScope<'_> {
    /// Concourse's lookup paths of var `name`, in order:
    /// `PREFIX/TEAM/PIPELINE/NAME` (with a pipeline), then
    /// `PREFIX/TEAM/NAME`.
    pub fn concourse_paths(&self, prefix: &str, name: &str) -> Vec<String> {
        let mut paths = Vec::with_capacity(2);
        if let Some(p) = self.pipeline {
            paths.push(format!("{prefix}/{}/{p}/{name}", self.team));
        }
        paths.push(format!("{prefix}/{}/{name}", self.team));
        paths
    }
}

/// What a manager answers for one var.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Its value, where it was found, and for how long the manager lets it
    /// be kept (a Vault lease), when it says.
    Found {
        /// The value (a string, or a mapping whose fields `((name.field))`
        /// reads).
        value: Value,
        /// The path it was found at.
        path: String,
        /// The value's lease.
        lease: Option<Duration>,
    },
    /// No value: the paths tried, in order.
    NotFound {
        /// Each path asked.
        tried: Vec<String>,
    },
}

/// Why a manager could not answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct ManagerError {
    /// What went wrong (never a value).
    pub reason: String,
    /// Whether asking again may work (a timeout, a 5xx), so it is retried.
    pub transient: bool,
}

/// A credential manager: where vars come from.
#[async_trait]
pub trait CredentialManager: Send + Sync {
    /// Its name in messages (`built-in`, `vault`, `ssm`, ...).
    fn name(&self) -> &str;

    /// The value of var `name` for `scope`, trying its paths in order.
    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError>;

    /// Whether it answers now (for `/readyz`).
    async fn health(&self) -> Result<(), ManagerError> {
        Ok(())
    }
}

/// Makes the managers of a pipeline's `var_sources` of the types an
/// adapter reads (`vault`), from each source's `config`.
pub trait VarSourceTypes: Send + Sync {
    /// The manager of a var source of type `type_` with `config`; none
    /// when the type is not one of these, an error naming what is wrong
    /// with the config.
    fn manager(
        &self,
        type_: &str,
        config: &Value,
    ) -> Option<Result<Arc<dyn CredentialManager>, String>>;
}

/// How long lookups are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// A value found without a lease (with one: half of it).
    pub found: Duration,
    /// A var not found.
    pub not_found: Duration,
    /// Tries of a lookup failing with a transient error.
    pub attempts: u32,
    /// Whether builds write secrets as they are (`[web.credentials]
    /// redact = false`): off only when an operator says so.
    pub no_redaction: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            found: Duration::from_secs(60),
            not_found: Duration::from_secs(10),
            attempts: 3,
            no_redaction: false,
        }
    }
}

type CacheKey = (String, Option<String>, String);

/// The vars a build needs, resolved.
#[derive(Debug, Default, Clone)]
pub(crate) struct Resolved {
    /// Each var by name, for the plan.
    pub vars: Vars,
    /// Their values, hidden wherever the build writes.
    pub redactor: Redactor,
}

/// A build's pipeline's `var_sources` and whom the build runs for (what
/// a `((source:name))` var is looked up with).
#[derive(Debug, Clone, Default)]
pub(crate) struct SourceContext {
    /// The pipeline's var sources.
    pub sources: Vec<crate::pipeline::model::VarSource>,
    /// The job (none: a check).
    pub job: Option<String>,
}

/// The node's credential manager behind its cache.
#[derive(Clone)]
pub(crate) struct Credentials {
    manager: Arc<dyn CredentialManager>,
    /// Signs the tokens of `idtoken` var sources.
    id_tokens: Option<idtoken::IdTokens>,
    /// Makes the managers of other var sources' types.
    source_types: Option<Arc<dyn VarSourceTypes>>,
    config: CacheConfig,
    cache: Arc<DashMap<CacheKey, (Instant, Lookup)>>,
    /// Lookups that reached the manager.
    calls: Arc<AtomicU64>,
}

impl Credentials {
    /// `manager` behind a cache kept as `config` says.
    pub(crate) fn new(manager: Arc<dyn CredentialManager>, config: CacheConfig) -> Credentials {
        Credentials {
            manager,
            id_tokens: None,
            source_types: None,
            config,
            cache: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// These, signing the tokens of `idtoken` var sources with `tokens`.
    pub(crate) fn with_id_tokens(self, tokens: idtoken::IdTokens) -> Credentials {
        Credentials {
            id_tokens: Some(tokens),
            ..self
        }
    }

    /// These, reading var sources of the types `types` makes.
    pub(crate) fn with_source_types(self, types: Option<Arc<dyn VarSourceTypes>>) -> Credentials {
        Credentials {
            source_types: types,
            ..self
        }
    }

    /// A new build's redactor: one that hides nothing when redaction is
    /// turned off on this node.
    pub(crate) fn redactor(&self) -> Redactor {
        if self.config.no_redaction {
            Redactor::off()
        } else {
            Redactor::new()
        }
    }

    /// The manager's name.
    pub(crate) fn manager_name(&self) -> &str {
        self.manager.name()
    }

    /// How many lookups reached the manager (not the cache) so far.
    pub(crate) fn manager_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Whether the manager answers now.
    pub(crate) async fn health(&self) -> Result<(), String> {
        self.manager
            .health()
            .await
            .map_err(|e| format!("credential manager {}: {}", self.manager.name(), e.reason))
    }

    /// Forgets what is cached of `team`'s vars (its secrets changed here).
    pub(crate) fn forget_team(&self, team: &str) {
        self.cache.retain(|k, _| k.0 != team);
    }

    /// The vars `needed` (each by its text, `name.field`) for `scope`
    /// (`sourced`: the pipeline's var sources, for `((source:name))`):
    /// every one found, or one error naming each var not found with the
    /// paths tried (and each manager error), never a value.
    pub(crate) async fn resolve(
        &self,
        scope: SecretScope<'_>,
        needed: &BTreeSet<String>,
        sourced: &SourceContext,
    ) -> Result<Resolved, EngineError> {
        let mut out = Resolved::default();
        let mut problems = Vec::new();
        let mut names = BTreeSet::new();
        let mut from_sources = BTreeSet::new();
        for text in needed {
            let var = VarRef::parse(text).map_err(EngineError::Invalid)?;
            match &var.source {
                Some(source) => {
                    from_sources.insert((source.clone(), var.path));
                }
                None => {
                    names.insert(var.path);
                }
            }
        }
        for (source, name) in from_sources {
            match self.lookup_in_source(scope, sourced, &source, &name).await {
                Ok(value) => {
                    out.redactor.add(&value);
                    out.vars.insert(&format!("{source}:{name}"), value);
                }
                Err(problem) => problems.push(problem),
            }
        }
        for name in names {
            match self.lookup(scope, &name).await {
                Ok(Lookup::Found { value, .. }) => {
                    out.redactor.add(&value);
                    out.vars.insert(&name, value);
                }
                Ok(Lookup::NotFound { tried }) => problems.push(format!(
                    "unfilled var (({name})): the credential manager ({}) has none (tried {})",
                    self.manager.name(),
                    tried.join(", ")
                )),
                Err(e) => problems.push(format!(
                    "var (({name})): the credential manager ({}) failed: {}",
                    self.manager.name(),
                    e.reason
                )),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(EngineError::Invalid(problems.join("; ")))
        }
    }

    /// Var `name` of the pipeline's var source `source`, or the problem.
    async fn lookup_in_source(
        &self,
        scope: SecretScope<'_>,
        sourced: &SourceContext,
        source: &str,
        name: &str,
    ) -> Result<Value, String> {
        let var = format!("(({source}:{name}))");
        let Some(declared) = sourced.sources.iter().find(|s| s.name == source) else {
            return Err(format!(
                "var {var}: the pipeline declares no var source {source:?} (var_sources)"
            ));
        };
        match declared.type_.as_str() {
            "idtoken" => {
                let config = idtoken::IdTokenConfig::read(&declared.config)
                    .map_err(|e| format!("var source {source:?}: {e}"))?;
                if name != "token" {
                    return Err(format!(
                        "var {var}: an idtoken var source gives (({source}:token)) only"
                    ));
                }
                let tokens = self
                    .id_tokens
                    .as_ref()
                    .ok_or_else(|| format!("var {var}: this web node signs no ID tokens"))?;
                let subject = idtoken::Subject {
                    team: scope.team,
                    pipeline: scope.pipeline.unwrap_or_default(),
                    instance: None,
                    job: sourced.job.as_deref(),
                };
                tokens
                    .token(&config, subject)
                    .await
                    .map(Value::String)
                    .map_err(|e| format!("var {var}: {e}"))
            }
            // Concourse's `dummy`: the vars are the config's own
            // (`vars: {name: value}`), redacted like any other.
            "dummy" => {
                let vars = declared.config.get("vars").and_then(Value::as_mapping);
                let Some(vars) = vars else {
                    return Err(format!(
                        "var source {source:?}: a dummy var source needs config.vars, a mapping"
                    ));
                };
                vars.get(name).cloned().ok_or_else(|| {
                    format!("unfilled var {var}: var source {source:?} (dummy) has no var {name:?}")
                })
            }
            other => {
                let made = self
                    .source_types
                    .as_ref()
                    .and_then(|t| t.manager(other, &declared.config));
                let manager = match made {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return Err(format!("var source {source:?}: {e}")),
                    None => {
                        return Err(format!(
                            "var {var}: var source {source:?} is of type {other:?}, which this web node does not read (it reads idtoken, dummy, vault, ssm and secretsmanager); store the var in the node's credential manager ({}) instead",
                            self.manager.name()
                        ))
                    }
                };
                match self
                    .lookup_with(manager.as_ref(), scope, name, Some(source))
                    .await
                {
                    Ok(Lookup::Found { value, .. }) => Ok(value),
                    Ok(Lookup::NotFound { tried }) => Err(format!(
                        "unfilled var {var}: var source {source:?} ({other}) has none (tried {})",
                        tried.join(", ")
                    )),
                    Err(e) => Err(format!(
                        "var {var}: var source {source:?} ({other}) failed: {}",
                        e.reason
                    )),
                }
            }
        }
    }

    /// One var, from the cache or the node's manager (retrying transient
    /// errors).
    async fn lookup(&self, scope: SecretScope<'_>, name: &str) -> Result<Lookup, ManagerError> {
        self.lookup_with(self.manager.as_ref(), scope, name, None)
            .await
    }

    /// One var of `manager` (the node's, or var source `source`'s), from
    /// the cache or the manager (retrying transient errors).
    async fn lookup_with(
        &self,
        manager: &dyn CredentialManager,
        scope: SecretScope<'_>,
        name: &str,
        source: Option<&str>,
    ) -> Result<Lookup, ManagerError> {
        let key = (
            scope.team.to_string(),
            scope.pipeline.map(str::to_string),
            match source {
                Some(s) => format!("{s}:{name}"),
                None => name.to_string(),
            },
        );
        if let Some(hit) = self.cache.get(&key) {
            if hit.0 > Instant::now() {
                return Ok(hit.1.clone());
            }
        }
        let mut attempt = 1;
        let found = loop {
            self.calls.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("gantry_credential_lookups_total", "manager" => manager.name().to_string())
                .increment(1);
            match manager.lookup(scope, name).await {
                Err(e) if e.transient && attempt < self.config.attempts => {
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    attempt += 1;
                }
                other => break other?,
            }
        };
        // A lease keeps a value for half of it, never longer than a value
        // without one, so a changed secret is read within that.
        let keep = match &found {
            Lookup::Found { lease: Some(l), .. } => (*l / 2).min(self.config.found),
            Lookup::Found { lease: None, .. } => self.config.found,
            Lookup::NotFound { .. } => self.config.not_found,
        };
        if !keep.is_zero() {
            self.cache
                .insert(key, (Instant::now() + keep, found.clone()));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests;
