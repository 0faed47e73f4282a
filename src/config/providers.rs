//! The providers people sign in through: `[web.oidc]` (an OpenID Connect
//! provider) and `[web.github]` (GitHub's OAuth apps).

use serde::{Deserialize, Serialize};

/// An OpenID Connect provider people sign in through (authorization code
/// with PKCE; see `web/oidc.rs`). Its people are named `oidc:NAME` in
/// teams (`gantry set-team --oidc-user NAME`), its groups by their names
/// (`--group`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer URL: its `/.well-known/openid-configuration` is read, and
    /// the ID tokens' `iss` must be exactly this. `https://`, or `http://`
    /// on a loopback host.
    pub issuer: String,
    /// The client id this node is registered with at the provider, with
    /// the redirect URI `EXTERNAL_URL/auth/oidc/callback`.
    pub client_id: String,
    /// The client's secret (sent by HTTP basic authentication to the token
    /// endpoint); none: a public client, PKCE alone.
    #[serde(default, skip_serializing)]
    pub client_secret: Option<String>,
    /// What the sign-in page's button says. Default "OpenID Connect".
    #[serde(default = "default_display_name")]
    pub display_name: String,
    /// The scopes asked for. Default `openid`, `profile`, `email`, `groups`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim naming the person. Default `preferred_username`.
    #[serde(default = "default_user_claim")]
    pub user_claim: String,
    /// The claim listing the person's groups (an array of strings, or one
    /// string). Default `groups`. Read from the ID token, else from the
    /// provider's userinfo endpoint.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// A PEM certificate to trust for the provider beside the usual roots
    /// (a provider behind a private CA). Default: none.
    #[serde(default)]
    pub ca_cert: Option<String>,
}

fn default_display_name() -> String {
    "OpenID Connect".into()
}

fn default_scopes() -> Vec<String> {
    ["openid", "profile", "email", "groups"]
        .map(String::from)
        .to_vec()
}

fn default_user_claim() -> String {
    "preferred_username".into()
}

fn default_groups_claim() -> String {
    "groups".into()
}

impl OidcConfig {
    /// Checks the settings a node cannot sign anyone in without.
    pub fn check(&self) -> anyhow::Result<()> {
        check_url("web.oidc.issuer", &self.issuer)?;
        if self.client_id.trim().is_empty() {
            anyhow::bail!(
                "web.oidc.client_id is empty: give the client id registered at the provider"
            );
        }
        if !self.scopes.iter().any(|s| s == "openid") {
            anyhow::bail!("web.oidc.scopes must hold \"openid\"");
        }
        if self.user_claim.is_empty() || self.groups_claim.is_empty() {
            anyhow::bail!("web.oidc.user_claim and groups_claim must name claims");
        }
        Ok(())
    }
}

/// Refuses a provider URL that is neither `https://` nor `http://` on a
/// loopback host.
fn check_url(what: &str, url: &str) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url).map_err(|e| anyhow::anyhow!("{what} {url:?}: {e}"))?;
    let host = parsed.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => {
            anyhow::bail!("{what} {url:?}: give an https:// URL (http:// only on a loopback host)")
        }
    }
}

/// GitHub's OAuth app people sign in through (the authorization code flow
/// with PKCE; see `web/github.rs`). Its people are `github:LOGIN` in teams
/// (`gantry set-team --github-user LOGIN`), its organisations
/// `github:ORG` (`--github-org`) and teams `github:ORG:TEAM`
/// (`--github-team ORG:TEAM`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    /// The OAuth app's client id; its callback URL is
    /// `EXTERNAL_URL/auth/github/callback`.
    pub client_id: String,
    /// The OAuth app's client secret.
    #[serde(skip_serializing)]
    pub client_secret: String,
    /// What the sign-in page's button says. Default "GitHub".
    #[serde(default = "default_github_name")]
    pub display_name: String,
    /// Where people sign in. Default `https://github.com` (GitHub
    /// Enterprise: its own URL).
    #[serde(default = "default_github_web")]
    pub web_url: String,
    /// GitHub's REST API. Default `https://api.github.com` (GitHub
    /// Enterprise: `https://HOST/api/v3`).
    #[serde(default = "default_github_api")]
    pub api_url: String,
    /// A PEM certificate to trust beside the usual roots. Default: none.
    #[serde(default)]
    pub ca_cert: Option<String>,
}

fn default_github_name() -> String {
    "GitHub".into()
}

fn default_github_web() -> String {
    "https://github.com".into()
}

fn default_github_api() -> String {
    "https://api.github.com".into()
}

impl GithubConfig {
    /// Checks the settings a node cannot sign anyone in without.
    pub fn check(&self) -> anyhow::Result<()> {
        check_url("web.github.web_url", &self.web_url)?;
        check_url("web.github.api_url", &self.api_url)?;
        if self.client_id.trim().is_empty() || self.client_secret.trim().is_empty() {
            anyhow::bail!("web.github: give the OAuth app's client_id and client_secret");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_urls_are_https_or_loopback_http() {
        assert!(check_url("x", "https://idp.example").is_ok());
        assert!(check_url("x", "http://127.0.0.1:4000").is_ok());
        assert!(check_url("x", "http://[::1]:4000").is_ok());
        assert!(check_url("x", "http://localhost").is_ok());
        let err = check_url("web.oidc.issuer", "http://idp.example").unwrap_err();
        assert!(err.to_string().contains("https://"), "{err}");
        assert!(check_url("x", "not a url").is_err());
    }
}
