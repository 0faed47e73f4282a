//! Telling a process that could not be started from one that failed.
//!
//! runc runs the process's program itself, so a program that does not
//! exist or cannot be executed makes runc exit 1 — as a program that
//! exits 1 does. runc is called with `--log FILE --log-format json`: its
//! own failures (and only those: the process's output never goes there)
//! are written to that file as `{"level": "error", "msg": ...}` lines. A
//! runc that exited non-zero after logging one did not run the process,
//! and its end becomes [`ProcessEnd::NotStarted`] with runc's reason.

use std::path::PathBuf;

use crate::processes::{judge_end, ProcessEnd, Spawned};

/// How runc's own failures begin (`fatal` in runc's `main.go`), for `run`
/// and `exec`.
const RUNC_FAILED: &[&str] = &["runc run failed: ", "runc exec failed: ", "exec failed: "];

/// What runc says before the reason an exec in the container failed.
const UNABLE_TO_START: &str = "unable to start container process: ";

/// Announces `spawned`'s end only after runc's log at `log` was read: an
/// end with a non-zero status whose runc logged an error becomes
/// [`ProcessEnd::NotStarted`].
pub fn explain_start(spawned: Spawned, log: PathBuf) -> Spawned {
    judge_end(spawned, |end| async move {
        match end {
            ProcessEnd::Exited(n) if n != 0 => {
                let text = tokio::fs::read_to_string(&log).await.unwrap_or_default();
                match runc_failure(&text) {
                    Some(reason) => ProcessEnd::NotStarted(reason),
                    None => ProcessEnd::Exited(n),
                }
            }
            other => other,
        }
    })
}

/// The reason of the first failure of runc's own in its JSON log `text`,
/// made short: the cause of a failed exec (`no such file or directory`,
/// `permission denied`, `executable file not found in $PATH`), else
/// runc's message without its prefixes.
pub fn runc_failure(text: &str) -> Option<String> {
    let msg = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "error")
        .filter_map(|v| v["msg"].as_str().map(str::to_string))
        .find(|m| RUNC_FAILED.iter().any(|p| m.starts_with(p)))?;
    let rest = RUNC_FAILED
        .iter()
        .find_map(|p| msg.strip_prefix(p))
        .unwrap_or(&msg);
    let rest = match rest.find(UNABLE_TO_START) {
        Some(at) => &rest[at + UNABLE_TO_START.len()..],
        None => rest,
    };
    // `exec: "/no/such": stat /no/such: no such file or directory`: the
    // program is named by the caller, the cause is the last part.
    let reason = match rest.strip_prefix("exec: \"") {
        Some(exec) => exec.rsplit(": ").next().unwrap_or(exec),
        None => rest,
    };
    Some(reason.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(level: &str, msg: &str) -> String {
        serde_json::json!({ "level": level, "msg": msg, "time": "2026-01-01T00:00:00Z" })
            .to_string()
    }

    #[test]
    fn a_failed_exec_is_reduced_to_its_cause() {
        let cases = [
            (
                "runc run failed: unable to start container process: exec: \"/no/such\": stat /no/such: no such file or directory",
                "no such file or directory",
            ),
            (
                "runc run failed: unable to start container process: exec: \"/bin/noexec\": permission denied",
                "permission denied",
            ),
            (
                "exec failed: unable to start container process: exec: \"sh\": executable file not found in $PATH",
                "executable file not found in $PATH",
            ),
            (
                "runc run failed: unable to start container process: error during container init: error mounting \"/x\"",
                "error during container init: error mounting \"/x\"",
            ),
        ];
        for (msg, reason) in cases {
            let text = format!("{}\n{}\n", line("warning", "ignored"), line("error", msg));
            assert_eq!(runc_failure(&text).as_deref(), Some(reason), "{msg}");
        }
    }

    #[test]
    fn a_log_without_a_failure_of_runc_is_a_process_that_ran() {
        assert_eq!(runc_failure(""), None);
        assert_eq!(runc_failure(&line("warning", "runc run failed: x")), None);
        assert_eq!(runc_failure(&line("error", "signal: killed")), None);
        assert_eq!(runc_failure("not json\n"), None);
    }
}
