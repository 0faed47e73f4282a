//! The worker agent driven through the runtime interface over its HTTP API,
//! through `gantry-agent-client`: what the engine sees of a real agent on
//! loopback (real containers where the machine has runc). Here, with the
//! agent, so the client needs no more of the agent than the wire types.

mod image_tests;
mod interactive_tests;
mod p2p_tests;
mod resource_type_tests;
mod runtime_tests;
mod tar_safety_tests;
mod test_support;

/// The malicious-archive catalogue shared with the end-to-end suites
/// (`tests/malicious_tars/` at the workspace's top).
#[path = "../../../tests/malicious_tars/mod.rs"]
pub(crate) mod malicious_tars;
