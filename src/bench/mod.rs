//! `gantry bench ...`: benchmarks that print each figure as `name: value`,
//! with a baseline measured in the same run.

pub mod builds;
pub mod container_start;
pub mod follow;
pub mod gc;
pub mod image_pull;
pub mod placement;
pub mod rig;
pub mod s3;
pub mod scheduling;
pub mod set_pipeline;
pub mod stream;

/// The key the benchmarks' engines seal stored secrets with: one per
/// process, so engines opened one after another (or side by side) on one
/// database agree with it.
pub(crate) fn sealer() -> gantry_actors::api::Sealer {
    static SEALER: std::sync::OnceLock<gantry_actors::api::Sealer> = std::sync::OnceLock::new();
    SEALER
        .get_or_init(gantry_actors::api::Sealer::ephemeral)
        .clone()
}
