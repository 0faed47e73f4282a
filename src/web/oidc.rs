//! Signing people in through an OpenID Connect provider (`[web.oidc]`):
//! the authorization code flow with PKCE (RFC 7636), `state` and `nonce`.
//!
//! `GET /auth/oidc/login` records the sign-in under way in the database
//! (a hash of its `state`, the PKCE verifier, the nonce, and a hash of a
//! cookie given to the browser, so only that browser can finish it) and
//! sends the browser to the provider. `GET /auth/oidc/callback` takes the
//! record (once: a replayed state finds nothing), exchanges the code for
//! tokens and verifies the ID token with `jsonwebtoken` against the keys
//! the provider publishes (its JWKS): an asymmetric signature, the issuer,
//! the audience, the expiry and the nonce. The person is `oidc:NAME` (the
//! `user_claim`), in the groups of the `groups_claim` (from the ID token,
//! else from the userinfo endpoint, whose `sub` must match). Their session
//! is a sign-in token of the team asked for (`main` or their first team
//! otherwise): a cookie for a browser, or handed to `gantry login`'s
//! loopback listener. Several web nodes share the records, so a sign-in
//! may start on one and finish on another.

use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::config::OidcConfig;
use crate::web::error::ApiError;
use crate::web::people::OIDC_PREFIX;
use crate::web::sign_in_flow::{
    self, challenge_of, provider_failed, Begun, CallbackQuery, LoginQuery, PendingSignIn, Person,
    ProviderHttp, SignInProvider,
};
use crate::web::AppState;

/// The provider's name in routes and sign-ins under way.
const PROVIDER: &str = "oidc";

/// How long the provider's metadata and keys are kept before being read
/// again (an unknown key id reads the keys again at once).
const METADATA_TTL: Duration = Duration::from_secs(3600);

/// How far the ID token's times may be off this node's clock.
const CLOCK_LEEWAY_SECS: u64 = 60;

/// The provider's metadata this node uses.
#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    userinfo_endpoint: Option<String>,
}

/// The provider of `[web.oidc]`, its metadata and keys as last read.
pub struct Oidc {
    cfg: OidcConfig,
    /// Its client and the callback URL.
    pub client: ProviderHttp,
    discovery: Mutex<Option<(Instant, Discovery)>>,
    keys: Mutex<Option<(Instant, JwkSet)>>,
}

fn refused(message: impl Into<String>) -> ApiError {
    ApiError::unauthorized(message)
}

impl Oidc {
    /// The provider of `cfg`, calling back at `external_url`'s
    /// `/auth/oidc/callback` (none: once the node is bound, see
    /// [`ProviderHttp::default_external_url`]). Nothing is read from the
    /// provider until a sign-in.
    pub fn new(cfg: OidcConfig, external_url: Option<&str>) -> anyhow::Result<Self> {
        cfg.check()?;
        Ok(Self {
            client: ProviderHttp::new(PROVIDER, cfg.ca_cert.as_deref(), external_url)?,
            cfg,
            discovery: Mutex::new(None),
            keys: Mutex::new(None),
        })
    }

    /// What the sign-in page's button says.
    pub fn display_name(&self) -> &str {
        &self.cfg.display_name
    }

    /// The provider's metadata, read again after [`METADATA_TTL`]. Its
    /// `issuer` must be exactly the configured one.
    async fn discovery(&self) -> Result<Discovery, ApiError> {
        let mut kept = self.discovery.lock().await;
        if let Some((at, d)) = kept.as_ref() {
            if at.elapsed() < METADATA_TTL {
                return Ok(d.clone());
            }
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.cfg.issuer.trim_end_matches('/')
        );
        let d: Discovery = self.client.get_json(&url, None, "metadata").await?;
        if d.issuer != self.cfg.issuer {
            return Err(provider_failed(format!(
                "the provider at {} says its issuer is {:?}: set web.oidc.issuer to the issuer exactly",
                self.cfg.issuer, d.issuer
            )));
        }
        *kept = Some((Instant::now(), d.clone()));
        Ok(d)
    }

    /// The provider's signing keys; read again when `kid` is not among
    /// them (the provider rotated its keys) or they are old.
    async fn keys(&self, d: &Discovery, kid: Option<&str>) -> Result<JwkSet, ApiError> {
        let mut kept = self.keys.lock().await;
        if let Some((at, set)) = kept.as_ref() {
            let has = kid.is_none_or(|k| set.find(k).is_some());
            if has && at.elapsed() < METADATA_TTL {
                return Ok(set.clone());
            }
        }
        let set: JwkSet = self.client.get_json(&d.jwks_uri, None, "keys").await?;
        *kept = Some((Instant::now(), set.clone()));
        Ok(set)
    }

    /// Where to send a browser to sign in, with the values of the sign-in
    /// to record.
    async fn authorize_url_with(
        &self,
        state: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<String, ApiError> {
        let d = self.discovery().await?;
        let url = reqwest::Url::parse_with_params(
            &d.authorization_endpoint,
            [
                ("response_type", "code"),
                ("client_id", self.cfg.client_id.as_str()),
                ("redirect_uri", self.client.redirect_uri()),
                ("scope", &self.cfg.scopes.join(" ")),
                ("state", state),
                ("nonce", nonce),
                ("code_challenge", &challenge_of(verifier)),
                ("code_challenge_method", "S256"),
            ],
        )
        .map_err(|e| {
            provider_failed(format!(
                "the provider's authorization endpoint {:?}: {e}",
                d.authorization_endpoint
            ))
        })?;
        Ok(url.into())
    }

    /// Exchanges `code` for the provider's tokens and says who signed in.
    async fn exchange(&self, code: &str, verifier: &str, nonce: &str) -> Result<Person, ApiError> {
        let d = self.discovery().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.client.redirect_uri()),
            ("code_verifier", verifier),
        ];
        let mut req = self.client.http.post(&d.token_endpoint);
        match &self.cfg.client_secret {
            Some(secret) => req = req.basic_auth(&self.cfg.client_id, Some(secret)),
            None => form.push(("client_id", self.cfg.client_id.as_str())),
        }
        let answer = req.form(&form).send().await.map_err(|e| {
            provider_failed(format!("exchanging the code at {}: {e}", d.token_endpoint))
        })?;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let why = body["error_description"]
                .as_str()
                .or(body["error"].as_str())
                .unwrap_or("no reason given");
            return Err(refused(format!(
                "the provider refused the code ({status}): {why}"
            )));
        }
        let id_token = body["id_token"]
            .as_str()
            .ok_or_else(|| refused("the provider answered no ID token"))?;
        let mut claims = self.verify(&d, id_token, nonce).await?;
        let wanted = [&self.cfg.user_claim, &self.cfg.groups_claim];
        if wanted.iter().any(|c| !claims.contains_key(c.as_str())) {
            if let (Some(url), Some(access)) = (&d.userinfo_endpoint, body["access_token"].as_str())
            {
                self.add_userinfo(url, access, &mut claims).await?;
            }
        }
        person_of(&claims, &self.cfg.user_claim, &self.cfg.groups_claim)
    }

    /// Verifies an ID token: signed by one of the provider's keys with an
    /// asymmetric algorithm, issued by the issuer for this client, not
    /// expired, carrying this sign-in's nonce. Answers its claims.
    async fn verify(
        &self,
        d: &Discovery,
        id_token: &str,
        nonce: &str,
    ) -> Result<Map<String, Value>, ApiError> {
        let header = jsonwebtoken::decode_header(id_token)
            .map_err(|e| refused(format!("the ID token is not a signed JWT: {e}")))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(refused(format!(
                "the ID token is signed with a shared key ({:?}), not one of the provider's keys",
                header.alg
            )));
        }
        let set = self.keys(d, header.kid.as_deref()).await?;
        let jwk = match header.kid.as_deref() {
            Some(kid) => set.find(kid),
            None if set.keys.len() == 1 => set.keys.first(),
            None => None,
        }
        .ok_or_else(|| {
            refused(format!(
                "the ID token is signed with a key the provider does not publish (kid {:?})",
                header.kid
            ))
        })?;
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| refused(format!("the provider's key {:?}: {e}", header.kid)))?;
        let mut rules = Validation::new(header.alg);
        rules.set_issuer(&[&self.cfg.issuer]);
        rules.set_audience(&[&self.cfg.client_id]);
        rules.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        rules.leeway = CLOCK_LEEWAY_SECS;
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(id_token, &key, &rules).map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                refused(match e.kind() {
                    K::ExpiredSignature => "the ID token has expired".to_string(),
                    K::ImmatureSignature => "the ID token is not valid yet".to_string(),
                    K::InvalidIssuer => format!(
                        "the ID token's issuer is unknown here (this node trusts {})",
                        self.cfg.issuer
                    ),
                    K::InvalidAudience => "the ID token was issued to another client".to_string(),
                    K::InvalidSignature => {
                        "the ID token's signature does not verify against the provider's keys"
                            .to_string()
                    }
                    K::MissingRequiredClaim(c) => format!("the ID token has no {c:?} claim"),
                    _ => format!("the ID token does not verify: {e}"),
                })
            })?;
        let claims = data.claims;
        if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
            return Err(refused(
                "the ID token's nonce is not this sign-in's (a token replayed from another sign-in?)",
            ));
        }
        // Several audiences: the token must have been given to this client.
        if claims["aud"].as_array().is_some_and(|a| a.len() > 1)
            && claims.get("azp").and_then(Value::as_str) != Some(self.cfg.client_id.as_str())
        {
            return Err(refused(
                "the ID token names several audiences but was not given to this client (azp)",
            ));
        }
        Ok(claims)
    }

    /// Adds the userinfo endpoint's claims the ID token lacks; its `sub`
    /// must be the ID token's.
    async fn add_userinfo(
        &self,
        url: &str,
        access_token: &str,
        claims: &mut Map<String, Value>,
    ) -> Result<(), ApiError> {
        let info: Map<String, Value> = self
            .client
            .get_json(url, Some(access_token), "userinfo")
            .await?;
        if info.get("sub") != claims.get("sub") {
            return Err(refused(
                "the provider's userinfo is about another subject than the ID token",
            ));
        }
        for (k, v) in info {
            claims.entry(k).or_insert(v);
        }
        Ok(())
    }
}

/// The person of `claims`: `oidc:` and the user claim (a non-empty
/// string), in the groups claim's groups (an array of strings, one
/// string, or none).
fn person_of(
    claims: &Map<String, Value>,
    user_claim: &str,
    groups_claim: &str,
) -> Result<Person, ApiError> {
    let user = claims
        .get(user_claim)
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty() && !u.chars().any(char::is_control))
        .ok_or_else(|| {
            refused(format!(
                "the provider gave no {user_claim:?} claim naming the person (web.oidc.user_claim)"
            ))
        })?;
    let groups = match claims.get(groups_claim) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|g| format!("{OIDC_PREFIX}{g}"))
            .collect(),
        Some(Value::String(one)) => vec![format!("{OIDC_PREFIX}{one}")],
        _ => Vec::new(),
    };
    Ok(Person {
        name: format!("{OIDC_PREFIX}{user}"),
        groups,
    })
}

impl SignInProvider for Oidc {
    const NAME: &'static str = PROVIDER;

    fn of(state: &AppState) -> Result<&Self, ApiError> {
        state.oidc.as_deref().ok_or_else(|| {
            ApiError::not_found(
                "this web node signs no one in through an OpenID provider ([web.oidc])",
            )
        })
    }

    async fn authorize_url(&self, begun: &Begun) -> Result<String, ApiError> {
        self.authorize_url_with(&begun.state, &begun.nonce, &begun.verifier)
            .await
    }

    /// An answer naming its issuer (RFC 9207) must name this one.
    fn check_answer(&self, answer: &CallbackQuery) -> Result<(), ApiError> {
        if answer
            .iss
            .as_ref()
            .is_some_and(|iss| iss != &self.cfg.issuer)
        {
            return Err(refused(format!(
                "the answer comes from an unknown issuer (this node trusts {})",
                self.cfg.issuer
            )));
        }
        Ok(())
    }

    async fn person(&self, code: &str, pending: &PendingSignIn) -> Result<Person, ApiError> {
        self.exchange(code, &pending.verifier, &pending.nonce).await
    }
}

/// `GET /auth/oidc/login`: sends the browser to the provider.
#[utoipa::path(
    get,
    path = "/auth/oidc/login",
    operation_id = "oidcSignIn",
    tag = "teams",
    security(()),
    params(LoginQuery),
    responses(
        (status = 302, description = "To the provider's sign-in"),
        (status = 400, description = "A bad query", body = crate::web::error::ErrorBody),
        (status = 404, description = "No [web.oidc] on this node", body = crate::web::error::ErrorBody),
        (status = 502, description = "The provider could not be read", body = crate::web::error::ErrorBody),
    )
)]
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<LoginQuery>,
) -> Result<HttpResponse, ApiError> {
    sign_in_flow::login::<Oidc>(req, state, query).await
}

/// `GET /auth/oidc/callback`: the provider's answer. Signs the person in
/// (a cookie and the dashboard, or the token to `gantry login`).
#[utoipa::path(
    get,
    path = "/auth/oidc/callback",
    operation_id = "oidcCallback",
    tag = "teams",
    security(()),
    params(CallbackQuery),
    responses(
        (status = 302, description = "Signed in: to the dashboard (with the session cookie) or to gantry login's listener"),
        (status = 400, description = "An unknown, used or expired sign-in, or another browser's", body = crate::web::error::ErrorBody),
        (status = 401, description = "The provider refused, or its ID token does not verify", body = crate::web::error::ErrorBody),
        (status = 403, description = "The person has no role in the team (or in any)", body = crate::web::error::ErrorBody),
        (status = 404, description = "No [web.oidc] on this node", body = crate::web::error::ErrorBody),
        (status = 502, description = "The provider could not be reached", body = crate::web::error::ErrorBody),
    )
)]
pub async fn callback(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> Result<HttpResponse, ApiError> {
    sign_in_flow::callback::<Oidc>(req, state, query).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_is_named_by_the_user_claim_in_the_groups_claims_groups() {
        let claims = |v: Value| v.as_object().unwrap().clone();
        let p = person_of(
            &claims(serde_json::json!({"preferred_username": "alice", "groups": ["a", "b", 3]})),
            "preferred_username",
            "groups",
        )
        .unwrap();
        assert_eq!(p.name, "oidc:alice");
        assert_eq!(p.groups, ["oidc:a", "oidc:b"]);
        let one = person_of(
            &claims(serde_json::json!({"email": "bob@x", "team": "ops"})),
            "email",
            "team",
        )
        .unwrap();
        assert_eq!(
            (one.name.as_str(), one.groups),
            ("oidc:bob@x", vec!["oidc:ops".to_string()])
        );
        let none = person_of(
            &claims(serde_json::json!({"sub": "1"})),
            "preferred_username",
            "groups",
        );
        assert_eq!(none.unwrap_err().status, 401);
        let empty = person_of(&claims(serde_json::json!({"u": ""})), "u", "groups");
        assert!(empty.is_err());
    }
}
