//! Intercept sessions (`gantry hijack`): which containers have a session
//! open, so that nothing destroys a container while someone works in it.
//!
//! A session [`Intercepts::enter`]s a container and holds the returned guard
//! until it ends. Whoever is about to destroy the container first calls
//! [`Intercepts::close`], which waits until the last session has ended (woken
//! by that session's guard, no polling, no timeout) and then shuts the door:
//! from then on `enter` fails, so a session can never start in a container
//! that is being destroyed. [`Intercepts::forget`] drops the record after
//! the destroy.
//!
//! This is in-memory state of one web node: sessions and builds of the same
//! web node see each other.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Notify;

use crate::error::EngineError;

/// What is known of one container.
#[derive(Default)]
struct Slot {
    /// Sessions open in it.
    sessions: usize,
    /// Set by [`Intercepts::close`]: no new session may start.
    closing: bool,
    /// Woken when the last session ends.
    idle: Arc<Notify>,
}

/// The open intercept sessions of every container, by handle.
#[derive(Clone, Default)]
pub struct Intercepts {
    /// Containers with open sessions or being closed.
    slots: Arc<DashMap<String, Slot>>,
}

/// An open session; dropping it ends the session.
pub struct InterceptGuard {
    /// Where the session is counted.
    slots: Arc<DashMap<String, Slot>>,
    /// The container's handle.
    handle: String,
}

impl Intercepts {
    /// Opens a session in container `handle`; fails when the container is
    /// being destroyed.
    pub fn enter(&self, handle: &str) -> Result<InterceptGuard, EngineError> {
        let mut slot = self.slots.entry(handle.to_string()).or_default();
        if slot.closing {
            return Err(EngineError::Invalid(format!(
                "container {handle} is being destroyed; it cannot be intercepted any more"
            )));
        }
        slot.sessions += 1;
        Ok(InterceptGuard {
            slots: self.slots.clone(),
            handle: handle.to_string(),
        })
    }

    /// How many sessions are open in container `handle`.
    pub fn open_sessions(&self, handle: &str) -> usize {
        self.slots.get(handle).map_or(0, |s| s.sessions)
    }

    /// Waits until no session is open in container `handle`, then refuses
    /// new ones. Returns whether it had to wait.
    pub async fn close(&self, handle: &str) -> bool {
        let mut waited = false;
        loop {
            let idle = {
                let mut slot = self.slots.entry(handle.to_string()).or_default();
                if slot.sessions == 0 {
                    slot.closing = true;
                    return waited;
                }
                slot.idle.clone()
            };
            waited = true;
            let notified = idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking again, so the last session's wake-up
            // cannot fall between the look and the wait.
            notified.as_mut().enable();
            if self.open_sessions(handle) == 0 {
                continue;
            }
            notified.await;
        }
    }

    /// Refuses new sessions in container `handle` if none is open, at once
    /// (under the same lock as [`Intercepts::enter`]); answers whether it
    /// did. The garbage collector marks a container `destroying` only after
    /// this succeeded.
    pub fn try_close(&self, handle: &str) -> bool {
        let mut slot = self.slots.entry(handle.to_string()).or_default();
        if slot.sessions > 0 {
            return false;
        }
        slot.closing = true;
        true
    }

    /// Forgets container `handle` once it is destroyed.
    pub fn forget(&self, handle: &str) {
        self.slots.remove(handle);
    }
}

impl Drop for InterceptGuard {
    fn drop(&mut self) {
        let mut remove = false;
        if let Some(mut slot) = self.slots.get_mut(&self.handle) {
            slot.sessions = slot.sessions.saturating_sub(1);
            if slot.sessions == 0 {
                slot.idle.notify_waiters();
                remove = !slot.closing;
            }
        }
        if remove {
            self.slots
                .remove_if(&self.handle, |_, s| s.sessions == 0 && !s.closing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn closing_waits_for_every_open_session_then_refuses_new_ones() {
        let intercepts = Intercepts::default();
        let first = intercepts.enter("c").unwrap();
        let second = intercepts.enter("c").unwrap();
        assert_eq!(intercepts.open_sessions("c"), 2);

        let closer = tokio::spawn({
            let intercepts = intercepts.clone();
            async move { intercepts.close("c").await }
        });
        drop(first);
        // One session is still open: the closer must still be waiting.
        tokio::task::yield_now().await;
        assert!(!closer.is_finished());
        drop(second);
        let waited = tokio::time::timeout(Duration::from_secs(5), closer)
            .await
            .expect("close returns once the last session ended")
            .unwrap();
        assert!(waited);
        assert!(intercepts.enter("c").is_err());
        intercepts.forget("c");
        assert!(intercepts.enter("c").is_ok());
    }

    #[tokio::test]
    async fn a_container_without_sessions_closes_at_once_and_idle_slots_go_away() {
        let intercepts = Intercepts::default();
        drop(intercepts.enter("a").unwrap());
        assert!(intercepts.slots.is_empty());
        assert!(!intercepts.close("b").await);
        assert!(intercepts.enter("b").is_err());
        assert_eq!(intercepts.open_sessions("b"), 0);
    }

    #[test]
    fn try_close_refuses_new_sessions_only_when_none_is_open() {
        let intercepts = Intercepts::default();
        let guard = intercepts.enter("c").unwrap();
        assert!(!intercepts.try_close("c"), "a session is open");
        assert!(intercepts.enter("c").is_ok(), "still open to sessions");
        drop(guard);
        assert!(intercepts.try_close("c"));
        assert!(intercepts.enter("c").is_err(), "closed to new sessions");
    }
}
