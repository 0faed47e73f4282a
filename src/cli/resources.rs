//! The verbs of a stored pipeline's resources (see `resource_grammar.rs`):
//! each one call of the team's pipeline routes, printed as a table, text
//! or JSON; a problem is one line and a non-zero exit.

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use crate::cli::client::ApiClient;
use crate::cli::follow::{follow, StepLines};
use crate::cli::pipelines::{pipeline_path, split};
use crate::cli::resource_grammar::ResourceCommand;
use crate::cli::table::{cell, print_table};
use gantry_wire::url::segment;

/// Runs one verb; returns the exit code.
pub async fn run(client: &ApiClient, command: ResourceCommand) -> anyhow::Result<i32> {
    use ResourceCommand as R;
    match command {
        R::Resources {
            pipeline,
            json,
            team,
        } => {
            let path = format!("{}/resources", pipeline_path(&team, &pipeline));
            list_resources(client, &path, json).await
        }
        R::ResourceVersions {
            resource,
            limit,
            json,
            team,
        } => {
            let (p, r) = split("--resource", &resource)?;
            let path = format!("{}/resources/{}", pipeline_path(&team, p), segment(r));
            list_versions(client, &path, limit, json, true).await
        }
        R::CheckResource {
            resource,
            from,
            shallow,
            team,
        } => {
            let (p, r) = split("--resource", &resource)?;
            let path = format!("{}/resources/{}/check", pipeline_path(&team, p), segment(r));
            // As fly's: `from` null unless given.
            let mut body = json!({ "from": null, "shallow": shallow });
            if !from.is_empty() {
                body["from"] = version_of("--from", &from)?;
            }
            check_now(client, &path, &body, &resource).await
        }
        R::CheckResourceType {
            resource_type,
            from,
            shallow,
            team,
        } => {
            let (p, t) = split("--resource-type", &resource_type)?;
            let path = format!(
                "{}/resource-types/{}/check",
                pipeline_path(&team, p),
                segment(t)
            );
            let mut body = json!({ "shallow": shallow });
            if !from.is_empty() {
                body["from"] = version_of("--from", &from)?;
            }
            check_now(client, &path, &body, &resource_type).await
        }
        R::ResourceTypeVersions {
            resource_type,
            limit,
            json,
            team,
        } => {
            let (p, t) = split("--resource-type", &resource_type)?;
            let path = format!("{}/resource-types/{}", pipeline_path(&team, p), segment(t));
            // A type's versions are disabled in none: no such column.
            list_versions(client, &path, limit, json, false).await
        }
        R::PinResource {
            resource,
            version,
            comment,
            team,
        } => {
            let (p, r) = split("--resource", &resource)?;
            let path = format!("{}/resources/{}", pipeline_path(&team, p), segment(r));
            pin(client, &path, &resource, &version, comment).await
        }
        R::UnpinResource { resource, team } => {
            let (p, r) = split("--resource", &resource)?;
            let path = format!("{}/resources/{}/unpin", pipeline_path(&team, p), segment(r));
            client.put_done(&path).await?;
            crate::outln!("{resource} unpinned");
            Ok(0)
        }
        R::DisableResourceVersion {
            resource,
            version,
            team,
        } => able(client, &team, &resource, &version, "disable").await,
        R::EnableResourceVersion {
            resource,
            version,
            team,
        } => able(client, &team, &resource, &version, "enable").await,
    }
}

/// `KEY:VALUE` pairs as a version object.
fn version_of(flag: &str, pairs: &[String]) -> anyhow::Result<Value> {
    let mut version = serde_json::Map::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once(':')
            .ok_or_else(|| anyhow!("{flag} {pair:?}: give KEY:VALUE"))?;
        version.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(Value::Object(version))
}

/// `gantry resources`: a pipeline's resources (under `path`), as a table
/// or JSON.
async fn list_resources(client: &ApiClient, path: &str, json: bool) -> anyhow::Result<i32> {
    let all: Vec<Value> = client.get(path).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(0);
    }
    print_table(
        &["name", "type", "pinned", "check", "error"],
        all.iter()
            .map(|r| {
                vec![
                    match r["resource_type"].as_bool() {
                        Some(true) => format!("{} (resource type)", cell(r, "name")),
                        _ => cell(r, "name"),
                    },
                    cell(r, "type_"),
                    match (r["pinned"].as_object(), r["pin_comment"].as_str()) {
                        (Some(_), Some(c)) => format!("{} ({c})", r["pinned"]),
                        (Some(_), None) => r["pinned"].to_string(),
                        _ => String::new(),
                    },
                    r["last_check"]["status"]
                        .as_str()
                        .unwrap_or("never")
                        .to_string(),
                    cell(r, "check_error"),
                ]
            })
            .collect(),
    );
    Ok(0)
}

/// `gantry pin-resource` (as fly's): pins `resource` (its route `path`)
/// to the newest version matching `version`, by its id, and/or saves a
/// pin comment.
async fn pin(
    client: &ApiClient,
    path: &str,
    resource: &str,
    version: &[String],
    comment: Option<String>,
) -> anyhow::Result<i32> {
    if !version.is_empty() {
        let (id, v) = version_id(client, path, resource, version).await?;
        client
            .put_done(&format!("{path}/versions/{id}/pin"))
            .await?;
        crate::outln!("{resource} pinned to {v}");
    }
    if let Some(c) = &comment {
        client
            .put_json_done(&format!("{path}/pin_comment"), &json!({ "pin_comment": c }))
            .await?;
        crate::outln!("pin comment {c:?} saved on {resource}");
    }
    Ok(0)
}

/// The id and version of the newest version of `resource` (its route
/// `path`) whose fields are `pairs` (KEY:VALUE), as fly finds the version
/// of `-v`: the versions route's `filter`.
async fn version_id(
    client: &ApiClient,
    path: &str,
    resource: &str,
    pairs: &[String],
) -> anyhow::Result<(i64, Value)> {
    let wanted = version_of("--version", pairs)?;
    let mut query: Vec<(&str, &str)> = pairs.iter().map(|p| ("filter", p.as_str())).collect();
    query.push(("limit", "1"));
    let query = serde_urlencoded::to_string(&query)?;
    let found: Vec<Value> = client.get(&format!("{path}/versions?{query}")).await?;
    let first = found
        .first()
        .ok_or_else(|| anyhow!("version {wanted} of {resource} not found"))?;
    let id = first["id"]
        .as_i64()
        .context("the version listed holds no id")?;
    Ok((id, first["version"].clone()))
}

/// Prints the versions under `path` (a resource's or a resource type's),
/// newest first, at most `limit`: as JSON, or a table with the
/// `disabled` column (of `enabled`) when `disabled` is asked for.
async fn list_versions(
    client: &ApiClient,
    path: &str,
    limit: usize,
    json: bool,
    disabled: bool,
) -> anyhow::Result<i32> {
    let path = format!("{path}/versions?limit={}", limit.clamp(1, 500));
    let all: Vec<Value> = client.get_pages(&path, limit).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(0);
    }
    let rows = all.iter().map(|v| {
        let mut row = vec![v["version"].to_string()];
        if disabled {
            row.push((v["enabled"] == json!(false)).to_string());
        }
        row
    });
    let head: &[&str] = if disabled {
        &["version", "disabled"]
    } else {
        &["version"]
    };
    print_table(head, rows.collect());
    Ok(0)
}

/// Starts the check build `path` answers to `body`, says so (`checking
/// WHAT (build N)`) and follows it: its exit code (non-zero when it did
/// not succeed, as fly's `check-resource` and `check-resource-type`).
async fn check_now(
    client: &ApiClient,
    path: &str,
    body: &Value,
    what: &str,
) -> anyhow::Result<i32> {
    let build: Value = client.post(path, body).await?;
    let id = build["id"]
        .as_i64()
        .context("the answer holds no build id")?;
    eprintln!("checking {what} (build {id})");
    let ended = follow(client, id, StepLines::Told).await?;
    Ok(ended.run_exit_code(id))
}

/// `disable-` or `enable-resource-version`.
async fn able(
    client: &ApiClient,
    team: &str,
    resource: &str,
    version: &[String],
    verb: &str,
) -> anyhow::Result<i32> {
    let (p, r) = split("--resource", resource)?;
    let path = format!("{}/resources/{}", pipeline_path(team, p), segment(r));
    let (id, v) = version_id(client, &path, resource, version).await?;
    client
        .put_done(&format!("{path}/versions/{id}/{verb}"))
        .await?;
    crate::outln!("{resource} version {v} {verb}d");
    Ok(0)
}
