//! Waiting for a job build's turn (Concourse's job `serial`,
//! `serial_groups` and `max_in_flight`): before its plan starts, a build
//! waits while, for any of its keys, `max_in_flight` builds created before
//! it are unfinished. It says once in its log what it waits for, looks
//! again every [`TURN_CHECK`], and an abort ends the wait.

use std::time::Duration;

use crate::builds::outcome::Outcome;
use crate::builds::run::BuildRun;
use crate::db::{now_ms, TurnAhead};
use crate::steps::task_cache::GANTRY_STREAM;
use gantry_wire::events::BuildEvent;

/// How often a waiting build looks whether its turn has come.
const TURN_CHECK: Duration = Duration::from_secs(1);

impl BuildRun {
    /// Waits for the build's turn; `None` once it has come (at once for a
    /// build with no turns), or how the build ended while it waited
    /// (stopped, or errored when the database fails).
    pub(super) async fn wait_for_turn(&self) -> Option<Outcome> {
        // Only a job's builds take turns (one-off and check builds have
        // none): no query for the others.
        self.job.as_ref()?;
        let mut told = false;
        let mut stop = self.stop.clone();
        loop {
            if let Some(reason) = self.stop.reason() {
                return Some(Outcome::Stopped(reason));
            }
            let turns = match self.deps.db.builds().builds_ahead(self.id).await {
                Ok(t) => t,
                Err(e) => {
                    return Some(Outcome::Errored(format!(
                        "waiting for the build's turn: {e}"
                    )))
                }
            };
            // No key blocks: its turn has come.
            let blocking = turns.iter().find(|t| t.blocks())?;
            if !told {
                told = true;
                tracing::info!(build = self.id, key = %blocking.key, "waiting for the build's turn");
                self.emit_quietly(&BuildEvent::Log {
                    step: self.job.as_ref().map(|j| j.job.clone()).unwrap_or_default(),
                    stream: GANTRY_STREAM.to_string(),
                    data: format!("{}\n", waiting_message(blocking)),
                    time: now_ms(),
                })
                .await;
            }
            tokio::select! {
                () = stop.requested() => {}
                () = tokio::time::sleep(TURN_CHECK) => {}
            }
        }
    }
}

/// What a build waiting on `turn` says.
fn waiting_message(turn: &TurnAhead) -> String {
    let ahead: Vec<String> = turn.ahead.iter().map(|id| format!("#{id}")).collect();
    // TEAM/PIPELINE/KIND:NAME: team and pipeline names hold no `/`, a
    // serial group's name may.
    let (what, setting) = match turn
        .key
        .splitn(3, '/')
        .nth(2)
        .and_then(|k| k.strip_prefix("group:"))
    {
        Some(group) => (format!("serial group {group}"), "serial_groups"),
        None => ("its job".to_string(), "serial / max_in_flight"),
    };
    format!(
        "waiting for its turn: {} of {what} still running or waiting ({}), at most {} at once ({setting})",
        ahead.len(),
        ahead.join(", "),
        turn.max_in_flight
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_builds_ahead_and_the_setting() {
        let job = TurnAhead {
            key: "main/p/job:j".into(),
            max_in_flight: 1,
            ahead: vec![4],
        };
        assert_eq!(
            waiting_message(&job),
            "waiting for its turn: 1 of its job still running or waiting (#4), at most 1 at once (serial / max_in_flight)"
        );
        let group = TurnAhead {
            key: "main/p/group:deploy".into(),
            max_in_flight: 1,
            ahead: vec![2, 3],
        };
        assert!(waiting_message(&group).contains("serial group deploy"));
        assert!(waiting_message(&group).contains("(#2, #3)"));
        let slashed = TurnAhead {
            key: "main/p/group:deploy/prod".into(),
            ..group
        };
        let said = waiting_message(&slashed);
        assert!(
            said.contains("of serial group deploy/prod still") && said.ends_with("(serial_groups)"),
            "{said}"
        );
    }
}
