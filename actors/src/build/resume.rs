//! Taking a build over after a restart of the web node: its step's process
//! is still on its worker (or has ended there, its exit status kept). The
//! step reattaches to it (output already stored is not repeated), then the
//! build goes on as usual: outputs, cleanup, final status.

use crate::build::actor::BuildRun;
use crate::build::outcome::Outcome;
use crate::build::placement::HeldPlacement;
use crate::db::HandleKind;
use crate::error::{EngineError, RuntimeError};
use crate::events::BuildEvent;
use crate::placement::Load;
use crate::scheduler::Placement;
use crate::steps::Plan;
use crate::steps::{Created, Reattach, StepEnd, WorkerWatch};

/// A build a restarted web node takes over: its step's process is still on
/// its worker (or has ended there, its exit status kept).
#[derive(Debug, Clone)]
pub struct Resume {
    /// The worker running the step.
    pub worker: String,
    /// The step's container.
    pub container: String,
    /// Sequence number of the build's next event.
    pub next_event: i64,
    /// The step's row in the shared placement ledger, already recorded
    /// again for this node (several web nodes).
    pub ledger: Option<i64>,
}

impl BuildRun {
    /// Takes over the build's step where it was and follows it to its end.
    /// Only a plan of one step can be taken over: a build of several is
    /// errored (and what it created destroyed).
    pub(super) async fn resume(&self, plan: &Plan, resume: Resume) -> Outcome {
        if !plan.is_one_step() {
            return self.refuse_resume().await;
        }
        tracing::info!(build = self.id, worker = %resume.worker, "resuming a build after a restart of the web node");
        let result = self.resume_step(plan, &resume).await;
        if self.never_started(&result).await {
            // Its node stopped between creating the container and starting
            // the process: nothing ran. The container goes first, so a start
            // still on its way to the worker cannot run beside the new one.
            tracing::info!(build = self.id, container = %resume.container, "the step's process never started: running the step from its start");
            self.discard_container(&resume).await;
            return self.run(plan).await;
        }
        Outcome::of_step(result.map_err(EngineError::lost_if_unreachable), &self.stop)
    }

    /// Whether reattaching found no process and none ever wrote output.
    async fn never_started(&self, result: &Result<StepEnd, EngineError>) -> bool {
        let missing = matches!(
            result,
            Err(EngineError::Runtime(RuntimeError::NotFound {
                kind: "process",
                ..
            }))
        );
        missing
            && self
                .deps
                .db
                .build_events_after(self.id, 0)
                .await
                .is_ok_and(|events| {
                    !events.iter().any(|(_, json)| {
                        matches!(
                            serde_json::from_str(json),
                            Ok(BuildEvent::Log { stream, .. }) if stream == "stdout" || stream == "stderr"
                        )
                    })
                })
    }

    /// Destroys the container of a step that never started, now, and marks
    /// its row `destroying` (the worker's sweeper finishes the row).
    async fn discard_container(&self, resume: &Resume) {
        let destroyed = match self.deps.db.get_worker(&resume.worker).await {
            Ok(Some(row)) => {
                let worker = self.deps.connector.connect(&row.registration);
                worker.destroy_container(&resume.container).await
            }
            _ => Ok(()),
        };
        if let Err(e) = destroyed {
            tracing::warn!(build = self.id, container = %resume.container, "destroying the container of a step that never started: {e}");
        }
        if let Err(e) = self
            .deps
            .db
            .mark_destroying(HandleKind::Container, &resume.container)
            .await
        {
            tracing::warn!(build = self.id, "marking a container destroying: {e}");
        }
    }

    /// Errors a build whose plan has several steps; what its steps
    /// created goes with the build (the garbage collector).
    async fn refuse_resume(&self) -> Outcome {
        let message = "the build's plan has several steps, and a restarted web node can take over only a build of one step; its steps were not followed to their end".to_string();
        tracing::warn!(build = self.id, "{message}");
        Outcome::Errored(message)
    }

    async fn resume_step(&self, plan: &Plan, resume: &Resume) -> Result<StepEnd, EngineError> {
        let db = &self.deps.db;
        let removed = || EngineError::WorkerLost {
            worker: resume.worker.clone(),
            reason: "was removed while the web node was down".into(),
        };
        let row = db.get_worker(&resume.worker).await?.ok_or_else(removed)?;
        let worker = self.deps.connector.connect(&row.registration);
        let watch =
            WorkerWatch::subscribe(&self.deps.worker_states, &resume.worker).ok_or_else(removed)?;
        let containers = db.build_handles(HandleKind::Container, self.id).await?;
        let volumes = db.build_handles(HandleKind::Volume, self.id).await?;
        let created = Created {
            containers: containers.iter().map(|r| r.handle.clone()).collect(),
            volumes: volumes.iter().map(|r| r.handle.clone()).collect(),
        };
        // The Scheduler restarted empty: hold this step's capacity again.
        let placement = Placement {
            worker: resume.worker.clone(),
            client: worker.clone(),
            reserved: Load {
                tasks: 1,
                containers: created.containers.len() as u32,
                volumes: created.volumes.len() as u32,
            },
            ledger: resume.ledger,
        };
        let placement = self.deps.placer.restore(placement, self.id).await?;
        let held = HeldPlacement::new(placement, self.deps.placer.clone());
        // The step whose container it is.
        let step_name = containers
            .iter()
            .find(|r| r.handle == resume.container)
            .and_then(|r| r.step.clone())
            .unwrap_or_default();
        let mut ctx = self.step_context(&step_name, worker.clone(), watch, created, &self.stop);
        let result = async {
            let step = plan.step(&step_name).ok_or_else(|| {
                EngineError::Invalid(format!(
                    "the plan has no step {step_name:?} for container {}",
                    resume.container
                ))
            })?;
            let at = Reattach {
                container: resume.container.clone(),
                volumes: volumes
                    .iter()
                    .filter_map(|r| Some((r.step.clone()?, r.handle.clone())))
                    .collect(),
                already_stored: self.stored_output_bytes(&step_name).await?,
            };
            step.reattach(&mut ctx, at).await
        }
        .await
        .map_err(EngineError::lost_if_unreachable);
        let lost = matches!(result, Err(EngineError::WorkerLost { .. }));
        self.left_to_gc(&resume.worker, &ctx.take_created(), lost);
        drop(held);
        result
    }

    /// Bytes of stdout and stderr of step `step` already stored as log events.
    async fn stored_output_bytes(&self, step: &str) -> Result<[u64; 2], EngineError> {
        let mut bytes = [0u64; 2];
        for (_, json) in self.deps.db.build_events_after(self.id, 0).await? {
            if let Ok(BuildEvent::Log {
                step: logged,
                stream,
                data,
                ..
            }) = serde_json::from_str(&json)
            {
                // Only the process's own output: Gantry's lines (the
                // `gantry` stream, e.g. task caches) are not in its log.
                let i = match stream.as_str() {
                    "stdout" => 0,
                    "stderr" => 1,
                    _ => continue,
                };
                if logged == step {
                    bytes[i] += data.len() as u64;
                }
            }
        }
        Ok(bytes)
    }
}
