//! The plan walker: runs a build's plan, step after step. Each step is
//! placed on a worker and run there through the steps module
//! ([`crate::steps::Step`]), so adding a kind of step changes nothing here.

use futures::future::LocalBoxFuture;
use futures::FutureExt;

use crate::build::actor::BuildRun;
use crate::build::plan::Plan;
use crate::db::BuildStatus;
use crate::error::EngineError;
use crate::events::BuildEvent;
use crate::steps::StepEnd;

impl BuildRun {
    /// Starts the build and walks its plan; returns how the last step that
    /// ran ended.
    pub(super) async fn run(&self, plan: &Plan) -> Result<StepEnd, EngineError> {
        self.emit_quietly(&BuildEvent::status(BuildStatus::Started, None))
            .await;
        self.walk(plan).await
    }

    /// Runs `plan`: a step where placement puts it, a sequence in order until
    /// one of its plans does not succeed.
    fn walk<'a>(&'a self, plan: &'a Plan) -> LocalBoxFuture<'a, Result<StepEnd, EngineError>> {
        async move {
            match plan {
                Plan::Step(step) => self.run_step(step.as_ref()).await,
                Plan::Do(plans) => {
                    let mut end = StepEnd::Exited(0);
                    for plan in plans {
                        end = self.walk(plan).await?;
                        if end != StepEnd::Exited(0) {
                            break;
                        }
                    }
                    Ok(end)
                }
            }
        }
        .boxed_local()
    }
}
