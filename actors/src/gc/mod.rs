//! Garbage collection: the Collector's rules on the web node change
//! database state only (marking what nothing owns any more); each worker's
//! Sweeper reports what it has and destroys what the web node answers.

// The Collector and its rules.
pub mod collector;
pub mod rules_artifacts;
pub mod rules_handles;
pub mod rules_pressure;

#[cfg(test)]
mod rules_pressure_tests;
#[cfg(test)]
mod rules_tests;

// The sweep protocol: worker reports, the GC epoch, reconciliation.
pub mod reconcile;
pub mod sweep;
