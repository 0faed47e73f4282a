//! Container backends: how a container's processes are isolated.
//!
//! A backend prepares a container (its root filesystem, bundle or directory)
//! and spawns processes in it; the container registry does the bookkeeping
//! (handles, logs, exit statuses) the same way for every backend. Adding a
//! backend is one more file here plus one arm in [`choose`] and [`select`].

pub mod bwrap;
pub mod local;
pub mod runc;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use gantry_wire::spec::{ContainerSpec, ProcessSpec};

use super::error::AgentError;
use super::processes::{ProcessCommand, Spawned};
use crate::config::WorkerConfig;

/// `PATH` every process starts with (the container's or process's env may
/// replace it).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `TERM` of a process with a TTY (the container's or process's env may
/// replace it).
pub const DEFAULT_TERM: &str = "TERM=xterm";

/// A volume mounted into a container, resolved to a host directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMount {
    /// The volume's data directory on the host.
    pub source: PathBuf,
    /// Absolute path inside the container.
    pub path: String,
    /// Mounted read-only.
    pub readonly: bool,
}

/// Everything a backend needs to know about a container.
#[derive(Debug, Clone)]
pub struct ContainerContext {
    /// Its handle (also the runc container id).
    pub handle: String,
    /// What it was created with.
    pub spec: ContainerSpec,
    /// `WORK_DIR/containers/<handle>`: bundle, rootfs, process logs.
    pub dir: PathBuf,
    /// Its volume mounts, parents before children.
    pub mounts: Vec<ResolvedMount>,
    /// The image directory, or `None` for the default read-only view of the host.
    pub image: Option<PathBuf>,
    /// The keeper program processes without a TTY run under (see
    /// `keeper.rs`); `None`: they are started directly.
    pub keeper: Option<PathBuf>,
}

impl ContainerContext {
    /// The command that starts `program` for `process`: under the keeper
    /// when there is one and the process has no TTY, else directly.
    pub fn command(
        &self,
        process: &ProcessSpec,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> ProcessCommand {
        match (&self.keeper, process.tty) {
            (Some(keeper), None) => {
                ProcessCommand::kept(keeper, &self.dir.join("processes"), &process.id, program)
            }
            _ => ProcessCommand::direct(program),
        }
    }

    /// Mountpoints that fall inside the host directories of the default
    /// view and must be made room for (see `rootfs::host_view_with`): the
    /// resource type's directory, if the container mounts one.
    pub fn inner_mountpoints(&self) -> Vec<String> {
        match &self.spec.resource_type {
            Some(_) => vec![super::resource_types::RESOURCE_DIR.to_string()],
            None => Vec::new(),
        }
    }
}

/// A container backend (`runc`, `bwrap`, `local`).
#[async_trait]
pub trait ContainerBackend: Send + Sync {
    /// Its name, as advertised to the web node.
    fn name(&self) -> &'static str;

    /// Sets up a container: a new one, or one found on disk at start-up
    /// (see [`Origin`]). Cleans up after itself on failure.
    async fn prepare(
        &self,
        ctx: Arc<ContainerContext>,
        origin: Origin,
    ) -> Result<Box<dyn BackendContainer>, AgentError>;
}

/// Where a container being prepared comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// It is being created.
    New,
    /// It was found on disk at start-up. `running`: a process of it still
    /// runs under its keeper and is adopted, so whatever runs in the
    /// container must be left alone; otherwise its processes are gone.
    Found {
        /// Whether a kept process of it still runs.
        running: bool,
    },
}

/// A prepared container in a backend.
#[async_trait]
pub trait BackendContainer: Send + Sync {
    /// Starts a process with stdin, stdout and stderr piped
    /// (`processes::spawn_child`), or on a terminal of its own when
    /// `process.tty` asks for one (`processes::spawn_tty_child`).
    async fn spawn(&self, process: &ProcessSpec) -> Result<Spawned, AgentError>;

    /// Takes back process `id`, found at start-up kept by its keeper (its
    /// end announced when the keeper ends, at once if it has): wraps its
    /// end in the judges [`Self::spawn`] would have, and sets how it is
    /// signalled. By default it is taken as it is.
    async fn adopt(&self, id: &str, spawned: Spawned) -> Spawned {
        let _ = id;
        spawned
    }

    /// Kills whatever still runs in it and undoes `prepare` (the registry
    /// removes the container's directory afterwards).
    async fn destroy(&self) -> Result<(), AgentError>;
}

/// Capabilities of an unprivileged container's processes (Docker's
/// default set): runc's bundles, and bwrap's sandboxes of root when the
/// agent runs as root (bwrap would otherwise keep every capability).
pub(crate) const CAPABILITIES: &[&str] = &[
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

/// The environment of a process: `PATH`, then `defaults`, the container's
/// env and the process's env; a later `KEY=` replaces an earlier one in place.
pub fn process_env(defaults: &[String], container: &[String], process: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let all = std::iter::once(DEFAULT_PATH.to_string())
        .chain(defaults.iter().cloned())
        .chain(container.iter().cloned())
        .chain(process.iter().cloned());
    for kv in all {
        let key = kv.split('=').next().unwrap_or_default().to_string();
        match out
            .iter_mut()
            .find(|e| e.split('=').next() == Some(key.as_str()))
        {
            Some(slot) => *slot = kv,
            None => out.push(kv),
        }
    }
    out
}

/// Which backend to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendKind {
    /// runc, at this path.
    Runc(PathBuf),
    /// crun, at this path (the runc backend driving crun).
    Crun(PathBuf),
    /// bubblewrap, at this path.
    Bwrap(PathBuf),
    /// No isolation.
    Local,
}

/// What the host offers, as far as backend selection cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// Running on Linux.
    pub linux: bool,
    /// Running as root.
    pub root: bool,
    /// The runc binary, if one is executable.
    pub runc: Option<PathBuf>,
    /// The crun binary, if one is executable.
    pub crun: Option<PathBuf>,
    /// Why crun cannot run containers here although installed: a hybrid
    /// cgroup layout whose v2 hierarchy holds controllers, which crun
    /// refuses.
    pub crun_blocked: Option<String>,
    /// The bwrap binary, if one is executable.
    pub bwrap: Option<PathBuf>,
}

impl HostFacts {
    /// Looks at this host; `runc_path` is the configured runc binary.
    pub fn detect(runc_path: &str) -> Self {
        HostFacts {
            linux: cfg!(target_os = "linux"),
            // SAFETY: geteuid has no preconditions and cannot fail.
            root: unsafe { libc::geteuid() } == 0,
            runc: find_executable(runc_path),
            crun: find_executable("crun"),
            crun_blocked: hybrid_v2_controllers(),
            bwrap: find_executable("bwrap"),
        }
    }
}

/// On a hybrid cgroup layout (v1 controllers and a v2 hierarchy at
/// `/sys/fs/cgroup/unified`), the controllers the v2 hierarchy holds, as
/// the reason crun cannot run there; `None` otherwise.
fn hybrid_v2_controllers() -> Option<String> {
    let held = std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").ok()?;
    let held = held.trim();
    (!held.is_empty()).then(|| {
        format!(
            "this host's cgroups are hybrid and cgroup v2 holds {held:?}, which crun refuses; \
             mount it as v1 (e.g. mount -t cgroup -o {c} {c} /sys/fs/cgroup/{c}) or use runc",
            c = held.split_whitespace().next().unwrap_or_default()
        )
    })
}

/// Picks the backend: the requested one (an error when it cannot work here),
/// else runc when running as root on Linux with runc installed, else crun
/// when so with crun installed (runc first: it is the reference runtime,
/// and a host that has it chose it), else bwrap when installed on Linux,
/// else local.
pub fn choose(requested: Option<&str>, host: &HostFacts) -> Result<BackendKind, String> {
    let runc_ok = || -> Result<BackendKind, String> {
        if !host.linux {
            return Err("backend runc needs Linux".into());
        }
        if !host.root {
            return Err(
                "backend runc needs root; run the worker as root or use backend \"local\"".into(),
            );
        }
        host.runc.clone().map(BackendKind::Runc).ok_or_else(|| {
            "backend runc: runc binary not found or not executable; install runc or set worker.runc_path".into()
        })
    };
    let crun_ok = || -> Result<BackendKind, String> {
        if !host.linux {
            return Err("backend crun needs Linux".into());
        }
        if !host.root {
            return Err(
                "backend crun needs root; run the worker as root or use backend \"local\"".into(),
            );
        }
        if let Some(why) = &host.crun_blocked {
            return Err(format!("backend crun: {why}"));
        }
        host.crun.clone().map(BackendKind::Crun).ok_or_else(|| {
            "backend crun: crun binary not found or not executable; install crun".into()
        })
    };
    let bwrap_ok = || -> Result<BackendKind, String> {
        if !host.linux {
            return Err("backend bwrap needs Linux".into());
        }
        host.bwrap.clone().map(BackendKind::Bwrap).ok_or_else(|| {
            "backend bwrap: bwrap binary not found or not executable; install bubblewrap".into()
        })
    };
    match requested.map(str::trim) {
        None | Some("") => Ok(runc_ok()
            .or_else(|_| crun_ok())
            .or_else(|_| bwrap_ok())
            .unwrap_or(BackendKind::Local)),
        Some("runc") => runc_ok(),
        Some("crun") => crun_ok(),
        Some("bwrap") => bwrap_ok(),
        Some("local") => Ok(BackendKind::Local),
        Some(other) => Err(format!(
            "unknown backend {other:?}; use \"runc\", \"crun\", \"bwrap\" or \"local\" (or leave it unset to detect)"
        )),
    }
}

/// Builds the backend for this worker (see [`choose`]). Blocking (it
/// probes the host for binaries and cgroup mounts): call it on a blocking
/// thread, as [`crate::start_worker`] does. `allow_privileged` is refused
/// unless the backend is runc (bwrap cannot give a sandbox every
/// capability, and local has no container to give them to).
pub fn select(
    cfg: &WorkerConfig,
    work_dir: &Path,
) -> Result<Arc<dyn ContainerBackend>, AgentError> {
    let host = HostFacts::detect(&cfg.runc_path);
    let kind = choose(cfg.backend.as_deref(), &host).map_err(AgentError::BadRequest)?;
    check_privileged(&kind, cfg.identity.allow_privileged).map_err(AgentError::BadRequest)?;
    Ok(match kind {
        BackendKind::Runc(path) => Arc::new(runc::RuncBackend::new(
            path,
            work_dir.join("runc"),
            cfg.default_limits,
            cfg.identity.allow_privileged,
        )),
        BackendKind::Crun(path) => Arc::new(runc::RuncBackend::with_runtime(
            runc::OciRuntime::Crun,
            path,
            work_dir.join("crun"),
            cfg.default_limits,
            cfg.identity.allow_privileged,
        )),
        BackendKind::Bwrap(path) => Arc::new(bwrap::BwrapBackend::new(path)),
        BackendKind::Local => Arc::new(local::LocalBackend),
    })
}

/// Whether backend `kind` may allow privileged containers: only runc can.
pub fn check_privileged(kind: &BackendKind, allow_privileged: bool) -> Result<(), String> {
    let name = match kind {
        BackendKind::Runc(_) | BackendKind::Crun(_) => return Ok(()),
        _ if !allow_privileged => return Ok(()),
        BackendKind::Bwrap(_) => "bwrap",
        BackendKind::Local => "local",
    };
    Err(format!(
        "allow_privileged: backend {name} cannot run privileged containers; use backend runc or crun, or drop --allow-privileged"
    ))
}

/// The refusal of a privileged container by a worker that does not allow
/// them (`backend`: why not).
pub fn privileged_refused(handle: &str, why: &str) -> AgentError {
    AgentError::BadRequest(format!("container {handle} is privileged, but {why}"))
}

/// Resolves an executable: a path with a `/` as is, else searched in `PATH`
/// and the usual sbin directories. `None` unless it is an executable file.
pub fn find_executable(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| executable(p));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(linux: bool, root: bool, runc: bool) -> HostFacts {
        HostFacts {
            linux,
            root,
            runc: runc.then(|| PathBuf::from("/usr/sbin/runc")),
            crun: None,
            crun_blocked: None,
            bwrap: None,
        }
    }

    #[test]
    fn crun_is_chosen_when_asked_or_when_runc_is_missing() {
        let crun = Ok(BackendKind::Crun("/usr/bin/crun".into()));
        let mut both = with_bwrap(host(true, true, true));
        both.crun = Some(PathBuf::from("/usr/bin/crun"));
        // runc first when both are installed; crun when asked.
        assert_eq!(
            choose(None, &both),
            Ok(BackendKind::Runc("/usr/sbin/runc".into()))
        );
        assert_eq!(choose(Some("crun"), &both), crun);
        // crun, not bwrap, when runc is missing.
        let mut no_runc = with_bwrap(host(true, true, false));
        no_runc.crun = Some(PathBuf::from("/usr/bin/crun"));
        assert_eq!(choose(None, &no_runc), crun);
        // Not as an ordinary user, and not when it is not installed.
        let mut user = no_runc.clone();
        user.root = false;
        assert!(choose(Some("crun"), &user).unwrap_err().contains("root"));
        assert!(choose(Some("crun"), &host(true, true, true))
            .unwrap_err()
            .contains("install crun"));
        // Nor on cgroups crun refuses, saying why.
        let mut hybrid = no_runc.clone();
        hybrid.crun_blocked = Some("this host's cgroups are hybrid".into());
        assert!(choose(Some("crun"), &hybrid)
            .unwrap_err()
            .contains("hybrid"));
        // Detection passes it over for the next backend.
        assert_eq!(
            choose(None, &hybrid),
            Ok(BackendKind::Bwrap("/usr/bin/bwrap".into()))
        );
    }

    fn with_bwrap(mut host: HostFacts) -> HostFacts {
        host.bwrap = Some(PathBuf::from("/usr/bin/bwrap"));
        host
    }

    #[test]
    fn detection_prefers_runc_then_bwrap_then_local() {
        let bwrap = Ok(BackendKind::Bwrap("/usr/bin/bwrap".into()));
        assert_eq!(
            choose(None, &with_bwrap(host(true, true, true))),
            Ok(BackendKind::Runc("/usr/sbin/runc".into()))
        );
        assert_eq!(choose(None, &with_bwrap(host(true, false, true))), bwrap);
        assert_eq!(choose(None, &with_bwrap(host(true, true, false))), bwrap);
        assert_eq!(
            choose(None, &with_bwrap(host(false, true, true))),
            Ok(BackendKind::Local)
        );
        assert_eq!(
            choose(Some("bwrap"), &with_bwrap(host(true, true, true))),
            bwrap
        );
        assert!(choose(Some("bwrap"), &host(true, true, true))
            .unwrap_err()
            .contains("install bubblewrap"));
    }

    #[test]
    fn detection_prefers_runc_as_root_on_linux_and_falls_back_to_local() {
        assert_eq!(
            choose(None, &host(true, true, true)),
            Ok(BackendKind::Runc("/usr/sbin/runc".into()))
        );
        assert_eq!(
            choose(None, &host(true, false, true)),
            Ok(BackendKind::Local)
        );
        assert_eq!(
            choose(None, &host(true, true, false)),
            Ok(BackendKind::Local)
        );
        assert_eq!(
            choose(None, &host(false, true, true)),
            Ok(BackendKind::Local)
        );
    }

    #[test]
    fn a_requested_backend_that_cannot_work_is_an_error_saying_why() {
        assert!(choose(Some("runc"), &host(true, false, true))
            .unwrap_err()
            .contains("root"));
        assert!(choose(Some("runc"), &host(true, true, false))
            .unwrap_err()
            .contains("runc_path"));
        assert_eq!(
            choose(Some("local"), &host(true, true, true)),
            Ok(BackendKind::Local)
        );
        assert!(choose(Some("docker"), &host(true, true, true))
            .unwrap_err()
            .contains("unknown backend"));
    }

    #[test]
    fn only_runc_may_allow_privileged_containers() {
        let runc = BackendKind::Runc("/usr/sbin/runc".into());
        let bwrap = BackendKind::Bwrap("/usr/bin/bwrap".into());
        assert_eq!(check_privileged(&runc, true), Ok(()));
        assert_eq!(check_privileged(&bwrap, false), Ok(()));
        assert_eq!(check_privileged(&BackendKind::Local, false), Ok(()));
        let err = check_privileged(&bwrap, true).unwrap_err();
        assert!(err.contains("backend bwrap cannot run privileged"), "{err}");
        assert!(check_privileged(&BackendKind::Local, true)
            .unwrap_err()
            .contains("backend local"));
    }

    #[test]
    fn later_env_entries_replace_earlier_ones_in_place() {
        let env = process_env(
            &["HOME=/root".into()],
            &["A=1".into(), "PATH=/bin".into()],
            &["A=2".into(), "B=x=y".into()],
        );
        assert_eq!(env, vec!["PATH=/bin", "HOME=/root", "A=2", "B=x=y"]);
    }

    #[test]
    fn executables_are_found_on_the_path() {
        assert!(find_executable("sh").is_some());
        assert!(find_executable("/nonexistent/runc").is_none());
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("runc");
        std::fs::write(&plain, "not executable").unwrap();
        assert!(find_executable(plain.to_str().unwrap()).is_none());
    }
}
