//! A team's roles, as Concourse names them (`atc/api/accessor`): each
//! role can do what the ones below it can, and more.
//!
//! - `viewer` reads the team's pipelines, builds, resources and workers;
//! - `pipeline-operator` also triggers, aborts and re-runs builds, pauses
//!   jobs and pipelines, pins, checks and disables versions;
//! - `member` also sets and removes pipelines, runs one-off builds, hijacks
//!   containers and manages the team's secrets and workers;
//! - `owner` also sets and destroys the team and manages its tokens.
//!
//! Which operation needs which role is the web node's action map
//! (`src/web/rbac.rs`), which an operator can change.

use std::fmt;
use std::str::FromStr;

/// A role in a team, ordered from the least to the most it may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads the team's things.
    Viewer,
    /// Operates the team's pipelines (trigger, abort, pause, pin, check).
    PipelineOperator,
    /// Changes the team's pipelines and runs its one-off builds.
    Member,
    /// Owns the team: its settings and tokens.
    Owner,
}

impl Role {
    /// Every role, from the least to the most.
    pub const ALL: [Role; 4] = [
        Role::Viewer,
        Role::PipelineOperator,
        Role::Member,
        Role::Owner,
    ];

    /// Its name, as the API, the CLI and the config spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::PipelineOperator => "pipeline-operator",
            Role::Member => "member",
            Role::Owner => "owner",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("role {s:?}: give one of owner, member, pipeline-operator, viewer")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Role;

    #[test]
    fn roles_order_parse_and_print_as_concourse_names_them() {
        assert!(Role::Viewer < Role::PipelineOperator);
        assert!(Role::PipelineOperator < Role::Member);
        assert!(Role::Member < Role::Owner);
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>().unwrap(), r);
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{r}\""));
        }
        let err = "admin".parse::<Role>().unwrap_err();
        assert!(err.contains("pipeline-operator"), "{err}");
    }
}
