//! Who is calling the API, and what they may touch.
//!
//! Bearer tokens from the config: the admin token sees and touches
//! everything; a team's token only that team's builds, artifacts, containers
//! and volumes. Workers present the registration key (registration,
//! heartbeats, and landing or retiring themselves). With no token configured
//! at all the API is open (the quickstart on loopback); `gantry web` refuses
//! to listen beyond loopback that way.

use std::collections::BTreeMap;
use std::future::{ready, Ready};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};

use gantry_actors::api::Role;

use crate::web::audit_log::{audited, record, Actor};
use crate::web::error::ApiError;
use crate::web::AppState;

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The admin token, or any caller of an open API.
    Admin,
    /// A team's token, with its role in the team.
    Team(String, Role),
    /// A worker presenting the registration key.
    Worker,
    /// No credentials (only the open routes).
    Anonymous,
}

impl Identity {
    /// Whether the caller may touch `team`'s things.
    pub fn can_use_team(&self, team: &str) -> bool {
        match self {
            Identity::Admin => true,
            Identity::Team(t, _) => t == team,
            _ => false,
        }
    }

    /// Refuses unless the caller may touch `team`'s things; `what` names the thing.
    pub fn require_team(&self, team: &str, what: &str) -> Result<(), ApiError> {
        match self {
            _ if self.can_use_team(team) => Ok(()),
            // Do not reveal another team's things: answer as if absent.
            Identity::Team(..) => Err(ApiError::not_found(format!("{what} not found"))),
            _ => Err(ApiError::unauthorized(
                "this needs a team or admin token (Authorization: Bearer TOKEN, or GANTRY_TOKEN for the CLI)",
            )),
        }
    }

    /// Refuses unless the caller is the admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self {
            Identity::Admin => Ok(()),
            _ => Err(ApiError {
                status: actix_web::http::StatusCode::FORBIDDEN,
                message: "this needs the admin token".into(),
            }),
        }
    }

    /// The team whose things a listing shows (`None`: all of them).
    pub fn team_filter(&self) -> Result<Option<&str>, ApiError> {
        match self {
            Identity::Admin => Ok(None),
            Identity::Team(t, _) => Ok(Some(t)),
            _ => Err(ApiError::unauthorized("this needs a team or admin token")),
        }
    }
}

impl FromRequest for Identity {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Ok(req
            .extensions()
            .get::<Identity>()
            .cloned()
            .unwrap_or(Identity::Anonymous)))
    }
}

/// The tokens the web node accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// The admin token.
    pub admin: Option<String>,
    /// Team tokens by team.
    pub teams: BTreeMap<String, String>,
    /// The workers' registration key.
    pub registration_key: String,
    /// Whether `/metrics` answers without a token.
    pub metrics_public: bool,
    /// Whether local users sign in (`[web.users]`): the API is not open.
    pub signin: bool,
}

impl Tokens {
    /// Whether any user token is configured (otherwise the API is open).
    pub fn secured(&self) -> bool {
        self.admin.is_some() || !self.teams.is_empty() || self.signin
    }

    /// Who presents `token`.
    pub fn identify(&self, token: Option<&str>) -> Identity {
        let Some(token) = token else {
            return if self.secured() {
                Identity::Anonymous
            } else {
                Identity::Admin
            };
        };
        if self.admin.as_deref().is_some_and(|a| same(a, token)) {
            return Identity::Admin;
        }
        if let Some((team, _)) = self.teams.iter().find(|(_, t)| same(t, token)) {
            // A token of the config file acts as a member of its team
            // (what team tokens could do before roles).
            return Identity::Team(team.clone(), Role::Member);
        }
        if same(&self.registration_key, token) {
            return Identity::Worker;
        }
        if self.secured() {
            Identity::Anonymous
        } else {
            Identity::Admin
        }
    }
}

/// Compares secrets in constant time.
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bearer token of a request, if any. The scheme's name is matched
/// without regard to case (RFC 9110, 11.1: fly and Go's oauth2 send
/// `Bearer`, other clients `bearer`).
pub fn bearer(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Who presents `token`: a token of the config file, or one made through
/// the API (`gtk_...`, looked up in the database: a revoked, expired or
/// unknown one is nobody, even on an open API), with the person a
/// sign-in's token was made for. A sign-in's token acts with the role
/// its person has in its team now: one removed from `[web.users]` or
/// from the team is nobody at once. On a route naming another team
/// (`named`) where the person has a role, it acts with that role there,
/// as a Concourse token does in every team of its user (fly signs in
/// once and names the team per request). An owner of team `main` is the
/// admin, as in Concourse.
async fn identify_token(
    state: &web::Data<AppState>,
    token: Option<&str>,
    named: Option<&str>,
) -> Result<(Identity, Option<String>), ApiError> {
    let by_config = state.tokens.identify(token);
    match token {
        Some(t) if t.starts_with(gantry_actors::api::TOKEN_PREFIX) => {
            if matches!(by_config, Identity::Admin | Identity::Team(..)) && state.tokens.secured() {
                return Ok((by_config, None));
            }
            let Some(mut t) = state.engine.team_of_token(t).await? else {
                return Ok((Identity::Anonymous, None));
            };
            if let Some(user) = &t.user {
                // A local user must still be one; a provider's person is
                // reckoned with the groups they had at sign-in.
                use crate::web::people::{GITHUB_PREFIX, OIDC_PREFIX};
                let known = if user.starts_with(OIDC_PREFIX) {
                    state.oidc.is_some()
                } else if user.starts_with(GITHUB_PREFIX) {
                    state.github.is_some()
                } else {
                    state.people.knows(user)
                };
                let now = match known {
                    true => {
                        state
                            .engine
                            .role_of_person_in(user, &t.groups, &t.team)
                            .await?
                    }
                    false => None,
                };
                let admin = t.team == "main" && now == Some(Role::Owner);
                let other = named.filter(|n| *n != t.team && known && !admin);
                let there = match other {
                    Some(other) => state
                        .engine
                        .role_of_person_in(user, &t.groups, other)
                        .await?
                        .map(|role| (other.to_string(), role)),
                    None => None,
                };
                match (there, now) {
                    (Some((team, role)), _) => (t.team, t.role) = (team, role),
                    (None, Some(role)) => t.role = role,
                    (None, None) => return Ok((Identity::Anonymous, None)),
                }
            }
            Ok(match t {
                t if t.team == "main" && t.role == Role::Owner => (Identity::Admin, t.user),
                t => (Identity::Team(t.team, t.role), t.user),
            })
        }
        _ => Ok((by_config, None)),
    }
}

/// The route of the dashboard's live feed, which also takes the token as
/// `?token=TOKEN`: a browser's `EventSource` cannot set a header.
pub const DASHBOARD_FEED: &str = "/api/v1/dashboard/events";

/// The cookie of a browser's sign-in (`HttpOnly`, `SameSite=Lax`).
pub const SESSION_COOKIE: &str = "gantry_session";

/// The header a browser session's changes carry its CSRF token in.
pub const CSRF_HEADER: &str = "x-gantry-csrf";

/// The CSRF token of a browser session's token: a hash of it, so the
/// page can be told it (`GET /api/v1/user`) while the token itself stays
/// in the `HttpOnly` cookie.
pub fn csrf_of(token: &str) -> String {
    gantry_actors::api::sha256_hex(format!("gantry-csrf\0{token}"))
}

/// Whether `path` is a live feed of the dashboard, which takes the token
/// as `?token=` too: [`DASHBOARD_FEED`], or a pipeline page's
/// (`/api/v1/teams/T/pipelines/P/feed`).
fn is_feed(path: &str) -> bool {
    path == DASHBOARD_FEED || (path.starts_with("/api/v1/teams/") && path.ends_with("/feed"))
}

/// The token of a request: its bearer token, on a feed ([`is_feed`]) its
/// `token` query parameter, else its session cookie.
pub fn request_token(req: &HttpRequest) -> Option<String> {
    if let Some(token) = bearer(req) {
        return Some(token.to_string());
    }
    let from_query = is_feed(req.path())
        .then(|| {
            web::Query::<BTreeMap<String, String>>::from_query(req.query_string())
                .ok()
                .and_then(|q| q.get("token").cloned())
        })
        .flatten();
    from_query.or_else(|| session_cookie(req))
}

/// The request's session cookie, if any.
pub fn session_cookie(req: &HttpRequest) -> Option<String> {
    req.cookie(SESSION_COOKIE)
        .map(|c| c.value().to_string())
        .filter(|v| !v.is_empty())
}

/// Refuses (403) a request authenticated by its session cookie that a
/// page of another origin could have made: a change (any method but
/// `GET`, `HEAD`, `OPTIONS`) without the session's CSRF token in
/// [`CSRF_HEADER`] (a cross-site form cannot set a header), or any
/// request whose `Origin` is not this node's (a cross-site websocket).
fn check_browser_request(req: &HttpRequest, token: &str) -> Result<(), ApiError> {
    let forbidden = |message: &str| ApiError {
        status: actix_web::http::StatusCode::FORBIDDEN,
        message: message.to_string(),
    };
    if let Some(origin) = req.headers().get("origin").and_then(|o| o.to_str().ok()) {
        let host = req.connection_info().host().to_string();
        let authority = origin.split_once("://").map(|(_, a)| a).unwrap_or(origin);
        if authority != host {
            return Err(forbidden(
                "a request from another origin cannot use this browser's session",
            ));
        }
    }
    let safe = matches!(
        *req.method(),
        actix_web::http::Method::GET
            | actix_web::http::Method::HEAD
            | actix_web::http::Method::OPTIONS
    );
    let sent = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    if !safe && !sent.is_some_and(|s| same(s, &csrf_of(token))) {
        return Err(forbidden(
            "a change made with a browser's session needs its CSRF token in the X-Gantry-CSRF header (GET /api/v1/user gives it)",
        ));
    }
    Ok(())
}

/// Whether a route answers callers without a token: the dashboard's page
/// and assets (which hold no data; the page asks the API with the token it
/// is given), the health routes, the OpenAPI document, `/api/v1/info`,
/// `/api/v1/cli` (`fly sync`, open as in Concourse),
/// the ID token issuer's metadata and keys (`/.well-known/...`),
/// `/metrics` (unless `metrics_public = false`), and the workers'
/// registration and heartbeats (which check the registration key
/// themselves). Open routes say `security(())` in their OpenAPI operation;
/// a unit test compares.
pub fn is_open(path: &str) -> bool {
    path == "/"
        || path.starts_with("/builds/")
        || path.starts_with("/teams/")
        || path.starts_with("/dashboard/")
        || matches!(
            path,
            "/healthz"
                | "/readyz"
                | "/metrics"
                | "/api/v1/openapi.json"
                | "/api/v1/info"
                | "/api/v1/cli"
                | "/api/v1/sessions"
                | "/login"
                | "/sky/issuer/token"
                | "/sky/login"
                | "/sky/issuer/auth/local"
                | "/fly_success"
                | "/workers"
                | "/queue"
                | "/collector"
                | "/auth/oidc/login"
                | "/auth/oidc/callback"
                | "/auth/github/login"
                | "/auth/github/callback"
                | "/api/v1/workers/register"
                | "/.well-known/openid-configuration"
                | "/.well-known/jwks.json"
        )
        || path.ends_with("/heartbeat")
        // A resource's webhook presents its `webhook_token` instead.
        || (path.starts_with("/api/v1/teams/") && path.ends_with("/check/webhook"))
}

/// Middleware: identifies the caller; a route that is not [`is_open`]
/// refuses an anonymous caller with 401.
pub async fn identify(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let secured = state.as_ref().is_some_and(|s| s.tokens.secured());
    let mut token = request_token(req.request());
    if let Some(t) = token.clone() {
        let by_cookie = bearer(req.request()).is_none()
            && session_cookie(req.request()).as_deref() == Some(t.as_str());
        if by_cookie && !secured {
            // An open node has no sessions: a cookie left by another
            // node on this address is no one's, not a refusal.
            token = None;
        } else if by_cookie && req.path() != "/api/v1/sessions" {
            // (Signing in again over a stale cookie is not a change made
            // with it.)
            check_browser_request(req.request(), &t)?;
        }
    }
    let named = team_of_path(req.match_pattern().as_deref(), req.path());
    let (identity, user) = match &state {
        Some(state) => identify_token(state, token.as_deref(), named.as_deref()).await?,
        None => (Identity::Anonymous, None),
    };
    let actor = match user {
        Some(user) => Actor(format!("user:{user}")),
        None => actor_of(&identity, token.as_deref(), secured),
    };
    let metrics_public = req
        .app_data::<web::Data<AppState>>()
        .is_none_or(|s| s.tokens.metrics_public);
    let path = req.path();
    let open = is_open(path) && (metrics_public || path != "/metrics");
    let op = state.as_ref().and_then(|s| {
        let pattern = req.match_pattern()?;
        s.actions
            .operation(req.method(), &pattern)
            .map(str::to_string)
    });
    // A read of an exposed pipeline reaches its handler from anyone,
    // which answers only for an exposed one.
    let public_read = op
        .as_deref()
        .is_some_and(|op| crate::web::rbac::PUBLIC_READS.contains(&op));
    if identity == Identity::Anonymous && !open && !public_read {
        return Err(ApiError::unauthorized(
            "missing or unknown token (Authorization: Bearer TOKEN, or GANTRY_TOKEN for the CLI)",
        )
        .into());
    }
    if let (Identity::Team(team, role), Some(state), Some(op)) = (&identity, &state, &op) {
        role_allows(state, op, team, *role)?;
        // A route naming another team's thing is answered as if absent,
        // before its body is read (a bad body must not tell the caller
        // more than a missing team would). Creating a team is the admin's,
        // which its handler says; a read of an exposed pipeline, its
        // handler's.
        if op != "setTeam" && !public_read {
            if let Some(named) = team_of_path(req.match_pattern().as_deref(), req.path()) {
                identity.require_team(&named, &format!("team {named:?}"))?;
            }
        }
    }
    let audit = match (state, op) {
        (Some(state), Some(op)) if audited(&state, req.method(), &op) => Some((state, op)),
        _ => None,
    };
    req.extensions_mut().insert(identity);
    req.extensions_mut().insert(actor.clone());
    let res = next.call(req).await?;
    if let Some((state, op)) = audit {
        record(&state, &op, &actor, &res).await;
    }
    Ok(res)
}

/// The team a request's path names, where its route pattern has `{team}`.
fn team_of_path(pattern: Option<&str>, path: &str) -> Option<String> {
    let at = pattern?.split('/').position(|s| s == "{team}")?;
    let segment = path.split('/').nth(at)?;
    Some(crate::web::instance_query::percent_decode(segment))
}

/// Who presents `token`, as the audit log names them.
fn actor_of(identity: &Identity, token: Option<&str>, secured: bool) -> Actor {
    let token_id = token
        .and_then(|t| t.strip_prefix(gantry_actors::api::TOKEN_PREFIX))
        .and_then(|rest| rest.split_once('_'))
        .map(|(id, _)| id);
    Actor(match (identity, token_id) {
        (Identity::Admin, _) if !secured => "anonymous (open API)".to_string(),
        (Identity::Admin, _) => "admin".to_string(),
        (Identity::Team(..), Some(id)) => format!("token:{id}"),
        (Identity::Team(team, _), None) => format!("config-token:{team}"),
        (Identity::Worker, _) => "worker".to_string(),
        (Identity::Anonymous, _) => "anonymous".to_string(),
    })
}

/// Refuses (403) a team caller whose role in its team is below what the
/// request's operation needs in the action map (`rbac.rs`). Whether the
/// thing is the caller's team's at all stays the handler's check.
fn role_allows(state: &AppState, op: &str, team: &str, role: Role) -> Result<(), ApiError> {
    use crate::web::rbac::{ADMIN_ONLY, WORKER_ONLY};
    if ADMIN_ONLY.contains(&op) || WORKER_ONLY.contains(&op) {
        return Err(ApiError {
            status: actix_web::http::StatusCode::FORBIDDEN,
            message: format!("{op} is the fleet's: it needs the admin token"),
        });
    }
    match state.actions.needs(op) {
        Some(need) if role < need => Err(ApiError {
            status: actix_web::http::StatusCode::FORBIDDEN,
            message: format!(
                "{op} needs the role {need} in a team (or the admin); this token is a {role} of team {team}"
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens {
            admin: Some("adm".into()),
            teams: BTreeMap::from([("red".into(), "r3d".into())]),
            registration_key: "key".into(),
            metrics_public: true,
            signin: false,
        }
    }

    #[test]
    fn tokens_identify_admins_teams_and_workers() {
        let t = tokens();
        assert_eq!(t.identify(Some("adm")), Identity::Admin);
        assert_eq!(
            t.identify(Some("r3d")),
            Identity::Team("red".into(), Role::Member)
        );
        assert_eq!(t.identify(Some("key")), Identity::Worker);
        assert_eq!(t.identify(Some("nope")), Identity::Anonymous);
        assert_eq!(t.identify(None), Identity::Anonymous);
        let open = Tokens::default();
        assert_eq!(open.identify(None), Identity::Admin);
    }

    #[test]
    fn teams_only_reach_their_own_things() {
        let red = Identity::Team("red".into(), Role::Viewer);
        assert!(red.require_team("red", "build 1").is_ok());
        assert_eq!(red.require_team("main", "build 1").unwrap_err().status, 404);
        assert_eq!(red.require_admin().unwrap_err().status, 403);
        assert_eq!(
            Identity::Worker
                .require_team("main", "x")
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(red.team_filter().unwrap(), Some("red"));
    }

    #[test]
    fn only_the_dashboard_feed_takes_a_token_in_its_query() {
        use actix_web::test::TestRequest;
        let feed = TestRequest::get()
            .uri("/api/v1/dashboard/events?token=r%33d")
            .to_http_request();
        assert_eq!(request_token(&feed).as_deref(), Some("r3d"));
        let other = TestRequest::get()
            .uri("/api/v1/builds?token=r3d")
            .to_http_request();
        assert_eq!(request_token(&other), None);
        let header = TestRequest::get()
            .uri("/api/v1/builds")
            .insert_header(("authorization", "Bearer adm"))
            .to_http_request();
        assert_eq!(request_token(&header).as_deref(), Some("adm"));
        for (value, token) in [
            ("bearer adm", Some("adm")),
            ("BEARER  adm ", Some("adm")),
            ("Basic adm", None),
            ("Bearer", None),
            ("Bearer ", None),
        ] {
            let req = TestRequest::get()
                .insert_header(("authorization", value))
                .to_http_request();
            assert_eq!(bearer(&req), token, "{value:?}");
        }
        assert!(is_open("/builds/7") && is_open("/dashboard/app.js"));
        assert!(is_open("/healthz") && is_open("/metrics"));
        assert!(!is_open("/api/v1/builds/7") && !is_open("/api/v1/dashboard/events"));
    }
}
