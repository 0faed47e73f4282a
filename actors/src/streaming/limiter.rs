//! Caps on concurrent streams out of and into each worker. A transfer takes
//! a slot out of its source (none for the web node's store) and a slot into
//! its destination; beyond the cap it waits, in the order it asked (tokio's
//! semaphores are fair), and the counts of streams in flight and queued per
//! worker are there for `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which way a stream goes, seen from a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Out of the worker.
    Out,
    /// Into the worker.
    In,
}

impl Direction {
    /// `out` or `in`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Direction::Out => "out",
            Direction::In => "in",
        }
    }
}

/// One side of one worker: its slots and how many wait for one.
struct Side {
    /// Free slots.
    slots: Arc<Semaphore>,
    /// The cap.
    cap: usize,
    /// Transfers waiting for a slot.
    queued: AtomicU64,
}

/// Streams in flight and queued on one side of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SideLoad {
    /// Streams holding a slot.
    pub in_flight: u64,
    /// Streams waiting for one.
    pub queued: u64,
}

/// Held while a transfer streams: its slots on both workers.
pub struct Slots {
    /// The permits, released when dropped.
    _permits: Vec<OwnedSemaphorePermit>,
}

/// The per-worker caps on concurrent streams.
#[derive(Clone)]
pub struct StreamLimiter {
    /// Cap on streams out of one worker.
    max_out: usize,
    /// Cap on streams into one worker.
    max_in: usize,
    /// Sides by (worker, direction), created when first used.
    sides: Arc<DashMap<(String, Direction), Arc<Side>>>,
}

impl StreamLimiter {
    /// Caps of `max_out` streams out of and `max_in` into each worker (at
    /// least one each).
    pub fn new(max_out: usize, max_in: usize) -> Self {
        StreamLimiter {
            max_out: max_out.max(1),
            max_in: max_in.max(1),
            sides: Arc::new(DashMap::new()),
        }
    }

    /// The side `direction` of `worker`.
    fn side(&self, worker: &str, direction: Direction) -> Arc<Side> {
        self.sides
            .entry((worker.to_string(), direction))
            .or_insert_with(|| {
                let cap = match direction {
                    Direction::Out => self.max_out,
                    Direction::In => self.max_in,
                };
                Arc::new(Side {
                    slots: Arc::new(Semaphore::new(cap)),
                    cap,
                    queued: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// Takes a slot out of `from` (when the source is a worker) and one into
    /// `to`, waiting in order for each. `waiting` is called once, with the
    /// worker and direction, if a slot is not free at once.
    pub async fn acquire(
        &self,
        from: Option<&str>,
        to: &str,
        mut waiting: impl FnMut(&str, Direction),
    ) -> Slots {
        let mut permits = Vec::with_capacity(2);
        let sides = from
            .map(|w| (w, Direction::Out))
            .into_iter()
            .chain([(to, Direction::In)]);
        for (worker, direction) in sides {
            let side = self.side(worker, direction);
            let permit = match side.slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    waiting(worker, direction);
                    side.queued.fetch_add(1, Ordering::SeqCst);
                    let p = side.slots.clone().acquire_owned().await;
                    side.queued.fetch_sub(1, Ordering::SeqCst);
                    p.expect("stream slots are never closed")
                }
            };
            permits.push(permit);
        }
        Slots { _permits: permits }
    }

    /// Streams in flight and queued, by worker and direction.
    pub fn loads(&self) -> BTreeMap<(String, Direction), SideLoad> {
        self.sides
            .iter()
            .map(|e| {
                let side = e.value();
                let load = SideLoad {
                    in_flight: (side.cap - side.slots.available_permits()) as u64,
                    queued: side.queued.load(Ordering::SeqCst),
                };
                (e.key().clone(), load)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_worker_queues_transfers_in_order_and_counts_them() {
        let limiter = StreamLimiter::new(2, 4);
        let a = limiter
            .acquire(Some("src"), "dst", |_, _| panic!("free"))
            .await;
        let b = limiter
            .acquire(Some("src"), "dst", |_, _| panic!("free"))
            .await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (limiter, order) = (limiter.clone(), order.clone());
            let (told_tx, told_rx) = tokio::sync::oneshot::channel();
            waiters.push(tokio::spawn(async move {
                let mut told = Some(told_tx);
                let slots = limiter
                    .acquire(Some("src"), "dst", |w, d| {
                        assert_eq!((w, d), ("src", Direction::Out));
                        let _ = told.take().map(|t| t.send(()));
                    })
                    .await;
                order.lock().unwrap().push(i);
                slots
            }));
            // Each waiter queues before the next one asks.
            told_rx.await.unwrap();
        }
        let loads = limiter.loads();
        let out = loads[&("src".to_string(), Direction::Out)];
        assert_eq!(
            out,
            SideLoad {
                in_flight: 2,
                queued: 3
            }
        );
        assert_eq!(loads[&("dst".to_string(), Direction::In)].in_flight, 2);
        drop(a);
        let first = waiters.remove(0).await.unwrap();
        drop(b);
        drop(first);
        for w in waiters {
            drop(w.await.unwrap());
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        let out = limiter.loads()[&("src".to_string(), Direction::Out)];
        assert_eq!(
            out,
            SideLoad {
                in_flight: 0,
                queued: 0
            }
        );
    }
}
