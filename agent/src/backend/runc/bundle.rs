//! A container's OCI bundle configuration: `config.json` (runtime spec
//! 1.0.2: namespaces, mounts, cgroup limits, capabilities) and the
//! `process` object a `runc exec` takes.
//!
//! A privileged container (`ContainerSpec::privileged`, only on a worker
//! started with `--allow-privileged`) gets every capability the agent
//! holds, every device in its cgroup, a writable `/sys` and no masked or
//! read-only paths, as Docker's `--privileged` does: it may mount file
//! systems, load modules, reach the host's devices. No seccomp filter is
//! set for any container. Still its own namespaces, and still root.

use gantry_wire::spec::ProcessSpec;
use serde_json::{json, Value};

use super::super::{process_env, ContainerContext, CAPABILITIES};
use super::oom::cgroup_path;
use crate::rootfs::{RootfsPlan, UserIds};

/// Every capability, by number (`CAP_CHOWN` is 0): a privileged container
/// gets those in the agent's own bounding set.
const ALL_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities of a privileged container: every one the agent may
/// give, its own bounding set (`CapBnd` of `/proc/self/status`; a kernel
/// without one, or an agent itself confined, has fewer than
/// [`ALL_CAPABILITIES`], and runc cannot grant what the agent lacks).
fn all_capabilities() -> &'static [&'static str] {
    static HELD: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    HELD.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        held_capabilities(&status)
    })
}

/// The capabilities of [`ALL_CAPABILITIES`] whose bit is set in `CapBnd`
/// of a `/proc/PID/status` text (all of them when it has none).
fn held_capabilities(status: &str) -> Vec<&'static str> {
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(u64::MAX);
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding & (1 << bit) != 0)
        .map(|(_, name)| *name)
        .collect()
}

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
        defaults.push(super::super::DEFAULT_TERM.to_string());
    }
    let caps: &[&str] = if ctx.spec.privileged {
        all_capabilities()
    } else {
        CAPABILITIES
    };
    let mut process = json!({
        "terminal": p.tty.is_some(),
        "user": { "uid": user.uid, "gid": user.gid },
        "args": args,
        "env": process_env(&defaults, &ctx.spec.env, &p.env),
        "cwd": cwd,
        "capabilities": {
            "bounding": caps,
            "effective": caps,
            "permitted": caps,
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
            if ctx.spec.privileged {
                &["nosuid", "noexec", "nodev", "rw"]
            } else {
                &["nosuid", "noexec", "nodev", "ro"]
            },
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

    // Every device is denied, or allowed to a privileged container.
    let mut resources = json!({ "devices": [{ "allow": ctx.spec.privileged, "access": "rwm" }] });
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
    let (masked, readonly): (&[&str], &[&str]) = if ctx.spec.privileged {
        (&[], &[])
    } else {
        (MASKED_PATHS, READONLY_PATHS)
    };
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
            "maskedPaths": masked,
            "readonlyPaths": readonly,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_privileged_container_gets_the_capabilities_the_agent_holds() {
        // Every capability but CAP_SYS_RESOURCE (24).
        let held = held_capabilities("Name:\tgantry\nCapBnd:\t000001fffeffffff\n");
        assert_eq!(held.len(), ALL_CAPABILITIES.len() - 1);
        assert!(held.contains(&"CAP_SYS_ADMIN") && !held.contains(&"CAP_SYS_RESOURCE"));
        assert_eq!(held_capabilities("").len(), ALL_CAPABILITIES.len());
    }
}
