//! `gantry bench secrets`: builds reading their vars from the credential
//! manager (the built-in one, on a SQLite database in a temporary
//! directory) as they start, against the same job planned with every var
//! given statically, in the same run:
//! - `lookups_per_build`: lookups that reached the manager, per build (the
//!   cache answers the rest: at most one per var per TTL);
//! - `build_start_overhead_ms`: per build, finding the vars and making the
//!   plan again with them; `plan_no_vars_ms`: per build, the plan of the
//!   job with its vars given (the baseline); `overhead_ratio`: the first
//!   over the second.

use anyhow::Context as _;
use gantry_actors::api::bench::BenchStore;

/// Runs the benchmark and prints its figures as `name: value` lines.
pub async fn bench(builds: usize, vars: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        builds >= 1 && vars >= 1,
        "--builds and --vars must be at least 1"
    );
    let dir = tempfile::tempdir().context("temporary directory")?;
    let url = format!("sqlite://{}/bench.db?mode=rwc", dir.path().display());
    let db = BenchStore::connect(&url, super::sealer())
        .await
        .context("opening SQLite")?;
    let f = db.secrets(builds, vars).await?;
    db.close().await;
    println!("builds: {}", f.builds);
    println!("vars_per_build: {}", f.vars);
    println!("manager_calls: {}", f.manager_calls);
    println!(
        "lookups_per_build: {:.4}",
        f.manager_calls as f64 / f.builds as f64
    );
    println!("build_start_overhead_ms: {:.3}", f.with_vars_ms);
    println!("plan_no_vars_ms: {:.3}", f.without_vars_ms);
    println!(
        "overhead_ratio: {:.2}",
        f.with_vars_ms / f.without_vars_ms.max(f64::EPSILON)
    );
    Ok(())
}
