//! Step hooks, nested as Concourse nests them
//! (`ensure(on_error(on_abort(on_failure(on_success(plan)))))`, see
//! `atc/exec/on_success.go`, `on_failure.go`, `on_abort.go`, `on_error.go`
//! and `ensure_step.go` in concourse/concourse):
//!
//! - `on_success` runs when the plan succeeded; its outcome is the whole's;
//! - `on_failure` runs when that failed (so also when `on_success` failed);
//!   the whole stays failed, unless the hook errors or is stopped;
//! - `on_abort` runs when that was cancelled (an abort, or `fail_fast`),
//!   not on a timeout; its outcome is ignored;
//! - `on_error` runs when that errored or a timeout stopped it; the whole
//!   stays errored (a hook's error is added to the message);
//! - `ensure` runs always, last; the whole succeeds only if both did.
//!
//! A hook that runs after a stop (`on_abort`, `ensure`, `on_error` after a
//! timeout) is not stopped by that stop: it runs under the enclosing scopes
//! that are not stopped, or, after the build itself was stopped, under the
//! build's second abort alone (Concourse runs them uninterruptible; here a
//! second `gantry abort` still ends them).

use std::sync::Arc;

use crate::builds::outcome::Outcome;
use crate::builds::run::{BuildRun, Scope};
use crate::steps::{Plan, Step};

impl BuildRun {
    /// A plan with its hooks.
    pub(super) async fn walk_hooks(
        &self,
        plan: &Plan,
        hooks: &crate::plan::Hooks<Arc<dyn Step>>,
        scope: &Scope,
    ) -> Outcome {
        let mut outcome = self.walk(plan, scope.child("plan")).await;
        if let (true, Some(hook)) = (outcome.succeeded(), &hooks.on_success) {
            outcome = self.walk(hook, scope.child("on_success")).await;
        }
        if let (true, Some(hook)) = (outcome.failed(), &hooks.on_failure) {
            let hooked = self.walk(hook, scope.child("on_failure")).await;
            if matches!(hooked, Outcome::Errored(_) | Outcome::Stopped(_)) {
                outcome = hooked;
            }
        }
        if let (true, Some(hook)) = (outcome.cancelled(), &hooks.on_abort) {
            self.walk(hook, self.after_stop(scope, "on_abort")).await;
        }
        if let (true, Some(hook)) = (outcome.errored_or_timed_out(), &hooks.on_error) {
            let hooked = self.walk(hook, self.after_stop(scope, "on_error")).await;
            if let Some(joined) = Outcome::join_errors(&outcome, &hooked) {
                outcome = joined;
            }
        }
        if let Some(hook) = &hooks.ensure {
            let hooked = self.walk(hook, self.after_stop(scope, "ensure")).await;
            if !outcome.stopped() {
                outcome = ensured(outcome, hooked);
            }
        }
        outcome
    }

    /// The scope of hook `role`, which may run after a stop: under the
    /// enclosing levels not stopped yet, or the build's second abort when
    /// the build itself is stopped.
    fn after_stop(&self, scope: &Scope, role: &str) -> Scope {
        let stop = scope
            .stop
            .unstopped()
            .unwrap_or_else(|| self.hooks_stop.clone());
        scope.child(role).under(stop)
    }
}

/// The outcome of a plan that was not stopped, and of its `ensure` hook.
fn ensured(plan: Outcome, hook: Outcome) -> Outcome {
    if hook.stopped() {
        // Stopped while the hook ran: the whole is.
        return hook;
    }
    if let Some(errored) = Outcome::join_errors(&plan, &hook) {
        return errored;
    }
    if !plan.succeeded() {
        return plan;
    }
    hook
}
