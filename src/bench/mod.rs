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
