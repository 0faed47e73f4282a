//! The plan walker: runs a build's plan with Concourse's semantics
//! (`atc/exec` in concourse/concourse: `do`, `try_step.go`,
//! `retry_step.go`, `timeout_step.go`; `in_parallel` in `parallel.rs`,
//! hooks in `hooks.rs`). Each step is placed on a worker and run there
//! through the steps module ([`crate::steps::Step`]), so adding a kind of
//! step changes nothing here. Before a step is placed it is prepared
//! ([`Step::prepare`]): a step defined with build-local vars becomes the
//! plan it stands for only then, once earlier steps have set the vars.
//!
//! Every node runs in a [`Scope`]: its position in the tree, the attempt it
//! is part of, and its stop signal — the build's, plus one level for each
//! enclosing `timeout` and `fail_fast` group, so that stopping a subtree
//! stops only its steps. A node whose scope is stopped before it starts
//! does not start. Each node's start and end are events (`node_started`,
//! `node_finished`) with its position and attempt.
//!
//! A build taken over by another web node (or by this one after a restart)
//! walks its plan again with the [`Journal`] its events make: a node that
//! ended is walked *quietly* (nothing runs, no event is stored; a step only
//! restores what it left in the build, see [`Step::restore`]) and answers
//! the outcome it had; a step that began and did not end is taken over
//! where it is (`resume.rs`); the rest runs as in any build.
//!
//! [`Journal`]: crate::builds::journal::Journal

use std::sync::Arc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use tokio::sync::watch;
use tracing::Instrument as _;

use crate::builds::outcome::{duration, Outcome};
use crate::builds::run::{BuildRun, Scope};
use crate::steps::{Plan, Prepared, Step, StopReason};
use gantry_wire::events::BuildEvent;

/// How many times one step of the plan is prepared at most before it runs.
const MAX_PREPARES: usize = 8;

impl BuildRun {
    /// Starts the build, once its turn has come (a job's `serial`,
    /// `serial_groups`, `max_in_flight`), and walks its plan; returns how
    /// the plan ended.
    pub(super) async fn run(&self, plan: &Plan) -> Outcome {
        if self.journal.began() {
            // Taken over: its turn had come, its start and plan are told.
            tracing::info!(build = self.id, "resuming a build where its plan was");
        } else {
            if let Some(ended) = self.wait_for_turn().await {
                return ended;
            }
            self.emit_quietly(&crate::events::started_event(self.trace.as_ref()))
                .await;
            self.emit_quietly(&BuildEvent::Plan {
                tree: plan.describe("0"),
                time: crate::db::now_ms(),
            })
            .await;
        }
        self.walk(plan, Scope::root(self.stop.clone())).await
    }

    /// Runs `plan` in `scope`, between its node events; a node whose scope
    /// is already stopped does not start. A node that ended before the
    /// build was taken over is walked quietly and answers how it ended.
    pub(super) fn walk<'a>(&'a self, plan: &'a Plan, scope: Scope) -> LocalBoxFuture<'a, Outcome> {
        async move {
            let origin = scope.origin();
            if let Some(outcome) = self.journal.outcome(&origin) {
                self.replay(plan, &scope.replaying()).await;
                return outcome;
            }
            if scope.replaying {
                // It never began inside a node that ended (a sibling
                // stopped it first): it does not begin now.
                return Outcome::Stopped(StopReason::FailFast);
            }
            let began = self.journal.began_at(&origin).is_some();
            // A node that began before a takeover is walked even when
            // stopped: what it started on a worker is stopped there.
            if let (Some(reason), false) = (scope.stop.reason(), began) {
                return Outcome::Stopped(reason);
            }
            let step = match plan {
                Plan::Step(step) => Some(step.name().to_string()),
                _ => None,
            };
            if !began {
                self.emit_quietly(&BuildEvent::NodeStarted {
                    origin: origin.clone(),
                    step: step.clone(),
                    time: crate::db::now_ms(),
                })
                .await;
            }
            let outcome = self.walk_node(plan, &scope).await;
            self.emit_quietly(&BuildEvent::NodeFinished {
                origin: scope.origin(),
                step,
                outcome: outcome.event(),
                exit_status: outcome.exit_status().filter(|_| !outcome.succeeded()),
                message: outcome.message(),
                time: crate::db::now_ms(),
            })
            .await;
            outcome
        }
        .boxed_local()
    }

    /// Runs the node `plan` (its own kind's rules) in `scope`.
    async fn walk_node(&self, plan: &Plan, scope: &Scope) -> Outcome {
        match plan {
            Plan::Step(s) => {
                let span = tracing::info_span!(
                    "step",
                    otel.name = %format!("step {}", s.name()),
                    step.name = s.name(),
                    step.node = %scope.origin().key(),
                );
                self.walk_step(s, scope).instrument(span).await
            }
            Plan::Do(plans) => self.walk_do(plans, scope).await,
            Plan::InParallel {
                plans,
                limit,
                fail_fast,
            } => self.walk_parallel(plans, *limit, *fail_fast, scope).await,
            Plan::Try(plan) => self.walk_try(plan, scope).await,
            Plan::Hooks { plan, hooks } => self.walk_hooks(plan, hooks, scope).await,
            Plan::Attempts { plan, attempts } => self.walk_attempts(plan, *attempts, scope).await,
            Plan::Timeout { plan, duration } => self.walk_timeout(plan, *duration, scope).await,
        }
    }

    /// Walks a node that ended before the build was taken over, quietly:
    /// its children as they ran, each answering how it ended, and each step
    /// restoring what it left in the build (the vars `load_var` set, the
    /// plan a deferred step became), so later nodes see the build as it was.
    async fn replay(&self, plan: &Plan, scope: &Scope) {
        match plan {
            Plan::Step(step) => self.replay_step(step, scope).await,
            // No timer: whatever a timeout did is in its outcome.
            Plan::Timeout { plan, .. } => {
                self.walk(plan, scope.child(0)).await;
            }
            _ => {
                self.walk_node(plan, scope).await;
            }
        }
    }

    /// Restores what a step that ended left in the build; a step that
    /// became a plan when it ran walks that plan again, quietly, where it
    /// ran (a step in the step's own place, a plan under child `0`).
    async fn replay_step(&self, step: &Arc<dyn Step>, scope: &Scope) {
        let mut step = step.clone();
        for _ in 0..MAX_PREPARES {
            match step.restore(&self.build_scope(&scope.stop)).await {
                Ok(Some(Plan::Step(next))) => step = next,
                Ok(Some(plan)) => {
                    self.walk(&plan, scope.child(0)).await;
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(
                        build = self.id,
                        step = step.name(),
                        "restoring what a step left in its build: {e}"
                    );
                    return;
                }
            }
        }
    }

    /// A step: prepared first ([`Step::prepare`], before placement), then
    /// what it gave placed and run, or walked in its place (a plan, under
    /// child `0` of the step's node), or its end taken as it is.
    async fn walk_step(&self, step: &Arc<dyn Step>, scope: &Scope) -> Outcome {
        let mut step = step.clone();
        // A prepared step that gives a step again is prepared again (a
        // deferred `file:` task gives the task read from its file); a
        // bound keeps a step that keeps deferring from looping.
        for _ in 0..MAX_PREPARES {
            let prepared = step.prepare(&self.build_scope(&scope.stop)).await;
            match prepared {
                Err(e) => return Outcome::of_step(Err(e), &scope.stop),
                Ok(Prepared::Ended(end)) => return Outcome::of_step(Ok(end), &scope.stop),
                Ok(Prepared::Itself) => {
                    let result = match self.journal.began_at(&scope.origin()) {
                        // It began before the build was taken over.
                        Some(began) => self.resume_step(step.as_ref(), scope, began).await,
                        None => self.run_step(step.as_ref(), scope).await,
                    };
                    return Outcome::of_step(result, &scope.stop);
                }
                Ok(Prepared::Plan(Plan::Step(next))) => step = next,
                Ok(Prepared::Plan(plan)) => return self.walk(&plan, scope.child(0)).await,
            }
        }
        Outcome::Errored(format!(
            "step {:?} was still not ready to run after being prepared {MAX_PREPARES} times",
            step.name()
        ))
    }

    /// `do`: in order; the first that does not succeed ends it.
    async fn walk_do(&self, plans: &[Plan], scope: &Scope) -> Outcome {
        for (i, plan) in plans.iter().enumerate() {
            let outcome = self.walk(plan, scope.child(i)).await;
            if !outcome.succeeded() {
                return outcome;
            }
        }
        Outcome::Succeeded
    }

    /// `try`: succeeds whatever its plan did, except that a cancellation (an
    /// abort) goes on; a timeout is swallowed (Concourse's `TryStep`).
    async fn walk_try(&self, plan: &Plan, scope: &Scope) -> Outcome {
        let outcome = self.walk(plan, scope.child(0)).await;
        if outcome.cancelled() {
            outcome
        } else {
            Outcome::Succeeded
        }
    }

    /// `attempts`: runs its plan again after a failure or an error, until
    /// it succeeds or `attempts` runs were made; the last run's outcome is
    /// the whole's. A stop of its scope ends it (Concourse's `RetryStep`).
    async fn walk_attempts(&self, plan: &Plan, attempts: u32, scope: &Scope) -> Outcome {
        let attempts = attempts.max(1);
        let mut attempt = 1;
        loop {
            let mut child = scope.child(0);
            child.attempts.push(attempt);
            let outcome = self.walk(plan, child).await;
            if let Some(reason) = scope.stop.reason() {
                return Outcome::Stopped(reason);
            }
            if outcome.succeeded() || attempt == attempts {
                return outcome;
            }
            attempt += 1;
        }
    }

    /// `timeout`: its plan under one more stop level, which a timer sets
    /// after `limit`; the steps are stopped (SIGTERM, then SIGKILL after the
    /// grace) and the node fails with `timed out after ...` — failed, not
    /// errored, as Concourse's `TimeoutStep` and task timeouts do, with an
    /// error event naming the timeout.
    async fn walk_timeout(&self, plan: &Plan, limit: Duration, scope: &Scope) -> Outcome {
        let (timer, rx) = watch::channel(None);
        let child = scope.child(0).under(scope.stop.within(rx));
        // Taken over: the time it ran before counts.
        let spent = self.journal.began_at(&scope.origin()).map_or(0, |b| {
            crate::db::now_ms().saturating_sub(b.time).max(0) as u64
        });
        let left = limit.saturating_sub(Duration::from_millis(spent));
        let walk = self.walk(plan, child);
        tokio::pin!(walk);
        let outcome = tokio::select! {
            outcome = &mut walk => outcome,
            () = tokio::time::sleep(left) => {
                timer.send_replace(Some(StopReason::Timeout(limit)));
                walk.await
            }
        };
        let timed_out = timer.borrow().is_some() && scope.stop.reason().is_none();
        if timed_out && matches!(outcome, Outcome::Stopped(StopReason::Timeout(_))) {
            let message = format!("timed out after {}", duration(limit));
            self.emit_quietly(&BuildEvent::Error {
                message: message.clone(),
                time: crate::db::now_ms(),
            })
            .await;
            return Outcome::Failed {
                exit_status: None,
                message: Some(message),
            };
        }
        outcome
    }
}
