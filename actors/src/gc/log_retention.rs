//! Build log retention, as Concourse applies it (`atc/gc`'s
//! `buildLogRetentionCalculator` and `buildLogCollector`): what a job
//! keeps (its `build_log_retention` or `build_logs_to_retain`, the node's
//! defaults, capped by the node's maximums), and which of its builds' logs
//! go. Pure functions of the builds and the clock; the `build-logs` rule
//! (`rules_logs.rs`) reads the builds and deletes the logs.

pub(crate) use crate::db::LoggedBuild;
use crate::pipeline::model::BuildLogRetention;
use gantry_wire::state::BuildStatus;

/// What a job keeps; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// The logs of this many builds, newest first.
    pub builds: u32,
    /// Builds ended within this many days.
    pub days: u32,
    /// At least this many succeeded builds, within `builds`.
    pub minimum_succeeded_builds: u32,
}

/// The node's defaults and maximums (`[web]`
/// `default_build_logs_to_retain`, `max_build_logs_to_retain`,
/// `default_days_to_retain_build_logs`, `max_days_to_retain_build_logs`);
/// 0 is none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionLimits {
    /// Builds kept by a job that sets none.
    pub default_builds: u32,
    /// The most builds any job keeps.
    pub max_builds: u32,
    /// Days kept by a job that sets none.
    pub default_days: u32,
    /// The most days any job keeps.
    pub max_days: u32,
    /// One-off builds' logs each team keeps, newest first (`[web.gc]`
    /// `one_off_build_logs_to_retain`).
    pub one_off_builds: u32,
    /// Days one-off builds' logs are kept
    /// (`one_off_days_to_retain_build_logs`).
    pub one_off_days: u32,
}

impl RetentionLimits {
    /// What each team's one-off builds keep.
    pub fn of_one_off(&self) -> Retention {
        Retention {
            builds: self.one_off_builds,
            days: self.one_off_days,
            minimum_succeeded_builds: 0,
        }
    }

    /// What a job with `retention` (or the deprecated `logs_to_retain`)
    /// keeps: its own values, else the defaults, each capped by its
    /// maximum. Unlike Concourse (concourse/concourse#8943), a maximum of
    /// one kind leaves the other as the job set it.
    pub fn of_job(
        &self,
        retention: Option<&BuildLogRetention>,
        logs_to_retain: Option<u32>,
    ) -> Retention {
        let (mut builds, mut days, minimum) = match retention {
            Some(r) => (
                r.builds.unwrap_or(0),
                r.days.unwrap_or(0),
                r.minimum_succeeded_builds.unwrap_or(0),
            ),
            None => (logs_to_retain.unwrap_or(0), 0, 0),
        };
        if builds == 0 {
            builds = self.default_builds;
        }
        if days == 0 {
            days = self.default_days;
        }
        let cap = |value: u32, max: u32| match (value, max) {
            (_, 0) => value,
            (0, max) => max,
            (value, max) => value.min(max),
        };
        let builds = cap(builds, self.max_builds);
        let days = cap(days, self.max_days);
        Retention {
            builds,
            days,
            // Up to `builds`, as Concourse; none kept otherwise.
            minimum_succeeded_builds: if minimum <= builds { minimum } else { 0 },
        }
    }
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The builds of `builds` (a job's, newest first) whose logs go under
/// `r` at `now_ms`: Concourse's `reapLogsOfJob`. A running build keeps
/// its log; so do the newest `minimum_succeeded_builds` succeeded builds
/// (counted within `builds`); with `days` as well as `builds`, a build goes
/// only when both say so.
pub(crate) fn to_reap(r: Retention, builds: &[LoggedBuild], now_ms: i64) -> Vec<i64> {
    if r.builds == 0 && r.days == 0 {
        return Vec::new();
    }
    let (keep, min_succeeded) = (r.builds as usize, r.minimum_succeeded_builds as usize);
    let mut reap = Vec::new();
    let mut kept_not_succeeded = Vec::new();
    let (mut kept, mut kept_succeeded) = (0usize, 0usize);
    for b in builds {
        if !b.status.is_finished() {
            continue;
        }
        if keep != 0
            && min_succeeded != 0
            && b.status == BuildStatus::Succeeded
            && kept_succeeded < min_succeeded
        {
            kept += 1;
            kept_succeeded += 1;
            continue;
        }
        let full = kept >= keep;
        if r.days == 0 {
            if full {
                reap.push(b.id);
            } else {
                kept += 1;
                kept_not_succeeded.push(b.id);
            }
            continue;
        }
        let expired = b
            .finished_at
            .is_some_and(|end| end + i64::from(r.days) * DAY_MS < now_ms);
        if r.builds == 0 {
            if expired {
                reap.push(b.id);
            }
            continue;
        }
        if full && expired {
            reap.push(b.id);
        } else {
            kept += 1;
            kept_not_succeeded.push(b.id);
        }
    }
    // The succeeded builds kept took places of the newest others: the
    // oldest of those go.
    if kept > keep && r.builds != 0 {
        for _ in 0..kept - keep {
            if let Some(id) = kept_not_succeeded.pop() {
                reap.push(id);
            }
        }
    }
    reap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(id: i64, status: BuildStatus, finished_at: Option<i64>) -> LoggedBuild {
        LoggedBuild {
            id,
            status,
            finished_at,
        }
    }

    fn sorted(mut v: Vec<i64>) -> Vec<i64> {
        v.sort_unstable();
        v
    }

    /// Ten builds, newest first: the 6th succeeded, the others failed.
    fn ten() -> Vec<LoggedBuild> {
        (1..=10)
            .rev()
            .map(|id| {
                let status = if id == 6 {
                    BuildStatus::Succeeded
                } else {
                    BuildStatus::Failed
                };
                build(id, status, Some(id * 1000))
            })
            .collect()
    }

    #[test]
    fn three_builds_with_one_succeeded_keep_the_two_newest_and_the_last_success() {
        let r = Retention {
            builds: 3,
            days: 0,
            minimum_succeeded_builds: 1,
        };
        assert_eq!(sorted(to_reap(r, &ten(), 0)), vec![1, 2, 3, 4, 5, 7, 8]);
        // Without the minimum: the three newest.
        let r = Retention {
            builds: 3,
            days: 0,
            minimum_succeeded_builds: 0,
        };
        assert_eq!(sorted(to_reap(r, &ten(), 0)), vec![1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn running_builds_keep_their_logs_and_take_no_place() {
        let mut builds = ten();
        builds[0] = build(10, BuildStatus::Started, None);
        let r = Retention {
            builds: 2,
            days: 0,
            minimum_succeeded_builds: 0,
        };
        assert_eq!(sorted(to_reap(r, &builds, 0)), vec![1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn days_reap_what_ended_before_them_and_with_builds_only_both_together() {
        let now = 100 * DAY_MS;
        let builds: Vec<_> = (1..=6)
            .rev()
            .map(|id| build(id, BuildStatus::Failed, Some(now - (7 - id) * DAY_MS)))
            .collect();
        // Builds 6..1 ended 1..6 days ago; keep 3 days.
        let days = Retention {
            builds: 0,
            days: 3,
            minimum_succeeded_builds: 0,
        };
        assert_eq!(sorted(to_reap(days, &builds, now)), vec![1, 2, 3]);
        // And 5 builds: only what both would reap (older than 3 days and
        // beyond the 5 newest).
        let both = Retention {
            builds: 5,
            days: 3,
            minimum_succeeded_builds: 0,
        };
        assert_eq!(sorted(to_reap(both, &builds, now)), vec![1]);
        // Nothing set: nothing goes.
        assert!(to_reap(Retention::default(), &builds, now).is_empty());
    }

    #[test]
    fn a_job_is_capped_by_the_node_and_one_maximum_leaves_the_other_alone() {
        let job = BuildLogRetention {
            builds: Some(50),
            days: Some(10),
            minimum_succeeded_builds: Some(2),
        };
        let none = RetentionLimits::default();
        assert_eq!(
            none.of_job(Some(&job), None),
            Retention {
                builds: 50,
                days: 10,
                minimum_succeeded_builds: 2
            }
        );
        let max_builds = RetentionLimits {
            max_builds: 20,
            ..none
        };
        assert_eq!(
            max_builds.of_job(Some(&job), None),
            Retention {
                builds: 20,
                days: 10,
                minimum_succeeded_builds: 2
            }
        );
        // A job asking for no limit gets the maximum.
        assert_eq!(max_builds.of_job(None, None).builds, 20);
        let defaults = RetentionLimits {
            default_builds: 7,
            default_days: 3,
            ..none
        };
        assert_eq!(
            defaults.of_job(None, Some(4)),
            Retention {
                builds: 4,
                days: 3,
                minimum_succeeded_builds: 0
            }
        );
        // More succeeded builds than builds: none is kept for succeeding.
        let odd = BuildLogRetention {
            builds: Some(2),
            days: None,
            minimum_succeeded_builds: Some(3),
        };
        assert_eq!(none.of_job(Some(&odd), None).minimum_succeeded_builds, 0);
    }
}
