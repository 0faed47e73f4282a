//! A worker known only by name: it holds nothing and creates nothing. The
//! Scheduler never calls its workers, so placement benchmarks and the
//! Scheduler's tests use this in-memory stand-in for thousands of workers.

use std::sync::Arc;

use async_trait::async_trait;

use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{Container, Volume, Worker, WorkerConnector, WorkerHandles};
use gantry_wire::spec::{ContainerSpec, VolumeSpec};
use gantry_wire::worker_info::WorkerRegistration;

/// A worker with a name and nothing behind it.
pub struct DetachedWorker(pub String);

impl DetachedWorker {
    fn refuse(&self) -> RuntimeError {
        RuntimeError::Worker {
            worker: self.0.clone(),
            status: 0,
            message: "a detached (simulated) worker cannot create anything".into(),
        }
    }
}

#[async_trait]
impl Worker for DetachedWorker {
    fn name(&self) -> &str {
        &self.0
    }
    async fn create_volume(&self, _: &VolumeSpec) -> Result<Arc<dyn Volume>, RuntimeError> {
        Err(self.refuse())
    }
    async fn lookup_volume(&self, _: &str) -> Result<Option<Arc<dyn Volume>>, RuntimeError> {
        Ok(None)
    }
    async fn destroy_volume(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn find_or_create_container(
        &self,
        _: &ContainerSpec,
    ) -> Result<Arc<dyn Container>, RuntimeError> {
        Err(self.refuse())
    }
    async fn lookup_container(&self, _: &str) -> Result<Option<Arc<dyn Container>>, RuntimeError> {
        Ok(None)
    }
    async fn destroy_container(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn list_handles(&self) -> Result<WorkerHandles, RuntimeError> {
        Ok(WorkerHandles::default())
    }
}

/// Connects every registered worker as a [`DetachedWorker`] of its name, so
/// an engine can run a simulated fleet.
pub struct DetachedConnector;

impl WorkerConnector for DetachedConnector {
    fn connect(&self, registration: &WorkerRegistration) -> Arc<dyn Worker> {
        Arc::new(DetachedWorker(registration.name.clone()))
    }
}
