//! The `local` backend: no isolation at all, for laptops and development.
//!
//! Processes run on the host as the agent's user. Each container gets a
//! directory `containers/<handle>/root/` in which every mount is recreated as
//! a symlink to its volume (a mount at `/tmp/build/x/src` becomes
//! `root/tmp/build/x/src -> volumes/<v>/data`), and a process's `dir` and an
//! absolute executable path are mapped into it the same way when they exist
//! there. The root filesystem, user, limits and read-only mounts are ignored.
//! A process with a TTY runs directly on a pseudo-terminal of the agent's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use gantry_wire::spec::ProcessSpec;

use super::{process_env, BackendContainer, ContainerBackend, ContainerContext};
use crate::error::{blocking, AgentError};
use crate::processes::{spawn_child, spawn_tty_child, Spawned};

/// The backend without isolation.
pub struct LocalBackend;

/// A container of the local backend: a directory of symlinks.
struct LocalContainer {
    /// The container.
    ctx: Arc<ContainerContext>,
    /// `containers/<handle>/root`, standing in for `/`.
    root: PathBuf,
    /// `containers/<handle>/home`, the processes' `HOME`.
    home: PathBuf,
}

#[async_trait]
impl ContainerBackend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn prepare(
        &self,
        ctx: Arc<ContainerContext>,
        _origin: super::Origin,
    ) -> Result<Box<dyn BackendContainer>, AgentError> {
        if ctx.spec.privileged {
            return Err(super::privileged_refused(
                &ctx.handle,
                "backend local does not run privileged containers",
            ));
        }
        if let Some(name) = &ctx.spec.resource_type {
            return Err(AgentError::BadRequest(format!(
                "backend local cannot run resource type {name}: its scripts take container \
                 paths, which the local backend does not map; use runc or bwrap"
            )));
        }
        let root = ctx.dir.join("root");
        let home = ctx.dir.join("home");
        let (r, h, c) = (root.clone(), home.clone(), ctx.clone());
        blocking("preparing a local container", move || {
            link_mounts(&r, &h, &c)
        })
        .await?;
        Ok(Box::new(LocalContainer { ctx, root, home }))
    }
}

/// Creates `root` and `home`, and a symlink in `root` for every mount.
fn link_mounts(root: &Path, home: &Path, ctx: &ContainerContext) -> Result<(), AgentError> {
    let io = |p: &Path| {
        let ctx = format!("preparing {}", p.display());
        move |e| AgentError::io(ctx, e)
    };
    std::fs::create_dir_all(root).map_err(io(root))?;
    std::fs::create_dir_all(home).map_err(io(home))?;
    for m in &ctx.mounts {
        let link = root.join(m.path.trim_start_matches('/'));
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(io(&link))?;
        }
        std::os::unix::fs::symlink(&m.source, &link).map_err(io(&link))?;
    }
    Ok(())
}

impl LocalContainer {
    /// Maps an absolute container path into `root` when it exists there.
    async fn map(&self, path: &str) -> Option<PathBuf> {
        let mapped = self.root.join(path.trim_start_matches('/'));
        let exists = path.starts_with('/') && tokio::fs::try_exists(&mapped).await.unwrap_or(false);
        exists.then_some(mapped)
    }
}

#[async_trait]
impl BackendContainer for LocalContainer {
    async fn spawn(&self, process: &ProcessSpec) -> Result<Spawned, AgentError> {
        let dir = process.dir.as_deref().unwrap_or("/");
        let cwd = self.root.join(dir.trim_start_matches('/'));
        tokio::fs::create_dir_all(&cwd).await.map_err(|e| {
            AgentError::io(format!("creating working directory {}", cwd.display()), e)
        })?;
        let program = self
            .map(&process.path)
            .await
            .map(PathBuf::into_os_string)
            .unwrap_or_else(|| process.path.clone().into());
        let mut defaults = vec![format!("HOME={}", self.home.display())];
        if process.tty.is_some() {
            defaults.push(super::DEFAULT_TERM.to_string());
        }
        let env = process_env(&defaults, &self.ctx.spec.env, &process.env);
        let mut cmd = self.ctx.command(process, program);
        cmd.args(&process.args).current_dir(&cwd).env_clear();
        for kv in &env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        let what = format!("process {:?}", process.path);
        let (spawned, _pid) = match process.tty {
            Some(size) => spawn_tty_child(cmd.into_inner(), &what, size),
            None => spawn_child(&mut cmd, &what).await,
        }
        .map_err(|e| AgentError::BadRequest(e.to_string()))?;
        Ok(spawned)
    }

    async fn destroy(&self) -> Result<(), AgentError> {
        // Nothing to undo: processes are killed by the registry and the
        // symlinks go with the container's directory.
        Ok(())
    }
}
