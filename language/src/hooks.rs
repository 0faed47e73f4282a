//! Concourse's step hooks, generic over what a hook is: a step of a
//! pipeline file (`Hooks<pipeline::Step>`) or a plan the walker runs
//! (`Hooks<plan::Plan<S>>`). The walker nests them as Concourse does:
//! `ensure(on_error(on_abort(on_failure(on_success(plan)))))`.

use serde::{Deserialize, Serialize};

/// The hooks of a step or a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hooks<T> {
    /// Runs when the step succeeded; its result becomes the whole's.
    pub on_success: Option<Box<T>>,
    /// Runs when the step (or its `on_success` hook) failed (a task exited
    /// non-zero); the whole stays failed, or errors if the hook errors.
    pub on_failure: Option<Box<T>>,
    /// Runs when the build was aborted during the step (not on a timeout),
    /// not stopped by that abort; its result does not change the whole's.
    pub on_abort: Option<Box<T>>,
    /// Runs when the step errored (could not run: no worker, bad config, or
    /// an enclosing timeout stopped it); the whole stays errored.
    pub on_error: Option<Box<T>>,
    /// Runs always, last, not stopped by a stop that came before it; the
    /// whole succeeds only when the step and it did.
    pub ensure: Option<Box<T>>,
}

impl<T> Default for Hooks<T> {
    fn default() -> Self {
        Hooks {
            on_success: None,
            on_failure: None,
            on_abort: None,
            on_error: None,
            ensure: None,
        }
    }
}

impl<T> Hooks<T> {
    /// Whether no hook is set.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The hooks that are set, with their keys, in the order they may run.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &T)> {
        [
            ("on_success", &self.on_success),
            ("on_failure", &self.on_failure),
            ("on_abort", &self.on_abort),
            ("on_error", &self.on_error),
            ("ensure", &self.ensure),
        ]
        .into_iter()
        .filter_map(|(key, hook)| Some((key, hook.as_deref()?)))
    }

    /// The hooks that are set, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        [
            &mut self.on_success,
            &mut self.on_failure,
            &mut self.on_abort,
            &mut self.on_error,
            &mut self.ensure,
        ]
        .into_iter()
        .filter_map(|hook| hook.as_deref_mut())
    }

    /// The same hooks, each turned into a `U` by `f`; the first error ends it.
    pub fn try_map<U, E>(&self, mut f: impl FnMut(&T) -> Result<U, E>) -> Result<Hooks<U>, E> {
        let mut one = |h: &Option<Box<T>>| h.as_deref().map(|t| f(t).map(Box::new)).transpose();
        Ok(Hooks {
            on_success: one(&self.on_success)?,
            on_failure: one(&self.on_failure)?,
            on_abort: one(&self.on_abort)?,
            on_error: one(&self.on_error)?,
            ensure: one(&self.ensure)?,
        })
    }

    /// The same hooks, each turned into a `U` by `f`.
    pub fn into_map<U>(self, f: impl Fn(T) -> U) -> Hooks<U> {
        let one = |h: Option<Box<T>>| h.map(|t| Box::new(f(*t)));
        Hooks {
            on_success: one(self.on_success),
            on_failure: one(self.on_failure),
            on_abort: one(self.on_abort),
            on_error: one(self.on_error),
            ensure: one(self.ensure),
        }
    }

    /// The same hooks, each turned by `f`; the first error `f` answers.
    pub fn try_into_map<U, E>(self, f: impl Fn(T) -> Result<U, E>) -> Result<Hooks<U>, E> {
        let one = |h: Option<Box<T>>| h.map(|t| f(*t).map(Box::new)).transpose();
        Ok(Hooks {
            on_success: one(self.on_success)?,
            on_failure: one(self.on_failure)?,
            on_abort: one(self.on_abort)?,
            on_error: one(self.on_error)?,
            ensure: one(self.ensure)?,
        })
    }
}
