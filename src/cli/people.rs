//! People on the command line: `gantry login` (a local user's password
//! for a signed-in target), `gantry logout`, `gantry targets`, `gantry
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
    let mut targets = Targets::load()?;
    let saved = Target {
        api: api.trim_end_matches('/').to_string(),
        team: cell(&made, "team"),
        token: token.to_string(),
        user: Some(user.to_string()),
        expires_at: made["expires_at"].as_i64(),
    };
    targets.targets.insert(target.to_string(), saved);
    targets.save()?;
    crate::outln!(
        "target {target} saved: {user} is {} of team {}",
        cell(&made, "role"),
        cell(&made, "team")
    );
    Ok(())
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
