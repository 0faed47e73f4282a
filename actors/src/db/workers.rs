//! The `workers` table: registrations, states and heartbeat counts.

use crate::db::{now_ms, Workers};

/// How many sequence numbers a web node reserves at once.
pub(super) const SEQUENCE_BLOCK: i64 = 64;
use super::states::{decode, sql_list};
use crate::error::EngineError;
use gantry_wire::worker_info::{WorkerRegistration, WorkerState};

/// A stored worker.
#[derive(Debug, Clone)]
pub(crate) struct WorkerRow {
    /// What the worker said when it registered.
    pub registration: WorkerRegistration,
    /// Its lifecycle state.
    pub state: WorkerState,
    /// Containers at its last heartbeat.
    pub containers: u32,
    /// Volumes at its last heartbeat.
    pub volumes: u32,
    /// Unix ms of its last heartbeat.
    pub last_heartbeat: i64,
    /// The build a one-build worker took, once it took one.
    pub bound_build: Option<i64>,
}

type Raw = (String, String, i64, i64, i64, Option<i64>);

/// The columns [`Workers::decode`] reads.
const COLUMNS: &str = "state, registration, containers, volumes, last_heartbeat, bound_build";

/// Binds a one-build worker to a build (`$1`) unless it is bound to another.
pub(crate) const BIND_WORKER: &str = "UPDATE workers SET bound_build = $1 \
     WHERE name = $2 AND (bound_build IS NULL OR bound_build = $1)";

/// The bound one-build workers and their builds.
pub(crate) const BINDINGS: &str =
    "SELECT name, bound_build FROM workers WHERE bound_build IS NOT NULL";

/// Who registers a worker, for its pinned identity (see [`Workers::register_pinned`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pin<'a> {
    /// This web node itself (its Kubernetes cluster worker): takes the
    /// name; a new row is pinned to a secret nobody holds, so no worker
    /// process can register under the name until an admin prunes it.
    Trusted,
    /// A worker process: `given` is the hash of the secret it presented
    /// (none at its first registration); `fresh` the hash of a new
    /// secret, pinned if the row has no pin yet.
    Presented {
        /// SHA-256 (hex) of the presented secret.
        given: Option<&'a str>,
        /// SHA-256 (hex) of the secret to issue when the name is not pinned.
        fresh: &'a str,
    },
    /// A worker process of an earlier version, which keeps no identity:
    /// it registers only under a name no worker is pinned to, and does not
    /// pin it (so a rolling upgrade of web nodes before workers leaves no
    /// worker unable to register after its own upgrade).
    Unaware,
}

/// What [`Workers::register_pinned`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Registered {
    /// The registration was stored: the build a one-build worker stays
    /// bound to, and whether the `fresh` secret was pinned now (to be
    /// handed to the worker, once).
    Taken {
        /// The binding kept.
        bound_build: Option<i64>,
        /// Whether the name was pinned to the fresh secret now.
        pinned_now: bool,
    },
    /// The name is pinned to another secret than the one presented.
    Refused,
}

/// Where a worker's stored secret `field` is sealed, bound to its row.
fn seal_context(name: &str, field: &str) -> String {
    format!("workers/{name}/{field}")
}

/// A new identity secret for a worker (256 random bits, hex), issued at
/// its first registration.
pub(crate) fn new_identity_secret() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// SHA-256 (hex) of a worker's identity secret: what the database keeps.
pub(crate) fn identity_hash(secret: &str) -> String {
    crate::digest::sha256_hex(secret)
}

impl Workers<'_> {
    /// The registration as stored: its agent token and stream key sealed.
    pub(super) fn encode_registration(&self, reg: &WorkerRegistration) -> String {
        let mut stored = reg.clone();
        for (field, value) in [
            ("agent_token", &mut stored.agent_token),
            ("stream_key", &mut stored.stream_key),
        ] {
            if !value.is_empty() && !crate::sealer::Sealer::is_sealed(value) {
                *value = self.db.sealer.seal(&seal_context(&reg.name, field), value);
            }
        }
        serde_json::to_string(&stored).expect("registration serialises")
    }

    /// A stored registration with its secrets opened (a value stored
    /// before sealing began is taken as it is, until the start-up pass
    /// seals it).
    pub(super) fn decode_registration(
        &self,
        json: &str,
    ) -> Result<WorkerRegistration, EngineError> {
        let mut reg: WorkerRegistration = serde_json::from_str(json)
            .map_err(|e| EngineError::Invalid(format!("stored worker registration: {e}")))?;
        let name = reg.name.clone();
        for (field, value) in [
            ("agent_token", &mut reg.agent_token),
            ("stream_key", &mut reg.stream_key),
        ] {
            if crate::sealer::Sealer::is_sealed(value) {
                *value = self.db.sealer.open(&seal_context(&name, field), value)?;
            }
        }
        Ok(reg)
    }

    fn decode(&self, raw: Raw) -> Result<WorkerRow, EngineError> {
        let (state, registration, containers, volumes, last_heartbeat, bound_build) = raw;
        Ok(WorkerRow {
            registration: self.decode_registration(&registration)?,
            state: decode(&state)?,
            containers: containers as u32,
            volumes: volumes as u32,
            last_heartbeat,
            bound_build,
        })
    }

    /// Seals the secrets of every registration stored before sealing
    /// began (a start-up pass; a row already sealed is left alone).
    /// Answers how many rows it sealed.
    pub(crate) async fn seal_plain_workers(&self) -> Result<usize, EngineError> {
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT name, registration FROM workers")
            .fetch_all(self.db.pool())
            .await?;
        let mut sealed = 0;
        for (name, json) in rows {
            let stored: WorkerRegistration = serde_json::from_str(&json)
                .map_err(|e| EngineError::Invalid(format!("stored worker registration: {e}")))?;
            let sealed_or_empty = |v: &str| v.is_empty() || crate::sealer::Sealer::is_sealed(v);
            if sealed_or_empty(&stored.agent_token) && sealed_or_empty(&stored.stream_key) {
                continue;
            }
            let stored = self.encode_registration(&self.decode_registration(&json)?);
            // Only the row as read: a registration since is sealed already.
            sqlx::query(
                "UPDATE workers SET registration = $1 WHERE name = $2 AND registration = $3",
            )
            .bind(stored)
            .bind(&name)
            .bind(&json)
            .execute(self.db.pool())
            .await?;
            sealed += 1;
        }
        Ok(sealed)
    }
}

impl Workers<'_> {
    /// Inserts or replaces a worker's registration as this web node
    /// itself (see [`Pin::Trusted`]); it becomes `running`. A one-build
    /// worker registering again keeps the build it is bound to (it
    /// finishes that build, or is retired); any other worker is bound to
    /// none. Answers the binding kept.
    pub(crate) async fn upsert_worker(
        &self,
        reg: &WorkerRegistration,
    ) -> Result<Option<i64>, EngineError> {
        match self.register_pinned(reg, Pin::Trusted).await? {
            Registered::Taken { bound_build, .. } => Ok(bound_build),
            Registered::Refused => unreachable!("a trusted registration is never refused"),
        }
    }

    /// Inserts or replaces a worker's registration (it becomes `running`)
    /// unless its name is pinned to another identity than `pin` presents,
    /// in one statement, so two registrants racing on several web nodes
    /// cannot both take a name. The first registration of a name pins it
    /// to `fresh`; the pin lasts until the row is deleted (an admin's
    /// prune, a retirement). Secrets are stored sealed.
    pub(crate) async fn register_pinned(
        &self,
        reg: &WorkerRegistration,
        pin: Pin<'_>,
    ) -> Result<Registered, EngineError> {
        let json = self.encode_registration(reg);
        let (given, fresh, trusted) = match pin {
            Pin::Trusted => {
                // A secret nobody holds: no worker process can present it.
                let nobody = identity_hash(&uuid::Uuid::new_v4().to_string());
                (None, Some(nobody), 1i64)
            }
            Pin::Presented { given, fresh } => {
                (given.map(str::to_string), Some(fresh.to_string()), 0)
            }
            Pin::Unaware => (None, None, 0),
        };
        let row: Option<(Option<i64>, Option<String>)> = sqlx::query_as(
            "INSERT INTO workers (name, state, registration, last_heartbeat, identity_hash) \
             VALUES ($1, $2, $3, $4, $6) \
             ON CONFLICT (name) DO UPDATE SET state = excluded.state, registration = excluded.registration, \
             last_heartbeat = excluded.last_heartbeat, \
             bound_build = CASE WHEN $5 = 1 THEN workers.bound_build ELSE NULL END, \
             identity_hash = COALESCE(workers.identity_hash, excluded.identity_hash) \
             WHERE workers.identity_hash IS NULL OR workers.identity_hash = $7 OR $8 = 1 \
             RETURNING bound_build, identity_hash",
        )
        .bind(&reg.name)
        .bind(WorkerState::Running.as_str())
        .bind(json)
        .bind(now_ms())
        .bind(i64::from(reg.identity.ephemeral))
        .bind(&fresh)
        .bind(given)
        .bind(trusted)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(match row {
            Some((bound_build, pinned)) => Registered::Taken {
                bound_build,
                pinned_now: trusted == 0 && fresh.is_some() && pinned == fresh,
            },
            None => Registered::Refused,
        })
    }

    /// Whether worker `name` is pinned to another identity than the one
    /// whose secret hashes to `given` (a quick check before its agent is
    /// probed; [`Workers::register_pinned`] decides atomically).
    pub(crate) async fn pinned_to_another(
        &self,
        name: &str,
        given: Option<&str>,
    ) -> Result<bool, EngineError> {
        let pin: Option<(Option<String>,)> =
            sqlx::query_as("SELECT identity_hash FROM workers WHERE name = $1")
                .bind(name)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(match pin.and_then(|p| p.0) {
            Some(pinned) => given != Some(pinned.as_str()),
            None => false,
        })
    }

    /// Records a heartbeat's counts and time (the state is written only by
    /// the Registry when it changes); returns false when the worker is unknown.
    pub(crate) async fn record_heartbeat(
        &self,
        name: &str,
        containers: u32,
        volumes: u32,
    ) -> Result<bool, EngineError> {
        let done = sqlx::query(
            "UPDATE workers SET containers = $1, volumes = $2, last_heartbeat = $3 WHERE name = $4",
        )
        .bind(containers as i64)
        .bind(volumes as i64)
        .bind(now_ms())
        .bind(name)
        .execute(self.db.pool())
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Sets a worker's state.
    pub(crate) async fn set_worker_state(
        &self,
        name: &str,
        state: WorkerState,
    ) -> Result<(), EngineError> {
        sqlx::query("UPDATE workers SET state = $1 WHERE name = $2")
            .bind(state.as_str())
            .bind(name)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Every stored worker.
    pub(crate) async fn list_workers(&self) -> Result<Vec<WorkerRow>, EngineError> {
        let rows: Vec<Raw> =
            sqlx::query_as(&format!("SELECT {COLUMNS} FROM workers ORDER BY name"))
                .fetch_all(self.db.pool())
                .await?;
        rows.into_iter().map(|r| self.decode(r)).collect()
    }

    /// One stored worker.
    pub(crate) async fn get_worker(&self, name: &str) -> Result<Option<WorkerRow>, EngineError> {
        let row: Option<Raw> =
            sqlx::query_as(&format!("SELECT {COLUMNS} FROM workers WHERE name = $1"))
                .bind(name)
                .fetch_optional(self.db.pool())
                .await?;
        row.map(|r| self.decode(r)).transpose()
    }

    /// Binds one-build worker `name` to `build`, the build whose steps it
    /// takes: false when it is bound to another build (or gone).
    pub(crate) async fn bind_worker(&self, name: &str, build: i64) -> Result<bool, EngineError> {
        let done = sqlx::query(BIND_WORKER)
            .bind(build)
            .bind(name)
            .execute(self.db.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The build one-build worker `name` is bound to, if any.
    #[cfg(test)]
    pub(crate) async fn worker_binding(&self, name: &str) -> Result<Option<i64>, EngineError> {
        let row: Option<(Option<i64>,)> =
            sqlx::query_as("SELECT bound_build FROM workers WHERE name = $1")
                .bind(name)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(row.and_then(|r| r.0))
    }

    /// The build each bound one-build worker took, by worker.
    pub(crate) async fn worker_bindings(
        &self,
    ) -> Result<std::collections::HashMap<String, i64>, EngineError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(BINDINGS).fetch_all(self.db.pool()).await?;
        Ok(rows.into_iter().collect())
    }

    /// One-build workers still running or stalled whose build has ended:
    /// they are to be retired.
    pub(crate) async fn ephemeral_workers_done(&self) -> Result<Vec<(String, i64)>, EngineError> {
        let sql = format!(
            "SELECT w.name, w.bound_build FROM workers w JOIN builds b ON b.id = w.bound_build \
             WHERE b.finished_at IS NOT NULL AND w.state IN {} ORDER BY w.name",
            sql_list(&[WorkerState::Running, WorkerState::Stalled])
        );
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql).fetch_all(self.db.pool()).await?;
        Ok(rows)
    }

    /// Records the volume store usage of `worker`'s latest sweep report.
    pub(crate) async fn record_volume_store(
        &self,
        worker: &str,
        used_bytes: u64,
        total_bytes: u64,
    ) -> Result<(), EngineError> {
        sqlx::query(
            "UPDATE workers SET volume_store_used = $1, volume_store_total = $2, \
             volume_store_reports = volume_store_reports + 1 WHERE name = $3",
        )
        .bind(i64::try_from(used_bytes).unwrap_or(i64::MAX))
        .bind(i64::try_from(total_bytes).unwrap_or(i64::MAX))
        .bind(worker)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Each worker's last reported volume store usage (used and total
    /// bytes) and how many reports gave one, by name.
    pub(crate) async fn volume_stores(&self) -> Result<Vec<(String, u64, u64, u64)>, EngineError> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT name, volume_store_used, volume_store_total, volume_store_reports FROM workers \
             WHERE volume_store_reports > 0 ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await?;
        let n = |x: i64| u64::try_from(x).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(|(w, used, total, reports)| (w, n(used), n(total), n(reports)))
            .collect())
    }

    /// Records that incarnation `incarnation` of worker `name` was retired,
    /// and deletes its row, in one transaction: no web node sees the row
    /// gone without the retirement.
    pub(crate) async fn retire_worker(
        &self,
        name: &str,
        incarnation: &str,
    ) -> Result<(), EngineError> {
        self.db.sequences.forget(name);
        let mut tx = self.db.pool().begin().await?;
        sqlx::query(
            "INSERT INTO retired_workers (name, incarnation, retired_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET incarnation = excluded.incarnation, retired_at = excluded.retired_at",
        )
        .bind(name)
        .bind(incarnation)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM workers WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Whether incarnation `incarnation` of worker `name` was retired.
    pub(crate) async fn is_retired(
        &self,
        name: &str,
        incarnation: &str,
    ) -> Result<bool, EngineError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT retired_at FROM retired_workers WHERE name = $1 AND incarnation = $2",
        )
        .bind(name)
        .bind(incarnation)
        .fetch_optional(self.db.pool())
        .await?;
        Ok(found.is_some())
    }

    /// Forgets the retirement of an earlier incarnation of worker `name`
    /// (a new one registers).
    pub(crate) async fn forget_retired(
        &self,
        name: &str,
        incarnation: &str,
    ) -> Result<(), EngineError> {
        sqlx::query("DELETE FROM retired_workers WHERE name = $1 AND incarnation <> $2")
            .bind(name)
            .bind(incarnation)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Deletes a worker row.
    pub(crate) async fn delete_worker(&self, name: &str) -> Result<(), EngineError> {
        self.db.sequences.forget(name);
        sqlx::query("DELETE FROM workers WHERE name = $1")
            .bind(name)
            .execute(self.db.pool())
            .await?;
        Ok(())
    }

    /// Takes the next per-worker sequence number for a container or volume
    /// create. Numbers are reserved from the database in blocks (one UPDATE
    /// per [`SEQUENCE_BLOCK`] creates), so several web nodes never hand out
    /// the same number; gaps are harmless to the GC's low-water mark, which
    /// only counts creates the worker received.
    pub(crate) async fn next_sequence(&self, worker: &str) -> Result<i64, EngineError> {
        if let Some(seq) = self.db.sequences.take(worker) {
            return Ok(seq);
        }
        let row: Option<(i64,)> = sqlx::query_as(
            "UPDATE workers SET next_sequence = next_sequence + $1 WHERE name = $2 RETURNING next_sequence - $1",
        )
        .bind(SEQUENCE_BLOCK)
        .bind(worker)
        .fetch_optional(self.db.pool())
        .await?;
        let first = row.map(|r| r.0).ok_or_else(|| EngineError::NotFound {
            kind: "worker",
            name: worker.to_string(),
        })?;
        self.db
            .sequences
            .put(worker, first + 1, first + SEQUENCE_BLOCK);
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    fn reg(name: &str) -> WorkerRegistration {
        crate::testing::registration(name)
    }

    #[tokio::test]
    async fn a_name_is_pinned_at_its_first_registration_until_its_row_goes() {
        let (db, _dir) = crate::db::test_db().await;
        let r = reg("w");
        let (s1, s2) = (identity_hash("one"), identity_hash("two"));
        let first = Pin::Presented {
            given: None,
            fresh: &s1,
        };
        let taken = db.workers().register_pinned(&r, first).await.unwrap();
        assert_eq!(
            taken,
            Registered::Taken {
                bound_build: None,
                pinned_now: true
            }
        );
        // No secret, or another one: refused; the pinned one: taken, and
        // the pin stays (no new secret is issued).
        for given in [None, Some(s2.as_str())] {
            let pin = Pin::Presented { given, fresh: &s2 };
            assert_eq!(
                db.workers().register_pinned(&r, pin).await.unwrap(),
                Registered::Refused
            );
            assert!(db.workers().pinned_to_another("w", given).await.unwrap());
        }
        let again = Pin::Presented {
            given: Some(&s1),
            fresh: &s2,
        };
        assert_eq!(
            db.workers().register_pinned(&r, again).await.unwrap(),
            Registered::Taken {
                bound_build: None,
                pinned_now: false
            }
        );
        assert!(!db
            .workers()
            .pinned_to_another("w", Some(&s1))
            .await
            .unwrap());
        // An agent that keeps no identity takes no pinned name...
        assert_eq!(
            db.workers()
                .register_pinned(&r, Pin::Unaware)
                .await
                .unwrap(),
            Registered::Refused
        );
        // ... and pins none it takes.
        let u = reg("u");
        for _ in 0..2 {
            assert_eq!(
                db.workers()
                    .register_pinned(&u, Pin::Unaware)
                    .await
                    .unwrap(),
                Registered::Taken {
                    bound_build: None,
                    pinned_now: false
                }
            );
        }
        assert!(!db.workers().pinned_to_another("u", None).await.unwrap());
        // Pruned: the next registrant pins the name anew.
        db.workers().delete_worker("w").await.unwrap();
        assert!(!db.workers().pinned_to_another("w", None).await.unwrap());
        let other = Pin::Presented {
            given: None,
            fresh: &s2,
        };
        assert!(matches!(
            db.workers().register_pinned(&r, other).await.unwrap(),
            Registered::Taken {
                pinned_now: true,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn secrets_are_stored_sealed_and_plain_rows_are_sealed_at_start() {
        let (db, dir) = crate::db::test_db().await;
        let mut r = reg("w");
        r.agent_token = "agent-token-0123456789".into();
        r.stream_key = "stream-key-0123456789".into();
        db.workers().upsert_worker(&r).await.unwrap();
        let raw = |db: &Db| {
            let db = db.clone();
            async move {
                let (json,): (String,) =
                    sqlx::query_as("SELECT registration FROM workers WHERE name = 'w'")
                        .fetch_one(db.pool())
                        .await
                        .unwrap();
                json
            }
        };
        let stored = raw(&db).await;
        assert!(!stored.contains("agent-token") && !stored.contains("stream-key"));
        let row = db.workers().get_worker("w").await.unwrap().unwrap();
        assert_eq!(row.registration, r);
        // A row of before sealing, in plain text, is sealed by the pass.
        sqlx::query("UPDATE workers SET registration = $1 WHERE name = 'w'")
            .bind(serde_json::to_string(&r).unwrap())
            .execute(db.pool())
            .await
            .unwrap();
        assert_eq!(db.workers().seal_plain_workers().await.unwrap(), 1);
        assert!(!raw(&db).await.contains("agent-token"));
        assert_eq!(
            db.workers()
                .get_worker("w")
                .await
                .unwrap()
                .unwrap()
                .registration,
            r
        );
        assert_eq!(db.workers().seal_plain_workers().await.unwrap(), 0);
        // Another web node with another key is refused at once.
        let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
        let key = crate::sealer::Sealer::ephemeral();
        let kept = Db::connect(&url)
            .await
            .unwrap()
            .sealed_with(key.clone(), None);
        assert!(kept.await.is_ok());
        let other = Db::connect(&url).await.unwrap();
        let e = other
            .sealed_with(crate::sealer::Sealer::ephemeral(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not the key"), "{e}");
    }

    #[tokio::test]
    async fn sequence_numbers_are_unique_across_web_nodes_sharing_a_database() {
        let (a, dir) = crate::db::test_db().await;
        let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
        let b = Db::connect(&url).await.unwrap();
        a.workers().upsert_worker(&reg("w")).await.unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 0..(SEQUENCE_BLOCK * 3) {
            let db = if i % 3 == 0 { &a } else { &b };
            assert!(
                seen.insert(db.workers().next_sequence("w").await.unwrap()),
                "duplicate sequence"
            );
        }
        assert!(a.workers().next_sequence("nope").await.is_err());
    }
}
