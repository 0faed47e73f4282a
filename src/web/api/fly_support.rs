//! What fly asks of a web node beyond pipelines and builds: `fly sync`
//! (`GET /api/v1/cli`: the fly binaries an operator put in `[web]
//! fly_cli_dir`) and `fly active-users` (`GET /api/v1/users`: the people
//! who signed in since a day, from the tokens their sign-ins made).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use actix_web::cookie::time::{Date, Month};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};

use super::NoBody;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// A 500 with a message.
fn internal(message: impl Into<String>) -> ApiError {
    ApiError {
        status: actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
        message: message.into(),
    }
}

/// Query of `GET /api/v1/cli`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CliQuery {
    /// `linux`, `darwin` or `windows` (lowercase letters and digits).
    #[serde(default)]
    platform: String,
    /// `amd64`, `arm64`... (lowercase letters and digits).
    #[serde(default)]
    arch: String,
}

/// The fly binary for `platform`/`arch` in `dir`: a plain
/// `fly-PLATFORM-ARCH` (`.exe` on windows), else the `fly` of Concourse's
/// `fly-PLATFORM-ARCH.tgz`. `Ok(None)`: neither is there.
fn fly_binary(dir: &Path, platform: &str, arch: &str) -> Result<Option<Vec<u8>>, ApiError> {
    let exe = if platform == "windows" { ".exe" } else { "" };
    let plain = dir.join(format!("fly-{platform}-{arch}{exe}"));
    if plain.is_file() {
        return std::fs::read(&plain)
            .map(Some)
            .map_err(|e| internal(format!("reading {}: {e}", plain.display())));
    }
    let tgz = dir.join(format!("fly-{platform}-{arch}.tgz"));
    let Ok(file) = std::fs::File::open(&tgz) else {
        return Ok(None);
    };
    let bad = |e: std::io::Error| internal(format!("reading {}: {e}", tgz.display()));
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.into_owned();
        if path == Path::new("fly") || path == Path::new("./fly") {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).map_err(bad)?;
            return Ok(Some(bytes));
        }
    }
    Err(internal(format!(
        "fly executable not found in {}",
        tgz.display()
    )))
}

/// `GET /api/v1/cli`: Concourse's `DownloadCLI` (`fly sync`).
#[utoipa::path(
    get,
    path = "/api/v1/cli",
    operation_id = "downloadCLI",
    tag = "operations",
    security(()),
    params(CliQuery),
    responses(
        (status = 200, description = "The fly binary", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "A platform or arch not of lowercase letters and digits", body = crate::web::error::ErrorBody),
        (status = 404, description = "`[web] fly_cli_dir` is not set, or holds no fly for that platform and arch", body = crate::web::error::ErrorBody),
        (status = 500, description = "The archive holds no `fly`, or could not be read", body = crate::web::error::ErrorBody),
    )
)]
pub async fn download_cli(
    state: web::Data<AppState>,
    query: web::Query<CliQuery>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let platform = query.platform.to_ascii_lowercase();
    if !word(&platform) || !word(&query.arch) {
        return Err(ApiError::bad_request(
            "platform and arch must be lowercase letters and digits (fly sends ?platform=linux&arch=amd64)",
        ));
    }
    let Some(dir) = state.info.fly_cli_dir.clone() else {
        return Err(ApiError::not_found(
            "this web node serves no fly binaries: set [web] fly_cli_dir to a directory holding fly-PLATFORM-ARCH.tgz (or a plain fly-PLATFORM-ARCH)",
        ));
    };
    let arch = query.arch.clone();
    let (p, a) = (platform.clone(), arch.clone());
    let found = web::block(move || fly_binary(&dir, &p, &a))
        .await
        .map_err(|e| internal(e.to_string()))??;
    let Some(bytes) = found else {
        return Err(ApiError::not_found(format!(
            "no fly for {platform}/{arch} in [web] fly_cli_dir (looked for fly-{platform}-{arch}.tgz and fly-{platform}-{arch})"
        )));
    };
    let name = if platform == "windows" {
        "fly.exe"
    } else {
        "fly"
    };
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename={name}"),
        ))
        .body(bytes))
}

/// Query of `GET /api/v1/users`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsersQuery {
    /// `yyyy-mm-dd` (UTC): the people who signed in that day or later;
    /// none: everyone who ever signed in.
    since: Option<String>,
}

/// Concourse's `atc.User`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActiveUser {
    /// The person, as Gantry names them (without the connector).
    pub username: String,
    /// How they signed in: `local`, `github`, `oidc`.
    pub connector: String,
    /// Unix seconds of their newest sign-in.
    pub last_login: i64,
}

/// Unix ms of midnight UTC of a `yyyy-mm-dd` day.
fn day_start_ms(day: &str) -> Option<i64> {
    let mut parts = day.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let month = Month::try_from(m.parse::<u8>().ok()?).ok()?;
    let date = Date::from_calendar_date(y.parse().ok()?, month, d.parse().ok()?).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() * 1000)
}

/// `(connector, name)` of a token's person: `github:x` is GitHub's `x`,
/// `oidc:x` the OpenID provider's; a bare name a local user.
fn connector_of(user: &str) -> (&str, &str) {
    match user.split_once(':') {
        Some((c, name)) if c == "github" || c == "oidc" || c == "local" => (c, name),
        _ => ("local", user),
    }
}

/// `GET /api/v1/users`: Concourse's `ListActiveUsersSince`.
#[utoipa::path(
    get,
    path = "/api/v1/users",
    operation_id = "listActiveUsersSince",
    tag = "teams",
    params(UsersQuery),
    responses(
        (status = 200, description = "The people who signed in since the day, as `atc.User`s, newest sign-in first", body = Vec<ActiveUser>),
        (status = 400, description = "`since` is not yyyy-mm-dd", body = crate::web::error::ErrorBody),
        (status = 403, description = "The admin token is needed", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn active_users(
    identity: Identity,
    state: web::Data<AppState>,
    query: web::Query<UsersQuery>,
    _: NoBody,
) -> Result<HttpResponse, ApiError> {
    identity.require_admin()?;
    let since = match query.since.as_deref().filter(|s| !s.is_empty()) {
        Some(day) => day_start_ms(day)
            .ok_or_else(|| ApiError::bad_request("wrong date format (yyyy-mm-dd)"))?,
        None => 0,
    };
    // Every sign-in made a token for its person: the newest per person.
    let mut newest: BTreeMap<String, i64> = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let page = state
            .engine
            .tokens_page(None, after.as_deref(), 500)
            .await?;
        for t in &page {
            if let Some(user) = &t.user {
                let at = newest.entry(user.clone()).or_insert(t.created_at);
                *at = (*at).max(t.created_at);
            }
        }
        match page.last() {
            Some(last) if page.len() == 500 => after = Some(last.id.clone()),
            _ => break,
        }
    }
    let mut users: Vec<ActiveUser> = newest
        .into_iter()
        .filter(|(_, at)| *at >= since)
        .map(|(user, at)| {
            let (connector, name) = connector_of(&user);
            ActiveUser {
                username: name.to_string(),
                connector: connector.to_string(),
                last_login: at / 1000,
            }
        })
        .collect();
    users.sort_by_key(|u| std::cmp::Reverse(u.last_login));
    Ok(HttpResponse::Ok().json(users))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_read_as_concourse_reads_them() {
        assert_eq!(day_start_ms("1970-01-02"), Some(86_400_000));
        assert_eq!(day_start_ms("2024-02-30"), None);
        assert_eq!(day_start_ms("2024-2-3"), None);
        assert_eq!(day_start_ms("yesterday"), None);
    }

    #[test]
    fn a_persons_connector_is_their_names_prefix() {
        assert_eq!(connector_of("github:octo"), ("github", "octo"));
        assert_eq!(connector_of("alice"), ("local", "alice"));
    }
}
