//! The engine's state mapping: the one place where the stored states
//! (build statuses, worker states, container and volume states, artifact
//! kinds, which way a version went through a build) meet SQL.
//!
//! The types and their names are `gantry-wire`'s (`state.rs`), but
//! [`Direction`], which only the database knows. A statement binds a state
//! (`.bind(BuildStatus::Aborted.as_str())`) or composes a list made here
//! ([`sql_list`]); a stored name is read back with [`decode`], which
//! refuses a name it does not know. No other file spells a state in SQL:
//! `scripts/gates.py sql-states` fails the test script when one does.

use crate::error::EngineError;
use gantry_wire::state::{ArtifactKind, BuildStatus, HandleState, WorkerState};

/// Which way a version went through a build (`build_versions.direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Fetched by a `get` (an input).
    In,
    /// Made by a `put` (an output).
    Out,
}

impl Direction {
    /// As stored.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// A state stored by name.
pub(crate) trait Stored: Copy + 'static {
    /// What the state is of, for errors (`build status`).
    const WHAT: &'static str;
    /// Every value.
    const ALL: &'static [Self];
    /// The stored name.
    fn name(self) -> &'static str;
}

impl Stored for BuildStatus {
    const WHAT: &'static str = "build status";
    const ALL: &'static [Self] = &BuildStatus::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Stored for WorkerState {
    const WHAT: &'static str = "worker state";
    const ALL: &'static [Self] = &WorkerState::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Stored for HandleState {
    const WHAT: &'static str = "container or volume state";
    const ALL: &'static [Self] = &HandleState::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Stored for ArtifactKind {
    const WHAT: &'static str = "artifact kind";
    const ALL: &'static [Self] = &ArtifactKind::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Stored for Direction {
    const WHAT: &'static str = "version direction";
    const ALL: &'static [Self] = &[Direction::In, Direction::Out];
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// `values` as an SQL list of their stored names, `('a', 'b')`, for
/// conditions composed into larger statements.
pub(crate) fn sql_list<T: Stored>(values: &[T]) -> String {
    let names: Vec<String> = values.iter().map(|v| format!("'{}'", v.name())).collect();
    format!("({})", names.join(", "))
}

/// `value` as an SQL literal, `'a'`, for a condition composed into a
/// larger statement.
pub(crate) fn sql_literal<T: Stored>(value: T) -> String {
    format!("'{}'", value.name())
}

/// The state stored as `name`; an error naming it when no state has that
/// name (a row written by something else, or by a newer Gantry).
pub(crate) fn decode<T: Stored>(name: &str) -> Result<T, EngineError> {
    T::ALL
        .iter()
        .copied()
        .find(|v| v.name() == name)
        .ok_or_else(|| EngineError::Invalid(format!("stored {} {name:?} is unknown", T::WHAT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T: Stored + PartialEq + std::fmt::Debug>() {
        for v in T::ALL {
            assert_eq!(decode::<T>(v.name()).unwrap(), *v);
        }
        let e = decode::<T>("bogus").unwrap_err().to_string();
        assert!(e.contains(T::WHAT) && e.contains("\"bogus\""), "{e}");
    }

    #[test]
    fn every_stored_state_round_trips_and_an_unknown_name_is_an_error_naming_it() {
        round_trips::<BuildStatus>();
        round_trips::<WorkerState>();
        round_trips::<HandleState>();
        round_trips::<ArtifactKind>();
        round_trips::<Direction>();
    }

    #[tokio::test]
    async fn a_build_stored_with_an_unknown_status_is_an_error_naming_it_not_errored() {
        let (db, _dir) = crate::db::test_db().await;
        let id = db
            .builds()
            .create_build("main", &serde_json::json!({}), "node")
            .await
            .unwrap();
        sqlx::query("UPDATE builds SET status = $1 WHERE id = $2")
            .bind("exploded")
            .bind(id)
            .execute(db.pool())
            .await
            .unwrap();
        let e = db.builds().get_build(id).await.unwrap_err().to_string();
        assert!(e.contains("build status \"exploded\""), "{e}");
    }

    #[test]
    fn lists_are_made_from_the_enum() {
        assert_eq!(sql_list(&BuildStatus::UNFINISHED), "('pending', 'started')");
        assert_eq!(sql_literal(ArtifactKind::Image), "'image'");
    }
}
