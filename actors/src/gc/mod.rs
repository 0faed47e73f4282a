//! Garbage collection: the Collector's rules on the web node change
//! database state only (marking what nothing owns any more); each worker's
//! Sweeper reports what it has and destroys what the web node answers.

// The Collector and its rules.
pub(crate) mod collector;
pub(crate) mod log_retention;
pub(crate) mod rules_artifacts;
pub(crate) mod rules_handles;
pub(crate) mod rules_logs;
pub(crate) mod rules_pressure;

#[cfg(test)]
mod rules_artifacts_tests;
#[cfg(test)]
mod rules_pressure_tests;
#[cfg(test)]
mod rules_tests;

// The sweep protocol: worker reports, the GC epoch, reconciliation.
pub(crate) mod reconcile;
pub(crate) mod sweep;
