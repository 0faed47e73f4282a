//! What the resource steps (`get`, `put`, check) share: their worker
//! request, running their work under the build's stop signal and the
//! worker's watch, and producing an artifact of the build.

use crate::error::EngineError;
use crate::placement::Load;
use crate::resources::ResourceConfig;
use crate::scheduler::StepRequest;
use crate::steps::resource_fetch::Halt;
use crate::steps::{StepContext, StepEnd};
use gantry_wire::events::BuildEvent;

/// What a resource step needs of a worker: its base type, its tags, and
/// room for `containers` containers (a get checks, then fetches; a put
/// pushes, then fetches) and one volume.
pub(super) fn resource_request(
    config: &ResourceConfig,
    tags: &[String],
    is_check: bool,
    containers: u32,
) -> StepRequest {
    StepRequest {
        platform: "linux".into(),
        tags: tags.to_vec(),
        is_check,
        resource_type: Some(config.type_.base().to_string()),
        privileged: config.type_.needs_privileged(),
        need: Load {
            tasks: 0,
            containers,
            volumes: 1,
        },
        ..StepRequest::default()
    }
}

/// The [`crate::steps::Step`] of a resource step type (a struct with
/// `name`, `config` and `tags`): its request from [`resource_request`], and
/// its work (the method `$work`) run [`guarded`], what a web node that
/// takes its build over does with it once it began (`on_takeover`), and
/// the method that takes it over where it was, if it has one (`reattach`).
macro_rules! resource_step {
    ($ty:ty, $work:ident, $kind:literal, is_check: $check:expr, containers: $containers:expr,
     on_takeover: $takeover:expr $(, reattach: $reattach:ident)?) => {
        #[async_trait::async_trait]
        impl $crate::steps::Step for $ty {
            fn name(&self) -> &str {
                &self.name
            }

            fn kind_name(&self) -> Option<&'static str> {
                Some($kind)
            }

            fn worker_request(&self) -> $crate::scheduler::StepRequest {
                $crate::steps::resource_step::resource_request(
                    &self.config,
                    &self.tags,
                    $check,
                    $containers,
                )
            }

            fn on_takeover(&self) -> $crate::steps::OnTakeover {
                ($takeover)(self)
            }

            async fn run(
                &self,
                ctx: &mut $crate::steps::StepContext,
            ) -> Result<$crate::steps::StepEnd, $crate::error::EngineError> {
                let (stop, watch) = (ctx.stop(), ctx.worker_watch());
                $crate::steps::resource_step::guarded(stop, watch, self.$work(ctx)).await
            }

            $(
            async fn reattach(
                &self,
                ctx: &mut $crate::steps::StepContext,
                at: $crate::steps::Reattach,
            ) -> Result<$crate::steps::StepEnd, $crate::error::EngineError> {
                let (stop, watch) = (ctx.stop(), ctx.worker_watch());
                $crate::steps::resource_step::guarded(stop, watch, self.$reattach(ctx, at)).await
            }
            )?
        }
    };
}
pub(crate) use resource_step;

/// Runs `body` (a resource step's work on `ctx`, whose stop signal and
/// worker watch are given) until it ends, the build stops or the worker is
/// lost; a stop destroys the script's container with the step.
pub(super) async fn guarded<F>(
    mut stop: crate::steps::Stop,
    mut watch: crate::steps::WorkerWatch,
    body: F,
) -> Result<StepEnd, EngineError>
where
    F: std::future::Future<Output = Result<StepEnd, Halt>>,
{
    tokio::select! {
        end = body => match end {
            Ok(end) => Ok(end),
            Err(halt) => halt.into_end(),
        },
        _ = stop.requested() => Ok(StepEnd::Stopped),
        lost = watch.lost("the resource step ran") => Err(lost),
    }
}

/// Makes `artifact` the build's artifact `name` and tells it.
pub(super) async fn produce(
    ctx: &StepContext,
    name: &str,
    artifact: &str,
) -> Result<(), EngineError> {
    ctx.named_artifacts().set(name, artifact);
    ctx.emit(&BuildEvent::Output {
        name: name.to_string(),
        artifact_id: artifact.to_string(),
        time: crate::db::now_ms(),
    })
    .await
}
