//! What a process cost: a child's CPU time and peak memory, exact from
//! `wait4`'s resource use, and a running server's CPU time from
//! `/proc/PID/stat`.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// What a child cost once it ended.
#[derive(Debug, Clone, Copy)]
pub struct Spent {
    /// How it ended.
    pub status: ExitStatus,
    /// User and system CPU time.
    pub cpu: Duration,
    /// Peak resident memory, in KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
}

/// Waits for `child` (reaping it with `wait4`) and answers what it cost;
/// a child still running after `deadline` is killed and the test fails.
pub fn wait_spent(child: &mut Child, deadline: Duration) -> Spent {
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let mut status = 0;
        // SAFETY: `wait4` fills `status` and `usage` for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(reaped >= 0, "wait4: {}", std::io::Error::last_os_error());
        if reaped == pid {
            let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
            return Spent {
                status: ExitStatus::from_raw(status),
                cpu: t(usage.ru_utime) + t(usage.ru_stime),
                max_rss_kib: usage.ru_maxrss as u64,
            };
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {deadline:?}: killed");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The CPU time (user and system, every thread) process `pid` has used
/// so far, from `/proc/PID/stat`.
pub fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's name, which is in parentheses.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime: the 14th and 15th fields, 12th and 13th here.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a setting.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_sec)
}
