//! Helpers shared by the agent's tests: worker configs, specs, running a
//! process to its end through the runtime interface, and whether isolated
//! backends (root, runc, bwrap, busybox) can run here.

use std::path::Path;

use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{Container, OutputStream, ProcessIo};
use gantry_wire::spec::{ContainerSpec, MountSpec, ProcessSpec, ResourceLimits, RootfsSpec};
use tokio::sync::mpsc;

use gantry_agent::WorkerConfig;
use gantry_agent::WorkerHandle;
use gantry_agent_client::{AgentConnector, AgentWorker};

pub(super) use gantry_agent::testing::{test_config, RUNC};

/// A worker config for tests (see [`test_config`]).
pub(super) fn config(work_dir: &Path, backend: &str) -> WorkerConfig {
    test_config(&format!("test-{backend}"), work_dir, backend)
}

/// A container with the default root filesystem (or `rootfs`), `mounts`
/// and `GREETING=hi` in its environment.
pub(super) fn container_spec(
    handle: &str,
    rootfs: RootfsSpec,
    mounts: Vec<MountSpec>,
) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        rootfs,
        mounts,
        env: vec!["GREETING=hi".into()],
        limits: ResourceLimits::default(),
        hermetic: false,
        properties: Default::default(),
        resource_type: None,
        privileged: false,
    }
}

/// `sh -c script` as process `id`, in `dir` if given.
pub(super) fn process(id: &str, script: &str, dir: Option<&str>) -> ProcessSpec {
    ProcessSpec {
        id: id.into(),
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        dir: dir.map(Into::into),
        env: vec![],
        user: None,
        tty: None,
        input: None,
    }
}

/// A fresh handle.
pub(super) fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Runs (or attaches to) a process; returns its output, with
/// consecutive chunks of one stream joined, and its exit status.
pub(super) async fn run(
    container: &dyn Container,
    spec: Option<ProcessSpec>,
    id: &str,
) -> (Vec<(OutputStream, String)>, Result<i32, RuntimeError>) {
    let (tx, mut rx) = mpsc::channel(16);
    let io = ProcessIo {
        stdin: None,
        output: tx,
    };
    let process = match spec {
        Some(spec) => container.run(spec, io).await.unwrap(),
        None => container.attach(id, io).await.unwrap(),
    };
    let mut out: Vec<(OutputStream, String)> = Vec::new();
    while let Some(chunk) = rx.recv().await {
        let text = String::from_utf8_lossy(&chunk.data).into_owned();
        match out.last_mut() {
            Some((s, t)) if *s == chunk.stream => t.push_str(&text),
            _ => out.push((chunk.stream, text)),
        }
    }
    (out, process.wait().await)
}

/// A runtime-interface client of `handle`.
pub(super) fn worker(handle: &WorkerHandle) -> AgentWorker {
    AgentConnector::new().worker(handle.registration())
}

/// Whether tests of isolated backends can run here: as root, with each of
/// `needs` (binaries) present. When not, the test is skipped (it says so),
/// unless `GANTRY_REQUIRE_RUNC` is set: then it fails.
pub(super) fn can_run_isolated(needs: &[&str]) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root && needs.iter().all(|p| Path::new(p).exists());
    if !ok {
        let needs = needs.join(", ");
        assert!(
            std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
            "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs root and {needs}"
        );
        eprintln!("skipped: needs root and {needs}");
    }
    ok
}

/// Kills the test's runc containers and unmounts their overlays if the
/// test fails half-way (on success they are gone already).
pub(super) struct RuncCleanup {
    /// The agent's work directory (canonical).
    pub(super) work_dir: std::path::PathBuf,
    /// The containers to remove.
    pub(super) handles: Vec<String>,
}

impl Drop for RuncCleanup {
    fn drop(&mut self) {
        for h in &self.handles {
            // Whichever OCI runtime the test's worker used.
            let _ = std::process::Command::new(RUNC)
                .arg("--root")
                .arg(self.work_dir.join("runc"))
                .args(["delete", "--force", h])
                .output();
            let _ = std::process::Command::new("crun")
                .arg("--root")
                .arg(self.work_dir.join("crun"))
                .args(["delete", "--force", h])
                .output();
            let rootfs = self.work_dir.join("containers").join(h).join("rootfs");
            let _ = gantry_agent::unmount(&rootfs);
        }
    }
}
