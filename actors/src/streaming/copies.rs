//! One copy of an artifact per worker: a step that needs an artifact held
//! on another worker gets a copy on its own worker, owned by the build; the
//! same artifact going to the same worker is streamed once, and steps that
//! need it meanwhile wait for that transfer.

use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument as _;

use actix::Addr;
use futures::FutureExt;

use crate::db::HandleKind;
use crate::error::EngineError;
use crate::events::Events;
use crate::scheduler::{ArtifactLocality, Scheduler};
use gantry_wire::events::BuildEvent;
use gantry_wire::runtime::Worker;
use gantry_wire::spec::{VolumeSpec, VolumeStrategy};
use gantry_wire::state::{HandleState, WorkerState};

use super::limiter::Direction;
use super::transfer::{OnWait, Source, StreamTransfer, TransferJob};
use super::Streams;

/// A step's need of an artifact of its build on its worker.
#[derive(Clone)]
pub struct CopyRequest {
    /// The build.
    pub build: i64,
    /// The build's team.
    pub team: String,
    /// The step asking (named in the events).
    pub step: String,
    /// The artifact's name in the build.
    pub name: String,
    /// The artifact's id.
    pub artifact: String,
    /// The step's worker, where the copy must be.
    pub worker: Arc<dyn Worker>,
    /// The build's events.
    pub events: Events,
    /// Told where copies are, for volume locality.
    pub scheduler: Addr<Scheduler>,
}

impl Streams {
    /// The handle of a volume on the request's worker holding its
    /// artifact: one the build has there already, or a copy streamed from
    /// a worker holding it (once, however many steps ask at the same time).
    pub async fn copy_to(&self, req: CopyRequest) -> Result<String, EngineError> {
        let here = req.worker.name().to_string();
        let copies = self
            .db()
            .handles()
            .artifact_copies(&req.artifact, req.build)
            .await?;
        if let Some(copy) = copies.iter().find(|c| c.worker == here) {
            return Ok(copy.volume.clone());
        }
        let key = (req.artifact.clone(), here);
        let pending = self
            .inner
            .pending
            .entry(key.clone())
            .or_insert_with(|| {
                let streams = self.clone();
                // In the span of the step that asked first, whichever
                // waiter polls it.
                async move { streams.make_copy(req).await.map_err(|e| e.to_string()) }
                    .instrument(tracing::Span::current())
                    .boxed()
                    .shared()
            })
            .clone();
        let made = pending.clone().await;
        self.inner
            .pending
            .remove_if(&key, |_, p| p.ptr_eq(&pending));
        made.map_err(EngineError::Invalid)
    }

    /// Streams the artifact from a worker holding it into a new volume of
    /// the build on the request's worker. A failed transfer leaves its
    /// volume `destroying`: the worker's sweeper destroys it.
    async fn make_copy(&self, req: CopyRequest) -> Result<String, EngineError> {
        let db = self.db();
        let to = req.worker.name().to_string();
        // Looked up again under the pending entry: a transfer that ended
        // between the caller's look and its entry left a copy here.
        let copies = db
            .handles()
            .artifact_copies(&req.artifact, req.build)
            .await?;
        if let Some(copy) = copies.iter().find(|c| c.worker == to) {
            return Ok(copy.volume.clone());
        }
        let source = self.source_of(&req, copies).await?;
        let handle = uuid::Uuid::new_v4().to_string();
        let role = format!("artifact:{}", req.name);
        db.handles()
            .insert_handle(
                HandleKind::Volume,
                &handle,
                &to,
                Some(req.build),
                Some(&role),
                &req.team,
            )
            .await?;
        db.handles()
            .set_volume_artifact(&handle, &req.artifact)
            .await?;
        let spec = VolumeSpec {
            handle: handle.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: BTreeMap::from([
                ("build".to_string(), req.build.to_string()),
                ("artifact".to_string(), req.artifact.clone()),
            ]),
        };
        let dest = match req.worker.create_volume(&spec).await {
            Ok(v) => v,
            Err(e) => {
                let _ = db
                    .handles()
                    .delete_handle(HandleKind::Volume, &handle)
                    .await;
                return Err(e.into());
            }
        };
        let what = format!("{} (artifact {})", req.name, req.artifact);
        let job = TransferJob {
            what,
            source: source.clone(),
            to: to.clone(),
            dest,
            on_wait: waiting_event(self, &req.events, &req.step, &req.name),
        };
        match StreamTransfer::run(self.clone(), job).await {
            Ok(done) => {
                db.handles()
                    .set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
                    .await?;
                req.scheduler.do_send(ArtifactLocality {
                    artifact: req.artifact.clone(),
                    worker: to.clone(),
                    present: true,
                });
                req.events
                    .emit(&BuildEvent::Transfer {
                        step: req.step.clone(),
                        name: req.name.clone(),
                        artifact: req.artifact.clone(),
                        from: source.name().to_string(),
                        to,
                        path: done.path.as_str().to_string(),
                        encoding: self.config().encoding.as_str().to_string(),
                        bytes: done.bytes,
                        seconds: done.seconds,
                        time: crate::db::now_ms(),
                    })
                    .await?;
                Ok(handle)
            }
            Err(e) => {
                // Half written: no `created` row points at it, and the
                // worker's sweeper destroys it.
                let _ = db
                    .handles()
                    .set_handle_state(HandleKind::Volume, &handle, HandleState::Destroying)
                    .await;
                Err(e)
            }
        }
    }

    /// A running worker among `copies` (the request's artifact's); an error
    /// naming the artifact and its holders when none is running.
    async fn source_of(
        &self,
        req: &CopyRequest,
        copies: Vec<crate::db::ArtifactCopy>,
    ) -> Result<Source, EngineError> {
        let mut holders = Vec::new();
        for copy in copies {
            match self.db().workers().get_worker(&copy.worker).await? {
                Some(row) if row.state == WorkerState::Running => {
                    return Ok(Source::Worker {
                        registration: Box::new(row.registration),
                        volume: copy.volume,
                    })
                }
                Some(row) => holders.push(format!("{} ({})", copy.worker, row.state.as_str())),
                None => holders.push(format!("{} (gone)", copy.worker)),
            }
        }
        if holders.is_empty() {
            return Err(EngineError::Invalid(format!(
                "artifact {:?} ({}) is held by no worker any more",
                req.name, req.artifact
            )));
        }
        Err(EngineError::Invalid(format!(
            "artifact {:?} ({}) is only on worker {}, which is not running",
            req.name,
            req.artifact,
            holders.join(", ")
        )))
    }
}

/// A callback telling the build's log that a step waits for a stream slot.
/// The event is written on the streams' owned tasks.
pub(crate) fn waiting_event(streams: &Streams, events: &Events, step: &str, name: &str) -> OnWait {
    let (events, step, name) = (events.clone(), step.to_string(), name.to_string());
    let config = streams.config();
    let (max_out, max_in) = (config.max_out, config.max_in);
    let tasks = streams.tasks().clone();
    Box::new(move |worker: &str, direction: Direction| {
        let (way, cap) = match direction {
            Direction::Out => ("out of", max_out),
            Direction::In => ("into", max_in),
        };
        let event = BuildEvent::Waiting {
            step: step.clone(),
            message: format!(
                "waiting for a stream slot {way} worker {worker} (at most {cap} at once) to stream {name}"
            ),
            time: crate::db::now_ms(),
        };
        let events = events.clone();
        tasks.spawn_local(async move {
            let _ = events.emit(&event).await;
        });
    })
}
