//! The listing verbs: `workers`, `builds`, `containers`, `volumes`, `jobs`.

use gantry_actors::worker_info::WorkerView;

use crate::cli::client::ApiClient;

pub(crate) fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!("{}", line(header.iter().map(|h| h.to_string()).collect()));
    for r in rows {
        println!("{}", line(r));
    }
}

/// A JSON field as a table cell: strings bare, null empty.
pub(crate) fn cell(v: &serde_json::Value, key: &str) -> String {
    match &v[key] {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `gantry workers`
pub async fn workers(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let workers: Vec<WorkerView> = client.get("/api/v1/workers").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
        return Ok(());
    }
    print_table(
        &[
            "name",
            "state",
            "platform",
            "tags",
            "team",
            "containers",
            "volumes",
            "active_tasks",
            "backend",
            "version",
        ],
        workers
            .into_iter()
            .map(|w| {
                vec![
                    w.name,
                    w.state.as_str().into(),
                    w.platform,
                    w.tags.join(","),
                    w.team.unwrap_or_default(),
                    w.containers.to_string(),
                    w.volumes.to_string(),
                    w.active_tasks.to_string(),
                    w.backend,
                    w.version,
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry builds`
pub async fn builds(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let builds: Vec<serde_json::Value> = client.get("/api/v1/builds").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&builds)?);
        return Ok(());
    }
    print_table(
        &["id", "team", "status", "worker", "exit"],
        builds
            .iter()
            .map(|b| {
                vec![
                    cell(b, "id"),
                    cell(b, "team"),
                    cell(b, "status"),
                    cell(b, "worker"),
                    cell(b, "exit_status"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry containers` / `gantry volumes`
pub async fn handles(client: &ApiClient, what: &str, json: bool) -> anyhow::Result<()> {
    let rows: Vec<serde_json::Value> = client.get(&format!("/api/v1/{what}")).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &["handle", "worker", "state", "owner", "team"],
        rows.iter()
            .map(|r| {
                let state = match r["missing"].as_bool() {
                    Some(true) => format!("{} (missing)", cell(r, "state")),
                    _ => cell(r, "state"),
                };
                vec![
                    cell(r, "handle"),
                    cell(r, "worker"),
                    state,
                    cell(r, "owner"),
                    cell(r, "team"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry jobs`
pub async fn jobs(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let rows: Vec<serde_json::Value> = client.get("/api/v1/jobs").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &["name", "state", "runs", "errors", "last_error"],
        rows.iter()
            .map(|r| {
                vec![
                    cell(r, "name"),
                    cell(r, "state"),
                    cell(r, "runs"),
                    cell(r, "errors"),
                    cell(r, "last_error"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry web-nodes`
pub async fn web_nodes(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let rows: Vec<serde_json::Value> = client.get("/api/v1/web-nodes").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    print_table(
        &["name", "alive", "last_seen", "this_node", "settings"],
        rows.iter()
            .map(|r| {
                vec![
                    cell(r, "name"),
                    cell(r, "alive"),
                    cell(r, "last_seen"),
                    cell(r, "this_node"),
                    cell(r, "settings"),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `land-worker`, `retire-worker`, `prune-worker`.
pub async fn lifecycle(client: &ApiClient, name: &str, action: &str) -> anyhow::Result<()> {
    let answer: serde_json::Value = client
        .post(
            &format!("/api/v1/workers/{name}/{action}"),
            &serde_json::json!({}),
        )
        .await?;
    println!(
        "worker {name}: {}",
        answer["state"].as_str().unwrap_or("removed")
    );
    Ok(())
}
