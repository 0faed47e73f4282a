//! The `runc` backend: one OCI bundle per container.
//!
//! `containers/<handle>/config.json` (OCI runtime spec 1.0.2) gives the
//! container its own pid, mount, uts, ipc and network namespaces (loopback
//! only), cgroup limits, the usual `/proc`, `/dev` and `/sys`, a tmpfs `/tmp`
//! and the volumes as bind mounts. The first process runs as the container's
//! init with `runc run` in the foreground, so the exit status of `runc run` is
//! the process's; while it runs, further processes join it with `runc exec`.
//! When the init exits the container stops and the next process starts a new
//! init. runc keeps its state under `WORK_DIR/runc`, so agents with different
//! work directories never see each other's containers.
//!
//! A process with a TTY (`ProcessSpec::tty`) gets `terminal: true`, and
//! runc (`run` or `exec`, in the foreground) gets a pseudo-terminal of the
//! agent's as its stdin, stdout, stderr and controlling terminal: runc
//! creates the container's own terminal, proxies between the two and copies
//! our window size onto it at start and on every `SIGWINCH`, which the
//! kernel sends when the agent resizes its side (see `agent::pty`). runc's
//! exit status is still the process's.
//!
//! Network: a container shares the host's network namespace (outbound
//! networking as the host has it); a hermetic one (`ContainerSpec::hermetic`)
//! gets a namespace of its own whose only interface is a loopback, which
//! runc brings up.
//!
//! Limits: the container's `limits`, each unset one taken from the worker's
//! `default_limits`, become `linux.resources` (memory without swap, CPU
//! shares, pids), enforced by the kernel in the cgroup `/gantry/<handle>`.
//! `runc run --keep` leaves that cgroup in place after the init exits until
//! the next init or `destroy` deletes the container, so the kernel's count of
//! out-of-memory kills (`memory.oom_control` on cgroup v1, `memory.events`
//! on v2) can still be read: a process that fails while the count grew gets
//! a last line on its stderr, `task killed: out of memory (container memory
//! limit 64 MiB)`, and keeps its exit status (137 when it was the victim).
//!
//! A process runc could not start (its program missing or not executable)
//! ends [`crate::processes::ProcessEnd::NotStarted`], not with runc's exit
//! status: see `start_error.rs`.
//!
//! Not yet: there are no user namespaces (container root is host root, with
//! Docker's capability set).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gantry_wire::spec::ProcessSpec;
use serde_json::Value;
use tokio::sync::{oneshot, watch, Mutex};

use super::Origin;
use super::{BackendContainer, ContainerBackend, ContainerContext};
use crate::config::ContainerLimitDefaults;
use crate::error::AgentError;
use crate::processes::{
    spawn_child, spawn_tty_child, ProcessCommand, ProcessEnd, SignalTarget, Spawned,
};
use crate::rootfs::{self, RootfsPlan};

mod bundle;
mod oom;
mod start_error;

pub use bundle::{config_json, process_json};
pub use oom::oom_message;
use oom::{cgroup_path, OomCounter};
use start_error::explain_start;

/// How long a second process waits for the container's init to start.
const INIT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The runc backend.
pub struct RuncBackend {
    /// The runc binary and its state directory.
    runc: Arc<Runc>,
    /// The worker's limits for what a container's spec leaves unset.
    defaults: ContainerLimitDefaults,
    /// Where the kernel counts out-of-memory kills; `None` without a memory
    /// cgroup controller (kills are then not explained).
    oom: Option<Arc<OomCounter>>,
    /// Whether privileged containers are allowed (`--allow-privileged`).
    allow_privileged: bool,
}

/// Which OCI runtime drives the containers: both take the same commands
/// (`run --keep --bundle --pid-file`, `exec --process --pid-file`, `delete
/// --force`) and the same bundle, so one backend serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OciRuntime {
    /// runc (Go; the reference implementation).
    Runc,
    /// crun (C; starts a container in less time and memory).
    Crun,
}

impl OciRuntime {
    /// Its name, as the backend's.
    pub fn name(self) -> &'static str {
        match self {
            OciRuntime::Runc => "runc",
            OciRuntime::Crun => "crun",
        }
    }
}

/// How to call runc (or crun).
struct Runc {
    /// Which runtime it is.
    kind: OciRuntime,
    /// The runtime's binary.
    binary: PathBuf,
    /// `--root`: the runtime's state directory.
    state_root: PathBuf,
}

impl Runc {
    /// A command of the runtime with the global flags set. crun is told to
    /// manage cgroups as runc does (cgroupfs, the path of the bundle's
    /// `cgroupsPath`), not through systemd, so limits and out-of-memory
    /// counting are the same under both.
    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.binary);
        self.global_args(&mut cmd);
        cmd
    }

    /// Adds the global flags (see [`Self::command`]) to `cmd`.
    fn global_args(&self, cmd: &mut tokio::process::Command) {
        if self.kind == OciRuntime::Crun {
            cmd.arg("--cgroup-manager=cgroupfs");
        }
        cmd.arg("--root").arg(&self.state_root);
    }

    /// The runtime's command for `process` of the container `ctx` (under
    /// its keeper when it has one, see [`ContainerContext::command`]),
    /// writing its own failures to `log` as JSON lines (see
    /// `start_error.rs`).
    fn process_command(
        &self,
        ctx: &ContainerContext,
        process: &ProcessSpec,
        log: &Path,
    ) -> ProcessCommand {
        let mut cmd = ctx.command(process, &self.binary);
        self.global_args(&mut cmd);
        cmd.arg("--log").arg(log).args(["--log-format", "json"]);
        cmd
    }

    /// `runc delete --force`: kills the container and removes its state; a
    /// container that does not exist is fine.
    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        let out = self
            .command()
            .args(["delete", "--force", id])
            .output()
            .await
            .map_err(|e| {
                AgentError::Backend(format!("cannot run {}: {e}", self.binary.display()))
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || stderr.contains("does not exist") {
            Ok(())
        } else {
            Err(AgentError::Backend(format!(
                "{} delete {id} failed: {}",
                self.kind.name(),
                stderr.trim()
            )))
        }
    }
}

impl RuncBackend {
    /// A backend using `binary`, keeping runc's state in `state_root`, with
    /// the worker's default limits. Blocking (it probes the host's cgroup
    /// mounts): call it on a blocking thread.
    pub fn new(
        binary: PathBuf,
        state_root: PathBuf,
        defaults: ContainerLimitDefaults,
        allow_privileged: bool,
    ) -> Self {
        Self::with_runtime(
            OciRuntime::Runc,
            binary,
            state_root,
            defaults,
            allow_privileged,
        )
    }

    /// [`Self::new`] for the OCI runtime `kind` (runc or crun).
    pub fn with_runtime(
        kind: OciRuntime,
        binary: PathBuf,
        state_root: PathBuf,
        defaults: ContainerLimitDefaults,
        allow_privileged: bool,
    ) -> Self {
        let oom = OomCounter::detect();
        if oom.is_none() {
            tracing::warn!(
                "no memory cgroup controller found; out-of-memory kills will not be explained"
            );
        }
        RuncBackend {
            runc: Arc::new(Runc {
                kind,
                binary,
                state_root,
            }),
            defaults,
            oom: oom.map(Arc::new),
            allow_privileged,
        }
    }
}

/// The running init of a container.
struct Init {
    /// Becomes `Some` when `runc run` exits (the container has stopped).
    exit: watch::Receiver<Option<ProcessEnd>>,
    /// Written by runc once the container exists.
    pid_file: PathBuf,
}

/// A container of the runc backend.
struct RuncContainer {
    /// How to call runc.
    runc: Arc<Runc>,
    /// The container, its limits completed with the worker's defaults.
    ctx: Arc<ContainerContext>,
    /// Its root filesystem.
    rootfs: RootfsPlan,
    /// The current init, if one was started; held while starting a process so
    /// that two processes never both become init.
    init: Mutex<Option<Init>>,
    /// Where out-of-memory kills are counted.
    oom: Option<Arc<OomCounter>>,
}

#[async_trait]
impl ContainerBackend for RuncBackend {
    fn name(&self) -> &'static str {
        self.runc.kind.name()
    }

    async fn prepare(
        &self,
        ctx: Arc<ContainerContext>,
        origin: Origin,
    ) -> Result<Box<dyn BackendContainer>, AgentError> {
        if ctx.spec.privileged && !self.allow_privileged {
            return Err(super::privileged_refused(
                &ctx.handle,
                "this worker does not allow privileged containers (start it with --allow-privileged)",
            ));
        }
        if origin == (Origin::Found { running: false }) {
            // Its processes ended with the previous agent; clear runc's
            // state. One with an adopted process keeps running as it is.
            self.runc.delete(&ctx.handle).await?;
        }
        tokio::fs::create_dir_all(&self.runc.state_root)
            .await
            .map_err(|e| {
                AgentError::io(format!("creating {}", self.runc.state_root.display()), e)
            })?;
        // runc runs as root: an image always gets an overlay.
        let rootfs = rootfs::prepare(
            ctx.image.clone(),
            ctx.dir.clone(),
            true,
            ctx.inner_mountpoints(),
        )
        .await?;
        let mut effective = (*ctx).clone();
        effective.spec.limits = self.defaults.apply(&ctx.spec.limits);
        Ok(Box::new(RuncContainer {
            runc: self.runc.clone(),
            ctx: Arc::new(effective),
            rootfs,
            init: Mutex::new(None),
            oom: self.oom.clone(),
        }))
    }
}

impl RuncContainer {
    /// Explains an out-of-memory kill: `spawned`'s end is announced only
    /// after the kill count of the container's cgroup (`before` when the
    /// process started) was read again, and a process that failed while it
    /// grew gets [`oom_message`] as its last stderr output.
    fn explain_oom(&self, mut spawned: Spawned, before: u64) -> Spawned {
        let Some(counter) = self.oom.clone() else {
            return spawned;
        };
        let path = cgroup_path(&self.ctx.handle);
        let limit = self.ctx.spec.limits.memory;
        let mut inner = spawned.exit.clone();
        let (tx, rx) = watch::channel(None);
        let (note_tx, note_rx) = oneshot::channel();
        tokio::spawn(async move {
            let end = match inner.wait_for(Option::is_some).await {
                Ok(end) => end.clone(),
                Err(_) => None,
            };
            let end =
                end.unwrap_or_else(|| ProcessEnd::Lost("the process's waiter went away".into()));
            if matches!(end, ProcessEnd::Exited(n) if n != 0) && counter.kills(&path).await > before
            {
                let _ = note_tx.send(oom_message(limit));
            }
            let _ = tx.send(Some(end));
        });
        spawned.exit = rx;
        spawned.epilogue = Some(note_rx);
        spawned
    }

    /// The container's out-of-memory kills so far.
    async fn oom_kills(&self) -> u64 {
        match &self.oom {
            Some(counter) => counter.kills(&cgroup_path(&self.ctx.handle)).await,
            None => 0,
        }
    }

    /// Waits until `init` has started (its pid file exists); false if it
    /// exited first.
    async fn init_started(init: &Init) -> Result<bool, AgentError> {
        let mut exit = init.exit.clone();
        let deadline = tokio::time::Instant::now() + INIT_START_TIMEOUT;
        loop {
            if exit.borrow_and_update().is_some() {
                return Ok(false);
            }
            if tokio::fs::metadata(&init.pid_file).await.is_ok() {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AgentError::Backend(format!(
                    "the container's first process did not start within {}s",
                    INIT_START_TIMEOUT.as_secs()
                )));
            }
            // runc writes the pid file within milliseconds; this bounded
            // wait only covers that start-up window.
            tokio::select! {
                _ = exit.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        }
    }
}

#[async_trait]
impl BackendContainer for RuncContainer {
    async fn spawn(&self, process: &ProcessSpec) -> Result<Spawned, AgentError> {
        let user = rootfs::resolve_user(&self.rootfs, process.user.as_deref()).await?;
        let process_value = process_json(&self.ctx, process, user);
        let procs = self.ctx.dir.join("processes");
        let pid_file = procs.join(format!("{}.pid", process.id));
        let runc_log = procs.join(format!("{}.runc.log", process.id));
        let _ = tokio::fs::remove_file(&runc_log).await;
        let what = format!("runc for process {}", process.id);

        let mut init = self.init.lock().await;
        let running = match init.as_ref() {
            Some(i) => Self::init_started(i).await?,
            None => false,
        };
        if running {
            let before = self.oom_kills().await;
            let file = procs.join(format!("{}.process.json", process.id));
            write_json(&file, &process_value).await?;
            let mut cmd = self.runc.process_command(&self.ctx, process, &runc_log);
            cmd.arg("exec")
                .arg("--process")
                .arg(&file)
                .arg("--pid-file")
                .arg(&pid_file)
                .arg(&self.ctx.handle);
            let (mut spawned, pid) = start(cmd, &what, process).await?;
            spawned.signal = SignalTarget::PidFile {
                path: pid_file,
                fallback: pid as i32,
            };
            return Ok(explain_start(self.explain_oom(spawned, before), runc_log));
        }

        if init.is_some() {
            // The previous init has exited; make sure no state is left.
            self.runc.delete(&self.ctx.handle).await?;
        }
        let config = config_json(&self.ctx, &self.rootfs, process_value);
        let file = self.ctx.dir.join("config.json");
        write_json(&file, &config).await?;
        // runc creates the cgroup afresh (the kept one of an earlier init
        // was deleted above), so every kill it counts is this init's.
        let mut cmd = self.runc.process_command(&self.ctx, process, &runc_log);
        cmd.arg("run");
        // runc keeps the stopped container (and its cgroup, where its
        // out-of-memory kills are counted) until `delete`; crun (1.8) has
        // no `--keep` and removes them when the init exits.
        if self.runc.kind == OciRuntime::Runc {
            cmd.arg("--keep");
        }
        cmd.arg("--bundle")
            .arg(&self.ctx.dir)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(&self.ctx.handle);
        let (mut spawned, pid) = start(cmd, &what, process).await?;
        spawned.signal = SignalTarget::PidFile {
            path: pid_file.clone(),
            fallback: pid as i32,
        };
        let spawned = explain_start(self.explain_oom(spawned, 0), runc_log);
        *init = Some(Init {
            exit: spawned.exit.clone(),
            pid_file,
        });
        Ok(spawned)
    }

    async fn adopt(&self, id: &str, mut spawned: Spawned) -> Spawned {
        let procs = self.ctx.dir.join("processes");
        let pid_file = procs.join(format!("{id}.pid"));
        if let SignalTarget::ProcessGroup(pid) = spawned.signal {
            spawned.signal = SignalTarget::PidFile {
                path: pid_file.clone(),
                fallback: pid,
            };
        }
        let runc_log = procs.join(format!("{id}.runc.log"));
        // `runc exec` reads a process.json; the init's process is in config.json.
        let exec = tokio::fs::metadata(procs.join(format!("{id}.process.json")))
            .await
            .is_ok();
        if exec {
            // Kills counted while no agent followed it are not told apart
            // from earlier ones: counting starts at adoption.
            let before = self.oom_kills().await;
            return explain_start(self.explain_oom(spawned, before), runc_log);
        }
        let spawned = explain_start(self.explain_oom(spawned, 0), runc_log);
        *self.init.lock().await = Some(Init {
            exit: spawned.exit.clone(),
            pid_file,
        });
        spawned
    }

    async fn destroy(&self) -> Result<(), AgentError> {
        self.runc.delete(&self.ctx.handle).await?;
        rootfs::release(&self.rootfs).await
    }
}

/// Writes `value` as pretty JSON to `file` (a runc bundle's `config.json`
/// or a `process.json`).
async fn write_json(file: &Path, value: &Value) -> Result<(), AgentError> {
    let body = serde_json::to_vec_pretty(value)
        .map_err(|e| AgentError::Backend(format!("encoding {}: {e}", file.display())))?;
    tokio::fs::write(file, body)
        .await
        .map_err(|e| AgentError::io(format!("writing {}", file.display()), e))
}

/// Starts runc with pipes (under its keeper when it has one), or on a
/// terminal when the process has a TTY.
async fn start(
    mut cmd: ProcessCommand,
    what: &str,
    process: &ProcessSpec,
) -> Result<(Spawned, u32), AgentError> {
    match process.tty {
        Some(size) => spawn_tty_child(cmd.into_inner(), what, size),
        None => spawn_child(&mut cmd, what).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ResolvedMount;
    use crate::rootfs::HostBind;
    use crate::rootfs::UserIds;
    use gantry_wire::spec::{ContainerSpec, ResourceLimits, RootfsSpec};
    use serde_json::json;

    fn ctx() -> ContainerContext {
        ContainerContext {
            handle: "c1".into(),
            spec: ContainerSpec {
                handle: "c1".into(),
                rootfs: RootfsSpec::Default,
                mounts: vec![],
                env: vec!["A=1".into()],
                limits: ResourceLimits {
                    memory: Some(1 << 30),
                    cpu: Some(512),
                    pids: Some(100),
                },
                hermetic: false,
                properties: Default::default(),
                resource_type: None,
                privileged: false,
            },
            dir: "/w/containers/c1".into(),
            mounts: vec![ResolvedMount {
                source: "/w/volumes/v/data".into(),
                path: "/tmp/build/in".into(),
                readonly: true,
            }],
            image: None,
            keeper: None,
        }
    }

    fn process() -> ProcessSpec {
        ProcessSpec {
            id: "p".into(),
            path: "sh".into(),
            args: vec!["-c".into(), "true".into()],
            dir: Some("tmp/build".into()),
            env: vec!["A=2".into()],
            user: None,
            tty: None,
            input: None,
        }
    }

    #[test]
    fn config_json_mounts_tmp_before_volumes_and_sets_limits() {
        let plan = RootfsPlan {
            root: "/w/containers/c1/rootfs".into(),
            readonly: false,
            binds: vec![HostBind {
                source: "/usr".into(),
                dest: "/usr".into(),
            }],
            overlay: false,
            passwd: "/etc/passwd".into(),
            resolv_conf: true,
        };
        let c = ctx();
        let p = process_json(
            &c,
            &process(),
            UserIds {
                uid: 1000,
                gid: 1000,
            },
        );
        assert_eq!(p["args"], json!(["sh", "-c", "true"]));
        assert_eq!(p["cwd"], "/tmp/build");
        assert_eq!(p["user"], json!({ "uid": 1000, "gid": 1000 }));
        let env: Vec<String> = serde_json::from_value(p["env"].clone()).unwrap();
        assert!(env[0].starts_with("PATH="));
        assert!(env.contains(&"A=2".to_string()) && !env.contains(&"A=1".to_string()));

        let config = config_json(&c, &plan, p);
        assert_eq!(config["ociVersion"], "1.0.2");
        assert_eq!(config["root"]["path"], "/w/containers/c1/rootfs");
        let dests: Vec<&str> = config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect();
        let tmp = dests.iter().position(|d| *d == "/tmp").unwrap();
        let vol = dests.iter().position(|d| *d == "/tmp/build/in").unwrap();
        assert!(tmp < vol);
        assert!(dests.contains(&"/usr"));
        assert_eq!(config["mounts"][vol]["options"], json!(["rbind", "ro"]));
        let r = &config["linux"]["resources"];
        assert_eq!(r["memory"]["limit"], 1u64 << 30);
        assert_eq!(r["memory"]["swap"], 1u64 << 30);
        assert_eq!(r["cpu"]["shares"], 512);
        assert_eq!(r["pids"]["limit"], 100);
        let ns: Vec<&str> = config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        // Not hermetic: the host's network, and its resolv.conf.
        assert_eq!(ns, vec!["pid", "mount", "uts", "ipc"]);
        assert!(dests.contains(&"/etc/resolv.conf"));
        assert_eq!(config["linux"]["cgroupsPath"], "/gantry/c1");

        let mut hermetic = ctx();
        hermetic.spec.hermetic = true;
        let p = process_json(&hermetic, &process(), UserIds { uid: 0, gid: 0 });
        let config = config_json(&hermetic, &plan, p);
        let ns: Vec<&str> = config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert_eq!(ns, vec!["pid", "mount", "uts", "ipc", "network"]);
        let mounts = config["mounts"].as_array().unwrap();
        assert!(!mounts
            .iter()
            .any(|m| m["destination"] == "/etc/resolv.conf"));
    }

    #[test]
    fn only_a_privileged_container_gets_every_capability_and_device() {
        let plan = RootfsPlan {
            root: "/w/containers/c1/rootfs".into(),
            readonly: false,
            binds: vec![],
            overlay: false,
            passwd: "/etc/passwd".into(),
            resolv_conf: false,
        };
        let root = UserIds { uid: 0, gid: 0 };
        for privileged in [false, true] {
            let mut c = ctx();
            c.spec.privileged = privileged;
            let p = process_json(&c, &process(), root);
            let caps = p["capabilities"]["bounding"].as_array().unwrap().clone();
            assert_eq!(caps.contains(&json!("CAP_SYS_ADMIN")), privileged);
            assert!(caps.contains(&json!("CAP_CHOWN")));
            let config = config_json(&c, &plan, p);
            let linux = &config["linux"];
            assert_eq!(linux["resources"]["devices"][0]["allow"], privileged);
            assert_eq!(
                linux["maskedPaths"].as_array().unwrap().is_empty(),
                privileged
            );
            assert_eq!(
                linux["readonlyPaths"].as_array().unwrap().is_empty(),
                privileged
            );
            assert!(linux.get("seccomp").is_none());
        }
    }

    #[test]
    fn the_oom_message_names_the_limit() {
        assert_eq!(
            oom_message(Some(64 << 20)),
            "task killed: out of memory (container memory limit 64 MiB)\n"
        );
        assert!(oom_message(Some(3 << 30)).contains("3 GiB"));
        assert!(oom_message(Some(1000)).contains("1000 bytes"));
        assert!(oom_message(None).contains("host ran out of memory"));
    }

    #[test]
    fn the_memory_controller_is_found_where_this_host_has_one() {
        let Some(counter) = OomCounter::detect() else {
            assert!(!Path::new("/sys/fs/cgroup/memory/memory.oom_control").exists());
            return;
        };
        assert!(counter.hierarchy.join(counter.file).exists() || counter.file == "memory.events");
    }
}
