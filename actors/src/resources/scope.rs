//! Where a resource config's versions are kept: its *scope*, the key of a
//! version history (`resource_versions.team`, `resource_checks.scope`,
//! `pipeline_resources.scope`). Every scope Gantry builds is built here.
//!
//! The trust model: **a team is the trust boundary.** A history is shared
//! only inside one team, so no action of one team (a check, `check-resource
//! --from`, a pin, a custom type, a put) can add a version another team's
//! jobs then take, and no check build of one team is shown to another.
//! The scopes:
//! - [`shared`] (`team:{team}`): one history per resource config (type and
//!   source) for every pipeline of one team, `[web] global_resources`
//!   (the default; Concourse's global resources, within a team);
//! - [`pipeline_resource`] / [`pipeline_type`] (`pipeline:{id}/{name}`,
//!   `pipeline:{id}/type:{name}`): one history per pipeline resource (or
//!   resource type image), global resources off (Concourse's default);
//! - [`one_off`] (the team's name): what builds not scheduled by a stored
//!   pipeline check and put (`gantry check`, `gantry run`). A put of a job
//!   build of a stored pipeline saves its version in its resource's scope
//!   (the one its `pipeline_resources` row names).
//!
//! Team names are letters, digits, `-` and `_`, so the three forms never
//! collide. Before migration 0024 the global history was `*`, shared by
//! every team ([`LEGACY_GLOBAL`]); the migration copied it into each
//! team's own, and a scope `*` still found in a stored check plan is read
//! as the build's team's ([`check_scope`]).

use crate::db::PIPELINE_ID;

/// The scope every team's global resources shared before migration 0024.
pub(crate) const LEGACY_GLOBAL: &str = "*";

/// The prefix of a team's shared history.
const TEAM_PREFIX: &str = "team:";

/// The prefix of a pipeline's own histories.
const PIPELINE_PREFIX: &str = "pipeline:";

/// The history every pipeline of `team` shares for one resource config
/// (global resources).
pub(crate) fn shared(team: &str) -> String {
    format!("{TEAM_PREFIX}{team}")
}

/// The history of builds of `team` that no stored pipeline schedules: a
/// one-off check or get, and the versions their puts make.
pub(crate) fn one_off(team: &str) -> String {
    team.to_string()
}

/// The history of a pipeline's resource `resource` of its own (global
/// resources off), as given to `Pipelines::set_pipeline`: the pipeline's id is
/// [`PIPELINE_ID`] until it is stored.
pub(crate) fn pipeline_resource(resource: &str) -> String {
    format!("{PIPELINE_PREFIX}{PIPELINE_ID}/{resource}")
}

/// The history of the image of a pipeline's resource type `name` of its
/// own (global resources off), apart from its resources'.
pub(crate) fn pipeline_type(name: &str) -> String {
    format!("{PIPELINE_PREFIX}{PIPELINE_ID}/type:{name}")
}

/// Where resource `resource` of a pipeline of `team` keeps its versions:
/// the team's shared history when `global`, else its own.
pub(crate) fn of_resource(global: bool, team: &str, resource: &str) -> String {
    if global {
        shared(team)
    } else {
        pipeline_resource(resource)
    }
}

/// Where the image of resource type `name` of a pipeline of `team` keeps
/// its versions: the team's shared history when `global`, else its own.
pub(crate) fn of_type(global: bool, team: &str, name: &str) -> String {
    if global {
        shared(team)
    } else {
        pipeline_type(name)
    }
}

/// Where a check of a build of `team` stores what it finds: the scope its
/// plan names (a stored pipeline's periodic check), `*` read as the team's
/// shared history (a plan stored before migration 0024), or none: the
/// team's one-off history.
pub(crate) fn check_scope(stored: Option<&str>, team: &str) -> String {
    match stored {
        None => one_off(team),
        Some(LEGACY_GLOBAL) => shared(team),
        Some(s) => s.to_string(),
    }
}

/// Who a scope belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner<'a> {
    /// A team: its shared or one-off history.
    Team(&'a str),
    /// A stored pipeline, by id: its team is the pipeline's.
    Pipeline(i64),
    /// Nobody's: `*`, or a scope Gantry does not make.
    Nobody,
}

/// Who `scope` belongs to.
pub(crate) fn owner(scope: &str) -> Owner<'_> {
    if let Some(team) = scope.strip_prefix(TEAM_PREFIX) {
        return Owner::Team(team);
    }
    if let Some(rest) = scope.strip_prefix(PIPELINE_PREFIX) {
        return rest
            .split_once('/')
            .and_then(|(id, _)| id.parse().ok())
            .map_or(Owner::Nobody, Owner::Pipeline);
    }
    // A team's name (letters, digits, `-`, `_`): its one-off history.
    let team_like = !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if team_like {
        Owner::Team(scope)
    } else {
        Owner::Nobody
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_teams_never_share_a_scope_and_one_team_shares_its_own() {
        assert_eq!(of_resource(true, "a", "r"), of_resource(true, "a", "other"));
        assert_eq!(of_type(true, "a", "t"), of_resource(true, "a", "r"));
        assert_ne!(of_resource(true, "a", "r"), of_resource(true, "b", "r"));
        assert_ne!(shared("a"), one_off("a"));
        assert_eq!(of_resource(false, "a", "r"), "pipeline:{pipeline_id}/r");
        assert_eq!(of_type(false, "a", "t"), "pipeline:{pipeline_id}/type:t");
    }

    #[test]
    fn every_scope_made_here_names_its_owner() {
        assert_eq!(owner(&shared("team-a")), Owner::Team("team-a"));
        assert_eq!(owner(&one_off("team_b")), Owner::Team("team_b"));
        assert_eq!(owner("pipeline:12/r"), Owner::Pipeline(12));
        assert_eq!(owner("pipeline:12/type:t"), Owner::Pipeline(12));
        for nobody in [LEGACY_GLOBAL, "pipeline:x/r", "pipeline:12", "a b", ""] {
            assert_eq!(owner(nobody), Owner::Nobody, "{nobody}");
        }
    }

    #[test]
    fn a_legacy_global_check_scope_is_read_as_the_teams_own() {
        assert_eq!(check_scope(Some("*"), "a"), "team:a");
        assert_eq!(check_scope(None, "a"), "a");
        assert_eq!(check_scope(Some("pipeline:3/r"), "a"), "pipeline:3/r");
    }
}
