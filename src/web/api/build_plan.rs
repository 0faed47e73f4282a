//! `GET /api/v1/builds/{id}/plan` (Concourse's `GetBuildPlan`): the
//! build's plan as Concourse's public plan (`atc.PublicBuildPlan`,
//! `{"schema": "exec.v2", "plan": ...}`, `atc/public_plan.go`), made from
//! the tree of Gantry's `plan` event, so that each step's `id` is the
//! `origin.id` its server-sent events carry (`0.1`; `0.1@2` in the second
//! attempt of an `attempts`).
//!
//! What differs from Concourse's: a `get`, `put` or `check` names its
//! step, with an empty `type` and no `resource` or `version` (the `plan`
//! event tells neither); a task is never `privileged` nor `hermetic` here;
//! `attempts` is Concourse's `retry`, one copy of its plan per attempt;
//! a node with several hooks nests them as Concourse's compiled plan
//! does (`ensure` outermost), the inner wrappers' ids being the hooks
//! node's with `/on_success` and so on; `across` is not Gantry's. A
//! build whose plan was not told yet (pending) or whose events were
//! reaped answers 404, as Concourse answers a build with no plan.

use actix_web::{web, HttpResponse};
use gantry_wire::events::{BuildEvent, PlanNode};
use serde_json::{json, Map, Value};

use crate::web::api::builds::{stored_up_to, visible_build};
use crate::web::auth::Identity;
use crate::web::error::{ApiError, ErrorBody};
use crate::web::AppState;

/// The schema Concourse names its public plans with.
pub const SCHEMA: &str = "exec.v2";

/// `GET /api/v1/builds/{id}/plan`
#[utoipa::path(
    get,
    path = "/api/v1/builds/{id}/plan",
    operation_id = "getBuildPlan",
    tag = "builds",
    params(("id" = i64, Path, description = "The build")),
    responses(
        (status = 200, description = "`{\"schema\": \"exec.v2\", \"plan\": atc.Plan}` (Concourse's public plan), its ids the `origin.id`s of the build's events", body = Object),
        (status = 404, description = "No such build (or another team's), or its plan is not told yet (pending) or was reaped", body = ErrorBody),
        (status = "5XX", description = "The database failed"),
    )
)]
pub async fn plan(
    identity: Identity,
    state: web::Data<AppState>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let build = visible_build(&identity, &state, id).await?;
    let tree = plan_tree(&state, &build)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("build {id} has no plan yet")))?;
    Ok(HttpResponse::Ok().json(json!({
        "schema": SCHEMA,
        "plan": public_plan(&tree, &[], &build.team),
    })))
}

/// The tree of build `build`'s `plan` event, read from its stored
/// events (the event comes second, after `started`; none yet: `None`).
pub(crate) async fn plan_tree(
    state: &AppState,
    build: &gantry_actors::api::Build,
) -> Result<Option<PlanNode>, ApiError> {
    let last = stored_up_to(state, build).await?;
    if last == 0 {
        return Ok(None);
    }
    let mut events = state.engine.follow_build_events(build.id, 0);
    while let Some(next) = events.recv().await {
        let stored = next?;
        if let Ok(BuildEvent::Plan { tree, .. }) = serde_json::from_str(&stored.json) {
            return Ok(Some(tree));
        }
        if stored.seq >= last || stored.is_final {
            break;
        }
    }
    Ok(None)
}

/// Node `node`'s id in Concourse's plan: Gantry's, with the attempts of
/// its enclosing `attempts` (as events' origins name them).
fn plan_id(node: &str, attempts: &[u32]) -> String {
    gantry_wire::events::Origin {
        id: node.to_string(),
        attempts: attempts.to_vec(),
    }
    .key()
}

/// One plan node with `id` and its one field `key`.
fn node_of(id: String, key: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(id));
    m.insert(key.into(), value);
    Value::Object(m)
}

/// `node` (inside the `attempts` given) as Concourse's public plan.
pub fn public_plan(node: &PlanNode, attempts: &[u32], team: &str) -> Value {
    let id = plan_id(&node.id, attempts);
    let child = |n: &PlanNode| public_plan(n, attempts, team);
    let first = || {
        node.children
            .first()
            .map_or(Value::Null, |c| public_plan(c, attempts, team))
    };
    match node.kind.as_str() {
        "step" => step(id, node, team),
        "do" => node_of(id, "do", node.children.iter().map(child).collect()),
        "in_parallel" => {
            let mut p = json!({ "steps": node.children.iter().map(child).collect::<Vec<_>>() });
            if let Some(limit) = node.limit.filter(|l| *l > 0) {
                p["limit"] = json!(limit);
            }
            if node.fail_fast {
                p["fail_fast"] = json!(true);
            }
            node_of(id, "in_parallel", p)
        }
        "try" => node_of(id, "try", json!({ "step": first() })),
        "timeout" => {
            let duration = duration(node.timeout_ms.unwrap_or_default());
            node_of(
                id,
                "timeout",
                json!({ "step": first(), "duration": duration }),
            )
        }
        "attempts" => {
            let tries = (1..=node.attempts.unwrap_or(1))
                .map(|n| {
                    let mut inner = attempts.to_vec();
                    inner.push(n);
                    node.children
                        .first()
                        .map_or(Value::Null, |c| public_plan(c, &inner, team))
                })
                .collect();
            node_of(id, "retry", tries)
        }
        "hooks" => hooks(id, node, attempts, team),
        _ => node_of(id, "do", node.children.iter().map(child).collect()),
    }
}

/// A step node as its kind's plan.
fn step(id: String, node: &PlanNode, team: &str) -> Value {
    let name = node.step.clone().unwrap_or_default();
    match node.step_kind.as_deref() {
        Some(kind @ ("get" | "put" | "check")) => {
            node_of(id, kind, json!({ "name": name, "type": "" }))
        }
        Some("load_var") => node_of(id, "load_var", json!({ "name": name })),
        Some("set_pipeline") => node_of(
            id,
            "set_pipeline",
            json!({ "name": name, "team": team, "instance_vars": null }),
        ),
        _ => node_of(
            id,
            "task",
            json!({ "name": name, "privileged": false, "hermetic": false }),
        ),
    }
}

/// A hooks node as Concourse's nested hook plans: the plan wrapped by
/// each hook in turn, `ensure` outermost (the whole has the node's id).
fn hooks(id: String, node: &PlanNode, attempts: &[u32], team: &str) -> Value {
    let part = |role: &str| {
        let suffix = format!(".{role}");
        node.children
            .iter()
            .find(|c| c.id.ends_with(&suffix))
            .map(|c| public_plan(c, attempts, team))
    };
    let mut plan = part("plan").unwrap_or(Value::Null);
    let roles: Vec<(&str, Value)> = ["on_success", "on_failure", "on_abort", "on_error", "ensure"]
        .into_iter()
        .filter_map(|role| part(role).map(|p| (role, p)))
        .collect();
    let count = roles.len();
    for (i, (role, hook)) in roles.into_iter().enumerate() {
        let wrapper = if i + 1 == count {
            id.clone()
        } else {
            format!("{id}/{role}")
        };
        plan = node_of(wrapper, role, json!({ "step": plan, role: hook }));
    }
    plan
}

/// A duration as Concourse's config writes one (`90s`, `1500ms`).
fn duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, kind: &str, children: Vec<PlanNode>) -> PlanNode {
        PlanNode {
            id: id.into(),
            kind: kind.into(),
            step: None,
            step_kind: None,
            argv: Vec::new(),
            limit: None,
            fail_fast: false,
            attempts: None,
            timeout_ms: None,
            children,
        }
    }

    fn leaf(id: &str, name: &str, kind: &str) -> PlanNode {
        PlanNode {
            step: Some(name.into()),
            step_kind: Some(kind.into()),
            ..node(id, "step", Vec::new())
        }
    }

    #[test]
    fn the_tree_becomes_concourses_public_plan_with_event_ids() {
        let mut retry = node("0.1", "attempts", vec![leaf("0.1.0", "unit", "task")]);
        retry.attempts = Some(2);
        let hooked = node(
            "0.2",
            "hooks",
            vec![
                leaf("0.2.plan", "ship", "put"),
                leaf("0.2.on_failure", "tell", "task"),
                leaf("0.2.ensure", "tidy", "task"),
            ],
        );
        let tree = node("0", "do", vec![leaf("0.0", "src", "get"), retry, hooked]);
        let plan = public_plan(&tree, &[], "main");
        assert_eq!(plan["id"], "0");
        let steps = plan["do"].as_array().unwrap();
        assert_eq!(
            steps[0],
            json!({"id": "0.0", "get": {"name": "src", "type": ""}})
        );
        assert_eq!(steps[1]["retry"][1]["id"], "0.1.0@2");
        assert_eq!(steps[1]["retry"][0]["task"]["name"], "unit");
        let ensure = &steps[2];
        assert_eq!(ensure["id"], "0.2");
        assert_eq!(ensure["ensure"]["ensure"]["id"], "0.2.ensure");
        let failure = &ensure["ensure"]["step"];
        assert_eq!(failure["id"], "0.2/on_failure");
        assert_eq!(failure["on_failure"]["step"]["put"]["name"], "ship");
        assert_eq!(duration(90_000), "90s");
        assert_eq!(duration(1500), "1500ms");
    }
}
