//! This process's resident memory (`VmRSS` of `/proc/self/status`), read
//! once or watched on a thread of its own for its peak.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;

/// How often the watcher reads the resident size.
const PERIOD: Duration = Duration::from_millis(2);

/// This process's resident memory now, in bytes.
pub fn rss_bytes() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_vm_rss(&status).context("no VmRSS line in /proc/self/status")
}

/// The `VmRSS:  N kB` line of a `/proc/PID/status`, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Reads the resident size every [`PERIOD`] on a thread until stopped.
pub struct PeakWatch {
    /// Tells the thread to stop.
    stop: Arc<AtomicBool>,
    /// The peak seen so far, in bytes.
    peak: Arc<AtomicU64>,
    /// The thread; fails if the resident size could not be read.
    thread: JoinHandle<anyhow::Result<()>>,
}

impl PeakWatch {
    /// Starts watching.
    pub fn start() -> anyhow::Result<PeakWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes()?));
        let (flag, seen) = (stop.clone(), peak.clone());
        let thread = std::thread::Builder::new()
            .name("gantry-rss-watch".into())
            .spawn(move || loop {
                seen.fetch_max(rss_bytes()?, Ordering::Relaxed);
                if flag.load(Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep(PERIOD);
            })
            .context("starting the memory watcher")?;
        Ok(PeakWatch { stop, peak, thread })
    }

    /// The peak resident size seen so far, in bytes.
    #[cfg(test)]
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Stops watching (after one last reading); answers the peak resident
    /// size seen, in bytes.
    pub fn stop(self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.peak.clone();
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the memory watcher panicked"))??;
        Ok(peak.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tgantry\nVmPeak:\t  2000 kB\nVmRSS:\t    1536 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(1536 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn the_watch_sees_memory_touched_while_it_runs_and_keeps_the_peak() {
        let watch = PeakWatch::start().unwrap();
        let before = rss_bytes().unwrap();
        // Touch 64 MiB and hold it until the watcher has seen it.
        let block = vec![1u8; 64 << 20];
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while watch.peak() < before + (60 << 20) {
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher never saw the 64 MiB: peak {}, before {before}",
                watch.peak()
            );
            std::thread::yield_now();
        }
        assert_eq!(block.iter().map(|b| *b as u64).sum::<u64>(), 64 << 20);
        drop(block);
        // Freed memory does not lower the peak.
        let peak = watch.stop().unwrap();
        assert!(peak >= before + (60 << 20), "peak {peak}, before {before}");
    }
}
