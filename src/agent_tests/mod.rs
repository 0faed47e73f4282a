//! The worker agent driven through the runtime interface over its HTTP API
//! (`crate::agent_client`): tests of the `gantry-agent` crate that need the
//! client, which lives with the edges.

mod image_tests;
mod interactive_tests;
mod p2p_tests;
mod resource_type_tests;
mod runtime_tests;
mod tar_safety_tests;
mod test_support;
