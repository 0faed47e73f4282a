//! What a step watches and tells while it runs: the build's events, its stop
//! signal (abort or timeout) and the state of the step's worker.

use std::sync::Arc;

use tokio::sync::{watch, Mutex};

use crate::build::StopReason;
use crate::error::EngineError;
use crate::events::{BuildEvent, EventSink};
use crate::registry::WorkerStates;
use crate::state::WorkerState;

/// A build's event sink, shared by the walker and its steps; events keep
/// their order.
#[derive(Clone)]
pub struct Events(Arc<Mutex<EventSink>>);

impl Events {
    /// Shares `sink`.
    pub fn new(sink: EventSink) -> Self {
        Events(Arc::new(Mutex::new(sink)))
    }

    /// Stores and publishes one event.
    pub async fn emit(&self, event: &BuildEvent) -> Result<(), EngineError> {
        self.0.lock().await.emit(event).await
    }
}

/// The build's stop signal (a user's abort or the step's timeout), as steps
/// see it.
#[derive(Clone)]
pub struct Stop(watch::Receiver<Option<StopReason>>);

impl Stop {
    /// Listens on the build's stop channel.
    pub fn new(rx: watch::Receiver<Option<StopReason>>) -> Self {
        Stop(rx)
    }

    /// Why the build is being stopped, if it is.
    pub fn reason(&self) -> Option<StopReason> {
        *self.0.borrow()
    }

    /// Resolves once the build is asked to stop (at once if it was already),
    /// or when nothing can ask any more.
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(Option::is_some).await;
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
