//! The listing verbs: `workers`, `builds`, `containers`, `volumes`, `jobs`.

use gantry_wire::worker_info::WorkerView;

use anyhow::Context as _;

use crate::cli::client::ApiClient;

pub(crate) use crate::cli::table::{cell, print_table};

/// `gantry workers`
/// `gantry queue`: the fleet's steps waiting for a worker, by the kind of
/// worker they need.
pub async fn queue(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let kinds: Vec<gantry_actors::api::QueueKind> =
        client.get_pages("/api/v1/queue", usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&kinds)?);
        return Ok(());
    }
    print_table(
        &[
            "team",
            "platform",
            "tags",
            "resource_type",
            "privileged",
            "waiting",
            "oldest",
        ],
        kinds
            .into_iter()
            .map(|k| {
                vec![
                    k.team,
                    k.platform,
                    k.tags.join(","),
                    k.resource_type.unwrap_or_default(),
                    if k.privileged { "yes" } else { "no" }.into(),
                    k.waiting.to_string(),
                    format!("{:.0}s", k.oldest_seconds),
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry workers`.
pub async fn workers(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let workers: Vec<WorkerView> = client.get_pages("/api/v1/workers", usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&workers)?);
        return Ok(());
    }
    print_table(
        &[
            "name",
            "state",
            "platform",
            "tags",
            "team",
            "privileged",
            "containers",
            "volumes",
            "active_tasks",
            "backend",
            "version",
            "one_build",
        ],
        workers
            .into_iter()
            .map(|w| {
                vec![
                    w.name,
                    w.state.as_str().into(),
                    w.platform,
                    w.tags.join(","),
                    w.team,
                    if w.allow_privileged { "allowed" } else { "no" }.into(),
                    w.containers.to_string(),
                    w.volumes.to_string(),
                    w.active_tasks.to_string(),
                    w.backend,
                    // Gantry's version; from a web node of an earlier
                    // version, `version` held it.
                    if w.gantry_version.is_empty() {
                        w.version
                    } else {
                        w.gantry_version
                    },
                    match (w.ephemeral, w.bound_build) {
                        (false, _) => "no".into(),
                        (true, None) => "unbound".into(),
                        (true, Some(b)) => format!("build {b}"),
                    },
                ]
            })
            .collect(),
    );
    Ok(())
}

/// Which builds `gantry builds` lists.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BuildFilters {
    /// How many of the newest builds to list (the API is paged through).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Only this team's builds.
    #[arg(long)]
    pub team: Option<String>,
    /// Only builds in this status (pending, started, succeeded, failed, errored, aborted).
    #[arg(long)]
    pub status: Option<String>,
    /// Only builds of this pipeline's jobs.
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Only builds of a job of this name, or of PIPELINE/JOB.
    #[arg(short = 'j', long)]
    pub job: Option<String>,
}

/// `gantry builds`
pub async fn builds(client: &ApiClient, filters: &BuildFilters, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(filters.limit > 0, "--limit: give at least 1");
    let page = filters.limit.min(100).to_string();
    let mut query = vec![("limit", page.as_str())];
    // `-j PIPELINE/JOB` names both.
    let (pipeline, job) = match filters.job.as_deref().and_then(|j| j.rsplit_once('/')) {
        Some((p, j)) => (Some(p.to_string()), Some(j.to_string())),
        None => (filters.pipeline.clone(), filters.job.clone()),
    };
    for (key, value) in [
        ("team", &filters.team),
        ("status", &filters.status),
        ("pipeline", &pipeline),
        ("job", &job),
    ] {
        if let Some(v) = value {
            query.push((key, v.as_str()));
        }
    }
    let path = format!(
        "/api/v1/builds?{}",
        serde_urlencoded::to_string(&query).context("encoding the query")?
    );
    let builds: Vec<serde_json::Value> = client.get_pages(&path, filters.limit).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&builds)?);
        return Ok(());
    }
    print_table(
        &["id", "team", "status", "worker", "exit", "build"],
        builds
            .iter()
            .map(|b| {
                vec![
                    cell(b, "id"),
                    cell(b, "team"),
                    cell(b, "status"),
                    cell(b, "worker"),
                    cell(b, "exit_status"),
                    // A job build's job and name (`P/J #1.1` for a rerun).
                    match (
                        b["pipeline"].as_str(),
                        b["job"].as_str(),
                        b["name"].as_str(),
                    ) {
                        (Some(p), Some(j), Some(n)) => format!("{p}/{j} #{n}"),
                        _ => String::new(),
                    },
                ]
            })
            .collect(),
    );
    Ok(())
}

/// `gantry containers` / `gantry volumes`
pub async fn handles(client: &ApiClient, what: &str, json: bool) -> anyhow::Result<()> {
    let rows: Vec<serde_json::Value> = client
        .get_pages(&format!("/api/v1/{what}"), usize::MAX)
        .await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&rows)?);
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
    let rows: Vec<serde_json::Value> = client
        .get_pages("/api/v1/background-jobs", usize::MAX)
        .await?;
    print_jobs(&rows, json)
}

/// `gantry jobs --worker NAME`: a worker's background jobs, as `gantry jobs`.
pub async fn worker_jobs(client: &ApiClient, worker: &str, json: bool) -> anyhow::Result<()> {
    let rows: Vec<serde_json::Value> = client
        .get(&format!(
            "/api/v1/workers/{}/jobs",
            gantry_wire::url::segment(worker)
        ))
        .await?;
    print_jobs(&rows, json)
}

/// Prints background jobs' rows as a table (or JSON).
fn print_jobs(rows: &[serde_json::Value], json: bool) -> anyhow::Result<()> {
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&rows)?);
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
    let rows: Vec<serde_json::Value> = client.get_pages("/api/v1/web-nodes", usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&rows)?);
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

/// `land-worker`, `retire-worker`, `prune-worker` (Concourse's `PUT` routes).
pub async fn lifecycle(client: &ApiClient, name: &str, action: &str) -> anyhow::Result<()> {
    gantry_wire::worker_info::check_worker_name(name).map_err(anyhow::Error::msg)?;
    let answer: serde_json::Value = client
        .put(&format!(
            "/api/v1/workers/{}/{action}",
            gantry_wire::url::segment(name)
        ))
        .await?;
    print_lifecycle(name, &answer);
    Ok(())
}

/// `prune-worker [--force]`: Concourse's `PUT .../workers/NAME/prune`;
/// with `--force`, or a stored name the name rule refuses (from before
/// it, too long for a URL), Gantry's route naming the worker in the body.
pub async fn prune(client: &ApiClient, name: &str, force: bool) -> anyhow::Result<()> {
    if !force && gantry_wire::worker_info::check_worker_name(name).is_ok() {
        return lifecycle(client, name, "prune").await;
    }
    let answer: serde_json::Value = client
        .post(
            "/api/v1/workers/prune",
            &serde_json::json!({ "name": name, "force": force }),
        )
        .await?;
    print_lifecycle(name, &answer);
    Ok(())
}

/// `worker NAME: STATE` of a lifecycle command's answer.
fn print_lifecycle(name: &str, answer: &serde_json::Value) {
    let name = crate::cli::table::shorten(name, crate::cli::table::MAX_CELL);
    crate::outln!(
        "worker {name}: {}",
        answer["state"].as_str().unwrap_or("removed")
    );
}

/// `gantry jobs -p PIPELINE`: a stored pipeline's jobs.
pub async fn pipeline_jobs(
    client: &ApiClient,
    team: &str,
    pipeline: &str,
    json: bool,
) -> anyhow::Result<()> {
    let path = format!(
        "/api/v1/teams/{}/pipelines/{}/jobs",
        gantry_wire::url::segment(team),
        gantry_wire::url::segment(pipeline)
    );
    let jobs: Vec<serde_json::Value> = client.get(&path).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    // As fly's `jobs`: the finished build (Concourse's, a rerun of an
    // older build never is) and the next build.
    print_table(
        &["name", "paused", "build", "status", "next", "scheduling"],
        jobs.iter()
            .map(|j| {
                let b = &j["finished_build"];
                let n = &j["next_build"];
                vec![
                    cell(j, "name"),
                    cell(j, "paused"),
                    cell(b, "name"),
                    cell(b, "status"),
                    if n.is_null() {
                        String::new()
                    } else {
                        // A build triggered by hand that waits says why.
                        let status = format!("{} {}", cell(n, "name"), cell(n, "status"));
                        match n["waiting"].as_str() {
                            Some(why) => format!("{status} (waiting: {why})"),
                            None => status,
                        }
                    },
                    j["decision"]["outcome"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ]
            })
            .collect(),
    );
    Ok(())
}
