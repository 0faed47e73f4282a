//! Concourse's reads of a team's containers and volumes (`fly containers`,
//! `fly volumes`, and the containers `fly intercept` looks up), answered in
//! Concourse's shapes (`atc.Container`, `atc.Volume`) from Gantry's
//! handle rows, and the people who signed in (`fly active-users`). Gantry's
//! own fleet-wide `GET /api/v1/containers` and `/api/v1/volumes` (its CLI's
//! and dashboard's) are in `builds.rs`.

use std::collections::{BTreeMap, HashMap};

use actix_web::{web, HttpResponse};
use gantry_actors::api::{Handle, HandleKind};
use gantry_wire::events::PlanNode;
use serde::Serialize;
use serde_json::Value;

use super::NoBody;
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// The most rows of one kind a team's listing reads.
const MAX_ROWS: i64 = 10_000;

/// Concourse's `atc.Container`: `id` and `worker_name` always, the others
/// when known (Concourse leaves empty ones out too).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Container {
    /// Gantry's handle.
    pub id: String,
    /// The worker holding it.
    pub worker_name: String,
    /// `creating`, `created`, `destroying` or `failed`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// The step's kind: `task`, `get`, `put` or `check`, when the build's
    /// plan tells it.
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// The step's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub step_name: String,
    /// The build using it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<i64>,
    /// That build's name (`N`, `N.M`; a one-off build's id).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub build_name: String,
    /// That build's pipeline.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pipeline_name: String,
    /// That build's job.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub job_name: String,
}

/// Concourse's `atc.Volume` (every field always sent).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Volume {
    /// Gantry's handle.
    pub id: String,
    /// The worker holding it.
    pub worker_name: String,
    /// `container` (a step's), `artifact` (a build's output or an
    /// artifact streamed to the worker), `task-cache`, `resource` (an
    /// image, a resource's files), or `unknown`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Empty: Gantry does not tie a volume to a container.
    pub container_handle: String,
    /// Empty: a volume's path stays the worker's.
    pub path: String,
    /// Empty: Gantry's volumes have no parent.
    pub parent_handle: String,
    /// Always null.
    #[schema(value_type = Object)]
    pub resource_type: Option<Value>,
    /// Always null.
    #[schema(value_type = Object)]
    pub base_resource_type: Option<Value>,
    /// Always 0.
    pub pipeline_id: i64,
    /// The pipeline of the build using it.
    pub pipeline_name: String,
    /// Always null.
    #[schema(value_type = Object)]
    pub pipeline_instance_vars: Option<Value>,
    /// The job of the build using it.
    pub job_name: String,
    /// The step (or the role) it serves.
    pub step_name: String,
}

/// What a team's listing knows of a build: (name, pipeline, job, the
/// tree of its `plan` event).
type BuildFacts = (String, String, String, Option<PlanNode>);

/// The facts of build `id` (`None`: gone).
async fn build_facts(state: &AppState, id: i64) -> Result<Option<BuildFacts>, ApiError> {
    // A build gone (its row deleted) leaves its names empty.
    let Ok(b) = state.engine.build(id).await else {
        return Ok(None);
    };
    let tree = super::build_plan::plan_tree(state, &b).await?;
    Ok(Some((
        b.name.clone(),
        b.pipeline.clone().unwrap_or_default(),
        b.job.clone().unwrap_or_default(),
        tree,
    )))
}

/// Every `kind` row of `team`, with the facts of the builds they serve.
async fn team_rows(
    state: &AppState,
    team: &str,
    kind: HandleKind,
) -> Result<(Vec<Handle>, HashMap<i64, BuildFacts>), ApiError> {
    let rows = state
        .engine
        .list_handles_page(kind, Some(team), None, MAX_ROWS)
        .await?;
    let mut builds = HashMap::new();
    for id in rows.iter().filter_map(|r| r.build_id) {
        if builds.contains_key(&id) {
            continue;
        }
        if let Some(facts) = build_facts(state, id).await? {
            builds.insert(id, facts);
        }
    }
    Ok((rows, builds))
}

/// The kind (`task`, `get`, `put`, `check`...) of the step named `step`
/// in a build's plan tree, when the tree tells it.
fn step_kind<'a>(node: &'a PlanNode, step: &str) -> Option<&'a str> {
    if node.step.as_deref() == Some(step) {
        if let Some(kind) = node.step_kind.as_deref() {
            return Some(kind);
        }
    }
    node.children.iter().find_map(|c| step_kind(c, step))
}

/// `h` as Concourse's `atc.Container`.
fn container_of(h: &Handle, builds: &HashMap<i64, BuildFacts>) -> Container {
    let facts = h.build_id.and_then(|id| builds.get(&id));
    let step = h.step.clone().unwrap_or_default();
    let (build_name, pipeline, job, kind) = match facts {
        Some((name, pipeline, job, plan)) => (
            name.clone(),
            pipeline.clone(),
            job.clone(),
            plan.as_ref()
                .and_then(|p| step_kind(p, &step))
                .unwrap_or_default()
                .to_string(),
        ),
        None => Default::default(),
    };
    Container {
        id: h.handle.clone(),
        worker_name: h.worker.clone(),
        state: h.state.as_str().to_string(),
        type_: kind,
        step_name: step,
        build_id: h.build_id,
        build_name,
        pipeline_name: pipeline,
        job_name: job,
    }
}

/// `h` as Concourse's `atc.Volume`.
fn volume_of(h: &Handle, builds: &HashMap<i64, BuildFacts>) -> Volume {
    let step = h.step.clone().unwrap_or_default();
    let type_ = match (h.build_id, step.as_str()) {
        (_, s) if s.starts_with("task-cache:") => "task-cache",
        (_, s) if s.starts_with("artifact:") => "artifact",
        (Some(_), "") => "artifact",
        (Some(_), _) => "container",
        (None, _) if h.owner.starts_with("image ") => "resource",
        (None, _) => "unknown",
    };
    let facts = h.build_id.and_then(|id| builds.get(&id));
    Volume {
        id: h.handle.clone(),
        worker_name: h.worker.clone(),
        type_: type_.to_string(),
        container_handle: String::new(),
        path: String::new(),
        parent_handle: String::new(),
        resource_type: None,
        base_resource_type: None,
        pipeline_id: 0,
        pipeline_name: facts.map(|f| f.1.clone()).unwrap_or_default(),
        pipeline_instance_vars: None,
        job_name: facts.map(|f| f.2.clone()).unwrap_or_default(),
        step_name: step,
    }
}

/// The filters of `ListContainers` Gantry answers (Concourse's names),
/// checked: a filter Gantry cannot apply is refused, never ignored.
fn container_filters(
    query: &BTreeMap<String, String>,
) -> Result<Vec<(&'static str, String)>, ApiError> {
    const KNOWN: &[&str] = &[
        "type",
        "step_name",
        "build_id",
        "build_name",
        "pipeline_name",
        "job_name",
    ];
    let mut filters = Vec::new();
    for (key, value) in query {
        match KNOWN.iter().find(|k| **k == key) {
            Some(k) if !value.is_empty() => filters.push((*k, value.clone())),
            Some(_) => {}
            None => {
                return Err(ApiError::bad_request(format!(
                    "filter {key:?} is not served: Gantry filters containers by {}",
                    KNOWN.join(", ")
                )))
            }
        }
    }
    if let Some((_, id)) = filters.iter().find(|(k, _)| *k == "build_id") {
        id.parse::<i64>().map_err(|e| {
            ApiError::bad_request(format!("non-numeric 'build_id' param ({id}): {e}"))
        })?;
    }
    Ok(filters)
}

/// Whether `c` passes every filter.
fn matches(c: &Container, filters: &[(&str, String)]) -> bool {
    filters.iter().all(|(key, want)| {
        let have = match *key {
            "type" => c.type_.clone(),
            "step_name" => c.step_name.clone(),
            "build_id" => c.build_id.map(|i| i.to_string()).unwrap_or_default(),
            "build_name" => c.build_name.clone(),
            "pipeline_name" => c.pipeline_name.clone(),
            _ => c.job_name.clone(),
        };
        &have == want
    })
}

/// `GET /api/v1/teams/{team}/containers`: Concourse's `ListContainers`.
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/containers",
    operation_id = "listTeamContainers",
    tag = "builds",
    params(
        ("team" = String, Path, description = "Team name"),
        ("type" = Option<String>, Query, description = "The step's kind: task, get, put, check"),
        ("step_name" = Option<String>, Query, description = "The step's name"),
        ("build_id" = Option<i64>, Query, description = "The build's id"),
        ("build_name" = Option<String>, Query, description = "The build's name"),
        ("pipeline_name" = Option<String>, Query, description = "The build's pipeline"),
        ("job_name" = Option<String>, Query, description = "The build's job"),
    ),
    responses(
        (status = 200, description = "The team's containers as `atc.Container`s (at most 10,000)", body = Vec<Container>),
        (status = 400, description = "A filter Gantry does not apply (`attempt`, `pipeline_id`, `job_id`, instance vars, `resource_name`), or a non-numeric `build_id`", body = crate::web::error::ErrorBody),
        (status = 404, description = "Another team's", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn list_containers(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<BTreeMap<String, String>>,
    _body: NoBody,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    super::allowed(&identity, &team, &[("team", &team)])?;
    let filters = container_filters(&query)?;
    let (rows, builds) = team_rows(&state, &team, HandleKind::Container).await?;
    let list: Vec<Container> = rows
        .iter()
        .map(|h| container_of(h, &builds))
        .filter(|c| matches(c, &filters))
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

/// `GET /api/v1/teams/{team}/containers/{id}`: Concourse's `GetContainer`.
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/containers/{id}",
    operation_id = "getContainer",
    tag = "builds",
    params(
        ("team" = String, Path, description = "Team name"),
        ("id" = String, Path, description = "The container's handle"),
    ),
    responses(
        (status = 200, description = "The container as `atc.Container`", body = Container),
        (status = 404, description = "No such container in the team", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn get_container(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    _body: NoBody,
) -> Result<HttpResponse, ApiError> {
    let (team, id) = path.into_inner();
    super::allowed(&identity, &team, &[("team", &team), ("id", &id)])?;
    let found = state.engine.container(&id).await?;
    let Some(h) = found.filter(|h| h.team == team) else {
        return Err(ApiError::not_found(format!("container {id:?} not found")));
    };
    let mut builds = HashMap::new();
    if let Some(b) = h.build_id {
        if let Some(facts) = build_facts(&state, b).await? {
            builds.insert(b, facts);
        }
    }
    Ok(HttpResponse::Ok().json(container_of(&h, &builds)))
}

/// `GET /api/v1/teams/{team}/volumes`: Concourse's `ListVolumes`.
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/volumes",
    operation_id = "listTeamVolumes",
    tag = "builds",
    params(("team" = String, Path, description = "Team name")),
    responses(
        (status = 200, description = "The team's volumes as `atc.Volume`s (at most 10,000)", body = Vec<Volume>),
        (status = 404, description = "Another team's", body = crate::web::error::ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn list_volumes(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<String>,
    _body: NoBody,
) -> Result<HttpResponse, ApiError> {
    let team = path.into_inner();
    super::allowed(&identity, &team, &[("team", &team)])?;
    let (rows, builds) = team_rows(&state, &team, HandleKind::Volume).await?;
    let list: Vec<Volume> = rows.iter().map(|h| volume_of(h, &builds)).collect();
    Ok(HttpResponse::Ok().json(list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_steps_kind_is_read_from_the_plan() {
        let leaf = |name: &str, kind: &str| {
            serde_json::from_value::<PlanNode>(
                json!({"id": "0.0", "kind": "step", "step": name, "step_kind": kind}),
            )
            .unwrap()
        };
        let mut plan: PlanNode = serde_json::from_value(json!({"id": "0", "kind": "do"})).unwrap();
        plan.children = vec![leaf("r", "get"), leaf("t", "task"), leaf("out", "put")];
        assert_eq!(step_kind(&plan, "t"), Some("task"));
        assert_eq!(step_kind(&plan, "r"), Some("get"));
        assert_eq!(step_kind(&plan, "out"), Some("put"));
        assert_eq!(step_kind(&plan, "nope"), None);
    }

    #[test]
    fn filters_gantry_cannot_apply_are_refused() {
        let q = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(container_filters(&q("attempt", "1")).is_err());
        assert!(container_filters(&q("build_id", "x")).is_err());
        assert_eq!(container_filters(&q("job_name", "j")).unwrap().len(), 1);
        assert!(container_filters(&q("job_name", "")).unwrap().is_empty());
    }
}
