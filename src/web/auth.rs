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

use crate::web::error::ApiError;
use crate::web::AppState;

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The admin token, or any caller of an open API.
    Admin,
    /// A team's token.
    Team(String),
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
            Identity::Team(t) => t == team,
            _ => false,
        }
    }

    /// Refuses unless the caller may touch `team`'s things; `what` names the thing.
    pub fn require_team(&self, team: &str, what: &str) -> Result<(), ApiError> {
        match self {
            _ if self.can_use_team(team) => Ok(()),
            // Do not reveal another team's things: answer as if absent.
            Identity::Team(_) => Err(ApiError::not_found(format!("{what} not found"))),
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
            Identity::Team(t) => Ok(Some(t)),
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
}

impl Tokens {
    /// Whether any user token is configured (otherwise the API is open).
    pub fn secured(&self) -> bool {
        self.admin.is_some() || !self.teams.is_empty()
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
            return Identity::Team(team.clone());
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

/// The bearer token of a request, if any.
pub fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Who presents `token`: a token of the config file, or one made through
/// the API (`gtk_...`, looked up in the database: a revoked, expired or
/// unknown one is nobody, even on an open API).
async fn identify_token(
    state: &web::Data<AppState>,
    token: Option<&str>,
) -> Result<Identity, ApiError> {
    let by_config = state.tokens.identify(token);
    match token {
        Some(t) if t.starts_with(gantry_actors::api::TOKEN_PREFIX) => {
            if matches!(by_config, Identity::Admin | Identity::Team(_)) && state.tokens.secured() {
                return Ok(by_config);
            }
            Ok(match state.engine.team_of_token(t).await? {
                Some(team) => Identity::Team(team),
                None => Identity::Anonymous,
            })
        }
        _ => Ok(by_config),
    }
}

/// The route of the dashboard's live feed, which also takes the token as
/// `?token=TOKEN`: a browser's `EventSource` cannot set a header.
pub const DASHBOARD_FEED: &str = "/api/v1/dashboard/events";

/// The token of a request: its bearer token, or on [`DASHBOARD_FEED`] only,
/// its `token` query parameter.
pub fn request_token(req: &HttpRequest) -> Option<String> {
    if let Some(token) = bearer(req) {
        return Some(token.to_string());
    }
    if req.path() != DASHBOARD_FEED {
        return None;
    }
    web::Query::<BTreeMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.get("token").cloned())
}

/// Whether a route answers callers without a token: the dashboard's page
/// and assets (which hold no data; the page asks the API with the token it
/// is given), the health routes, the OpenAPI document, `/api/v1/info`,
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
    let identity = match req.app_data::<web::Data<AppState>>() {
        Some(state) => identify_token(state, request_token(req.request()).as_deref()).await?,
        None => Identity::Anonymous,
    };
    let metrics_public = req
        .app_data::<web::Data<AppState>>()
        .is_none_or(|s| s.tokens.metrics_public);
    let path = req.path();
    let open = is_open(path) && (metrics_public || path != "/metrics");
    if identity == Identity::Anonymous && !open {
        return Err(ApiError::unauthorized(
            "missing or unknown token (Authorization: Bearer TOKEN, or GANTRY_TOKEN for the CLI)",
        )
        .into());
    }
    req.extensions_mut().insert(identity);
    next.call(req).await
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
        }
    }

    #[test]
    fn tokens_identify_admins_teams_and_workers() {
        let t = tokens();
        assert_eq!(t.identify(Some("adm")), Identity::Admin);
        assert_eq!(t.identify(Some("r3d")), Identity::Team("red".into()));
        assert_eq!(t.identify(Some("key")), Identity::Worker);
        assert_eq!(t.identify(Some("nope")), Identity::Anonymous);
        assert_eq!(t.identify(None), Identity::Anonymous);
        let open = Tokens::default();
        assert_eq!(open.identify(None), Identity::Admin);
    }

    #[test]
    fn teams_only_reach_their_own_things() {
        let red = Identity::Team("red".into());
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
        assert!(is_open("/builds/7") && is_open("/dashboard/app.js"));
        assert!(is_open("/healthz") && is_open("/metrics"));
        assert!(!is_open("/api/v1/builds/7") && !is_open("/api/v1/dashboard/events"));
    }
}
