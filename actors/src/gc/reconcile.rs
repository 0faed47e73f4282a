//! Judging one sweep report against a worker's rows, in memory: which rows
//! go, which are missing, which are seen again, and which handles the
//! worker is to destroy. Pure, so every rule is tested without a database.

use std::collections::HashSet;

use crate::db::{SweepRow, SweepWrites};
use gantry_wire::state::HandleState;

/// The verdict on one kind (containers or volumes) of one report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// What to write in the database.
    pub writes: SweepWrites,
    /// Handles the worker is to destroy.
    pub destroy: Vec<String>,
    /// How many of those the web node has no row for.
    pub unknown: usize,
}

/// Judges the `reported` handles of a report made at `epoch` against the
/// worker's `rows`. `new_incarnation`: the first report of a new
/// incarnation, whose absent rows go at once instead of being marked missing.
///
/// - a `destroying` or `failed` row: present, the worker destroys it;
///   absent (and created before `epoch`), the row goes;
/// - a `created` row created before `epoch` (`created_epoch < epoch`):
///   absent, it is missing (or goes, for a new incarnation); a row created
///   at or after `epoch` may have been made after the worker listed, and is
///   never judged absent;
/// - a row seen again is no longer missing;
/// - a `creating` row is never judged;
/// - a reported handle with no row is unknown: the worker destroys it.
pub(crate) fn judge(
    rows: &[SweepRow],
    reported: &[String],
    epoch: i64,
    new_incarnation: bool,
) -> Verdict {
    let present: HashSet<&str> = reported.iter().map(String::as_str).collect();
    let mut known: HashSet<&str> = HashSet::with_capacity(rows.len());
    let mut v = Verdict::default();
    for row in rows {
        known.insert(row.handle.as_str());
        let seen = present.contains(row.handle.as_str());
        let before = row.created_epoch < epoch;
        match row.state {
            HandleState::Creating => {}
            HandleState::Destroying | HandleState::Failed => match (seen, before) {
                (true, _) => v.destroy.push(row.handle.clone()),
                (false, true) => v.writes.delete.push(row.handle.clone()),
                (false, false) => {}
            },
            HandleState::Created => match (seen, before) {
                (true, _) if row.missing => v.writes.clear_missing.push(row.handle.clone()),
                (true, _) => {}
                (false, true) if new_incarnation => v.writes.delete.push(row.handle.clone()),
                (false, true) if !row.missing => v.writes.mark_missing.push(row.handle.clone()),
                (false, _) => {}
            },
        }
    }
    let mut unknown: Vec<String> = present
        .into_iter()
        .filter(|h| !known.contains(h))
        .map(str::to_string)
        .collect();
    unknown.sort();
    v.unknown = unknown.len();
    v.destroy.extend(unknown);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(handle: &str, state: HandleState, created_epoch: i64, missing: bool) -> SweepRow {
        SweepRow {
            handle: handle.into(),
            state,
            created_epoch,
            missing,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rows_created_at_or_after_the_epoch_are_never_judged_absent() {
        let rows = [
            row("old", HandleState::Created, 4, false),
            row("new", HandleState::Created, 5, false),
            row("newer", HandleState::Created, 6, false),
        ];
        let v = judge(&rows, &[], 5, false);
        assert_eq!(v.writes.mark_missing, names(&["old"]));
        let v = judge(&rows, &[], 5, true);
        assert_eq!(v.writes.delete, names(&["old"]));
        assert!(v.writes.mark_missing.is_empty());
    }

    #[test]
    fn creating_rows_are_never_judged_and_unknown_handles_are_destroyed() {
        let rows = [
            row("c", HandleState::Creating, 0, false),
            row("d", HandleState::Destroying, 1, false),
            row("gone", HandleState::Destroying, 1, false),
            row("f", HandleState::Failed, 0, false),
            row("m", HandleState::Created, 1, true),
            row("already", HandleState::Created, 1, true),
        ];
        let v = judge(&rows, &names(&["d", "m", "zz", "aa", "zz"]), 9, false);
        assert_eq!(v.destroy, names(&["d", "aa", "zz"]));
        assert_eq!(v.unknown, 2);
        assert_eq!(v.writes.delete, names(&["gone", "f"]));
        assert_eq!(v.writes.clear_missing, names(&["m"]));
        // Already missing: not marked again (its time stays).
        assert!(v.writes.mark_missing.is_empty());
    }
}
