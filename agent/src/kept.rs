//! The agent's side of kept processes (the keeper itself is `keeper.rs`):
//! starting a process under a keeper, following the log the keeper writes,
//! learning its end, and, at start-up, finding the keepers a previous run
//! of the agent left running (adoption).
//!
//! Following: the keeper appends frames to `<id>.log`; the agent watches
//! the file with inotify (`IN_MODIFY`, through `libc` and tokio's
//! `AsyncFd`: no thread, no polling, and no crate for three system calls)
//! and, at each change, advances the log's length over the complete frames
//! now in it (a frame being written is left for the next change), which
//! wakes the readers. Each followed process takes one inotify instance;
//! where none can be had (past `fs.inotify.max_user_instances`, 128 by
//! default), the length is looked at every [`POLL`] instead.
//!
//! The end: while the agent runs, the keeper is its child and is waited
//! for; an adopted keeper (not the agent's child) is watched through a
//! pidfd, which becomes readable when it exits. Either way the end is then
//! read from `<id>.end`, written by the keeper before it exits.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::watch;

use super::api::OutputLine;
use super::child::{ChildOutput, SignalTarget, Spawned, StdinSink};
use super::error::AgentError;
use super::keeper::{process_file, start_time, KeeperRecord, SUBCOMMAND};
use super::output_log::{ProcessEnd, Progress, MAX_CHUNK};

/// How often the log's length is looked at when inotify cannot be had.
const POLL: Duration = Duration::from_millis(100);

/// Bytes of a frame header (see `output_log.rs`).
const HEADER: u64 = 5;

/// The command that runs `program` under `keeper` for process `id` whose
/// files are in `dir`: `KEEPER keep DIR ID -- PROGRAM` (the caller adds
/// the program's arguments).
pub fn keeper_command(
    keeper: &Path,
    dir: &Path,
    id: &str,
    program: &std::ffi::OsStr,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(keeper);
    // Named so in `ps` whatever path starts it (`/proc/self/exe`).
    cmd.arg0("gantry")
        .arg(SUBCOMMAND)
        .arg(dir)
        .arg(id)
        .arg("--")
        .arg(program);
    cmd
}

/// Starts `cmd` (from [`keeper_command`]) and waits for the keeper's word:
/// the child's pid, or why it could not be started (an error naming
/// `what`, as a failed direct start is). Returns the child and its pid.
pub async fn spawn_kept(
    cmd: &mut tokio::process::Command,
    dir: &Path,
    id: &str,
    what: &str,
) -> Result<(Spawned, u32), AgentError> {
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false);
    let mut keeper = cmd
        .spawn()
        .map_err(|e| AgentError::Backend(format!("cannot start {what}: {e}")))?;
    let (Some(stdin), Some(stdout)) = (keeper.stdin.take(), keeper.stdout.take()) else {
        return Err(AgentError::Backend(format!("{what}: stdio pipes missing")));
    };
    let mut line = String::new();
    let read = tokio::io::BufReader::new(stdout).read_line(&mut line).await;
    let pid = match line.trim_end().split_once(' ') {
        Some(("pid", pid)) => pid.parse::<u32>().ok(),
        _ => None,
    };
    let Some(pid) = pid else {
        let _ = keeper.wait().await;
        let why = match (line.trim_end().strip_prefix("error "), read) {
            (Some(why), _) => why.to_string(),
            (None, Err(e)) => format!("its keeper did not answer: {e}"),
            (None, Ok(_)) => format!("its keeper ended without starting it: {line:?}"),
        };
        return Err(AgentError::Backend(format!("cannot start {what}: {why}")));
    };
    let (dir, id) = (dir.to_path_buf(), id.to_string());
    let (tx, exit) = watch::channel(None);
    tokio::spawn(async move {
        let waited = keeper.wait().await;
        let end = match read_end(&dir, &id).await {
            Some(end) => end,
            None => ProcessEnd::Lost(match waited {
                Ok(status) => {
                    format!("the process's keeper ended ({status}) without recording its end")
                }
                Err(e) => format!("waiting for the process's keeper failed: {e}"),
            }),
        };
        let _ = tx.send(Some(end));
    });
    let spawned = Spawned {
        output: ChildOutput::Kept,
        stdin: Some(StdinSink::Pipe(stdin)),
        exit,
        signal: SignalTarget::ProcessGroup(pid as i32),
        epilogue: None,
    };
    Ok((spawned, pid))
}

/// Reads an `.exit` or `.end` file's contents.
pub fn parse_end(bytes: &[u8], path: &Path) -> ProcessEnd {
    match serde_json::from_slice::<OutputLine>(bytes) {
        Ok(OutputLine::Exit { exit_status }) => ProcessEnd::Exited(exit_status),
        Ok(OutputLine::Error { error }) => ProcessEnd::Lost(error),
        Ok(OutputLine::NotStarted { not_started }) => ProcessEnd::NotStarted(not_started),
        _ => ProcessEnd::Lost(format!("unreadable exit file {}", path.display())),
    }
}

/// The raw end a keeper recorded in `<id>.end`, if it did.
async fn read_end(dir: &Path, id: &str) -> Option<ProcessEnd> {
    let path = process_file(dir, id, "end");
    let bytes = tokio::fs::read(&path).await.ok()?;
    Some(parse_end(&bytes, &path))
}

/// A keeper found at start-up.
pub struct Found {
    /// The process, its output already in the log: `exit` is announced
    /// when the keeper ends (at once when it is gone already).
    pub spawned: Spawned,
    /// Whether its keeper still runs (the process is adopted).
    pub alive: bool,
}

/// Looks for the keeper of a process found on disk without an exit file:
/// `None` when it had none, or when its keeper is gone without recording
/// the end. A keeper whose pid now names another process (its start time
/// differs) is gone.
pub async fn find(dir: &Path, id: &str) -> Option<Found> {
    let record: KeeperRecord = serde_json::from_slice(
        &tokio::fs::read(process_file(dir, id, "keeper"))
            .await
            .ok()?,
    )
    .ok()?;
    let signal = SignalTarget::ProcessGroup(record.child_pid);
    let (tx, exit) = watch::channel(None);
    let alive = match live_pidfd(&record) {
        Some(pidfd) => {
            let (dir, id) = (dir.to_path_buf(), id.to_string());
            tokio::spawn(async move {
                if let Ok(fd) = readable_fd(pidfd) {
                    let _ = fd.readable().await;
                }
                let end = read_end(&dir, &id).await.unwrap_or_else(|| {
                    ProcessEnd::Lost("the process's keeper ended without recording its end".into())
                });
                let _ = tx.send(Some(end));
            });
            true
        }
        None => {
            let _ = tx.send(Some(read_end(dir, id).await?));
            false
        }
    };
    Some(Found {
        spawned: Spawned {
            output: ChildOutput::Kept,
            stdin: None,
            exit,
            signal,
            epilogue: None,
        },
        alive,
    })
}

/// Registers `fd` with the runtime for readability.
fn readable_fd(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns `fd`, which stays open and the same until
    // it is dropped with it.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// A pidfd of the recorded keeper if it still runs: opened first, then the
/// start time checked, so the descriptor cannot name a process that took
/// the pid over later.
fn live_pidfd(record: &KeeperRecord) -> Option<OwnedFd> {
    if record.keeper_pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, record.keeper_pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor was just returned to us and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    (start_time(record.keeper_pid) == Some(record.keeper_start)).then_some(fd)
}

/// Advances `progress` as complete frames are appended to the log at `path`
/// by a keeper, until `exit` announces the end; then takes the last frames
/// in. Returns the log's length in complete frames.
pub(crate) async fn follow(
    path: &Path,
    progress: &watch::Sender<Progress>,
    mut exit: watch::Receiver<Option<ProcessEnd>>,
) -> u64 {
    let mut pos = progress.borrow().len;
    let watcher = Inotify::watch(path)
        .inspect_err(|e| {
            tracing::debug!(path = %path.display(), error = %e, "no inotify; polling the output log");
        })
        .ok();
    loop {
        pos = advance(path, pos, progress).await;
        if exit.borrow_and_update().is_some() {
            break;
        }
        let changed = async {
            match &watcher {
                Some(w) => w.changed().await,
                None => tokio::time::sleep(POLL).await,
            }
        };
        tokio::select! {
            _ = changed => {}
            r = exit.changed() => if r.is_err() { break },
        }
    }
    advance(path, pos, progress).await
}

/// Moves past the complete frames after `pos` in the log at `path`; tells
/// `progress` when it moved. Returns the new position.
async fn advance(path: &Path, pos: u64, progress: &watch::Sender<Progress>) -> u64 {
    let p = path.to_path_buf();
    let next = tokio::task::spawn_blocking(move || complete_frames(&p, pos))
        .await
        .unwrap_or(pos);
    if next > pos {
        progress.send_modify(|p| p.len = next);
    }
    next
}

/// The end of the last complete frame after `pos` in the log at `path`.
pub fn complete_frames(path: &Path, mut pos: u64) -> u64 {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = std::fs::File::open(path) else {
        return pos;
    };
    let Ok(size) = file.metadata().map(|m| m.len()) else {
        return pos;
    };
    let mut header = [0u8; HEADER as usize];
    while pos + HEADER <= size {
        if file.read_exact_at(&mut header, pos).is_err() {
            break;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as u64;
        if len > MAX_CHUNK as u64 || pos + HEADER + len > size {
            break;
        }
        pos += HEADER + len;
    }
    pos
}

/// An inotify instance watching one file for writes.
struct Inotify {
    /// The instance, non-blocking.
    fd: AsyncFd<OwnedFd>,
}

impl Inotify {
    /// Watches `path` for modification.
    fn watch(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::ffi::OsStrExt as _;
        // SAFETY: inotify_init1 takes flags and returns a new descriptor.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just returned to us and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c =
            std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: `c` is a NUL-terminated path; the descriptor is valid.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), libc::IN_MODIFY) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Inotify {
            fd: readable_fd(fd)?,
        })
    }

    /// Waits until the file changed, then drains the events.
    async fn changed(&self) {
        let Ok(mut guard) = self.fd.readable().await else {
            // Cannot wait on it: fall back to a pause.
            tokio::time::sleep(POLL).await;
            return;
        };
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a buffer of that length.
            let n = unsafe {
                libc::read(
                    self.fd.get_ref().as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n <= 0 {
                break;
            }
        }
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_log::encode_frame;
    use gantry_wire::runtime::OutputStream;

    #[test]
    fn only_complete_frames_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let one = encode_frame(OutputStream::Stdout, b"one");
        let two = encode_frame(OutputStream::Stderr, b"two!");
        let mut bytes = one.clone();
        bytes.extend_from_slice(&two[..6]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(complete_frames(&path, 0), one.len() as u64);
        bytes.extend_from_slice(&two[6..]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(complete_frames(&path, one.len() as u64), bytes.len() as u64);
        assert_eq!(complete_frames(&dir.path().join("none"), 7), 7);
    }

    use crate::keeper::write_end;
    use crate::output_log::LogEvent;
    use crate::processes::{ProcessRecord, Recovered};

    /// Appends a stdout frame of `text` to `dir/p.log`.
    fn append(dir: &Path, text: &str) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("p.log"))
            .unwrap();
        f.write_all(&encode_frame(OutputStream::Stdout, text.as_bytes()))
            .unwrap();
    }

    /// Records `pid` (started at `start`) as the keeper of process `p`.
    fn record(dir: &Path, pid: u32, start: u64) {
        let r = KeeperRecord {
            keeper_pid: pid as i32,
            keeper_start: start,
            child_pid: pid as i32,
        };
        std::fs::write(dir.join("p.keeper"), serde_json::to_vec(&r).unwrap()).unwrap();
    }

    #[tokio::test]
    async fn a_process_whose_keeper_still_runs_is_adopted_followed_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, "before ");
        // Stands in for a keeper left running by a previous agent.
        let mut keeper = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        record(d, keeper.id(), start_time(keeper.id() as i32).unwrap());
        let Recovered::Kept(found) = ProcessRecord::recover(d, "p").await else {
            panic!("not adopted")
        };
        assert!(found.alive);
        let rec = ProcessRecord::resume(d, "p", found.spawned);
        assert_eq!(rec.end(), None);
        let mut reader = rec.reader();
        let first = reader.next().await.unwrap().unwrap();
        assert_eq!(
            first,
            LogEvent::Output(OutputStream::Stdout, "before ".into())
        );
        append(d, "after");
        let second = tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("the new frame was followed")
            .unwrap()
            .unwrap();
        assert_eq!(
            second,
            LogEvent::Output(OutputStream::Stdout, "after".into())
        );
        // The keeper records the end, then exits.
        write_end(d, "p", &ProcessEnd::Exited(4)).unwrap();
        keeper.kill().unwrap();
        keeper.wait().unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), rec.wait())
            .await
            .expect("the keeper's exit was seen");
        assert_eq!(end, ProcessEnd::Exited(4));
        assert_eq!(reader.next().await.unwrap().unwrap(), LogEvent::End(end));
        let exit = std::fs::read(d.join("p.exit")).unwrap();
        assert_eq!(parse_end(&exit, d), ProcessEnd::Exited(4));
    }

    #[tokio::test]
    async fn an_adopted_process_is_signalled_through_its_childs_group() {
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, "running");
        // Its own group, as a keeper's child is: the keeper and the child
        // in one for this test.
        let mut keeper = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        record(d, keeper.id(), start_time(keeper.id() as i32).unwrap());
        let Recovered::Kept(found) = ProcessRecord::recover(d, "p").await else {
            panic!("not adopted")
        };
        let rec = ProcessRecord::resume(d, "p", found.spawned);
        rec.signal(gantry_wire::runtime::ProcessSignal::Kill)
            .await
            .unwrap();
        let status = tokio::task::spawn_blocking(move || keeper.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(ProcessEnd::from_status(status), ProcessEnd::Exited(137));
        // Killed before it recorded an end: lost, saying so.
        let end = tokio::time::timeout(Duration::from_secs(10), rec.wait())
            .await
            .expect("the keeper's exit was seen");
        assert!(
            matches!(&end, ProcessEnd::Lost(why) if why.contains("without recording its end")),
            "{end:?}"
        );
    }

    #[tokio::test]
    async fn a_pid_taken_over_by_another_process_is_no_keeper() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, "partial");
        let mut other = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        // Same pid, another start time: not the keeper, which is gone.
        record(d, other.id(), start_time(other.id() as i32).unwrap() + 1);
        let recovered = ProcessRecord::recover(d, "p").await;
        other.kill().unwrap();
        other.wait().unwrap();
        let Recovered::Ended(rec) = recovered else {
            panic!("adopted another process")
        };
        assert!(
            matches!(rec.end(), Some(ProcessEnd::Lost(_))),
            "{:?}",
            rec.end()
        );

        // A keeper gone after recording the end: that end, taken as it is.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        append(d, "done");
        record(d, i32::MAX as u32, 1);
        write_end(d, "p", &ProcessEnd::Exited(0)).unwrap();
        let Recovered::Kept(found) = ProcessRecord::recover(d, "p").await else {
            panic!("its recorded end was not taken")
        };
        assert!(!found.alive);
        let rec = ProcessRecord::resume(d, "p", found.spawned);
        assert_eq!(rec.wait().await, ProcessEnd::Exited(0));
        assert!(d.join("p.exit").exists());
    }

    #[tokio::test]
    async fn following_wakes_at_each_frame_and_ends_with_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        std::fs::write(&path, b"").unwrap();
        let (progress, mut rx) = watch::channel(Progress::default());
        let (exit_tx, exit) = watch::channel(None);
        let p = path.clone();
        let follower = tokio::spawn(async move { follow(&p, &progress, exit).await });
        let frame = encode_frame(OutputStream::Stdout, b"hello");
        {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(&frame[..3]).unwrap();
            f.write_all(&frame[3..]).unwrap();
        }
        let len = frame.len() as u64;
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|p| p.len == len))
            .await
            .expect("the follower saw the frame")
            .unwrap();
        exit_tx.send(Some(ProcessEnd::Exited(0))).unwrap();
        assert_eq!(follower.await.unwrap(), len);
    }
}
