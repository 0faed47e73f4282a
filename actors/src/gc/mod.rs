//! Garbage collection: the Collector on the web node marks what nothing
//! owns any more (database only); the workers' sweepers destroy it.

pub mod collector;
pub mod rules_artifacts;
pub mod rules_handles;

#[cfg(test)]
mod rules_tests;
