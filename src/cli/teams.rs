//! The team verbs (see `team_grammar.rs`): `teams`, `set-team`,
//! `destroy-team`, `tokens`, `token create`, `token revoke`, `audit`, and
//! the secrets' (`secrets.rs`).

use crate::cli::client::ApiClient;
use crate::cli::list::{cell, print_table};
use crate::cli::secrets;
use crate::cli::team_grammar::{TeamCommand, TokenCommand};
use gantry_wire::url::segment;

/// Runs one team verb; returns the exit code.
pub async fn run(client: &ApiClient, command: TeamCommand) -> anyhow::Result<i32> {
    match command {
        TeamCommand::Teams { json } => teams(client, json).await,
        TeamCommand::SetTeam(args) => {
            let (users, groups) = args.members();
            let change = TeamChange {
                users,
                groups,
                role: args.role,
                remove_users: args.remove_users,
                remove_groups: args.remove_groups,
            };
            set_team(client, &args.name, change).await
        }
        TeamCommand::DestroyTeam { name } => destroy_team(client, &name).await,
        TeamCommand::Tokens { json } => tokens(client, json).await,
        TeamCommand::Audit { team, json } => audit(client, team.as_deref(), json).await,
        TeamCommand::Token { action } => token(client, action).await,
        TeamCommand::SetSecret {
            name,
            pipeline,
            team,
        } => secrets::set_secret(client, &team, pipeline.as_deref(), &name).await,
        TeamCommand::Secrets { team, json } => secrets::list(client, &team, json).await,
        TeamCommand::DestroySecret {
            name,
            pipeline,
            team,
        } => secrets::destroy(client, &team, pipeline.as_deref(), &name).await,
    }
    .map(|_| 0)
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC (empty for none).
pub(crate) fn when(v: &serde_json::Value) -> String {
    let Some(ms) = v.as_i64() else {
        return String::new();
    };
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `gantry teams`
pub async fn teams(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let teams: Vec<serde_json::Value> = client.get_pages("/api/v1/teams", usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&teams)?);
        return Ok(());
    }
    print_table(
        &["name", "created", "from_config", "roles"],
        teams
            .iter()
            .map(|t| {
                let roles: Vec<String> = t["roles"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        let who = match r["kind"].as_str() {
                            Some("group") => format!("group:{}", cell(r, "name")),
                            _ => cell(r, "name"),
                        };
                        format!("{who}={}", cell(r, "role"))
                    })
                    .collect();
                vec![
                    cell(t, "name"),
                    when(&t["created_at"]),
                    cell(t, "from_config"),
                    roles.join(" "),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// Who `gantry set-team` gives a role to, or takes it from.
#[derive(Debug)]
pub struct TeamChange {
    /// Users to give `role`.
    pub users: Vec<String>,
    /// Groups to give `role`.
    pub groups: Vec<String>,
    /// The role they get.
    pub role: gantry_actors::api::Role,
    /// Users whose role is taken away.
    pub remove_users: Vec<String>,
    /// Groups whose role is taken away.
    pub remove_groups: Vec<String>,
}

/// `gantry set-team NAME [--user U] [--group G] [--role R]
/// [--remove-user U] [--remove-group G]`
pub async fn set_team(client: &ApiClient, name: &str, change: TeamChange) -> anyhow::Result<()> {
    let roles: Vec<serde_json::Value> = change
        .users
        .iter()
        .map(|u| ("user", u))
        .chain(change.groups.iter().map(|g| ("group", g)))
        .map(|(kind, n)| serde_json::json!({"kind": kind, "name": n, "role": change.role}))
        .collect();
    let answer: serde_json::Value = client
        .put_json(
            &format!("/api/v1/teams/{}", segment(name)),
            &serde_json::json!({ "roles": roles }),
        )
        .await?;
    if answer["created"] == true {
        crate::outln!("team {name} created");
    } else {
        crate::outln!("team {name} exists");
    }
    for r in &roles {
        crate::outln!(
            "{} {} is {} of team {name}",
            r["kind"].as_str().unwrap_or_default(),
            r["name"].as_str().unwrap_or_default(),
            change.role
        );
    }
    let removed = change
        .remove_users
        .iter()
        .map(|u| ("user", u))
        .chain(change.remove_groups.iter().map(|g| ("group", g)));
    for (kind, who) in removed {
        let _: serde_json::Value = client
            .delete(&format!(
                "/api/v1/teams/{}/roles/{kind}/{}",
                segment(name),
                segment(who)
            ))
            .await?;
        crate::outln!("{kind} {who} has no role in team {name} any more");
    }
    Ok(())
}

/// `gantry destroy-team NAME`
pub async fn destroy_team(client: &ApiClient, name: &str) -> anyhow::Result<()> {
    client
        .delete_done(&format!("/api/v1/teams/{}", segment(name)))
        .await?;
    crate::outln!("team {name} removed, its tokens revoked");
    Ok(())
}

/// `gantry tokens`
pub async fn tokens(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let tokens: Vec<serde_json::Value> = client.get_pages("/api/v1/tokens", usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&tokens)?);
        return Ok(());
    }
    print_table(
        &[
            "id",
            "team",
            "role",
            "created",
            "expires",
            "revoked",
            "description",
        ],
        tokens
            .iter()
            .map(|t| {
                vec![
                    cell(t, "id"),
                    cell(t, "team"),
                    cell(t, "role"),
                    when(&t["created_at"]),
                    when(&t["expires_at"]),
                    when(&t["revoked_at"]),
                    cell(t, "description"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry audit`: every page of the audit log, oldest first.
pub async fn audit(client: &ApiClient, team: Option<&str>, json: bool) -> anyhow::Result<()> {
    let path = match team {
        Some(team) => format!("/api/v1/audit?team={}", segment(team)),
        None => "/api/v1/audit".to_string(),
    };
    let entries: Vec<serde_json::Value> = client.get_pages(&path, usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    print_table(
        &["at", "team", "who", "action", "target", "status"],
        entries
            .iter()
            .map(|e| {
                vec![
                    when(&e["at"]),
                    cell(e, "team"),
                    cell(e, "actor"),
                    cell(e, "action"),
                    cell(e, "target"),
                    cell(e, "status"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry token create|revoke`
pub async fn token(client: &ApiClient, action: TokenCommand) -> anyhow::Result<()> {
    match action {
        TokenCommand::Create {
            team,
            role,
            expires,
            description,
        } => {
            let made: serde_json::Value = client
                .post(
                    &format!("/api/v1/teams/{}/tokens", segment(&team)),
                    &serde_json::json!({
                        "role": role,
                        "expires_in_secs": expires,
                        "description": description,
                    }),
                )
                .await?;
            let token = made["token"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("the server answered no token"))?;
            // The token alone on stdout (for scripts); what it is on stderr.
            crate::outln!("{token}");
            let until = match when(&made["expires_at"]) {
                e if e.is_empty() => "never expires".to_string(),
                e => format!("expires {e} UTC"),
            };
            eprintln!(
                "token {} for team {team} as {role}; {until}",
                cell(&made, "id")
            );
        }
        TokenCommand::Revoke { id } => {
            let _: serde_json::Value = client
                .delete(&format!("/api/v1/tokens/{}", segment(&id)))
                .await?;
            crate::outln!("token {id} revoked");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(super::when(&serde_json::json!(0)), "1970-01-01 00:00:00");
        assert_eq!(
            super::when(&serde_json::json!(1_795_000_000_123_i64)),
            "2026-11-18 11:06:40"
        );
        assert_eq!(super::when(&serde_json::Value::Null), "");
    }
}
