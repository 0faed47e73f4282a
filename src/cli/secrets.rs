//! The secret verbs of the built-in credential manager: `set-secret`
//! (the value from standard input, never from an argument a process list
//! would show), `secrets` (names and scopes only), `destroy-secret`.

use anyhow::Context as _;

use crate::cli::client::ApiClient;
use crate::cli::list::{cell, print_table};
use gantry_wire::url::segment;

/// The API path of secret `name` of `team` (of its `pipeline`).
fn secret_path(team: &str, pipeline: Option<&str>, name: &str) -> String {
    match pipeline {
        Some(p) => format!(
            "/api/v1/teams/{}/pipelines/{}/secrets/{}",
            segment(team),
            segment(p),
            segment(name)
        ),
        None => format!("/api/v1/teams/{}/secrets/{}", segment(team), segment(name)),
    }
}

/// `gantry set-secret NAME [-p PIPELINE]`, the value on standard input.
pub async fn set_secret(
    client: &ApiClient,
    team: &str,
    pipeline: Option<&str>,
    name: &str,
) -> anyhow::Result<()> {
    // Read up to the server's bound (and a newline) and no further.
    let limit = gantry_actors::api::MAX_SECRET + 2;
    let Some(bytes) = crate::cli::read_bounded::read_at_most(std::io::stdin().lock(), limit)
        .context("reading the secret's value from standard input")?
    else {
        anyhow::bail!(
            "secret {name:?}: standard input holds more than {} bytes, the limit of a secret",
            gantry_actors::api::MAX_SECRET
        );
    };
    let mut value = String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("secret {name:?}: standard input is not UTF-8 text: {e}"))?;
    // `echo value | gantry set-secret` means the value, not its newline.
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        anyhow::bail!("secret {name:?}: standard input was empty: give the value on it");
    }
    let answer: serde_json::Value = client
        .put_json(
            &secret_path(team, pipeline, name),
            &serde_json::json!({ "value": value }),
        )
        .await?;
    let what = if answer["created"].as_bool() == Some(true) {
        "created"
    } else {
        "updated"
    };
    match pipeline {
        Some(p) => crate::outln!("secret {name} of pipeline {p} {what}"),
        None => crate::outln!("secret {name} of team {team} {what}"),
    }
    Ok(())
}

/// `gantry secrets`
pub async fn list(client: &ApiClient, team: &str, json: bool) -> anyhow::Result<()> {
    let secrets: Vec<serde_json::Value> = client
        .get(&format!("/api/v1/teams/{}/secrets", segment(team)))
        .await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&secrets)?);
        return Ok(());
    }
    print_table(
        &["name", "pipeline"],
        secrets
            .iter()
            .map(|s| vec![cell(s, "name"), cell(s, "pipeline")])
            .collect(),
    );
    Ok(())
}

/// `gantry destroy-secret NAME [-p PIPELINE]`
pub async fn destroy(
    client: &ApiClient,
    team: &str,
    pipeline: Option<&str>,
    name: &str,
) -> anyhow::Result<()> {
    client
        .delete_done(&secret_path(team, pipeline, name))
        .await?;
    crate::outln!("secret {name} destroyed");
    Ok(())
}
