//! What a step watches and tells while it runs: the build's events, its stop
//! signal (abort or timeout) and the state of the step's worker.

use std::time::Duration;

use tokio::sync::watch;

use crate::error::EngineError;
use crate::registry::WorkerStates;
use gantry_wire::state::WorkerState;

pub(crate) use crate::events::Events;

/// Why a build, or a scope of its plan, is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A user aborted it.
    Abort,
    /// It ran past its timeout: the build's, or a `timeout` in its plan.
    Timeout(Duration),
    /// A sibling in an `in_parallel` with `fail_fast` did not succeed.
    FailFast,
}

/// The stop signal a step sees: the build's (a user's abort or the build's
/// timeout) and those of the scopes of the plan it runs in (an enclosing
/// `timeout`, an `in_parallel` with `fail_fast`), outermost first. Any of
/// them stops the step.
#[derive(Clone)]
pub struct Stop(Vec<watch::Receiver<Option<StopReason>>>);

impl Stop {
    /// Listens on the build's stop channel.
    pub fn new(rx: watch::Receiver<Option<StopReason>>) -> Self {
        Stop(vec![rx])
    }

    /// This signal, and also `rx`: the stop of a scope nested in this one.
    pub fn within(&self, rx: watch::Receiver<Option<StopReason>>) -> Self {
        let mut levels = self.0.clone();
        levels.push(rx);
        Stop(levels)
    }

    /// The enclosing scopes that are not stopped yet: the levels before the
    /// first one that is (all of them when none is); `None` when even the
    /// outermost is stopped. Hooks that run after a stop (`ensure`,
    /// `on_abort`) listen on this, so the stop that already happened does not
    /// stop them at once.
    pub fn unstopped(&self) -> Option<Self> {
        let n = self.0.iter().take_while(|rx| rx.borrow().is_none()).count();
        (n > 0).then(|| Stop(self.0[..n].to_vec()))
    }

    /// Why the step is being stopped, if it is: the outermost reason set.
    pub fn reason(&self) -> Option<StopReason> {
        self.0.iter().find_map(|rx| *rx.borrow())
    }

    /// Resolves once any level asks to stop (at once if one did already), or
    /// when nothing can ask any more.
    pub async fn requested(&mut self) {
        let mut waits: Vec<_> = self
            .0
            .iter_mut()
            .map(|rx| Box::pin(async move { rx.wait_for(Option::is_some).await.is_ok() }))
            .collect();
        while !waits.is_empty() {
            let (asked, _, rest) = futures::future::select_all(waits).await;
            if asked {
                return;
            }
            waits = rest;
        }
    }
}

/// Watches the state of the worker a step runs on.
#[derive(Clone)]
pub struct WorkerWatch {
    /// The worker's name, for errors.
    worker: String,
    /// Its state, as the Registry publishes it.
    state: watch::Receiver<WorkerState>,
}

impl WorkerWatch {
    /// Starts watching worker `name`; `None` when it is not registered.
    pub fn subscribe(states: &WorkerStates, name: &str) -> Option<Self> {
        Some(WorkerWatch {
            worker: name.to_string(),
            state: states.get(name)?.subscribe(),
        })
    }

    /// Resolves when the worker is stalled (now or later) or removed, with
    /// the error that ends the step; `phase` says what the step was doing.
    pub async fn lost(&mut self, phase: &str) -> EngineError {
        let stalled = self
            .state
            .wait_for(|s| *s == WorkerState::Stalled)
            .await
            .is_ok();
        self.lost_error(stalled, phase)
    }

    /// Like [`Self::lost`], but only for a change of state after the last one
    /// this watch saw: a worker already stalled when the watch began is not
    /// lost until its state changes again.
    pub async fn becomes_lost(&mut self, phase: &str) -> EngineError {
        loop {
            if self.state.changed().await.is_err() {
                return self.lost_error(false, phase);
            }
            if *self.state.borrow() == WorkerState::Stalled {
                return self.lost_error(true, phase);
            }
        }
    }

    fn lost_error(&self, stalled: bool, phase: &str) -> EngineError {
        let reason = if stalled {
            format!("stalled (no heartbeat within its TTL) while {phase}")
        } else {
            format!("was removed while {phase}")
        };
        EngineError::WorkerLost {
            worker: self.worker.clone(),
            reason,
        }
    }
}
