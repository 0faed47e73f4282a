//! People on the command line: `gantry login` (through the web node's
//! OpenID provider, the token taken on a loopback callback as `fly login`
//! does, or a local user's password) for a signed-in target, `gantry logout`, `gantry targets`, `gantry
//! status`, and `gantry hash-password` for `[web.users]`.

use std::io::BufRead as _;

use crate::cli::client::ApiClient;
use crate::cli::list::{cell, print_table};
use crate::cli::targets::{Target, Targets};

/// The first line of standard input, without its line ending.
fn read_line(what: &str) -> anyhow::Result<String> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprint!("{what}: ");
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let line = line.trim_end_matches(['\n', '\r']).to_string();
    anyhow::ensure!(!line.is_empty(), "no {what} given on standard input");
    Ok(line)
}

/// `gantry hash-password`: an argon2id PHC string of the password read
/// from standard input, for `[web.users]`.
pub fn hash_password() -> anyhow::Result<()> {
    let password = read_line("password")?;
    let hash = crate::web::people::hash_password(&password).map_err(anyhow::Error::msg)?;
    crate::outln!("{hash}");
    Ok(())
}

/// `gantry login -c URL -n TEAM -t NAME -u USER [-p PASSWORD]`: signs in
/// and saves the target; the password is read from standard input when
/// `-p` is not given.
pub async fn login(
    target: &str,
    api: &str,
    team: Option<&str>,
    user: &str,
    password: Option<String>,
) -> anyhow::Result<()> {
    let password = match password {
        Some(p) => p,
        None => read_line("password")?,
    };
    let client = ApiClient::new(api);
    let made: serde_json::Value = client
        .post(
            "/api/v1/sessions",
            &serde_json::json!({"username": user, "password": password, "team": team}),
        )
        .await?;
    let token = made["token"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("the server answered no token"))?;
    save_target(target, api, token, &made)
}

/// Saves `token` (what `me` says of it: team, role, user, expiry) as
/// `target`, and says so.
fn save_target(target: &str, api: &str, token: &str, me: &serde_json::Value) -> anyhow::Result<()> {
    let mut targets = Targets::load()?;
    let user = me["user"].as_str().map(String::from);
    let saved = Target {
        api: api.trim_end_matches('/').to_string(),
        team: cell(me, "team"),
        token: token.to_string(),
        user: user.clone(),
        expires_at: me["expires_at"].as_i64(),
    };
    targets.targets.insert(target.to_string(), saved);
    targets.save()?;
    crate::outln!(
        "target {target} saved: {} is {} of team {}",
        user.as_deref().unwrap_or("the token"),
        cell(me, "role"),
        cell(me, "team")
    );
    Ok(())
}

/// How long `gantry login` waits for the browser's sign-in.
const SIGN_IN_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// `gantry login -c URL -n TEAM -t NAME` without `-u`: prints the URL of
/// the node's provider's sign-in (`--provider oidc|github` when it has
/// both), waits on a loopback port for the browser to
/// bring the token back (checked by a random value only this command and
/// the node know), and saves the target.
pub async fn login_with_provider(
    target: &str,
    api: &str,
    team: Option<&str>,
    asked: Option<&str>,
) -> anyhow::Result<()> {
    let api = api.trim_end_matches('/');
    let client = ApiClient::new(api);
    let info: serde_json::Value = client.get("/api/v1/info").await?;
    let offered: Vec<(&str, &str)> = ["oidc", "github"]
        .into_iter()
        .filter_map(|p| Some((p, info["sign_in"][p].as_str()?)))
        .collect();
    let (route, provider) = match (asked, offered.as_slice()) {
        (_, []) => {
            anyhow::bail!("{api} signs no one in through a provider: give -u USER for a local user")
        }
        (None, [one]) => *one,
        (None, _) => anyhow::bail!("{api} offers oidc and github: choose with --provider"),
        (Some(p), all) => *all.iter().find(|(r, _)| *r == p).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|(r, _)| *r).collect();
            anyhow::anyhow!(
                "{api} has no provider {p:?} (it offers: {})",
                names.join(", ")
            )
        })?,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let mut secret = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut secret);
    let cli_state = hex::encode(secret);
    let mut url = reqwest::Url::parse(&format!("{api}/auth/{route}/login"))?;
    url.query_pairs_mut()
        .append_pair("cli_port", &port.to_string())
        .append_pair("cli_state", &cli_state);
    if let Some(team) = team {
        url.query_pairs_mut().append_pair("team", team);
    }
    crate::outln!("sign in with {provider} in a browser on this machine:");
    crate::outln!("  {url}");
    let token = tokio::time::timeout(SIGN_IN_WAIT, take_token(&listener, &cli_state))
        .await
        .map_err(|_| {
            anyhow::anyhow!("no sign-in came back within {} s", SIGN_IN_WAIT.as_secs())
        })??;
    let me: serde_json::Value = client
        .with_token(Some(token.clone()))?
        .get("/api/v1/user")
        .await?;
    save_target(target, api, &token, &me)
}

/// Answers the browser's requests on `listener` until one brings a token
/// with `cli_state` (others get 400 and are ignored).
async fn take_token(listener: &tokio::net::TcpListener, cli_state: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let (mut conn, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&head);
        let path = line.split_whitespace().nth(1).unwrap_or_default();
        let query = reqwest::Url::parse(&format!("http://127.0.0.1{path}")).ok();
        let pairs: std::collections::BTreeMap<String, String> = query
            .map(|u| u.query_pairs().into_owned().collect())
            .unwrap_or_default();
        let good = path.starts_with("/callback?")
            && pairs.get("state").is_some_and(|s| s == cli_state)
            && pairs.contains_key("token");
        let (status, text) = match good {
            true => (
                "200 OK",
                "Signed in: gantry login has the token. You may close this tab.",
            ),
            false => ("400 Bad Request", "Not a sign-in of this gantry login."),
        };
        let page = format!("<!doctype html><title>gantry login</title><p>{text}</p>");
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = conn.write_all(answer.as_bytes()).await;
        let _ = conn.shutdown().await;
        if good {
            return Ok(pairs["token"].clone());
        }
    }
}

/// `gantry logout -t NAME`: revokes the target's token and forgets it.
pub async fn logout(target: &str) -> anyhow::Result<()> {
    let mut targets = Targets::load()?;
    let saved = targets.get(target)?.clone();
    let client = ApiClient::new(&saved.api).with_token(Some(saved.token))?;
    // A token already refused (expired, revoked) is forgotten all the same.
    if let Err(e) = client
        .delete::<serde_json::Value>("/api/v1/sessions/current")
        .await
    {
        eprintln!("the server did not revoke the token ({e:#}); forgetting it");
    }
    targets.targets.remove(target);
    targets.save()?;
    crate::outln!("target {target} signed out");
    Ok(())
}

/// `gantry targets`: the saved targets (no tokens).
pub fn list(json: bool) -> anyhow::Result<()> {
    let targets = Targets::load()?;
    if json {
        let shown: Vec<_> = targets
            .targets
            .iter()
            .map(|(name, t)| {
                serde_json::json!({"name": name, "api": t.api, "team": t.team, "user": t.user, "expires_at": t.expires_at})
            })
            .collect();
        crate::outln!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(());
    }
    print_table(
        &["name", "url", "team", "user", "expires"],
        targets
            .targets
            .iter()
            .map(|(name, t)| {
                vec![
                    name.clone(),
                    t.api.clone(),
                    t.team.clone(),
                    t.user.clone().unwrap_or_default(),
                    crate::cli::teams::when(&serde_json::json!(t.expires_at)),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry status`: who the token (of `-t`, or `--token`) is.
pub async fn status(client: &ApiClient) -> anyhow::Result<()> {
    let me: serde_json::Value = client.get("/api/v1/user").await?;
    let who = match me["user"].as_str() {
        Some(u) => format!("user {u}"),
        None if me["admin"] == true => "the admin".to_string(),
        None => "a team token".to_string(),
    };
    let what = if me["admin"] == true {
        "admin".to_string()
    } else {
        format!("{} of team {}", cell(&me, "role"), cell(&me, "team"))
    };
    crate::outln!("signed in: {who}, {what}");
    Ok(())
}
