//! One snapshot of the fleet per viewer per interval, shared by every open
//! dashboard feed: a feed that ticks within [`MAX_AGE`] of another feed of
//! the same viewer (the admin, or one team) reuses the snapshot that feed
//! took. So the database's work grows with the number of viewers (teams),
//! not with the number of open tabs; `gantry_dashboard_snapshots_total`
//! counts the snapshots taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_actors::Engine;

use super::feed::Snapshot;
use crate::web::error::ApiError;

/// How old a shared snapshot may be and still be used: just under the
/// feeds' tick, so each tick of a feed sees the fleet of that second.
pub const MAX_AGE: Duration = Duration::from_millis(900);

/// The latest snapshot of one viewer as JSON (serialised once, whatever
/// the number of feeds sending it), and when it was taken.
type Slot = Arc<tokio::sync::Mutex<Option<(Instant, Arc<str>)>>>;

/// The latest snapshot of each viewer.
#[derive(Default)]
pub struct SharedSnapshots {
    /// One slot per viewer (`None`: the admin); the slot's lock makes
    /// concurrent feeds of a viewer wait for one snapshot, not take several.
    by_viewer: Mutex<HashMap<Option<String>, Slot>>,
    /// Snapshots taken since the node started.
    taken: AtomicU64,
}

impl SharedSnapshots {
    /// The fleet as `team` (`None`: the admin) sees it, as JSON: the shared
    /// snapshot when it is younger than [`MAX_AGE`], else a new one.
    pub async fn get(&self, engine: &Engine, team: Option<&str>) -> Result<Arc<str>, ApiError> {
        let slot = {
            let mut map = self.by_viewer.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(team.map(str::to_string)).or_default().clone()
        };
        let mut latest = slot.lock().await;
        if let Some((at, snapshot)) = latest.as_ref() {
            if at.elapsed() < MAX_AGE {
                return Ok(snapshot.clone());
            }
        }
        let taken = Snapshot::take(engine, team).await?;
        let snapshot: Arc<str> = serde_json::to_string(&taken)
            .expect("snapshots serialise")
            .into();
        self.taken.fetch_add(1, Ordering::Relaxed);
        *latest = Some((Instant::now(), snapshot.clone()));
        Ok(snapshot)
    }

    /// Snapshots taken since the node started.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}
