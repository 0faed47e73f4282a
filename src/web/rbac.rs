//! The action map: which role of a team each API operation needs, as
//! Concourse's `atc/api/accessor/role_action_map.go` gives it, and what an
//! operator moves between roles with `[web.rbac]` (Concourse's
//! `--config-rbac`).
//!
//! An action is an operation of the OpenAPI document, named by its
//! `operationId`. Every operation is one of:
//! - open (`security(())` in the document: health, the page's assets, the
//!   workers' registration, a resource's webhook): no role;
//! - the workers' ([`WORKER_ONLY`]) or the admin's ([`ADMIN_ONLY`]): no
//!   team role reaches it, and `[web.rbac]` cannot move it;
//! - a team's ([`DEFAULT_ROLES`]): a caller with a role in the team needs
//!   at least the role the map gives; a lower role is refused with 403
//!   before the handler runs. Whether the caller may see the team's thing
//!   at all (404 for another team's) stays the handler's check.
//!
//! A unit test (`rbac_tests.rs`) holds the map and the document to each
//! other: every operation is in exactly one class.

use std::collections::HashMap;

use actix_web::http::Method;
use gantry_actors::api::Role;

pub use crate::config::RbacConfig;

/// The operations only a worker presenting the registration key calls.
pub const WORKER_ONLY: &[&str] = &["beginSweep", "reportSweep"];

/// The operations only the admin calls (the fleet's, no team's): creating a
/// new team is the admin's too, checked by its handler. Land and retire
/// also answer the worker itself. Gantry's workers belong to no team, so
/// no team role manages one (Concourse gives a team's member its team's
/// workers).
pub const ADMIN_ONLY: &[&str] = &[
    "landWorker",
    "retireWorker",
    "pruneWorker",
    "pruneWorkerByName",
    "listActiveUsersSince",
];

/// The team operations that read an exposed pipeline (Concourse's
/// `expose-pipeline`): a caller outside the team, anonymous or of another
/// team, reaches their handlers, which answer only for an exposed
/// pipeline and cut what they show (`api/public_pipelines.rs`). Each is
/// a viewer's reading in [`DEFAULT_ROLES`] too.
pub const PUBLIC_READS: &[&str] = &[
    "listPipelines",
    "getPipeline",
    "pipelineBadge",
    "jobBadge",
    "getJobBuild",
    "getResource",
    "listResourceTypes",
    "listAllPipelines",
    "listAllJobs",
    "listAllResources",
    "listPipelineBuilds",
    "pipelineFeed",
    "listPipelineJobs",
    "getPipelineJob",
    "listJobBuilds",
    "listResources",
    "listResourceVersions",
    "getBuild",
    "getBuildResources",
    "buildEvents",
    "buildLog",
];

/// The role each team operation needs by default.
pub const DEFAULT_ROLES: &[(&str, Role)] = &[
    // Reading.
    ("listWorkers", Role::Viewer),
    ("listWorkerJobs", Role::Viewer),
    ("listBackgroundJobs", Role::Viewer),
    ("listWebNodes", Role::Viewer),
    ("queue", Role::Viewer),
    ("listBuilds", Role::Viewer),
    ("getBuild", Role::Viewer),
    ("getBuildPlan", Role::Viewer),
    ("getBuildPreparation", Role::Viewer),
    ("listTeamBuilds", Role::Viewer),
    ("getResourceVersion", Role::Viewer),
    ("listBuildsWithVersionAsInput", Role::Viewer),
    ("listBuildsWithVersionAsOutput", Role::Viewer),
    ("buildEvents", Role::Viewer),
    ("buildLog", Role::Viewer),
    ("getBuildResources", Role::Viewer),
    ("listContainers", Role::Viewer),
    ("listVolumes", Role::Viewer),
    ("listTeamContainers", Role::Viewer),
    ("getContainer", Role::Viewer),
    ("listTeamVolumes", Role::Viewer),
    ("listTeams", Role::Viewer),
    ("getTeam", Role::Viewer),
    ("listPipelines", Role::Viewer),
    ("getPipeline", Role::Viewer),
    ("pipelineBadge", Role::Viewer),
    ("jobBadge", Role::Viewer),
    ("getJobBuild", Role::Viewer),
    ("getResource", Role::Viewer),
    ("listResourceTypes", Role::Viewer),
    ("listAllPipelines", Role::Viewer),
    ("listAllJobs", Role::Viewer),
    ("listJobInputs", Role::Viewer),
    ("listAllResources", Role::Viewer),
    ("listPipelineBuilds", Role::Viewer),
    ("getConfig", Role::Viewer),
    ("listPipelineJobs", Role::Viewer),
    ("getPipelineJob", Role::Viewer),
    ("listJobBuilds", Role::Viewer),
    ("listResources", Role::Viewer),
    ("listResourceVersions", Role::Viewer),
    ("listResourceTypeVersions", Role::Viewer),
    ("dashboardEvents", Role::Viewer),
    ("pipelineFeed", Role::Viewer),
    // Operating pipelines.
    ("abortBuild", Role::PipelineOperator),
    ("triggerJob", Role::PipelineOperator),
    ("rerunJobBuild", Role::PipelineOperator),
    ("pauseJob", Role::PipelineOperator),
    ("unpauseJob", Role::PipelineOperator),
    ("pausePipeline", Role::PipelineOperator),
    ("unpausePipeline", Role::PipelineOperator),
    ("checkResource", Role::PipelineOperator),
    ("checkResourceType", Role::PipelineOperator),
    ("pinResourceVersion", Role::PipelineOperator),
    ("setPinCommentOnResource", Role::PipelineOperator),
    ("unpinResource", Role::PipelineOperator),
    ("enableResourceVersion", Role::PipelineOperator),
    ("disableResourceVersion", Role::PipelineOperator),
    ("clearTaskCache", Role::PipelineOperator),
    ("deleteTaskCache", Role::PipelineOperator),
    ("clearResourceCache", Role::PipelineOperator),
    // Changing pipelines, one-off builds, containers, secrets.
    ("setPipeline", Role::Member),
    ("saveConfig", Role::Member),
    ("destroyPipeline", Role::Member),
    ("renamePipeline", Role::Member),
    ("orderPipelines", Role::Member),
    ("archivePipeline", Role::Member),
    ("exposePipeline", Role::Member),
    ("hidePipeline", Role::Member),
    ("createBuild", Role::Member),
    ("uploadArtifact", Role::Member),
    ("downloadArtifact", Role::Member),
    ("hijackBuild", Role::Member),
    ("hijackContainer", Role::Member),
    ("listSecrets", Role::Member),
    ("setTeamSecret", Role::Member),
    ("destroyTeamSecret", Role::Member),
    ("setPipelineSecret", Role::Member),
    ("destroyPipelineSecret", Role::Member),
    // The team itself.
    ("setTeam", Role::Owner),
    ("destroyTeam", Role::Owner),
    ("createToken", Role::Owner),
    ("listTokens", Role::Owner),
    ("revokeToken", Role::Owner),
    ("listAudit", Role::Owner),
    ("removeTeamRole", Role::Owner),
    ("signOut", Role::Viewer),
    ("whoAmI", Role::Viewer),
];

/// The action map in force: the defaults with `[web.rbac]` applied, and
/// which operation a route is.
#[derive(Debug, Clone)]
pub struct ActionRoles {
    roles: HashMap<String, Role>,
    operations: HashMap<(Method, String), String>,
}

impl ActionRoles {
    /// The defaults with `config`'s moves applied. Refuses an unknown role,
    /// an unknown action, and an action no team role may take (open, the
    /// workers' or the admin's), naming it.
    /// `document` is the API's OpenAPI document, whose operations the
    /// routes are.
    pub fn new(config: &RbacConfig, document: &utoipa::openapi::OpenApi) -> Result<Self, String> {
        let mut roles: HashMap<String, Role> = DEFAULT_ROLES
            .iter()
            .map(|(op, role)| (op.to_string(), *role))
            .collect();
        let mut moved: HashMap<&str, &str> = HashMap::new();
        for (role_name, actions) in config {
            let role: Role = role_name.parse().map_err(|e| format!("[web.rbac]: {e}"))?;
            for action in actions {
                if let Some(earlier) = moved.insert(action, role_name) {
                    return Err(format!(
                        "[web.rbac]: action {action:?} is given to both {earlier} and {role_name}"
                    ));
                }
                match roles.get_mut(action.as_str()) {
                    Some(r) => *r = role,
                    None if WORKER_ONLY.contains(&action.as_str())
                        || ADMIN_ONLY.contains(&action.as_str()) =>
                    {
                        return Err(format!(
                            "[web.rbac]: action {action:?} is the fleet's (the admin's or the workers'): no team role can be given it"
                        ))
                    }
                    None => {
                        return Err(format!(
                            "[web.rbac]: unknown action {action:?}; the actions are the API's operationIds: {}",
                            DEFAULT_ROLES.iter().map(|(op, _)| *op).collect::<Vec<_>>().join(", ")
                        ))
                    }
                }
            }
        }
        let mut operations = HashMap::new();
        for (path, item) in &document.paths.paths {
            for (method, op) in [
                (Method::GET, &item.get),
                (Method::PUT, &item.put),
                (Method::POST, &item.post),
                (Method::DELETE, &item.delete),
            ] {
                if let Some(id) = op.as_ref().and_then(|o| o.operation_id.clone()) {
                    operations.insert((method, path.clone()), id);
                }
            }
        }
        Ok(Self { roles, operations })
    }

    /// The operation a request is: its method and the route pattern it
    /// matched.
    pub fn operation(&self, method: &Method, pattern: &str) -> Option<&str> {
        self.operations
            .get(&(method.clone(), pattern.to_string()))
            .map(String::as_str)
    }

    /// The role a team operation needs (`None`: not a team operation).
    pub fn needs(&self, operation: &str) -> Option<Role> {
        self.roles.get(operation).copied()
    }

    /// The team operations `role` may take (every one for `None`: the
    /// admin), sorted: what the dashboard shows buttons for.
    pub fn allowed(&self, role: Option<Role>) -> Vec<&str> {
        let mut ops: Vec<&str> = self
            .roles
            .iter()
            .filter(|(_, needs)| role.is_none_or(|r| r >= **needs))
            .map(|(op, _)| op.as_str())
            .collect();
        ops.sort_unstable();
        ops
    }
}
