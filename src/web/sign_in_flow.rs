//! What signing in through a provider (`[web.oidc]`, `[web.github]`) does
//! the same way whatever the provider: the sign-in under way (a hash of
//! its `state`, the PKCE verifier, the nonce, the team asked, `gantry
//! login`'s loopback port) sealed into a short-lived cookie of the browser
//! that leaves for the provider, opened when that browser comes back, and
//! the session made for the person the provider named: a cookie and the
//! dashboard, or the token handed to `gantry login`'s loopback listener.
//!
//! The routes beginning a sign-in are open to anyone, so nothing of a
//! sign-in under way is kept on the node or in the database: a caller
//! looping on them fills nothing shared, and any node sharing the
//! database (and so its encryption key) opens the cookie. The cookie is
//! sealed with the node's key (AES-256-GCM, bound to the provider), so the
//! browser can neither read the verifier nor forge a sign-in; it is
//! cleared once used, and the provider takes an authorization code once
//! (RFC 6749 10.5), so a replayed answer signs no one in.
//!
//! A provider says only what differs ([`SignInProvider`]): where the
//! browser is sent, what its answer must also carry, and who the code it
//! answered names. The routes' handlers ([`login`], [`callback`]) are the
//! same for every provider.

use actix_web::cookie::{time::Duration as CookieAge, Cookie, SameSite};
use actix_web::http::StatusCode;
use std::future::Future;

use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine as _;
use rand::RngCore as _;
use serde::Deserialize;
use sha2::Digest as _;

use gantry_actors::api::{sha256_hex, Sealer};

use crate::web::api::sessions::{record_sign_in, session_cookie};
use crate::web::error::ApiError;
use crate::web::AppState;

/// The cookie holding a sign-in under way, sealed, in the browser that
/// started it.
const BROWSER_COOKIE: &str = "gantry_sign_in";

/// How long a sign-in through a provider may take, from the browser's
/// leaving for the provider to its return.
pub const SIGN_IN_TTL_MS: i64 = 10 * 60 * 1000;

/// A sign-in through a provider under way, between the browser's leaving
/// for the provider and its return (sealed in the browser's cookie).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct PendingSignIn {
    /// Hex SHA-256 of the `state` sent to the provider.
    pub state_hash: String,
    /// The PKCE code verifier.
    pub verifier: String,
    /// The nonce an OpenID Connect ID token must carry.
    pub nonce: String,
    /// The team asked for, if any.
    pub team: Option<String>,
    /// For `gantry login`: the loopback port its token goes to.
    pub cli_port: Option<u16>,
    /// For `gantry login`: the value it checks its callback by.
    pub cli_state: Option<String>,
    /// For `fly login`: its loopback port (the browser ends at
    /// `/fly_success?fly_port=PORT`, which hands fly a token).
    #[serde(default)]
    pub fly_port: Option<u16>,
    /// Unix ms it was made at.
    pub created_at: i64,
}

/// The keys a sign-in's cookie is sealed with: the node's encryption key
/// (every node sharing the database has it), and while a key is being
/// rotated, the old one, which still opens cookies sealed before.
#[derive(Debug, Clone)]
pub struct SignInKeys {
    current: Sealer,
    old: Option<Sealer>,
}

impl SignInKeys {
    /// Sealing with `current`, opening with it or `old`.
    pub fn new(current: Sealer, old: Option<Sealer>) -> Self {
        Self { current, old }
    }

    /// Where a cookie's sealed value belongs (its associated data): a
    /// cookie of one provider does not open for another.
    fn context(provider: &str) -> String {
        format!("sign-in cookie of {provider}")
    }

    fn seal(&self, provider: &str, pending: &PendingSignIn) -> String {
        let plain = serde_json::to_string(pending).expect("a sign-in serializes");
        self.current.seal(&Self::context(provider), &plain)
    }

    fn open(&self, provider: &str, sealed: &str) -> Option<PendingSignIn> {
        let context = Self::context(provider);
        let plain = self
            .current
            .open(&context, sealed)
            .ok()
            .or_else(|| self.old.as_ref()?.open(&context, sealed).ok())?;
        serde_json::from_str(&plain).ok()
    }
}

/// The routes a provider's sign-in and callback live under.
const AUTH_PATH: &str = "/auth";

/// Requests to a provider give up after this long.
const PROVIDER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// A provider's HTTP client and the callback URL it sends browsers back
/// to.
pub struct ProviderHttp {
    /// The client (rustls; redirects are read, never followed).
    pub http: reqwest::Client,
    /// `EXTERNAL_URL/auth/PROVIDER/callback`: set when made, or once the
    /// node knows the address it listens on.
    redirect_uri: std::sync::OnceLock<String>,
    provider: &'static str,
}

impl ProviderHttp {
    /// The client of `provider` (`oidc`, `github`), trusting `ca_cert`
    /// (PEM) beside the usual roots, called back at `external_url` (none:
    /// see [`ProviderHttp::default_external_url`]).
    pub fn new(
        provider: &'static str,
        ca_cert: Option<&str>,
        external_url: Option<&str>,
    ) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(PROVIDER_TIMEOUT)
            .user_agent(concat!("gantry/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca_cert {
            let cert = reqwest::Certificate::from_pem(pem.as_bytes())
                .map_err(|e| anyhow::anyhow!("web.{provider}.ca_cert: {e}"))?;
            http = http.add_root_certificate(cert);
        }
        let made = Self {
            http: http.build()?,
            redirect_uri: std::sync::OnceLock::new(),
            provider,
        };
        if let Some(url) = external_url {
            made.default_external_url(url);
        }
        Ok(made)
    }

    /// Sends browsers back under `url` when no external URL was
    /// configured (the address the node listens on, known once bound).
    pub fn default_external_url(&self, url: &str) {
        let _ = self.redirect_uri.set(format!(
            "{}{AUTH_PATH}/{}/callback",
            url.trim_end_matches('/'),
            self.provider
        ));
    }

    /// The callback URL the provider sends browsers back to.
    pub fn redirect_uri(&self) -> &str {
        self.redirect_uri
            .get()
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// GETs `url` (with `bearer`, if given) and decodes its JSON; `what`
    /// names it in errors (502: the provider failed).
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        bearer: Option<&str>,
        what: &str,
    ) -> Result<T, ApiError> {
        let mut req = self.http.get(url).header("accept", "application/json");
        if let Some(token) = bearer {
            req = req.bearer_auth(token);
        }
        let answer = req
            .send()
            .await
            .map_err(|e| provider_failed(format!("reading the provider's {what} ({url}): {e}")))?;
        if !answer.status().is_success() {
            return Err(provider_failed(format!(
                "the provider's {what} ({url}) answered {}",
                answer.status()
            )));
        }
        answer
            .json()
            .await
            .map_err(|e| provider_failed(format!("the provider's {what} ({url}): {e}")))
    }
}

/// An error of the provider itself (502).
pub fn provider_failed(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_GATEWAY,
        message: message.into(),
    }
}

/// Who a provider says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// Their name in teams: the provider's prefix (`oidc:`, `github:`) and
    /// the provider's name for them.
    pub name: String,
    /// Their groups, each with the provider's prefix.
    pub groups: Vec<String>,
}

/// The query of `GET /auth/PROVIDER/login`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LoginQuery {
    /// The team to sign in to (default: `main` when the person has a role
    /// there, else their first team).
    pub team: Option<String>,
    /// `gantry login`: the loopback port its listener waits on.
    pub cli_port: Option<u16>,
    /// `gantry login`: the value its listener checks the token's arrival by.
    pub cli_state: Option<String>,
    /// `fly login`: its loopback port (`/login?fly_port=PORT` passes it on).
    pub fly_port: Option<u16>,
}

/// The query of `GET /auth/PROVIDER/callback`, as the provider sends it.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct CallbackQuery {
    /// The authorization code.
    pub code: Option<String>,
    /// The state this node sent.
    pub state: Option<String>,
    /// The provider's refusal, if it refused.
    pub error: Option<String>,
    /// Its explanation.
    pub error_description: Option<String>,
    /// The issuer answering (RFC 9207), when the provider says.
    pub iss: Option<String>,
}

/// 32 random bytes, base64url: a state, a nonce, a PKCE verifier.
pub fn random_value() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The PKCE `S256` challenge of `verifier`.
pub fn challenge_of(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier))
}

/// The values of a sign-in begun: what the provider is sent.
pub struct Begun {
    /// The `state`.
    pub state: String,
    /// The `nonce` (OpenID Connect's ID token carries it back).
    pub nonce: String,
    /// The PKCE verifier, whose challenge the provider is sent.
    pub verifier: String,
    query: LoginQuery,
}

/// Checks a sign-in's query and draws its values.
fn begin(query: LoginQuery) -> Result<Begun, ApiError> {
    match (query.cli_port, &query.cli_state) {
        (Some(0), _) => return Err(ApiError::bad_request("cli_port must not be 0")),
        _ if query.fly_port == Some(0) => {
            return Err(ApiError::bad_request("fly_port must not be 0"))
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(ApiError::bad_request(
                "give cli_port and cli_state together (gantry login does)",
            ))
        }
        _ => {}
    }
    if query.cli_state.as_ref().is_some_and(|s| s.len() > 128) {
        return Err(ApiError::bad_request(
            "cli_state is longer than 128 characters",
        ));
    }
    if let Some(team) = &query.team {
        gantry_actors::api::check_team_name(team)
            .map_err(|e| ApiError::bad_request(format!("team: {e}")))?;
    }
    Ok(Begun {
        state: random_value(),
        nonce: random_value(),
        verifier: random_value(),
        query,
    })
}

/// Seals `begun` as `provider`'s sign-in under way into a cookie and
/// sends the browser to `to` (the provider's authorization URL) with it.
async fn leave_for(
    state: &AppState,
    req: &HttpRequest,
    provider: &str,
    begun: Begun,
    to: String,
) -> Result<HttpResponse, ApiError> {
    let sealed = state.sign_in_keys.seal(
        provider,
        &PendingSignIn {
            state_hash: sha256_hex(&begun.state),
            verifier: begun.verifier,
            nonce: begun.nonce,
            team: begun.query.team,
            cli_port: begun.query.cli_port,
            cli_state: begun.query.cli_state,
            fly_port: begun.query.fly_port,
            created_at: gantry_actors::api::now_ms(),
        },
    );
    let mut cookie = Cookie::build(BROWSER_COOKIE, sealed)
        .path(AUTH_PATH)
        .http_only(true)
        .same_site(SameSite::Lax)
        .max_age(CookieAge::milliseconds(SIGN_IN_TTL_MS))
        .finish();
    if req.connection_info().scheme() == "https" {
        cookie.set_secure(true);
    }
    Ok(HttpResponse::Found()
        .insert_header(("location", to))
        .cookie(cookie)
        .finish())
}

/// The provider's answer: opens the sign-in under way from the browser's
/// cookie, refuses one too old, of another provider, or of another state
/// (another browser than the one that began it: login CSRF), or refused
/// by the provider. Answers the sign-in and the authorization code.
async fn come_back(
    state: &AppState,
    req: &HttpRequest,
    provider: &str,
    q: &CallbackQuery,
) -> Result<(PendingSignIn, String), ApiError> {
    let sign_in_state = q
        .state
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("the provider's answer has no state"))?;
    let other_browser = || {
        ApiError::bad_request("this sign-in was started in another browser: start it again here")
    };
    let cookie = req.cookie(BROWSER_COOKIE).ok_or_else(other_browser)?;
    let pending = state
        .sign_in_keys
        .open(provider, cookie.value())
        .ok_or_else(|| {
            ApiError::bad_request(
                "this sign-in is unknown or was already used: start the sign-in again",
            )
        })?;
    if pending.state_hash != sha256_hex(sign_in_state) {
        return Err(other_browser());
    }
    if gantry_actors::api::now_ms() - pending.created_at > SIGN_IN_TTL_MS {
        return Err(ApiError::bad_request(
            "this sign-in took longer than 10 minutes: start it again",
        ));
    }
    if let Some(error) = &q.error {
        return Err(ApiError::unauthorized(format!(
            "the provider refused the sign-in: {error}{}",
            q.error_description
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )));
    }
    let code = q
        .code
        .clone()
        .ok_or_else(|| ApiError::bad_request("the provider's answer has no code"))?;
    Ok((pending, code))
}

/// Signs `person` in to the team `pending` asked for (or their default
/// one): the session cookie and the dashboard for a browser (or, for `fly
/// login`, `/fly_success`, which hands fly its token), the token on
/// `gantry login`'s loopback callback for the CLI.
async fn finish(
    state: &AppState,
    req: &HttpRequest,
    pending: &PendingSignIn,
    person: &Person,
) -> Result<HttpResponse, ApiError> {
    let session = state
        .engine
        .sign_in(
            &person.name,
            &person.groups,
            pending.team.as_deref(),
            state.people.session_ttl_ms,
        )
        .await?
        .ok_or_else(|| ApiError {
            status: StatusCode::FORBIDDEN,
            message: match &pending.team {
                Some(t) => format!("{} has no role in team {t}", person.name),
                None => format!("{} has no role in any team", person.name),
            },
        })?;
    record_sign_in(state, req, &person.name, &session).await;
    let gone = Cookie::build(BROWSER_COOKIE, "")
        .path(AUTH_PATH)
        .max_age(CookieAge::ZERO)
        .finish();
    let token = &session.token.token;
    if let (Some(port), Some(cli_state)) = (pending.cli_port, &pending.cli_state) {
        let to = reqwest::Url::parse_with_params(
            &format!("http://127.0.0.1:{port}/callback"),
            [("token", token.as_str()), ("state", cli_state.as_str())],
        )
        .map_err(|e| ApiError::bad_request(format!("cli_port: {e}")))?;
        return Ok(HttpResponse::Found()
            .insert_header(("location", String::from(to)))
            .cookie(gone)
            .finish());
    }
    let age = CookieAge::milliseconds(state.people.session_ttl_ms);
    let home = match pending.fly_port {
        Some(port) => format!("/fly_success?fly_port={port}"),
        None => "/".to_string(),
    };
    Ok(HttpResponse::Found()
        .insert_header(("location", home))
        .cookie(session_cookie(req, token, age))
        .cookie(gone)
        .finish())
}

/// What differs between sign-in providers (`[web.oidc]`, `[web.github]`);
/// the rest of a sign-in is this module's, the same for each.
pub trait SignInProvider: 'static {
    /// The provider's name in its routes (`/auth/NAME/...`) and in the
    /// seal of its sign-in cookie.
    const NAME: &'static str;

    /// The provider configured on this node, or a 404 naming the section
    /// that would configure it.
    fn of(state: &AppState) -> Result<&Self, ApiError>;

    /// Where to send the browser beginning `begun` (with its `state`, PKCE
    /// challenge and, for OpenID Connect, nonce).
    fn authorize_url(&self, begun: &Begun) -> impl Future<Output = Result<String, ApiError>>;

    /// Checks what the provider's answer carries beyond its code and
    /// state, once the sign-in under way is known (nothing by default).
    fn check_answer(&self, _answer: &CallbackQuery) -> Result<(), ApiError> {
        Ok(())
    }

    /// Exchanges the authorization `code` of the sign-in `pending` and
    /// says who signed in.
    fn person(
        &self,
        code: &str,
        pending: &PendingSignIn,
    ) -> impl Future<Output = Result<Person, ApiError>>;
}

/// `GET /auth/PROVIDER/login`: sends the browser to the provider, its
/// sign-in under way sealed in a cookie.
pub async fn login<P: SignInProvider>(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<LoginQuery>,
) -> Result<HttpResponse, ApiError> {
    let provider = P::of(&state)?;
    let begun = begin(query.into_inner())?;
    let to = provider.authorize_url(&begun).await?;
    leave_for(&state, &req, P::NAME, begun, to).await
}

/// `GET /auth/PROVIDER/callback`: the provider's answer. Signs the person
/// in (a cookie and the dashboard, or the token to `gantry login`).
pub async fn callback<P: SignInProvider>(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> Result<HttpResponse, ApiError> {
    let provider = P::of(&state)?;
    let answer = query.into_inner();
    let (pending, code) = come_back(&state, &req, P::NAME, &answer).await?;
    provider.check_answer(&answer)?;
    let person = provider.person(&code, &pending).await?;
    finish(&state, &req, &pending, &person).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let (a, b) = (random_value(), random_value());
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
    }

    #[test]
    fn a_sign_ins_query_is_checked() {
        let q = |port: Option<u16>, cli: Option<&str>, team: Option<&str>| LoginQuery {
            team: team.map(String::from),
            cli_port: port,
            cli_state: cli.map(String::from),
            fly_port: None,
        };
        assert!(begin(q(Some(4000), None, None)).is_err());
        assert!(begin(q(None, Some("s"), None)).is_err());
        assert!(begin(q(Some(0), Some("s"), None)).is_err());
        assert!(begin(q(Some(4000), Some(&"x".repeat(129)), None)).is_err());
        assert!(begin(q(None, None, Some("no such/team"))).is_err());
        let ok = begin(q(Some(4000), Some("s"), Some("red"))).unwrap();
        assert_ne!(ok.state, ok.nonce);
    }

    #[test]
    fn a_sealed_sign_in_opens_on_any_node_with_the_key_and_only_for_its_provider() {
        let key = [9u8; 32];
        let pending = PendingSignIn {
            state_hash: sha256_hex("s"),
            verifier: "the-verifier".into(),
            nonce: "the-nonce".into(),
            team: Some("red".into()),
            cli_port: Some(4000),
            cli_state: Some("c".into()),
            fly_port: None,
            created_at: 1,
        };
        let one = SignInKeys::new(Sealer::from_key(&key, "node a"), None);
        let sealed = one.seal("oidc", &pending);
        assert!(!sealed.contains("verifier") && !sealed.contains("nonce"));
        let another = SignInKeys::new(Sealer::from_key(&key, "node b"), None);
        assert_eq!(another.open("oidc", &sealed), Some(pending.clone()));
        assert_eq!(
            another.open("github", &sealed),
            None,
            "bound to its provider"
        );
        let stranger = SignInKeys::new(Sealer::ephemeral(), None);
        assert_eq!(stranger.open("oidc", &sealed), None);
        // While the key is rotated, the old one still opens.
        let rotated = SignInKeys::new(Sealer::ephemeral(), Some(Sealer::from_key(&key, "old")));
        assert_eq!(rotated.open("oidc", &sealed), Some(pending));
        let mut altered = sealed.clone();
        altered.push('A');
        assert_eq!(one.open("oidc", &altered), None);
    }
}
