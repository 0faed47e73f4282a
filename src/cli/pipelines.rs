//! The stored pipeline verbs (see `pipeline_grammar.rs`): each one call of
//! the team's pipeline routes, printed as a table, text or JSON; a problem
//! is one line and a non-zero exit.

use std::io::IsTerminal as _;

use anyhow::{anyhow, bail, Context as _};
use serde_json::{json, Value};

use crate::cli::client::ApiClient;
use crate::cli::follow::{follow, StepLines};
use crate::cli::pipeline_grammar::PipelineCommand;
use crate::cli::run::load_instance;
use crate::cli::table::{cell, print_table};
use gantry_wire::url::segment;

/// `/api/v1/teams/T/pipelines/P` with each part escaped.
pub(super) fn pipeline_path(team: &str, pipeline: &str) -> String {
    format!(
        "/api/v1/teams/{}/pipelines/{}",
        segment(team),
        segment(pipeline)
    )
}

/// `PIPELINE/NAME` split (an instance: `PIPELINE/K:V,.../NAME`), or a
/// one-line error naming the flag.
pub(super) fn split<'a>(flag: &str, value: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    match value.rsplit_once('/') {
        Some((p, n)) if !p.is_empty() && !n.is_empty() => Ok((p, n)),
        _ => bail!("{flag} {value:?}: give PIPELINE/NAME"),
    }
}

/// The pipeline `-p` and `--instance-var KEY=VALUE` flags name, as the
/// API names it (`NAME/K:V,...`, canonical).
fn instance_of(pipeline: &str, instance_vars: &[String]) -> anyhow::Result<String> {
    use gantry_actors::api::{set_dotted, PipelineRef};
    let mut r = PipelineRef::parse(pipeline).map_err(|e| anyhow!("-p: {e}"))?;
    let mut vars = r.instance_vars.take().unwrap_or_default();
    for flag in instance_vars {
        let Some((k, v)) = flag.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            bail!("--instance-var {flag:?}: give KEY=VALUE");
        };
        let value: Value = gantry_actors::api::parse_yaml_value(v, "--instance-var value")
            .map_err(|e| anyhow!("--instance-var {flag:?}: invalid value: {e}"))?;
        set_dotted(&mut vars, k.trim(), value);
    }
    let r = PipelineRef::new(&r.name, Some(vars)).map_err(|e| anyhow!("-p: {e}"))?;
    Ok(r.to_string())
}

/// Runs one verb; returns the exit code.
pub async fn run(client: &ApiClient, command: PipelineCommand) -> anyhow::Result<i32> {
    use PipelineCommand as C;
    match command {
        C::SetPipeline {
            pipeline,
            instance_vars,
            config,
            vars,
            yaml_vars,
            var_files,
            config_version,
            non_interactive,
            team,
        } => {
            let pipeline = instance_of(&pipeline, &instance_vars)?;
            let instance = gantry_actors::api::PipelineRef::parse(&pipeline)?.vars();
            let Some((text, vars)) =
                load_instance(&config, (&vars, &yaml_vars, &var_files), &instance)?
            else {
                return Ok(1);
            };
            let set = SetPipeline {
                team: &team,
                name: &pipeline,
                text: &text,
                vars: &vars,
                config_version,
                ask: !non_interactive && std::io::stdin().is_terminal(),
            };
            set_pipeline(client, set).await
        }
        C::Pipelines { json, team } => list_pipelines(client, &team, json).await,
        C::GetPipeline { pipeline, team } => get_pipeline(client, &team, &pipeline).await,
        C::DestroyPipeline { pipeline, team } => {
            client.delete_done(&pipeline_path(&team, &pipeline)).await?;
            crate::outln!("pipeline {pipeline} destroyed");
            Ok(0)
        }
        C::RenamePipeline { old, new, team } => {
            let path = format!("{}/rename", pipeline_path(&team, &old));
            let _: Value = client.put_json(&path, &json!({ "name": new })).await?;
            crate::outln!("pipeline {old} renamed to {new}");
            Ok(0)
        }
        C::OrderPipelines { pipelines, team } => {
            let path = format!("/api/v1/teams/{}/pipelines/ordering", segment(&team));
            client.put_json_done(&path, &json!(pipelines)).await?;
            crate::outln!("ordered pipelines");
            for p in &pipelines {
                crate::outln!("  {p}");
            }
            Ok(0)
        }
        C::PausePipeline { pipeline, team } => {
            pause(client, &pipeline_path(&team, &pipeline), "pause", &pipeline).await
        }
        C::UnpausePipeline { pipeline, team } => {
            pause(
                client,
                &pipeline_path(&team, &pipeline),
                "unpause",
                &pipeline,
            )
            .await
        }
        C::ArchivePipeline {
            pipeline,
            non_interactive,
            team,
        } => archive(client, &team, &pipeline, non_interactive).await,
        C::ExposePipeline { pipeline, team } => {
            let path = format!("{}/expose", pipeline_path(&team, &pipeline));
            client.put_done(&path).await?;
            crate::outln!("exposed '{pipeline}'");
            Ok(0)
        }
        C::HidePipeline { pipeline, team } => {
            let path = format!("{}/hide", pipeline_path(&team, &pipeline));
            client.put_done(&path).await?;
            crate::outln!("hid '{pipeline}'");
            Ok(0)
        }
        C::PauseJob { job, team } => {
            let (p, j) = split("--job", &job)?;
            let path = format!("{}/jobs/{}", pipeline_path(&team, p), segment(j));
            pause(client, &path, "pause", &job).await
        }
        C::UnpauseJob { job, team } => {
            let (p, j) = split("--job", &job)?;
            let path = format!("{}/jobs/{}", pipeline_path(&team, p), segment(j));
            pause(client, &path, "unpause", &job).await
        }
        C::TriggerJob { job, watch, team } => {
            let (p, j) = split("--job", &job)?;
            let path = format!("{}/jobs/{}/builds", pipeline_path(&team, p), segment(j));
            start_build(client, &path, &job, watch).await
        }
        C::RerunBuild {
            job,
            build,
            watch,
            team,
        } => {
            let (p, j) = split("--job", &job)?;
            let path = format!(
                "{}/jobs/{}/builds/{}",
                pipeline_path(&team, p),
                segment(j),
                segment(&build)
            );
            start_build(client, &path, &job, watch).await
        }
        C::Why { job, team } => {
            let (p, j) = split("--job", &job)?;
            let path = format!("{}/jobs/{}", pipeline_path(&team, p), segment(j));
            let view: Value = client.get(&path).await?;
            print_why(&job, &view);
            Ok(0)
        }
    }
}

/// `gantry pipelines`: the team's pipelines, as a table or JSON.
async fn list_pipelines(client: &ApiClient, team: &str, json: bool) -> anyhow::Result<i32> {
    let path = format!("/api/v1/teams/{}/pipelines", segment(team));
    let all: Vec<Value> = client.get_pages(&path, usize::MAX).await?;
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_table(
            &["name", "paused", "archived", "config_version"],
            all.iter()
                .map(|p| {
                    vec![
                        cell(p, "name"),
                        cell(p, "paused"),
                        cell(p, "archived"),
                        cell(p, "config_version"),
                    ]
                })
                .collect(),
        );
    }
    Ok(0)
}

/// `gantry archive-pipeline`, asking first unless `non_interactive`.
async fn archive(
    client: &ApiClient,
    team: &str,
    pipeline: &str,
    non_interactive: bool,
) -> anyhow::Result<i32> {
    if !non_interactive && !confirm(&format!("archive pipeline '{pipeline}'?"))? {
        crate::outln!("bailing out");
        return Ok(1);
    }
    let path = format!("{}/archive", pipeline_path(team, pipeline));
    client.put_done(&path).await?;
    crate::outln!("archived '{pipeline}'");
    Ok(0)
}

/// `gantry get-pipeline`: prints the pipeline's config as it was set.
async fn get_pipeline(client: &ApiClient, team: &str, pipeline: &str) -> anyhow::Result<i32> {
    let p: Value = client.get(&pipeline_path(team, pipeline)).await?;
    // As fly's `get-pipeline`: Concourse's config route answers an
    // archived pipeline 404, so its clients say it is not found.
    if p["archived"] == true {
        bail!("pipeline {team}/{pipeline} not found: it is archived (set-pipeline sets it again)");
    }
    crate::out!("{}", p["config"].as_str().unwrap_or_default());
    Ok(0)
}

/// Asks `question [yN]` on a terminal (as fly, on stdout): true for `y`
/// or `yes`; off a terminal (a script) there is nobody to ask: true, as
/// with `-n`.
fn confirm(question: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead as _, IsTerminal as _};
    if !std::io::stdin().is_terminal() {
        return Ok(true);
    }
    crate::out!("{question} [yN]: ");
    crate::cli::output::write_bytes(b"");
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// `pause` or `unpause` of a pipeline or job at `path`.
async fn pause(client: &ApiClient, path: &str, verb: &str, what: &str) -> anyhow::Result<i32> {
    client.put_done(&format!("{path}/{verb}")).await?;
    crate::outln!("{what} {verb}d");
    Ok(0)
}

/// What `set-pipeline` sets, and how.
struct SetPipeline<'a> {
    team: &'a str,
    name: &'a str,
    text: &'a str,
    vars: &'a gantry_actors::api::Vars,
    config_version: Option<i64>,
    /// Ask "apply configuration? [yN]" before the write (as fly does,
    /// unless -n).
    ask: bool,
}

/// `set-pipeline`: the diff against the stored config, the question
/// (when asked), then the write.
async fn set_pipeline(client: &ApiClient, set: SetPipeline<'_>) -> anyhow::Result<i32> {
    let SetPipeline {
        team,
        name,
        text,
        vars,
        config_version,
        ask,
    } = set;
    let path = pipeline_path(team, name);
    let stored: Option<Value> = match client.get::<Value>(&path).await {
        Ok(v) => Some(v),
        Err(e) if e.to_string().contains("answered 404") => None,
        Err(e) => return Err(e),
    };
    let before = stored
        .as_ref()
        .and_then(|s| s["config"].as_str())
        .unwrap_or_default();
    if before == text {
        crate::outln!("no changes to the config of {name}");
    } else {
        let diff = similar::TextDiff::from_lines(before, text);
        crate::out!(
            "{}",
            diff.unified_diff()
                .context_radius(3)
                .header(&format!("{name} (stored)"), &format!("{name} (new)"))
        );
    }
    if ask && !confirm("apply configuration?")? {
        // As fly: nothing written, and not a failure.
        crate::outln!("bailing out");
        return Ok(0);
    }
    let mut body = json!({ "config": text, "vars": vars });
    if let Some(v) = config_version {
        body["config_version"] = json!(v);
    }
    let answer: Value = client.put_json(&path, &body).await?;
    let p = &answer["pipeline"];
    crate::outln!(
        "pipeline {name} set: config version {}",
        cell(p, "config_version")
    );
    if answer["created"].as_bool() == Some(true) {
        crate::outln!("it is paused, as every new pipeline: gantry unpause-pipeline -p {name}");
    }
    Ok(0)
}

/// `why`: what the last scheduling round decided for a job (and why its
/// newest build, triggered by hand, still waits, if it does).
fn print_why(job: &str, view: &Value) {
    let latest = &view["latest_build"];
    if let Some(why) = latest["waiting"].as_str() {
        crate::outln!(
            "{job} #{} (build {}) is pending: waiting: {why}",
            cell(latest, "name"),
            cell(latest, "id")
        );
    }
    let Some(d) = view["decision"].as_object() else {
        crate::outln!("{job}: not scheduled yet (no trigger input, a paused pipeline, or no round since it was set)");
        return;
    };
    if view["paused"].as_bool() == Some(true) {
        crate::outln!("{job} is paused");
    }
    crate::outln!(
        "{job}: {}",
        d.get("outcome").and_then(Value::as_str).unwrap_or_default()
    );
    if let Some(inputs) = d.get("inputs").and_then(Value::as_object) {
        for (name, v) in inputs {
            crate::outln!("  input {name}: {v}");
        }
    }
    if let Some(why) = d.get("unsatisfied").and_then(Value::as_object) {
        for (name, reason) in why {
            crate::outln!("  input {name}: {}", reason.as_str().unwrap_or_default());
        }
    }
    if let Some(candidates) = view["candidates"].as_object() {
        for (name, list) in candidates {
            crate::outln!("  newest versions of input {name}:");
            for c in list.as_array().into_iter().flatten() {
                crate::outln!(
                    "    {}: {}",
                    c["version"],
                    c["verdict"].as_str().unwrap_or_default()
                );
            }
        }
    }
}

/// Asks for a build of `job` at `path` (a trigger or a rerun), prints its
/// name and id (and why it waits), and follows it when `watch` is set.
async fn start_build(
    client: &ApiClient,
    path: &str,
    job: &str,
    watch: bool,
) -> anyhow::Result<i32> {
    let build: Value = client.post(path, &json!({})).await?;
    let id = build["id"]
        .as_i64()
        .context("the answer holds no build id")?;
    match build["waiting"].as_str() {
        Some(why) => crate::outln!(
            "created {job} #{} (build {id}), pending: waiting: {why}",
            cell(&build, "name")
        ),
        None => crate::outln!("started {job} #{} (build {id})", cell(&build, "name")),
    }
    if !watch {
        return Ok(0);
    }
    Ok(follow(client, id, StepLines::Told).await?.run_exit_code(id))
}
