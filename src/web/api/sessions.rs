//! Signing people in and out: `POST /api/v1/sessions` checks a local
//! user's password and answers a token of one team with the user's role
//! there (`gantry login -u`), or for a browser (`"cookie": true`, the
//! sign-in page) sets it as an `HttpOnly`, `SameSite=Lax` cookie
//! (`Secure` over TLS) and answers only the session's CSRF token; `DELETE
//! /api/v1/sessions/current` revokes the token it is called with and
//! clears the cookie (`gantry logout`, the page's sign-out); `GET
//! /api/v1/user` says who a token is (`gantry status`).

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use actix_web::cookie::{time::Duration as CookieAge, Cookie, SameSite};

use std::collections::BTreeMap;

use gantry_actors::api::Role;

use crate::web::audit_log::Actor;
use crate::web::auth::{csrf_of, request_token, Identity, SESSION_COOKIE};
use crate::web::error::ApiError;
use crate::web::people::NotChecked;
use crate::web::people::{GITHUB_PREFIX, OIDC_PREFIX};
use crate::web::AppState;
use actix_web::http::StatusCode;

/// The body of `POST /api/v1/sessions`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// A user of `[web.users]`.
    pub username: String,
    /// Their password.
    pub password: String,
    /// The team to act in; none: `main` when they have a role there, else
    /// the first team they have one in.
    #[serde(default)]
    pub team: Option<String>,
    /// A browser's sign-in: the token is set as a cookie, never answered.
    #[serde(default)]
    pub cookie: bool,
}

/// The session cookie holding `value` for `max_age` (0: cleared), `Secure`
/// when the request came over TLS.
pub(crate) fn session_cookie(
    req: &HttpRequest,
    value: &str,
    max_age: CookieAge,
) -> Cookie<'static> {
    let mut cookie = Cookie::build(SESSION_COOKIE, value.to_string())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .max_age(max_age)
        .finish();
    if req.connection_info().scheme() == "https" {
        cookie.set_secure(true);
    }
    cookie
}

/// `POST /api/v1/sessions`: signs a local user in.
#[utoipa::path(
    post,
    path = "/api/v1/sessions",
    operation_id = "signIn",
    tag = "teams",
    security(()),
    request_body = SignIn,
    responses(
        (status = 201, description = "Signed in: the token (shown only now), its team, role, user and expiry", body = Object),
        (status = 400, description = "Invalid body", body = crate::web::error::ErrorBody),
        (status = 401, description = "Wrong user name or password", body = crate::web::error::ErrorBody),
        (status = 403, description = "The user has no role in the team (or in any)", body = crate::web::error::ErrorBody),
        (status = 429, description = "Too many wrong passwords for this user name or from this address: wait (Retry-After)", body = crate::web::error::ErrorBody),
        (status = 503, description = "The node checks as many passwords as it may (or this address holds its share): try again (Retry-After)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn sign_in(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: crate::web::api::Json<SignIn>,
) -> Result<HttpResponse, ApiError> {
    let SignIn {
        username,
        password,
        team,
        cookie,
    } = body.into_inner();
    if !state.people.any() {
        return Err(ApiError::unauthorized(
            "this web node has no users ([web.users]): present a token instead",
        ));
    }
    let client = state.clients.of(&req);
    match state.people.check(client, &username, password).await {
        Ok(()) => {}
        Err(NotChecked::Wrong) => {
            return Err(ApiError::unauthorized("wrong user name or password"))
        }
        Err(NotChecked::Wait(wait)) => {
            let secs = wait.as_secs() + 1;
            return Ok(answer_later(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many wrong passwords for this user name or from this address: try again in {secs} s"),
                secs,
            ));
        }
        Err(NotChecked::Busy(refused)) => {
            return Ok(answer_later(
                StatusCode::SERVICE_UNAVAILABLE,
                refused.to_string(),
                1,
            ));
        }
    }
    let made = state
        .engine
        .sign_in(&username, &[], team.as_deref(), state.people.session_ttl_ms)
        .await?;
    if let Some(session) = &made {
        record_sign_in(&state, &req, &username, session).await;
    }
    match made {
        Some(session) if cookie => {
            let token = &session.token.token;
            let row = &session.token.row;
            let age = CookieAge::milliseconds(state.people.session_ttl_ms);
            Ok(HttpResponse::Created()
                .cookie(session_cookie(&req, token, age))
                .json(serde_json::json!({
                    "user": row.user,
                    "team": row.team,
                    "role": row.role,
                    "expires_at": row.expires_at,
                    "csrf_token": csrf_of(token),
                })))
        }
        Some(session) => Ok(HttpResponse::Created().json(session)),
        None => Err(ApiError {
            status: actix_web::http::StatusCode::FORBIDDEN,
            message: match team {
                Some(t) => format!("user {username} has no role in team {t}"),
                None => format!("user {username} has no role in any team"),
            },
        }),
    }
}

/// An error answer (`{"error": ...}`) saying to try again in `secs`
/// seconds (`Retry-After`).
pub(crate) fn answer_later(status: StatusCode, message: String, secs: u64) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((actix_web::http::header::RETRY_AFTER, secs.to_string()))
        .json(crate::web::error::ErrorBody { error: message })
}

/// Records `user`'s sign-in in the audit log (a failure to is logged: the
/// sign-in stands).
pub(crate) async fn record_sign_in(
    state: &AppState,
    req: &HttpRequest,
    user: &str,
    session: &gantry_actors::api::Session,
) {
    let entry = gantry_actors::api::AuditEntry {
        id: 0,
        at: 0,
        team: Some(session.token.row.team.clone()),
        actor: format!("user:{user}"),
        action: "signIn".into(),
        target: req.path().to_string(),
        status: 201,
    };
    if let Err(e) = state.engine.record_audit(entry).await {
        tracing::warn!(error = %e, "recording a sign-in in the audit log failed");
    }
}

/// `DELETE /api/v1/sessions/current`: revokes the sign-in token the
/// request presents.
#[utoipa::path(
    delete,
    path = "/api/v1/sessions/current",
    operation_id = "signOut",
    tag = "teams",
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "Signed out: the token is revoked", body = Object),
        (status = 400, description = "The token is not a sign-in's (a team token: revoke it with `gantry token revoke`)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn sign_out(
    req: HttpRequest,
    state: web::Data<AppState>,
    _: crate::web::api::NoBody,
) -> Result<HttpResponse, ApiError> {
    let token = request_token(&req).unwrap_or_default();
    let session = state
        .engine
        .team_of_token(&token)
        .await?
        .filter(|t| t.user.is_some())
        .ok_or_else(|| {
            ApiError::bad_request(
                "this token is not a sign-in's: revoke a team token with `gantry token revoke`",
            )
        })?;
    state.engine.revoke_token(&session.id, None).await?;
    Ok(HttpResponse::Ok()
        .cookie(session_cookie(&req, "", CookieAge::ZERO))
        .json(serde_json::json!({ "signed_out": session.user })))
}

/// `GET /api/v1/user`: who the request's token is.
#[utoipa::path(
    get,
    path = "/api/v1/user",
    operation_id = "whoAmI",
    tag = "teams",
    responses(
        (status = 200, description = "The caller: admin, team, role, user (a sign-in's), expires_at, and actions: the team operations (operationIds) the caller may take under the action map in force; and Concourse's `UserInfo` fields (`user_name`, `is_admin`, `teams`: each team's roles, `connector`, ...) as `fly userinfo` reads them", body = Object),
    )
)]
pub async fn who_am_i(
    req: HttpRequest,
    identity: Identity,
    actor: Actor,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let token = request_token(&req).unwrap_or_default();
    let known = state.engine.team_of_token(&token).await?;
    let (team, role) = match &identity {
        Identity::Team(team, role) => (Some(team.clone()), Some(role.as_str())),
        _ => (
            known.as_ref().map(|t| t.team.clone()),
            known.as_ref().map(|t| t.role.as_str()),
        ),
    };
    let actions = match &identity {
        Identity::Admin => state.actions.allowed(None),
        Identity::Team(_, role) => state.actions.allowed(Some(*role)),
        _ => vec![],
    };
    // Concourse's `UserInfo` (`atc/user.go`): a person's roles in every
    // team they have one in; a token's, its team's.
    let user = known.as_ref().and_then(|t| t.user.clone());
    let mut teams: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    match (&user, &known, &identity) {
        (Some(person), Some(t), _) => {
            for (team, role) in state.engine.roles_of_person(person, &t.groups).await? {
                teams.entry(team).or_default().push(role.as_str());
            }
        }
        (_, _, Identity::Team(team, role)) => {
            teams.entry(team.clone()).or_default().push(role.as_str());
        }
        (_, _, Identity::Admin) => {
            teams
                .entry("main".into())
                .or_default()
                .push(Role::Owner.as_str());
        }
        _ => {}
    }
    let user_name = user.clone().unwrap_or_else(|| actor.0.clone());
    let connector = match user.as_deref() {
        Some(u) if u.starts_with(OIDC_PREFIX) => "oidc",
        Some(u) if u.starts_with(GITHUB_PREFIX) => "github",
        Some(_) => "local",
        None => "token",
    };
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "admin": identity == Identity::Admin,
        "actions": actions,
        "team": team,
        "role": role,
        "user": user,
        "expires_at": known.as_ref().and_then(|t| t.expires_at),
        // What a page signed in with the cookie sends with its changes.
        "csrf_token": (!token.is_empty()).then(|| csrf_of(&token)),
        "sub": user_name,
        "name": user_name,
        "user_id": user_name,
        "user_name": user_name,
        "display_user_id": user_name,
        "email": "",
        "is_admin": identity == Identity::Admin,
        "is_system": false,
        "teams": teams,
        "connector": connector,
    })))
}
