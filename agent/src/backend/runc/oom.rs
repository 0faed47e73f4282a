//! Explaining out-of-memory kills: where the kernel counts them for a
//! container's cgroup (`memory.oom_control` on cgroup v1, `memory.events`
//! on v2), and the line a process that failed after one gets on its stderr.

use std::path::{Path, PathBuf};

/// Where the kernel counts the out-of-memory kills of containers' cgroups.
#[derive(Debug)]
pub(super) struct OomCounter {
    /// The memory controller's hierarchy (`/sys/fs/cgroup/memory` on cgroup
    /// v1, `/sys/fs/cgroup` on v2).
    pub(super) hierarchy: PathBuf,
    /// `memory.oom_control` (v1) or `memory.events` (v2).
    pub(super) file: &'static str,
}

impl OomCounter {
    /// Finds the memory controller in `/proc/self/mountinfo`: a v1
    /// hierarchy with `memory`, else a v2 one offering it. Only hierarchies
    /// mounted from their root qualify (cgroup paths are taken from there).
    /// Reads procfs and cgroupfs: blocking, called (through
    /// [`RuncBackend::new`]) on a blocking thread when the agent starts.
    pub(super) fn detect() -> Option<Self> {
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
    pub(super) async fn kills(&self, path: &str) -> u64 {
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
pub(super) fn cgroup_path(handle: &str) -> String {
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
