//! The action map against the OpenAPI document (`rbac.rs`).

use actix_web::http::Method;
use gantry_actors::api::Role;

use super::rbac::{ActionRoles, RbacConfig, ADMIN_ONLY, DEFAULT_ROLES, PUBLIC_READS, WORKER_ONLY};

fn doc() -> &'static utoipa::openapi::OpenApi {
    super::routes::document()
}

fn document_operations() -> Vec<(String, bool)> {
    let doc = serde_json::to_value(super::routes::document()).unwrap();
    let mut ops = Vec::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            // Open: a requirement that is empty (`/metrics` is open or
            // takes a token, as configured).
            let open = op["security"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|r| r.as_object().is_some_and(|o| o.is_empty()))
            });
            ops.push((op["operationId"].as_str().unwrap().to_string(), open));
        }
    }
    ops
}

#[test]
fn the_public_reads_of_an_exposed_pipeline_are_a_viewers_gets() {
    let doc = serde_json::to_value(doc()).unwrap();
    for op in PUBLIC_READS {
        assert_eq!(
            DEFAULT_ROLES.iter().find(|(o, _)| o == op).map(|(_, r)| *r),
            Some(Role::Viewer),
            "{op} is read by the public: a viewer's reading"
        );
        let methods: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().iter())
            .filter(|(_, o)| o["operationId"] == *op)
            .map(|(m, _)| m.as_str())
            .collect();
        assert_eq!(methods, ["get"], "{op} reads: a GET, once");
    }
}

#[test]
fn every_operation_is_open_the_fleets_or_a_teams_and_only_one() {
    let ops = document_operations();
    for (op, open) in &ops {
        let classes = [
            *open,
            WORKER_ONLY.contains(&op.as_str()),
            ADMIN_ONLY.contains(&op.as_str()),
            DEFAULT_ROLES.iter().any(|(o, _)| o == op),
        ];
        assert_eq!(
            classes.iter().filter(|c| **c).count(),
            1,
            "{op}: open, worker, admin, team = {classes:?}"
        );
    }
    for (op, _) in DEFAULT_ROLES {
        assert!(
            ops.iter().any(|(o, _)| o == op),
            "{op} is in the map but not in the document"
        );
    }
    assert_eq!(
        DEFAULT_ROLES.len(),
        DEFAULT_ROLES
            .iter()
            .map(|(o, _)| *o)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        "an action twice in the map"
    );
}

#[test]
fn rbac_moves_an_action_and_refuses_what_it_cannot_move() {
    let map = ActionRoles::new(&RbacConfig::new(), doc()).unwrap();
    assert_eq!(map.needs("hijackBuild"), Some(Role::Member));
    assert_eq!(map.needs("landWorker"), None);
    assert_eq!(
        map.operation(&Method::PUT, "/api/v1/builds/{id}/abort"),
        Some("abortBuild")
    );
    let moved = ActionRoles::new(
        &RbacConfig::from([("pipeline-operator".into(), vec!["hijackBuild".into()])]),
        doc(),
    )
    .unwrap();
    assert_eq!(moved.needs("hijackBuild"), Some(Role::PipelineOperator));
    assert_eq!(moved.needs("hijackContainer"), Some(Role::Member));
    // What a role may take, as the page is told: the map in force.
    let viewer = map.allowed(Some(Role::Viewer));
    assert!(viewer.contains(&"getBuild") && !viewer.contains(&"triggerJob"));
    let operator = moved.allowed(Some(Role::PipelineOperator));
    assert!(operator.contains(&"triggerJob") && operator.contains(&"hijackBuild"));
    assert!(!operator.contains(&"setPipeline"));
    assert!(!map
        .allowed(Some(Role::PipelineOperator))
        .contains(&"hijackBuild"));
    assert_eq!(map.allowed(None).len(), DEFAULT_ROLES.len());
    assert!(!map.allowed(None).contains(&"landWorker"));
    for (config, want) in [
        (RbacConfig::from([("boss".into(), vec![])]), "role \"boss\""),
        (
            RbacConfig::from([("viewer".into(), vec!["fly".into()])]),
            "unknown action \"fly\"",
        ),
        (
            RbacConfig::from([("viewer".into(), vec!["pruneWorker".into()])]),
            "the fleet's",
        ),
        (
            RbacConfig::from([
                ("viewer".into(), vec!["triggerJob".into()]),
                ("owner".into(), vec!["triggerJob".into()]),
            ]),
            "both",
        ),
    ] {
        let err = ActionRoles::new(&config, doc()).unwrap_err();
        assert!(err.contains(want), "{err}");
    }
}
