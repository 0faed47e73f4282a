//! The database's stores, one per aggregate. [`Db`] is the connection
//! (the pool, the server's flavour, the sealing key); each store is a
//! borrowed view of it that owns the statements of one group of tables, so
//! a caller names the aggregate it works on (`db.builds().create_build(..)`)
//! and a reader finds every statement on those tables in the store's files.
//!
//! | Store | Tables | Files |
//! |---|---|---|
//! | [`Builds`] | builds, build_events, waiting builds and steps, turns, reruns | `builds`, `job_builds`, `waiting_builds`, `waiting_steps`, `turns`, `reruns`, `allowance` |
//! | [`Versions`] | resource versions, the versions builds used and made, pins | `resources`, `build_versions`, `pins` |
//! | [`Pipelines`] | pipelines, jobs, resources, resource types, checks | `pipelines`, `set_pipeline`, `pipeline_archive` |
//! | [`Workers`] | workers, their volume stores and sequences, the placement ledger | `workers`, `placements` |
//! | [`Handles`] | containers and volumes, intercept sessions, task caches | `handles`, `intercepts`, `task_caches` |
//! | [`ArtifactIndex`] | artifacts and where their copies are | `artifacts` |
//! | [`Collection`] | what the garbage collector reads and writes across them | `gc_collect`, `gc_pressure`, `gc_sweep` |
//! | [`Teams`] | teams, their tokens, the audit log | `teams` |
//! | [`Nodes`] | web nodes, their leases and abort requests | `web_nodes`, `leadership` |
//! | [`Secrets`] | the built-in credential manager's secrets | `secrets` |

use super::Db;

macro_rules! stores {
    ($($(#[$doc:meta])* $vis:vis $store:ident => $accessor:ident;)*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy)]
            $vis struct $store<'a> {
                pub(super) db: &'a Db,
            }

            impl std::fmt::Debug for $store<'_> {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(stringify!($store))
                }
            }
        )*

        impl Db {
            $(
                #[doc = concat!("The [`", stringify!($store), "`] store.")]
                $vis fn $accessor(&self) -> $store<'_> {
                    $store { db: self }
                }
            )*
        }
    };
}

stores! {
    /// Builds: their rows and events, the waiting builds a job's
    /// scheduler makes, the steps waiting for a worker, turns and reruns.
    pub(crate) Builds => builds;
    /// Resource versions: those checks find, those builds use and make,
    /// and pins' comments.
    pub(crate) Versions => versions;
    /// Pipelines and what they declare: jobs, resources, resource types,
    /// and the checks due on them.
    pub(crate) Pipelines => pipelines;
    /// Workers: registration, heartbeats, states, volume stores, sequence
    /// numbers and the placement ledger.
    pub(crate) Workers => workers;
    /// Containers and volumes (handles), intercept sessions and task
    /// caches.
    pub(crate) Handles => handles;
    /// Artifacts and where their copies are.
    pub(crate) ArtifactIndex => artifact_index;
    /// The garbage collector's reads and writes: what is released, stale
    /// or missing, and the sweeps' epochs.
    pub(crate) Collection => gc;
    /// Teams and their tokens.
    pub(crate) Teams => teams;
    /// Web nodes: membership, leases and abort requests.
    pub(crate) Nodes => nodes;
    /// The built-in credential manager's secrets, sealed.
    pub(crate) Secrets => secrets;
}

stores! {
    /// What only the benchmarks ask: bulk set-ups and counts.
    pub Bench => bench;
}
