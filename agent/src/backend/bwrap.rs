//! The `bwrap` backend: bubblewrap sandboxes, for workers without root.
//!
//! Every process runs in a sandbox of its own made by Debian's `bwrap`: new
//! pid, ipc, uts and mount namespaces (plus a network namespace with only a
//! loopback interface, which bwrap brings up, when the container is
//! hermetic; otherwise the host's network), the container's root filesystem
//! bound at `/`, a new `/proc`, a minimal `/dev`, a tmpfs `/tmp` and the
//! volumes bound below it. The process is pid 1 of its namespace
//! (`--as-pid-1`, as under runc) and is killed with bwrap
//! (`--die-with-parent`); bwrap's exit status is the process's.
//!
//! Root filesystems are put together as for runc (see `agent::rootfs`): the
//! default read-only view of the host (an empty directory plus read-only
//! binds of the host's `/usr`, `/etc`, ...), or an image directory under a
//! copy-on-write overlay mounted by the agent when it runs as root; without
//! root the image is bound read-only.
//!
//! Users: a process runs as `ProcessSpec::user` looked up in the root
//! filesystem's `/etc/passwd`. Without root, bwrap always makes a user
//! namespace mapping that uid to the agent's own user. As root, a process
//! running as root gets no user namespace and keeps only the capabilities
//! runc gives an unprivileged container (Docker's default set); another
//! user gets one mapping its uid to host root (bwrap cannot map it to the
//! same host uid), so inside it is that user without any capability, while
//! its files on the host belong to root.
//!
//! A process bwrap could not start (its program missing or not
//! executable) ends [`ProcessEnd::NotStarted`]: bwrap reports
//! `{"exit-code": N}` on its `--json-status-fd` only once the program was
//! executed, and exits 1 when it could not execute it (saying why on
//! stderr, the process's own).
//!
//! Not like runc: there are no resource limits (bwrap has no cgroups), and
//! the processes of one container do not share namespaces: each is a sandbox
//! of its own over the same root filesystem and volumes.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use gantry_wire::spec::ProcessSpec;

use super::{process_env, BackendContainer, ContainerBackend, ContainerContext, CAPABILITIES};
use crate::error::AgentError;
use crate::processes::{judge_end, spawn_child, spawn_tty_child, ProcessEnd, Spawned};
use crate::rootfs::{self, RootfsPlan, UserIds};

/// The bwrap backend.
pub struct BwrapBackend {
    /// The bwrap binary.
    binary: PathBuf,
    /// Whether the agent runs as root (overlays, no user namespace for root).
    root: bool,
}

impl BwrapBackend {
    /// A backend running `binary`.
    pub fn new(binary: PathBuf) -> Self {
        BwrapBackend {
            binary,
            // SAFETY: geteuid has no preconditions and cannot fail.
            root: unsafe { libc::geteuid() } == 0,
        }
    }
}

/// A container of the bwrap backend: its root filesystem, ready to bind.
struct BwrapContainer {
    /// The bwrap binary.
    binary: PathBuf,
    /// Whether the agent runs as root.
    agent_root: bool,
    /// The container.
    ctx: Arc<ContainerContext>,
    /// Its root filesystem.
    rootfs: RootfsPlan,
}

#[async_trait]
impl ContainerBackend for BwrapBackend {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    async fn prepare(
        &self,
        ctx: Arc<ContainerContext>,
        _origin: super::Origin,
    ) -> Result<Box<dyn BackendContainer>, AgentError> {
        if ctx.spec.privileged {
            return Err(super::privileged_refused(
                &ctx.handle,
                "backend bwrap cannot run privileged containers",
            ));
        }
        let rootfs = rootfs::prepare(
            ctx.image.clone(),
            ctx.dir.clone(),
            self.root,
            ctx.inner_mountpoints(),
        )
        .await?;
        Ok(Box::new(BwrapContainer {
            binary: self.binary.clone(),
            agent_root: self.root,
            ctx,
            rootfs,
        }))
    }
}

#[async_trait]
impl BackendContainer for BwrapContainer {
    async fn spawn(&self, process: &ProcessSpec) -> Result<Spawned, AgentError> {
        let user = rootfs::resolve_user(&self.rootfs, process.user.as_deref()).await?;
        let args = bwrap_args(&self.ctx, &self.rootfs, process, user, self.agent_root);
        let home = if user.uid == 0 {
            "HOME=/root"
        } else {
            "HOME=/tmp"
        };
        let mut defaults = vec![home.to_string()];
        if process.tty.is_some() {
            defaults.push(super::DEFAULT_TERM.to_string());
        }
        let env = process_env(&defaults, &self.ctx.spec.env, &process.env);
        // bwrap writes its status to this file, open in the child as the
        // same descriptor (no longer closed on exec).
        let status_path = self
            .ctx
            .dir
            .join("processes")
            .join(format!("{}.bwrap-status.json", process.id));
        let status = std::fs::File::create(&status_path)
            .map_err(|e| AgentError::io(format!("creating {}", status_path.display()), e))?;
        let status_fd = std::os::fd::AsRawFd::as_raw_fd(&status);
        let mut cmd = self.ctx.command(process, &self.binary);
        cmd.arg("--json-status-fd")
            .arg(status_fd.to_string())
            .args(args)
            .env_clear();
        // SAFETY: fcntl is async-signal-safe and touches only this descriptor.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(status_fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        for kv in &env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        let what = format!("bwrap for process {}", process.id);
        let (spawned, _pid) = match process.tty {
            Some(size) => spawn_tty_child(cmd.into_inner(), &what, size)?,
            None => spawn_child(&mut cmd, &what).await?,
        };
        drop(status);
        Ok(judge_by_status(spawned, status_path))
    }

    async fn adopt(&self, id: &str, spawned: Spawned) -> Spawned {
        let status_path = self
            .ctx
            .dir
            .join("processes")
            .join(format!("{id}.bwrap-status.json"));
        judge_by_status(spawned, status_path)
    }

    async fn destroy(&self) -> Result<(), AgentError> {
        // The registry has killed the processes (bwrap's sandboxes die with
        // it); only an overlay needs undoing.
        rootfs::release(&self.rootfs).await
    }
}

/// Announces `spawned`'s end once bwrap's status file was read: bwrap's
/// own failures exit 1, and a status without an exit code means the
/// program was never executed ([`ProcessEnd::NotStarted`]).
fn judge_by_status(spawned: Spawned, status_path: PathBuf) -> Spawned {
    judge_end(spawned, |end| async move {
        if end != ProcessEnd::Exited(1) {
            return end;
        }
        let status = tokio::fs::read_to_string(&status_path)
            .await
            .unwrap_or_default();
        if status.contains("\"exit-code\"") {
            return end;
        }
        ProcessEnd::NotStarted(
            "bwrap could not execute it (its reason is the last line of its stderr)".into(),
        )
    })
}

/// The working directory of a process: absolute, `/` by default.
fn cwd(process: &ProcessSpec) -> String {
    match process.dir.as_deref() {
        None | Some("") => "/".to_string(),
        Some(d) if d.starts_with('/') => d.to_string(),
        Some(d) => format!("/{d}"),
    }
}

/// bwrap's arguments for `process` in a container, ending with the command.
pub fn bwrap_args(
    ctx: &ContainerContext,
    rootfs: &RootfsPlan,
    process: &ProcessSpec,
    user: UserIds,
    agent_root: bool,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
        a.extend(items.iter().map(|i| i.as_ref().to_os_string()));
    };
    let hostname: String = ctx.handle.chars().take(63).collect();
    push(&[
        &"--die-with-parent",
        &"--as-pid-1",
        &"--unshare-pid",
        &"--unshare-ipc",
        &"--unshare-uts",
        &"--unshare-cgroup-try",
        &"--hostname",
        &hostname,
    ]);
    if ctx.spec.hermetic {
        push(&[&"--unshare-net"]);
    }
    if agent_root && user.uid == 0 {
        // Root in no user namespace: bwrap, run by root, would keep every
        // capability (CAP_SYS_ADMIN included), which is a privileged
        // container. Keep runc's unprivileged set only.
        push(&[&"--cap-drop", &"ALL"]);
        for cap in CAPABILITIES {
            push(&[&"--cap-add", cap]);
        }
    } else {
        let (uid, gid) = (user.uid.to_string(), user.gid.to_string());
        push(&[&"--unshare-user", &"--uid", &uid, &"--gid", &gid]);
    }
    let root_bind = if rootfs.readonly {
        "--ro-bind"
    } else {
        "--bind"
    };
    push(&[&root_bind, &rootfs.root, &"/"]);
    for b in &rootfs.binds {
        push(&[&"--ro-bind", &b.source, &b.dest]);
    }
    push(&[&"--proc", &"/proc", &"--dev", &"/dev", &"--tmpfs", &"/tmp"]);
    for m in &ctx.mounts {
        let how = if m.readonly { "--ro-bind" } else { "--bind" };
        push(&[&how, &m.source, &m.path]);
    }
    let cwd = cwd(process);
    if cwd != "/" {
        push(&[&"--dir", &cwd]);
    }
    push(&[&"--chdir", &cwd, &"--", &process.path]);
    a.extend(process.args.iter().map(OsString::from));
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ResolvedMount;
    use crate::rootfs::HostBind;
    use gantry_wire::spec::{ContainerSpec, ResourceLimits, RootfsSpec};

    fn ctx(hermetic: bool) -> ContainerContext {
        ContainerContext {
            handle: "c1".into(),
            spec: ContainerSpec {
                handle: "c1".into(),
                rootfs: RootfsSpec::Default,
                mounts: vec![],
                env: vec![],
                limits: ResourceLimits::default(),
                hermetic,
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

    fn plan() -> RootfsPlan {
        RootfsPlan {
            root: "/w/containers/c1/rootfs".into(),
            readonly: false,
            binds: vec![HostBind {
                source: "/usr".into(),
                dest: "/usr".into(),
            }],
            overlay: false,
            passwd: "/etc/passwd".into(),
            resolv_conf: false,
        }
    }

    fn process(dir: Option<&str>) -> ProcessSpec {
        ProcessSpec {
            id: "p".into(),
            path: "sh".into(),
            args: vec!["-c".into(), "true".into()],
            dir: dir.map(Into::into),
            env: vec![],
            user: None,
            tty: None,
            input: None,
        }
    }

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    /// Index of `pair` (an option and its first value) in `args`.
    fn find(args: &[String], pair: &[&str]) -> Option<usize> {
        args.windows(pair.len()).position(|w| w == pair)
    }

    #[test]
    fn args_bind_the_root_then_tmp_then_volumes_and_end_with_the_command() {
        let root = UserIds { uid: 0, gid: 0 };
        let args = strings(bwrap_args(
            &ctx(false),
            &plan(),
            &process(Some("tmp/build")),
            root,
            true,
        ));
        let root_at = find(&args, &["--bind", "/w/containers/c1/rootfs", "/"]).unwrap();
        let tmp = find(&args, &["--tmpfs", "/tmp"]).unwrap();
        let vol = find(&args, &["--ro-bind", "/w/volumes/v/data", "/tmp/build/in"]).unwrap();
        assert!(root_at < tmp && tmp < vol, "{args:?}");
        assert!(find(&args, &["--ro-bind", "/usr", "/usr"]).is_some());
        assert!(find(&args, &["--chdir", "/tmp/build"]).is_some());
        assert!(!args.contains(&"--unshare-net".to_string()));
        assert!(!args.contains(&"--unshare-user".to_string()));
        // Root keeps runc's unprivileged capabilities only, never
        // CAP_SYS_ADMIN (bwrap run by root would keep them all).
        assert!(find(&args, &["--cap-drop", "ALL"]).is_some(), "{args:?}");
        assert!(
            find(&args, &["--cap-add", "CAP_CHOWN"]).is_some(),
            "{args:?}"
        );
        assert!(!args.contains(&"CAP_SYS_ADMIN".to_string()), "{args:?}");
        let dashes = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&args[dashes + 1..], ["sh", "-c", "true"]);
    }

    #[test]
    fn hermetic_containers_and_other_users_get_their_own_namespaces() {
        let nobody = UserIds {
            uid: 65534,
            gid: 65534,
        };
        let args = strings(bwrap_args(
            &ctx(true),
            &plan(),
            &process(None),
            nobody,
            true,
        ));
        assert!(args.contains(&"--unshare-net".to_string()));
        assert!(find(
            &args,
            &["--unshare-user", "--uid", "65534", "--gid", "65534"]
        )
        .is_some());
        assert!(find(&args, &["--chdir", "/"]).is_some());
        // Without root, even root inside needs a user namespace.
        let root = UserIds { uid: 0, gid: 0 };
        let args = strings(bwrap_args(
            &ctx(false),
            &plan(),
            &process(None),
            root,
            false,
        ));
        assert!(find(&args, &["--unshare-user", "--uid", "0"]).is_some());
    }
}
