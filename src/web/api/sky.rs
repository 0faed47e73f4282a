//! Signing in as fly does against Concourse (skymarshal and the web
//! node's pages), over Gantry's own sign-ins:
//!
//! - `POST /sky/issuer/token`: the OAuth 2 password grant of `fly login
//!   -u USER -p PASSWORD` (RFC 6749 4.3; client `fly`, its secret in HTTP
//!   basic auth or the form). A local user's password is checked as
//!   `POST /api/v1/sessions` checks it (the same throttles), and the
//!   answer is a sign-in token of Gantry's in Concourse's token JSON
//!   (`access_token`, `token_type`, `expires_in`), which fly sends back as
//!   `Authorization: bearer TOKEN`. The token acts in every team its
//!   person has a role in (`auth::identify`), as a Concourse token does.
//! - `GET /fly_success?fly_port=PORT`: where `fly login`'s browser flow
//!   ends once the person has signed in on `/login?fly_port=PORT` (a
//!   password, OpenID Connect or GitHub). A fresh sign-in of the
//!   browser's person is handed to fly's loopback listener by sending the
//!   browser to `http://127.0.0.1:PORT/?token=bearer%20TOKEN` (the request
//!   Concourse's page makes from a script); fly reads the token and sends
//!   the browser back to `/fly_success?noop=true`, which says it is done.
//!   A browser not signed in is sent to `/login?fly_port=PORT` first.

use actix_web::http::header::{CACHE_CONTROL, PRAGMA};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine as _;
use serde::Deserialize;

use crate::web::api::sessions::{answer_later, record_sign_in};
use crate::web::auth::{request_token, Identity};
use crate::web::error::ApiError;
use crate::web::people::NotChecked;
use crate::web::AppState;

/// fly's OAuth client: its id and the secret it sends (Concourse's
/// `fly/commands/login.go`; published, so it proves only that the caller
/// speaks as fly).
pub const FLY_CLIENT: (&str, &str) = ("fly", "Zmx5");

/// The form of `POST /sky/issuer/token` (unknown parameters are ignored,
/// as RFC 6749 3.2 says).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct TokenRequest {
    /// `password` (the only grant served).
    pub grant_type: Option<String>,
    /// A user of `[web.users]`.
    pub username: Option<String>,
    /// Their password.
    pub password: Option<String>,
    /// The scopes asked (fly: `openid profile email federated:id
    /// groups`); the token's reach is its person's roles whatever is asked.
    pub scope: Option<String>,
    /// The client, when not in basic auth.
    pub client_id: Option<String>,
    /// Its secret, when not in basic auth.
    pub client_secret: Option<String>,
}

/// An OAuth 2 error answer (RFC 6749 5.2): `{"error": CODE,
/// "error_description": ...}` with `status`.
fn oauth_error(status: StatusCode, code: &str, description: &str) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((CACHE_CONTROL, "no-store"))
        .json(serde_json::json!({ "error": code, "error_description": description }))
}

/// The client of a token request: basic auth (whose parts Go's oauth2
/// sends URL-escaped), else the form's `client_id` and `client_secret`.
fn client_of(req: &HttpRequest, form: &TokenRequest) -> Option<(String, String)> {
    let basic = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, b64)| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok());
    if let Some(pair) = basic {
        let (id, secret) = pair.split_once(':')?;
        let unescape = |s: &str| {
            serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("v={s}"))
                .ok()
                .and_then(|mut v| v.pop())
                .map(|(_, v)| v)
        };
        return Some((unescape(id)?, unescape(secret)?));
    }
    Some((form.client_id.clone()?, form.client_secret.clone()?))
}

/// Checks a local user's password as `POST /api/v1/sessions` does (its
/// throttles): a refusal is the answer to give (429, 503), or none for a
/// wrong password, which each route answers its own way.
async fn check_password(
    state: &AppState,
    req: &HttpRequest,
    username: &str,
    password: String,
) -> Result<(), Option<HttpResponse>> {
    let client = state.clients.of(req);
    match state.people.check(client, username, password).await {
        Ok(()) => Ok(()),
        Err(NotChecked::Wrong) => Err(None),
        Err(NotChecked::Wait(wait)) => {
            let secs = wait.as_secs() + 1;
            Err(Some(answer_later(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many wrong passwords for this user name or from this address: try again in {secs} s"),
                secs,
            )))
        }
        Err(NotChecked::Busy(refused)) => Err(Some(answer_later(
            StatusCode::SERVICE_UNAVAILABLE,
            refused.to_string(),
            1,
        ))),
    }
}

/// `POST /sky/issuer/token`: the password grant of `fly login -u -p`.
#[utoipa::path(
    post,
    path = "/sky/issuer/token",
    operation_id = "skyToken",
    tag = "teams",
    security(()),
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded", description = "`grant_type=password&username=U&password=P&scope=...`, client `fly` in HTTP basic auth (or `client_id` and `client_secret`)"),
    responses(
        (status = 200, description = "Signed in: `access_token` (a Gantry sign-in token), `token_type` (`bearer`), `expires_in` (seconds)", body = Object),
        (status = 400, description = "Not a form, or not the password grant (`invalid_request`, `unsupported_grant_type`)", body = crate::web::error::ErrorBody),
        (status = 401, description = "Not fly's client (`invalid_client`), or a wrong user name or password (`access_denied`)", body = crate::web::error::ErrorBody),
        (status = 403, description = "The user has no role in any team (`access_denied`)", body = crate::web::error::ErrorBody),
        (status = 429, description = "Too many wrong passwords for this user name or from this address: wait (Retry-After)", body = crate::web::error::ErrorBody),
        (status = 503, description = "The node checks as many passwords as it may: try again (Retry-After)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn token(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let bad =
        |description: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_request", description);
    let form_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form_type {
        return Ok(bad("the body must be application/x-www-form-urlencoded"));
    }
    let Ok(form) = serde_urlencoded::from_bytes::<TokenRequest>(&body) else {
        return Ok(bad(
            "the body is not a form of the token request's parameters",
        ));
    };
    if client_of(&req, &form)
        .as_ref()
        .map(|(i, s)| (i.as_str(), s.as_str()))
        != Some(FLY_CLIENT)
    {
        return Ok(oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the client is not fly's",
        ));
    }
    if form.grant_type.as_deref() != Some("password") {
        return Ok(oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only the password grant is served here: sign in with a browser through /login",
        ));
    }
    let (Some(username), Some(password)) = (form.username, form.password) else {
        return Ok(bad("give username and password"));
    };
    if !state.people.any() {
        return Ok(oauth_error(
            StatusCode::UNAUTHORIZED,
            "access_denied",
            "this web node has no users ([web.users])",
        ));
    }
    if let Err(refused) = check_password(&state, &req, &username, password).await {
        return Ok(refused.unwrap_or_else(|| {
            oauth_error(
                StatusCode::UNAUTHORIZED,
                "access_denied",
                "Invalid username or password",
            )
        }));
    }
    let ttl = state.people.session_ttl_ms;
    let Some(session) = state.engine.sign_in(&username, &[], None, ttl).await? else {
        return Ok(oauth_error(
            StatusCode::FORBIDDEN,
            "access_denied",
            &format!("user {username} has no role in any team"),
        ));
    };
    record_sign_in(&state, &req, &username, &session).await;
    Ok(HttpResponse::Ok()
        .insert_header((CACHE_CONTROL, "no-store"))
        .insert_header((PRAGMA, "no-cache"))
        .json(serde_json::json!({
            "access_token": session.token.token,
            "token_type": "bearer",
            "expires_in": ttl / 1000,
        })))
}

/// The query of `GET /fly_success`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct FlySuccessQuery {
    /// fly's loopback port, which the token is handed to.
    pub fly_port: Option<u16>,
    /// fly's redirect once it has the token: only say it is done.
    pub noop: Option<bool>,
}

/// The page saying fly has its token.
const DONE_PAGE: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Signed in · Gantry</title>\
<link rel=\"stylesheet\" href=\"/dashboard/style.css\"></head><body><main class=\"signin\"><section class=\"panel\">\
<h2>Signed in</h2><p id=\"fly-success\">fly has its token: you may close this tab and go back to your terminal.</p>\
</section></main></body></html>\n";

/// `GET /fly_success`: hands a sign-in of the browser's person to fly's
/// loopback listener (`fly_port`), or says it is done (`noop=true`).
#[utoipa::path(
    get,
    path = "/fly_success",
    operation_id = "flySuccess",
    tag = "teams",
    security(()),
    params(FlySuccessQuery),
    responses(
        (status = 200, description = "`noop=true`: the page saying fly has its token", content_type = "text/html"),
        (status = 302, description = "Signed in: to fly's listener, `http://127.0.0.1:PORT/?token=bearer%20TOKEN` (a sign-in of its own); not signed in: to `/login?fly_port=PORT`"),
        (status = 400, description = "Neither `fly_port` nor `noop`", body = crate::web::error::ErrorBody),
    )
)]
pub async fn fly_success(
    req: HttpRequest,
    state: web::Data<AppState>,
    identity: Identity,
    query: web::Query<FlySuccessQuery>,
) -> Result<HttpResponse, ApiError> {
    let FlySuccessQuery { fly_port, noop } = query.into_inner();
    let port = match (fly_port, noop) {
        (_, Some(true)) => {
            return Ok(HttpResponse::Ok()
                .content_type("text/html; charset=utf-8")
                .body(DONE_PAGE))
        }
        (Some(port), _) if port != 0 => port,
        _ => {
            return Err(ApiError::bad_request(
                "give fly_port (fly login's loopback port)",
            ))
        }
    };
    let token = request_token(&req).unwrap_or_default();
    let signed_in = match identity {
        Identity::Admin | Identity::Team(..) => state.engine.team_of_token(&token).await?,
        _ => None,
    };
    let Some((person, known)) = signed_in.and_then(|t| Some((t.user.clone()?, t))) else {
        return Ok(HttpResponse::Found()
            .insert_header(("location", format!("/login?fly_port={port}")))
            .finish());
    };
    let ttl = state.people.session_ttl_ms;
    let session = state
        .engine
        .sign_in(&person, &known.groups, Some(&known.team), ttl)
        .await?
        .ok_or_else(|| ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!("{person} has no role in team {}", known.team),
        })?;
    record_sign_in(&state, &req, &person, &session).await;
    let to = reqwest::Url::parse_with_params(
        &format!("http://127.0.0.1:{port}/"),
        [("token", format!("bearer {}", session.token.token))],
    )
    .map_err(|e| ApiError::bad_request(format!("fly_port: {e}")))?;
    Ok(HttpResponse::Found()
        .insert_header(("location", String::from(to)))
        .insert_header((CACHE_CONTROL, "no-store"))
        .finish())
}

/// The cookie Concourse's web node keeps a browser's token in, which
/// clients that sign in as a browser does (concoursepy) read:
/// `"Bearer TOKEN"`, quoted as Go quotes a value with a space.
pub const SKYMARSHAL_COOKIE: &str = "skymarshal_auth";

/// The local user form of `GET /sky/login`, where dex's would be.
const LOCAL_FORM: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · Gantry</title>\
<link rel=\"stylesheet\" href=\"/dashboard/style.css\"></head><body><main class=\"signin\">\
<form class=\"panel\" method=\"post\" action=\"/sky/issuer/auth/local\"><h2>Sign in</h2>\
<p><label for=\"login\">User name</label><br><input id=\"login\" name=\"login\" autocomplete=\"username\" required></p>\
<p><label for=\"password\">Password</label><br><input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required></p>\
<p><button type=\"submit\">Sign in</button></p></form>\
<p><a href=\"/login\">Other ways to sign in</a></p></main></body></html>\n";

/// `GET /sky/login`: Concourse's sign-in start, as clients that sign in
/// the way a browser does read it: the local users' form (dex's field
/// names, posted to `/sky/issuer/auth/local`).
#[utoipa::path(
    get,
    path = "/sky/login",
    operation_id = "skyLogin",
    tag = "teams",
    security(()),
    responses((status = 200, description = "The local users' sign-in form (`login`, `password`, posted to `/sky/issuer/auth/local`)", content_type = "text/html"))
)]
pub async fn sky_login(_: crate::web::api::NoBody) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(LOCAL_FORM)
}

/// The form of `POST /sky/issuer/auth/local` (dex's names).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct LocalSignIn {
    /// A user of `[web.users]`.
    pub login: String,
    /// Their password.
    pub password: String,
}

/// `POST /sky/issuer/auth/local`: the local users' form of `/sky/login`.
#[utoipa::path(
    post,
    path = "/sky/issuer/auth/local",
    operation_id = "skyLocalSignIn",
    tag = "teams",
    security(()),
    request_body(content = LocalSignIn, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 302, description = "Signed in: a sign-in token in the `skymarshal_auth` cookie (`\"Bearer TOKEN\"`, as Concourse sets it; Gantry's own pages read `gantry_session`), and the browser to `/`"),
        (status = 400, description = "Not the form", body = crate::web::error::ErrorBody),
        (status = 401, description = "Invalid username and password", body = crate::web::error::ErrorBody),
        (status = 403, description = "The user has no role in any team", body = crate::web::error::ErrorBody),
        (status = 429, description = "Too many wrong passwords for this user name or from this address: wait (Retry-After)", body = crate::web::error::ErrorBody),
        (status = 503, description = "The node checks as many passwords as it may: try again (Retry-After)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn sky_local_sign_in(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let form_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let form = serde_urlencoded::from_bytes::<LocalSignIn>(&body)
        .ok()
        .filter(|_| form_type)
        .ok_or_else(|| {
            ApiError::bad_request("the body must be the form login=USER&password=PASSWORD")
        })?;
    let invalid = || ApiError::unauthorized("invalid username and password");
    if !state.people.any() {
        return Err(invalid());
    }
    if let Err(refused) = check_password(&state, &req, &form.login, form.password).await {
        return refused.ok_or_else(invalid);
    }
    let ttl = state.people.session_ttl_ms;
    let session = state
        .engine
        .sign_in(&form.login, &[], None, ttl)
        .await?
        .ok_or_else(|| ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!("user {} has no role in any team", form.login),
        })?;
    record_sign_in(&state, &req, &form.login, &session).await;
    let value = format!("\"Bearer {}\"", session.token.token);
    let mut cookie = actix_web::cookie::Cookie::build(SKYMARSHAL_COOKIE, value)
        .path("/")
        .http_only(true)
        .same_site(actix_web::cookie::SameSite::Lax)
        .max_age(actix_web::cookie::time::Duration::milliseconds(ttl))
        .finish();
    if req.connection_info().scheme() == "https" {
        cookie.set_secure(true);
    }
    Ok(HttpResponse::Found()
        .insert_header(("location", "/"))
        .insert_header((CACHE_CONTROL, "no-store"))
        .cookie(cookie)
        .finish())
}
