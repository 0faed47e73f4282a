//! Signing people in through GitHub (`[web.github]`): an OAuth app's
//! authorization code flow with `state` and PKCE (GitHub takes an `S256`
//! challenge), then GitHub's REST API says who signed in (`GET /user`)
//! and which organisations and teams they are in (`GET /user/orgs`, `GET
//! /user/teams`, the `read:org` scope). GitHub is not an OpenID provider:
//! there is no ID token, so the code exchange over TLS with the client
//! secret, the state taken once and the browser's cookie are what bind the
//! answer to this sign-in (`sign_in_flow.rs`).
//!
//! The person is `github:LOGIN`, in the groups `github:ORG` and
//! `github:ORG:TEAM` (all lowercased: GitHub's names are not case
//! sensitive). What this was checked against: GitHub's documented REST
//! API and OAuth endpoints, through a stand-in server in the tests; no
//! request reached GitHub itself (the machines that built this have no
//! network but package registries).

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

use crate::config::GithubConfig;
use crate::web::error::ApiError;
use crate::web::people::GITHUB_PREFIX;
use crate::web::sign_in_flow::{
    self, challenge_of, provider_failed, Begun, CallbackQuery, LoginQuery, PendingSignIn, Person,
    ProviderHttp, SignInProvider,
};
use crate::web::AppState;

/// The provider's name in routes and sign-ins under way.
const PROVIDER: &str = "github";

/// The most pages of organisations or teams read (100 each).
const MAX_PAGES: usize = 10;

/// GitHub, as `[web.github]` names it.
pub struct Github {
    cfg: GithubConfig,
    /// Its client and the callback URL.
    pub client: ProviderHttp,
}

#[derive(Deserialize)]
struct User {
    login: String,
}

#[derive(Deserialize)]
struct Org {
    login: String,
}

#[derive(Deserialize)]
struct Team {
    slug: String,
    organization: Org,
}

impl Github {
    /// GitHub of `cfg`, calling back at `external_url`'s
    /// `/auth/github/callback` (none: once the node is bound).
    pub fn new(cfg: GithubConfig, external_url: Option<&str>) -> anyhow::Result<Self> {
        cfg.check()?;
        Ok(Self {
            client: ProviderHttp::new(PROVIDER, cfg.ca_cert.as_deref(), external_url)?,
            cfg,
        })
    }

    /// What the sign-in page's button says.
    pub fn display_name(&self) -> &str {
        &self.cfg.display_name
    }

    fn authorize_url_with(&self, state: &str, verifier: &str) -> Result<String, ApiError> {
        let base = format!(
            "{}/login/oauth/authorize",
            self.cfg.web_url.trim_end_matches('/')
        );
        reqwest::Url::parse_with_params(
            &base,
            [
                ("client_id", self.cfg.client_id.as_str()),
                ("redirect_uri", self.client.redirect_uri()),
                ("scope", "read:user read:org"),
                ("state", state),
                ("code_challenge", &challenge_of(verifier)),
                ("code_challenge_method", "S256"),
                ("allow_signup", "false"),
            ],
        )
        .map(String::from)
        .map_err(|e| provider_failed(format!("web.github.web_url: {e}")))
    }

    /// Exchanges `code` for an access token and asks GitHub who it is.
    async fn exchange(&self, code: &str, verifier: &str) -> Result<Person, ApiError> {
        let url = format!(
            "{}/login/oauth/access_token",
            self.cfg.web_url.trim_end_matches('/')
        );
        let answer = self
            .client
            .http
            .post(&url)
            .header("accept", "application/json")
            .form(&[
                ("client_id", self.cfg.client_id.as_str()),
                ("client_secret", self.cfg.client_secret.as_str()),
                ("code", code),
                ("redirect_uri", self.client.redirect_uri()),
                ("code_verifier", verifier),
            ])
            .send()
            .await
            .map_err(|e| provider_failed(format!("exchanging the code at {url}: {e}")))?;
        let status = answer.status();
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        // GitHub answers a refused code with 200 and an `error`.
        let Some(token) = body["access_token"]
            .as_str()
            .filter(|_| status.is_success())
        else {
            let why = body["error_description"]
                .as_str()
                .or(body["error"].as_str())
                .unwrap_or("no reason given");
            return Err(ApiError::unauthorized(format!(
                "GitHub refused the code ({status}): {why}"
            )));
        };
        let api = self.cfg.api_url.trim_end_matches('/');
        let user: User = self
            .client
            .get_json(&format!("{api}/user"), Some(token), "user")
            .await?;
        let orgs: Vec<Org> = self.pages(&format!("{api}/user/orgs"), token).await?;
        let teams: Vec<Team> = self.pages(&format!("{api}/user/teams"), token).await?;
        Ok(person_of(&user, &orgs, &teams))
    }

    /// Every item of a paged list (100 a page, at most [`MAX_PAGES`]).
    async fn pages<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        token: &str,
    ) -> Result<Vec<T>, ApiError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let items: Vec<T> = self
                .client
                .get_json(&format!("{url}?per_page=100&page={page}"), Some(token), url)
                .await?;
            let full = items.len() == 100;
            all.extend(items);
            if !full {
                break;
            }
        }
        Ok(all)
    }
}

/// `github:LOGIN`, in `github:ORG` for each organisation (its teams' too)
/// and `github:ORG:TEAM` for each team, lowercased.
fn person_of(user: &User, orgs: &[Org], teams: &[Team]) -> Person {
    let mut groups: Vec<String> = orgs
        .iter()
        .map(|o| o.login.as_str())
        .chain(teams.iter().map(|t| t.organization.login.as_str()))
        .map(|org| format!("{GITHUB_PREFIX}{}", org.to_lowercase()))
        .chain(teams.iter().map(|t| {
            format!(
                "{GITHUB_PREFIX}{}:{}",
                t.organization.login.to_lowercase(),
                t.slug.to_lowercase()
            )
        }))
        .collect();
    groups.sort();
    groups.dedup();
    Person {
        name: format!("{GITHUB_PREFIX}{}", user.login.to_lowercase()),
        groups,
    }
}

impl SignInProvider for Github {
    const NAME: &'static str = PROVIDER;

    fn of(state: &AppState) -> Result<&Self, ApiError> {
        state.github.as_deref().ok_or_else(|| {
            ApiError::not_found("this web node signs no one in through GitHub ([web.github])")
        })
    }

    async fn authorize_url(&self, begun: &Begun) -> Result<String, ApiError> {
        self.authorize_url_with(&begun.state, &begun.verifier)
    }

    async fn person(&self, code: &str, pending: &PendingSignIn) -> Result<Person, ApiError> {
        self.exchange(code, &pending.verifier).await
    }
}

/// `GET /auth/github/login`: sends the browser to GitHub.
#[utoipa::path(
    get,
    path = "/auth/github/login",
    operation_id = "githubSignIn",
    tag = "teams",
    security(()),
    params(LoginQuery),
    responses(
        (status = 302, description = "To GitHub's sign-in"),
        (status = 400, description = "A bad query", body = crate::web::error::ErrorBody),
        (status = 404, description = "No [web.github] on this node", body = crate::web::error::ErrorBody),
    )
)]
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<LoginQuery>,
) -> Result<HttpResponse, ApiError> {
    sign_in_flow::login::<Github>(req, state, query).await
}

/// `GET /auth/github/callback`: GitHub's answer. Signs the person in (a
/// cookie and the dashboard, or the token to `gantry login`).
#[utoipa::path(
    get,
    path = "/auth/github/callback",
    operation_id = "githubCallback",
    tag = "teams",
    security(()),
    params(CallbackQuery),
    responses(
        (status = 302, description = "Signed in: to the dashboard (with the session cookie) or to gantry login's listener"),
        (status = 400, description = "An unknown, used or expired sign-in, or another browser's", body = crate::web::error::ErrorBody),
        (status = 401, description = "GitHub refused", body = crate::web::error::ErrorBody),
        (status = 403, description = "The person has no role in the team (or in any)", body = crate::web::error::ErrorBody),
        (status = 404, description = "No [web.github] on this node", body = crate::web::error::ErrorBody),
        (status = 502, description = "GitHub could not be reached", body = crate::web::error::ErrorBody),
    )
)]
pub async fn callback(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> Result<HttpResponse, ApiError> {
    sign_in_flow::callback::<Github>(req, state, query).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_github_person_is_their_login_in_their_orgs_and_teams_lowercased() {
        let org = |l: &str| Org { login: l.into() };
        let p = person_of(
            &User {
                login: "Alice".into(),
            },
            &[org("Acme"), org("solo")],
            &[
                Team {
                    slug: "Ops".into(),
                    organization: org("Acme"),
                },
                Team {
                    slug: "web".into(),
                    organization: org("hidden-org"),
                },
            ],
        );
        assert_eq!(p.name, "github:alice");
        assert_eq!(
            p.groups,
            [
                "github:acme",
                "github:acme:ops",
                "github:hidden-org",
                "github:hidden-org:web",
                "github:solo"
            ]
        );
    }
}
