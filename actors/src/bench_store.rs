//! The benchmarks' database handle: what `gantry bench` asks of a database
//! beyond the engine's methods, with the connection kept private, so no
//! edge of the engine holds the database layer ([`crate::db::Db`]) itself.

use gantry_wire::sweep::{SweepAnswer, SweepReport};

use crate::credentials::bench::SecretsFigures;
use crate::db::{Bench, Db};
use crate::error::EngineError;
use crate::gc::sweep::{SweepError, Sweeps};
use crate::sealer::Sealer;

/// A benchmark's own connection to a database (SQLite or PostgreSQL), with
/// exactly the operations the benchmarks time or set up with: the
/// [`Bench`] store, a GC sweep's begin and report, the secrets benchmark,
/// and scratch PostgreSQL databases. Cheap to clone (one pool).
#[derive(Clone)]
pub struct BenchStore {
    db: Db,
}

impl BenchStore {
    /// Connects to `url` (`sqlite://...` or `postgres://...`), runs the
    /// migrations and seals with `sealer` (the key the benchmark's engines
    /// use, so each opens what the other sealed).
    pub async fn connect(url: &str, sealer: Sealer) -> Result<BenchStore, EngineError> {
        let db = Db::connect(url).await?.sealed_with(sealer, None).await?;
        Ok(BenchStore { db })
    }

    /// Closes every connection, waiting for those in use to be returned.
    pub async fn close(&self) {
        self.db.close().await;
    }

    /// The bulk set-ups and counts only the benchmarks ask for.
    pub fn bench(&self) -> Bench<'_> {
        self.db.bench()
    }

    /// Begins a GC sweep of `worker`'s `incarnation` on `sweeps`, as a
    /// worker's sweeper does before it reports; answers the epoch.
    pub async fn sweep_begin(
        &self,
        sweeps: &Sweeps,
        worker: &str,
        incarnation: &str,
    ) -> Result<i64, SweepError> {
        sweeps.begin(&self.db, worker, incarnation).await
    }

    /// Reconciles a worker's sweep `report` on `sweeps`, as the web node
    /// does when a report arrives; answers what the worker must destroy.
    pub async fn sweep_report(
        &self,
        sweeps: &Sweeps,
        report: SweepReport,
    ) -> Result<SweepAnswer, SweepError> {
        sweeps.report(&self.db, report).await
    }

    /// `gantry bench secrets`: `vars` secrets of team `main` stored (sealed),
    /// then `builds` builds reading them all through the credential
    /// manager, against the same job planned with the vars given.
    pub async fn secrets(&self, builds: usize, vars: usize) -> Result<SecretsFigures, EngineError> {
        crate::credentials::bench::secrets(self.db.clone(), builds, vars).await
    }

    /// Makes database `name` (letters, digits and `_`) on the PostgreSQL
    /// server at `base` (its URL without a database), for a benchmark's run.
    pub async fn create_database(base: &str, name: &str) -> Result<(), EngineError> {
        Db::bench_create_database(base, name).await
    }

    /// Drops database `name` made by [`BenchStore::create_database`].
    pub async fn drop_database(base: &str, name: &str) -> Result<(), EngineError> {
        Db::bench_drop_database(base, name).await
    }
}
