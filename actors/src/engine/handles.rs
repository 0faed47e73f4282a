//! Containers and volumes through the engine: listing, counting, and
//! entering a container for an intercept session.

use super::Engine;
use crate::db::HandleKind;
use crate::error::EngineError;
use crate::intercept::InterceptGuard;
use crate::views::Handle;
use gantry_wire::state::HandleState;

impl Engine {
    /// One page of container or volume rows (of one team, when given), by
    /// handle: at most `limit` after the handle `after`.
    pub async fn list_handles_page(
        &self,
        kind: HandleKind,
        team: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Handle>, EngineError> {
        self.db
            .handles()
            .list_handles_page(kind, team, after, limit)
            .await
    }

    /// How many containers or volumes each worker has in each state.
    pub async fn count_handles(
        &self,
        kind: HandleKind,
    ) -> Result<Vec<(String, HandleState, i64)>, EngineError> {
        self.db.handles().count_handles(kind).await
    }

    /// A container by handle.
    pub async fn container(&self, handle: &str) -> Result<Option<Handle>, EngineError> {
        self.db
            .handles()
            .get_handle(HandleKind::Container, handle)
            .await
    }

    /// The latest container of a build's step.
    pub async fn step_container(
        &self,
        build: i64,
        step: &str,
    ) -> Result<Option<Handle>, EngineError> {
        self.db.handles().find_step_container(build, step).await
    }

    /// Opens an intercept session in a container (recorded in the
    /// database, so no web node's Collector destroys it while the guard
    /// lives); fails when the container is not `created`.
    pub async fn enter_container(&self, handle: &str) -> Result<InterceptGuard, EngineError> {
        self.intercepts.enter(handle).await
    }

    /// Records a container or volume (`creating`) before a worker is asked
    /// to create it, as garbage collection requires.
    pub async fn record_handle(
        &self,
        kind: HandleKind,
        handle: &str,
        worker: &str,
        owner: HandleOwner<'_>,
    ) -> Result<(), EngineError> {
        self.db
            .handles()
            .insert_handle(kind, handle, worker, owner.build, owner.step, owner.team)
            .await
    }

    /// Moves a container or volume row to `state`.
    pub async fn set_handle_state(
        &self,
        kind: HandleKind,
        handle: &str,
        state: HandleState,
    ) -> Result<(), EngineError> {
        self.db
            .handles()
            .set_handle_state(kind, handle, state)
            .await
    }

    /// Forgets a container or volume the worker no longer has.
    pub async fn forget_handle(&self, kind: HandleKind, handle: &str) -> Result<(), EngineError> {
        self.db.handles().delete_handle(kind, handle).await
    }
}

/// Who a container or volume row belongs to.
#[derive(Debug, Clone, Copy)]
pub struct HandleOwner<'a> {
    /// The team that may see it.
    pub team: &'a str,
    /// The build that uses it, if any.
    pub build: Option<i64>,
    /// The step of that build (containers).
    pub step: Option<&'a str>,
}
