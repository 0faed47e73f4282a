//! Resources: Concourse's resource protocol run on workers.
//!
//! A resource type is a root filesystem with `/opt/resource/check`, `in` and
//! `out`, which read a JSON request on stdin and write JSON on stdout
//! (stderr goes to the build log). Workers ship base types (`mock`, `time`,
//! `git`) whose scripts they mount at `/opt/resource` in their default image
//! and advertise in their registration; a pipeline's `resource_types` build
//! custom types on top of another type, whose `in` fetches the custom
//! type's image (a `rootfs/` directory with `metadata.json`, or an
//! `image.tar` OCI layout).
//!
//! - [`config`]: a resource (or an image resource) resolved down to a base
//!   type, and the hashes that name its versions and caches.
//! - [`scope`]: where a resource config's versions are kept, and the trust
//!   model of shared histories (a team is the boundary).
//!
//! Running the scripts is step code (`crate::steps::resource_script`: one
//! script in a container and its answer; `crate::steps::resource_fetch`:
//! `check` with stored versions, `in` kept once per (config, version,
//! params) as the resource cache, and images).

/// Resource configs resolved from a pipeline: the language's.
pub(crate) use gantry_language::resource_config as config;
pub(crate) mod scope;

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use config::{ResourceConfig, ResourceType};

/// Counters of resource work since the web node started, for `/metrics`.
#[derive(Debug, Default)]
pub struct ResourceStats {
    /// `get`s (and image fetches) answered from a resource cache: no `in` ran.
    pub cache_hits: AtomicU64,
    /// `get`s (and image fetches) that ran `in`.
    pub cache_misses: AtomicU64,
    /// `check` scripts run.
    pub checks: AtomicU64,
    /// `out` scripts run.
    pub puts: AtomicU64,
}

impl ResourceStats {
    /// Adds one to a counter.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
