//! Teams and team tokens through the API: `gantry teams`, `set-team`,
//! `destroy-team`, `tokens`, `token create`, `token revoke`. The admin
//! makes teams; a team's owner sets and destroys its own team and manages
//! its tokens (the action map, `web/rbac.rs`, refuses lower roles).

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use crate::web::api::paging::PageQuery;
use crate::web::api::NoBody;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The longest a token may live: 10 years, in seconds.
pub const MAX_TOKEN_EXPIRY_SECS: u64 = 10 * 365 * 24 * 3600;

/// The body of `POST /api/v1/teams/{team}/tokens`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Seconds until it expires; never when absent.
    #[serde(default)]
    pub expires_in_secs: Option<u64>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Its role in the team: `owner`, `member`, `pipeline-operator` or
    /// `viewer`; `member` when absent.
    #[serde(default)]
    pub role: Option<gantry_actors::api::Role>,
}

/// The body of `PUT /api/v1/teams/{team}`, in one of two forms. Gantry's
/// (`gantry set-team`): `roles`, users and groups to give a role in the
/// team (in place of the one they had; others keep theirs). Concourse's
/// (`fly set-team`, an `atc.Team`): `auth`, the team's whole desired auth
/// (role → `{users, groups}` with connector-prefixed names: `local:NAME`,
/// `github:LOGIN`, `oidc:NAME`); everyone it does not name loses their role.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTeam {
    /// Who gets which role (Gantry's form).
    #[serde(default)]
    pub roles: Vec<gantry_actors::api::TeamRole>,
    /// Concourse's `atc.TeamAuth`: role → `users`/`groups` → names.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub auth: Option<super::team_auth::TeamAuth>,
    /// `atc.Team`'s `id`: not used (the path names the team).
    #[serde(default)]
    pub id: Option<i64>,
    /// `atc.Team`'s `name`: if given, the path's.
    #[serde(default)]
    pub name: Option<String>,
}

/// `GET /api/v1/teams`: every team (the admin), or the caller's own.
#[utoipa::path(
    get,
    path = "/api/v1/teams",
    operation_id = "listTeams",
    tag = "teams",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of teams by name: Concourse's id, name, auth (role → users, groups) beside created_at (unix ms), from_config, roles (who is what); `Link: <URL>; rel=\"next\"` when more follow", body = Vec<Object>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
    )
)]
pub async fn list(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    let filter = identity.team_filter()?;
    let roles = state.engine.team_roles(filter).await?;
    let teams: Vec<_> = state
        .engine
        .teams()
        .await?
        .into_iter()
        .filter(|t| filter.is_none_or(|f| f == t.name))
        .map(|t| team_json(&state, t, &roles))
        .collect();
    Ok(page.of_sorted(&req, teams, |t: &serde_json::Value| {
        t["name"].as_str().unwrap_or_default().to_string()
    }))
}

/// A team as the API answers it: Concourse's `atc.Team` (`id`, `name`,
/// `auth`) beside Gantry's `created_at`, `from_config` and `roles`.
fn team_json(
    state: &AppState,
    t: gantry_actors::api::Team,
    roles: &[(String, gantry_actors::api::TeamRole)],
) -> serde_json::Value {
    let from_config = state.tokens.teams.contains_key(&t.name);
    let members: Vec<_> = roles
        .iter()
        .filter(|(team, _)| *team == t.name)
        .map(|(_, r)| r)
        .collect();
    serde_json::json!({
        "id": t.id,
        "name": t.name,
        "auth": super::team_auth::auth_of_roles(members.iter().copied()),
        "created_at": t.created_at,
        "from_config": from_config,
        "roles": members,
    })
}

/// `GET /api/v1/teams/{team}`: one team (its members and the admin).
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}",
    operation_id = "getTeam",
    tag = "teams",
    params(("team" = String, Path, description = "The team's name")),
    responses(
        (status = 200, description = "The team: Concourse's id, name, auth (role → users, groups) beside created_at (unix ms), from_config, roles (who is what)", body = Object),
        (status = 404, description = "No such team (or another team's)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn get(
    identity: Identity,
    state: web::Data<AppState>,
    team: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let team = team.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    let roles = state.engine.team_roles(Some(&team)).await?;
    let found = state
        .engine
        .teams()
        .await?
        .into_iter()
        .find(|t| t.name == team)
        .ok_or_else(|| ApiError::not_found(format!("team {team:?} not found")))?;
    Ok(HttpResponse::Ok().json(team_json(&state, found, &roles)))
}

/// `PUT /api/v1/teams/{team}`: creates the team if it does not exist (the
/// admin); 201 when it was made, 200 when it was there (the admin or the
/// team's owner). Gantry's body's users and groups get their roles in it;
/// Concourse's (`auth`) becomes the team's whole auth.
#[utoipa::path(
    put,
    path = "/api/v1/teams/{team}",
    operation_id = "setTeam",
    tag = "teams",
    params(("team" = String, Path, description = "The team's name")),
    request_body(content = Option<SetTeam>, description = "Optional: Gantry's roles to give, or Concourse's whole auth"),
    responses(
        (status = 201, description = "Created: {name, created: true, team} (team: Concourse's id, name, auth)", body = Object),
        (status = 200, description = "It existed: {name, created: false, team}", body = Object),
        (status = 400, description = "Not a valid team name, an empty auth, a role Gantry has not got, a name of a connector Gantry has not got, or both forms", body = crate::web::error::ErrorBody),
        (status = 403, description = "Not the admin (a new team), nor the team's owner", body = crate::web::error::ErrorBody),
        (status = 413, description = "Body over the request body limit", body = crate::web::error::ErrorBody),
    )
)]
pub async fn set(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    if !identity.can_use_team(&team) {
        identity.require_admin()?;
    }
    let req: SetTeam = super::optional_json(&body)?;
    if req.name.as_ref().is_some_and(|n| *n != team) {
        return Err(ApiError::bad_request(format!(
            "the body's name {:?} is not the path's team {team:?} (rename-team renames)",
            req.name.unwrap_or_default()
        )));
    }
    let concourse_roles = match req.auth {
        Some(_) if !req.roles.is_empty() => {
            return Err(ApiError::bad_request(
                "give Concourse's auth or Gantry's roles, not both",
            ))
        }
        Some(auth) => Some(super::team_auth::roles_of_auth(&auth).map_err(ApiError::bad_request)?),
        None => None,
    };
    let created = state.engine.set_team(&team).await?;
    match &concourse_roles {
        Some(roles) => state.engine.replace_team_roles(&team, roles).await?,
        None => state.engine.set_team_roles(&team, &req.roles).await?,
    }
    let roles = state.engine.team_roles(Some(&team)).await?;
    let found = state
        .engine
        .teams()
        .await?
        .into_iter()
        .find(|t| t.name == team);
    let mut answer = serde_json::json!({ "name": team, "created": created });
    if let Some(t) = found {
        let mut concourse = team_json(&state, t, &roles);
        if let Some(fields) = concourse.as_object_mut() {
            fields.retain(|k, _| matches!(k.as_str(), "id" | "name" | "auth"));
        }
        answer["team"] = concourse;
    }
    Ok(if created {
        HttpResponse::Created().json(answer)
    } else {
        HttpResponse::Ok().json(answer)
    })
}

/// `DELETE /api/v1/teams/{team}` (the admin or the team's owner): removes
/// the team and revokes its tokens; refused for `main`, a team of the
/// config file, and a team with builds that have not ended.
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}",
    operation_id = "destroyTeam",
    tag = "teams",
    params(("team" = String, Path, description = "The team's name")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 204, description = "Removed (as Concourse answers)"),
        (status = 400, description = "main, or a team with builds that have not ended"),
        (status = 403, description = "Not the admin nor the team's owner"),
        (status = 404, description = "No such team"),
        (status = 409, description = "A team of the config file"),
    )
)]
pub async fn remove(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    if state.tokens.teams.contains_key(&team) {
        return Err(ApiError {
            status: actix_web::http::StatusCode::CONFLICT,
            message: format!("team {team} comes from the web node's config file: remove it there"),
        });
    }
    state.engine.remove_team(&team).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `DELETE /api/v1/teams/{team}/roles/{kind}/{name}` (the admin or the
/// team's owner): takes a user's or group's role in the team away.
#[utoipa::path(
    delete,
    path = "/api/v1/teams/{team}/roles/{kind}/{name}",
    operation_id = "removeTeamRole",
    tag = "teams",
    params(
        ("team" = String, Path, description = "The team's name"),
        ("kind" = String, Path, description = "`user` or `group`"),
        ("name" = String, Path, description = "The user's or group's name"),
    ),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "Removed: {removed: NAME}", body = Object),
        (status = 400, description = "A kind other than user or group", body = crate::web::error::ErrorBody),
        (status = 403, description = "Not the admin nor the team's owner", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such role in the team", body = crate::web::error::ErrorBody),
    )
)]
pub async fn remove_role(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String, String)>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, kind, name) = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    let kind: gantry_actors::api::MemberKind = kind.parse().map_err(ApiError::bad_request)?;
    state.engine.remove_team_role(&team, kind, &name).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "removed": name })))
}

/// `POST /api/v1/teams/{team}/tokens` (the admin or the team's owner):
/// makes a token for the team with a role in it; the answer (201) is the
/// only time its secret is shown.
#[utoipa::path(
    post,
    path = "/api/v1/teams/{team}/tokens",
    operation_id = "createToken",
    tag = "teams",
    params(("team" = String, Path, description = "The team the token acts for")),
    request_body(content = Option<CreateToken>, description = "Optional role, expiry and description"),
    responses(
        (status = 201, description = "The token (shown only now) and its record", body = Object),
        (status = 400, description = "Invalid body"),
        (status = 403, description = "Not the admin nor the team's owner"),
        (status = 404, description = "No such team"),
    )
)]
pub async fn create_token(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    identity.require_team(&team, &format!("team {team:?}"))?;
    let req: CreateToken = super::optional_json(&body)?;
    let ttl_ms = match req.expires_in_secs {
        Some(s) if !(1..=MAX_TOKEN_EXPIRY_SECS).contains(&s) => {
            return Err(ApiError::bad_request(format!(
                "expires_in_secs {s}: give 1 to {MAX_TOKEN_EXPIRY_SECS} seconds (10 years), or none to never expire"
            )))
        }
        Some(s) => Some((s * 1000) as i64),
        None => None,
    };
    if let Some(d) = &req.description {
        crate::web::api::bounds::check_text(
            "description",
            d,
            crate::web::api::bounds::MAX_DESCRIPTION,
        )?;
    }
    let made = state
        .engine
        .create_token(
            &team,
            req.role.unwrap_or(gantry_actors::api::Role::Member),
            ttl_ms,
            req.description,
        )
        .await?;
    Ok(HttpResponse::Created().json(made))
}

/// `GET /api/v1/tokens`: every token (the admin) or the caller team's, with
/// no secrets.
#[utoipa::path(
    get,
    path = "/api/v1/tokens",
    operation_id = "listTokens",
    tag = "teams",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of tokens by id, without their secrets: id, team, description, created_at, expires_at, revoked_at; `Link: <URL>; rel=\"next\"` when more follow", body = Vec<Object>),
        (status = 400, description = "A bad limit or unknown query parameter", body = crate::web::error::ErrorBody),
    )
)]
pub async fn list_tokens(
    identity: Identity,
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = query.into_inner().page()?;
    let filter = identity.team_filter()?;
    let tokens = state
        .engine
        .tokens_page(filter, page.cursor.as_deref(), page.fetch())
        .await?;
    Ok(page.answer(&req, tokens, |t| t.id.clone()))
}

/// `DELETE /api/v1/tokens/{id}` (the admin or the token's team's owner):
/// revokes a token at once.
#[utoipa::path(
    delete,
    path = "/api/v1/tokens/{id}",
    operation_id = "revokeToken",
    tag = "teams",
    params(("id" = String, Path, description = "The token's id")),
    request_body(content = Option<Object>, description = "None (or an empty JSON object): the request takes no body"),
    responses(
        (status = 200, description = "Revoked: {revoked: ID}", body = Object),
        (status = 400, description = "Already revoked"),
        (status = 403, description = "Not the admin nor the token's team's owner"),
        (status = 404, description = "No such token (or another team's)"),
    )
)]
pub async fn revoke_token(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let team = identity.team_filter()?;
    state.engine.revoke_token(&id, team).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "revoked": id })))
}
