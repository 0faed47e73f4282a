//! `in_parallel`, as Concourse's `InParallelStep` (`atc/exec/in_parallel.go`
//! in concourse/concourse): its plans start in order, at most `limit` at
//! once, each as a place frees up. Without `fail_fast` all of them run and
//! it fails when any did not succeed; with it, the first that does not
//! succeed stops the running ones (their own `on_abort` and `ensure` hooks
//! run, as a cancellation runs them in Concourse) and the others never
//! start, and it fails. Errors of its plans make it errored; a stop of its
//! own scope makes it stopped.

use futures::StreamExt;
use tokio::sync::watch;

use crate::builds::outcome::Outcome;
use crate::builds::run::{BuildRun, Scope};
use crate::steps::{Plan, StopReason};

impl BuildRun {
    /// Runs `plans` at once, at most `limit` at a time.
    pub(super) async fn walk_parallel(
        &self,
        plans: &[Plan],
        limit: Option<usize>,
        fail_fast: bool,
        scope: &Scope,
    ) -> Outcome {
        // The group's own stop level, set when fail_fast stops the others.
        let (group, rx) = watch::channel(None);
        let stop = if fail_fast {
            scope.stop.within(rx)
        } else {
            scope.stop.clone()
        };
        let limit = limit.filter(|l| *l > 0).unwrap_or(plans.len()).max(1);
        let mut outcomes: Vec<Option<Outcome>> = vec![None; plans.len()];
        let mut running = futures::stream::iter(plans.iter().enumerate())
            .map(|(i, plan)| {
                let child = scope.child(i).under(stop.clone());
                async move { (i, self.walk(plan, child).await) }
            })
            .buffer_unordered(limit);
        while let Some((i, outcome)) = running.next().await {
            if fail_fast && !outcome.succeeded() {
                group.send_if_modified(|s| {
                    s.is_none()
                        .then(|| *s = Some(StopReason::FailFast))
                        .is_some()
                });
            }
            outcomes[i] = Some(outcome);
        }
        drop(running);
        if let Some(reason) = scope.stop.reason() {
            return Outcome::Stopped(reason);
        }
        let ran: Vec<Outcome> = outcomes.into_iter().flatten().collect();
        let errors: Vec<String> = ran
            .iter()
            .filter_map(|o| match o {
                Outcome::Errored(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        if !errors.is_empty() {
            return Outcome::Errored(errors.join("; "));
        }
        if ran.len() == plans.len() && ran.iter().all(Outcome::succeeded) {
            return Outcome::Succeeded;
        }
        // The first failure in the plan's order; only cancelled ones: failed.
        ran.into_iter()
            .find(Outcome::failed)
            .unwrap_or(Outcome::Failed {
                exit_status: None,
                message: None,
            })
    }
}
