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
//! Not yet: there are no user namespaces (container root is host root, with
//! Docker's capability set).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gantry_wire::spec::ProcessSpec;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch, Mutex};

use super::{process_env, BackendContainer, ContainerBackend, ContainerContext};
use crate::config::ContainerLimitDefaults;
use crate::error::AgentError;
use crate::processes::{spawn_child, spawn_tty_child, ProcessEnd, SignalTarget, Spawned};
use crate::rootfs::{self, RootfsPlan, UserIds};

/// How long a second process waits for the container's init to start.
const INIT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// Capabilities of container processes (Docker's default set).
const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Paths of `/proc` and `/sys` hidden from containers (runc's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];

/// Paths of `/proc` made read-only in containers (runc's defaults).
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The runc backend.
pub struct RuncBackend {
    /// The runc binary and its state directory.
    runc: Arc<Runc>,
    /// The worker's limits for what a container's spec leaves unset.
    defaults: ContainerLimitDefaults,
    /// Where the kernel counts out-of-memory kills; `None` without a memory
    /// cgroup controller (kills are then not explained).
    oom: Option<Arc<OomCounter>>,
}

/// Where the kernel counts the out-of-memory kills of containers' cgroups.
#[derive(Debug)]
struct OomCounter {
    /// The memory controller's hierarchy (`/sys/fs/cgroup/memory` on cgroup
    /// v1, `/sys/fs/cgroup` on v2).
    hierarchy: PathBuf,
    /// `memory.oom_control` (v1) or `memory.events` (v2).
    file: &'static str,
}

impl OomCounter {
    /// Finds the memory controller in `/proc/self/mountinfo`: a v1
    /// hierarchy with `memory`, else a v2 one offering it. Only hierarchies
    /// mounted from their root qualify (cgroup paths are taken from there).
    /// Reads procfs and cgroupfs: blocking, called (through
    /// [`RuncBackend::new`]) on a blocking thread when the agent starts.
    fn detect() -> Option<Self> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mut v2 = None;
        for line in info.lines() {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let sys: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(point), Some(fstype)) =
                (fields.get(3), fields.get(4), sys.first())
            else {
                continue;
            };
            if *root != "/" {
                continue;
            }
            let options = sys.get(2).copied().unwrap_or_default();
            if *fstype == "cgroup" && options.split(',').any(|o| o == "memory") {
                return Some(OomCounter {
                    hierarchy: PathBuf::from(point),
                    file: "memory.oom_control",
                });
            }
            if *fstype == "cgroup2" {
                let controllers = Path::new(point).join("cgroup.controllers");
                let offered = std::fs::read_to_string(controllers).unwrap_or_default();
                if offered.split_whitespace().any(|c| c == "memory") {
                    v2 = Some(PathBuf::from(point));
                }
            }
        }
        v2.map(|hierarchy| OomCounter {
            hierarchy,
            file: "memory.events",
        })
    }

    /// Out-of-memory kills so far in the cgroup `path` (as in config.json);
    /// 0 when it does not exist (yet).
    async fn kills(&self, path: &str) -> u64 {
        let file = self
            .hierarchy
            .join(path.trim_start_matches('/'))
            .join(self.file);
        let text = tokio::fs::read_to_string(&file).await.unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The cgroup of a container, as config.json's `cgroupsPath`.
fn cgroup_path(handle: &str) -> String {
    format!("/gantry/{handle}")
}

/// `64 MiB`, `1 GiB`, or plain bytes.
fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(size, _)| n >= *size && n.is_multiple_of(*size))
        .map(|(size, unit)| format!("{} {unit}", n / size))
        .unwrap_or_else(|| format!("{n} bytes"))
}

/// The line added to the stderr of a process that failed after an
/// out-of-memory kill in its container.
pub fn oom_message(memory_limit: Option<u64>) -> String {
    match memory_limit {
        Some(limit) => format!(
            "task killed: out of memory (container memory limit {})\n",
            human_bytes(limit)
        ),
        None => "task killed: out of memory (the worker host ran out of memory)\n".into(),
    }
}

/// How to call runc.
struct Runc {
    /// The runc binary.
    binary: PathBuf,
    /// `--root`: runc's state directory.
    state_root: PathBuf,
}

impl Runc {
    /// A runc command with the global flags set.
    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg("--root").arg(&self.state_root);
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
                "runc delete {id} failed: {}",
                stderr.trim()
            )))
        }
    }
}

impl RuncBackend {
    /// A backend using `binary`, keeping runc's state in `state_root`, with
    /// the worker's default limits. Blocking (it probes the host's cgroup
    /// mounts): call it on a blocking thread.
    pub fn new(binary: PathBuf, state_root: PathBuf, defaults: ContainerLimitDefaults) -> Self {
        let oom = OomCounter::detect();
        if oom.is_none() {
            tracing::warn!(
                "no memory cgroup controller found; out-of-memory kills will not be explained"
            );
        }
        RuncBackend {
            runc: Arc::new(Runc { binary, state_root }),
            defaults,
            oom: oom.map(Arc::new),
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
        "runc"
    }

    async fn prepare(
        &self,
        ctx: Arc<ContainerContext>,
        recovered: bool,
    ) -> Result<Box<dyn BackendContainer>, AgentError> {
        if recovered {
            // Its processes died with the previous agent; clear runc's state.
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
            let mut cmd = self.runc.command();
            cmd.arg("exec")
                .arg("--process")
                .arg(&file)
                .arg("--pid-file")
                .arg(&pid_file)
                .arg(&self.ctx.handle);
            let (mut spawned, pid) = start(cmd, &what, process)?;
            spawned.signal = SignalTarget::PidFile {
                path: pid_file,
                fallback: pid as i32,
            };
            return Ok(self.explain_oom(spawned, before));
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
        let mut cmd = self.runc.command();
        cmd.arg("run")
            .arg("--keep")
            .arg("--bundle")
            .arg(&self.ctx.dir)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(&self.ctx.handle);
        let (mut spawned, pid) = start(cmd, &what, process)?;
        spawned.signal = SignalTarget::PidFile {
            path: pid_file.clone(),
            fallback: pid as i32,
        };
        let spawned = self.explain_oom(spawned, 0);
        *init = Some(Init {
            exit: spawned.exit.clone(),
            pid_file,
        });
        Ok(spawned)
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

/// Starts runc with pipes, or on a terminal when the process has a TTY.
fn start(
    mut cmd: tokio::process::Command,
    what: &str,
    process: &ProcessSpec,
) -> Result<(Spawned, u32), AgentError> {
    match process.tty {
        Some(size) => spawn_tty_child(cmd, what, size),
        None => spawn_child(&mut cmd, what),
    }
}

/// The `process` object of config.json (and of `runc exec --process`).
pub fn process_json(ctx: &ContainerContext, p: &ProcessSpec, user: UserIds) -> Value {
    let cwd = match p.dir.as_deref() {
        None | Some("") => "/".to_string(),
        Some(d) if d.starts_with('/') => d.to_string(),
        Some(d) => format!("/{d}"),
    };
    let home = if user.uid == 0 {
        "HOME=/root"
    } else {
        "HOME=/tmp"
    };
    let args: Vec<&str> = std::iter::once(p.path.as_str())
        .chain(p.args.iter().map(String::as_str))
        .collect();
    let mut defaults = vec![home.to_string()];
    if p.tty.is_some() {
        defaults.push(super::DEFAULT_TERM.to_string());
    }
    let mut process = json!({
        "terminal": p.tty.is_some(),
        "user": { "uid": user.uid, "gid": user.gid },
        "args": args,
        "env": process_env(&defaults, &ctx.spec.env, &p.env),
        "cwd": cwd,
        "capabilities": {
            "bounding": CAPABILITIES,
            "effective": CAPABILITIES,
            "permitted": CAPABILITIES,
        },
        "noNewPrivileges": false,
    });
    if let Some(size) = p.tty {
        process["consoleSize"] = json!({ "height": size.rows, "width": size.columns });
    }
    process
}

/// One entry of config.json's `mounts`.
fn mount(dest: &str, kind: &str, source: &str, options: &[&str]) -> Value {
    json!({ "destination": dest, "type": kind, "source": source, "options": options })
}

/// config.json of a container whose init runs `process`.
pub fn config_json(ctx: &ContainerContext, rootfs: &RootfsPlan, process: Value) -> Value {
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
    ];
    for b in &rootfs.binds {
        mounts.push(mount(
            &b.dest,
            "bind",
            &b.source.to_string_lossy(),
            &["rbind", "ro", "nosuid", "nodev"],
        ));
    }
    // /tmp before the volumes, so that volumes can live under /tmp.
    mounts.push(mount(
        "/tmp",
        "tmpfs",
        "tmpfs",
        &["nosuid", "nodev", "mode=1777"],
    ));
    for m in &ctx.mounts {
        let mode = if m.readonly { "ro" } else { "rw" };
        mounts.push(mount(
            &m.path,
            "bind",
            &m.source.to_string_lossy(),
            &["rbind", mode],
        ));
    }

    if rootfs.resolv_conf && !ctx.spec.hermetic {
        mounts.push(mount(
            "/etc/resolv.conf",
            "bind",
            "/etc/resolv.conf",
            &["rbind", "ro", "nosuid", "nodev"],
        ));
    }

    let mut resources = json!({ "devices": [{ "allow": false, "access": "rwm" }] });
    let limits = &ctx.spec.limits;
    if let Some(memory) = limits.memory {
        // swap = memory + swap: the container never swaps, so it is killed
        // at its limit instead of slowing the host down.
        resources["memory"] = json!({ "limit": memory, "swap": memory });
    }
    if let Some(shares) = limits.cpu {
        resources["cpu"] = json!({ "shares": shares });
    }
    if let Some(pids) = limits.pids {
        resources["pids"] = json!({ "limit": pids });
    }
    let hostname: String = ctx.handle.chars().take(63).collect();
    let mut namespaces = vec![
        json!({ "type": "pid" }),
        json!({ "type": "mount" }),
        json!({ "type": "uts" }),
        json!({ "type": "ipc" }),
    ];
    if ctx.spec.hermetic {
        // A new network namespace: runc brings its loopback up.
        namespaces.push(json!({ "type": "network" }));
    }
    json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": { "path": rootfs.root.to_string_lossy(), "readonly": rootfs.readonly },
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "resources": resources,
            "cgroupsPath": cgroup_path(&ctx.handle),
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ResolvedMount;
    use crate::rootfs::HostBind;
    use gantry_wire::spec::{ContainerSpec, ResourceLimits, RootfsSpec};

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
            },
            dir: "/w/containers/c1".into(),
            mounts: vec![ResolvedMount {
                source: "/w/volumes/v/data".into(),
                path: "/tmp/build/in".into(),
                readonly: true,
            }],
            image: None,
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
