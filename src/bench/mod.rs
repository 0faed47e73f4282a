//! `gantry bench ...`: benchmarks that print each figure as `name: value`,
//! with a baseline measured in the same run.

pub mod builds;
pub mod cdp;
pub mod container_start;
pub mod deep_yaml;
pub mod follow;
pub mod gc;
pub mod image_pull;
pub mod logs;
pub mod placement;
pub mod rig;
pub mod s3;
pub mod scheduling;
pub mod secrets;
pub mod set_pipeline;
pub mod sign_ins;
pub mod stream;
pub mod ui;

/// The key the benchmarks' engines seal stored secrets with: one per
/// process, random, so engines opened one after another (or side by side)
/// on one database agree with it, and so does a web node a benchmark
/// starts on that database (through [`write_key_file`]).
fn bench_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key);
        key
    })
}

/// The sealer of the benchmarks' key ([`bench_key`]).
pub(crate) fn sealer() -> gantry_actors::api::Sealer {
    gantry_actors::api::Sealer::from_key(bench_key(), "the benchmark's key")
}

/// Writes the benchmarks' key to `path` (mode 0600), as a web node's
/// `encryption_key_file`, so a node started on a benchmark's database
/// opens what its engines sealed.
pub(crate) fn write_key_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let hex = hex::encode(bench_key());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(format!("{hex}\n").as_bytes())
}
