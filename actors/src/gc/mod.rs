//! Garbage collection: the Collector's rules on the web node change
//! database state; each worker's Sweeper reports what it has and destroys
//! what the web node answers.

// The sweep protocol: worker reports, the GC epoch, reconciliation.
pub mod reconcile;
pub mod sweep;
