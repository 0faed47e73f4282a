//! A container's OCI bundle configuration: `config.json` (runtime spec
//! 1.0.2: namespaces, mounts, cgroup limits, capabilities) and the
//! `process` object a `runc exec` takes.

use gantry_wire::spec::ProcessSpec;
use serde_json::{json, Value};

use super::super::{process_env, ContainerContext};
use super::oom::cgroup_path;
use crate::rootfs::{RootfsPlan, UserIds};

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
