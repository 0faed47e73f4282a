//! What the API answers about builds, containers and volumes, teams and
//! tokens: types made for the API. The database layer decodes builds,
//! handles and teams straight into them (its queries name each column);
//! a token has a row of its own, which holds its hash, and is answered as
//! [`Token`], which does not. A column added to a table (or a secret) never
//! reaches a response by accident.

use serde::{Deserialize, Serialize};

use crate::state::{BuildStatus, HandleState};

/// A build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Build {
    /// Build id.
    pub id: i64,
    /// Owning team.
    pub team: String,
    /// Status.
    pub status: BuildStatus,
    /// The plan (JSON), as given.
    pub plan: serde_json::Value,
    /// Worker its step ran on, once placed.
    pub worker: Option<String>,
    /// Exit status of its task, once it ran.
    pub exit_status: Option<i64>,
    /// Why it errored.
    pub error: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms, once finished.
    pub finished_at: Option<i64>,
}

/// A container or a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Handle {
    /// Handle on the worker.
    pub handle: String,
    /// Worker holding it.
    pub worker: String,
    /// Where it is in its life.
    pub state: HandleState,
    /// Per-worker sequence number of its create.
    pub sequence: i64,
    /// Build that uses it.
    pub build_id: Option<i64>,
    /// Step of that build (containers).
    pub step: Option<String>,
    /// Owning team.
    pub team: String,
    /// Who keeps it: `build N (step or role)`, `task cache (PATH)`,
    /// `image ARTIFACT`, or `none`.
    pub owner: String,
    /// Absent from its worker's last report (see the garbage collector).
    pub missing: bool,
}

/// A team.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Team {
    /// Its name.
    pub name: String,
    /// Unix ms of its creation (0 for `main`).
    pub created_at: i64,
}

/// A team token, never its secret nor its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Token {
    /// Its public id (the `<id>` of `gtk_<id>_<secret>`).
    pub id: String,
    /// The team it acts for.
    pub team: String,
    /// What it is for, as given when it was made.
    pub description: Option<String>,
    /// Unix ms of its creation.
    pub created_at: i64,
    /// Unix ms after which it is refused (`None`: never).
    pub expires_at: Option<i64>,
    /// Unix ms of its revocation, if revoked.
    pub revoked_at: Option<i64>,
}
