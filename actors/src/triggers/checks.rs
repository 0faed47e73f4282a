//! A build triggered by hand checks its inputs first, as Concourse's
//! (`atc/scheduler/buildstarter.go` `createChecks`, `atc/db/build.go`
//! `ResourcesChecked`): every input with no `passed` whose resource is
//! not pinned (by hand or by its `version:`; a get's own `version: {...}`
//! does not spare its resource the check, as in Concourse, whose
//! `CurrentPinnedVersion` is the resource's) has its resource config
//! checked, even one with `check_every: never`, each
//! config once however many inputs name it. The build resolves its inputs
//! only once every such config has a check that finished (succeeded or
//! not, as Concourse's `last_check_end_time`) at or after the build was
//! created; until then it waits, saying so, and a config whose last check
//! finished before is checked again. Once done, a build waits for no check
//! again (`builds.inputs_checked_at`), as Concourse's end time only grows.

use super::inputs::{JobInput, Pin};
use crate::views::Build;

/// The inputs whose resource configs a build triggered by hand checks:
/// no `passed`, no pin of the resource (a get's own pinned version is
/// checked); one per (scope, config), in the inputs' order.
pub(crate) fn to_check(inputs: &[JobInput]) -> Vec<&JobInput> {
    let mut out: Vec<&JobInput> = Vec::new();
    for input in inputs {
        let resource_pinned = matches!(input.pin, Some(Pin::Api(_) | Pin::Config(_)));
        if !input.passed.is_empty() || resource_pinned {
            continue;
        }
        if out
            .iter()
            .any(|o| o.scope == input.scope && o.config == input.config)
        {
            continue;
        }
        out.push(input);
    }
    out
}

/// Where the check of a config stands for a build created at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckState {
    /// A check finished at or after the build was created: done.
    Done,
    /// Its last check still runs: it is waited for.
    Running,
    /// No check, or the last finished before the build was created: one
    /// is to be started.
    Needed,
}

/// Where the check of a config stands for a build created at
/// `created_at`, given the config's last check build.
pub(crate) fn check_state(created_at: i64, last: Option<&Build>) -> CheckState {
    let Some(last) = last else {
        return CheckState::Needed;
    };
    match (last.status.is_finished(), last.finished_at) {
        (false, _) => CheckState::Running,
        (true, Some(at)) if at >= created_at => CheckState::Done,
        (true, _) => CheckState::Needed,
    }
}

/// Why a build waits for the checks of `resources` (their names).
pub(crate) fn waiting_for(resources: &[String]) -> String {
    let names: Vec<String> = resources.iter().map(|r| format!("{r:?}")).collect();
    match names.len() {
        1 => format!("for checks of resource {}", names[0]),
        _ => format!("for checks of resources {}", names.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_wire::state::BuildStatus;

    fn input(name: &str, resource: &str, config: &str) -> JobInput {
        JobInput {
            name: name.into(),
            resource: resource.into(),
            passed: vec![],
            trigger: false,
            every: false,
            pin: None,
            scope: "main".into(),
            config: config.into(),
        }
    }

    /// Inputs with `passed` or a pinned resource are not checked (a get's
    /// own pinned version is); a config named by several inputs is
    /// checked once; trigger inputs are checked too.
    #[test]
    fn inputs_with_passed_or_a_pinned_resource_are_not_checked_and_a_config_is_checked_once() {
        let mut passed = input("p", "up", "c-up");
        passed.passed = vec!["j".into()];
        let mut step_pin = input("s", "s", "c-s");
        step_pin.pin = Some(Pin::Step("{\"v\":\"1\"}".into()));
        let mut api_pin = input("a", "a", "c-a");
        api_pin.pin = Some(Pin::Api("{\"v\":\"1\"}".into()));
        let mut config_pin = input("c", "c", "c-c");
        config_pin.pin = Some(Pin::Config("{\"v\":\"1\"}".into()));
        let mut trigger = input("t", "t", "c-t");
        trigger.trigger = true;
        let twice = input("repo-again", "repo", "c-repo");
        let mut elsewhere = input("other-scope", "repo", "c-repo");
        elsewhere.scope = "pipeline:2/repo".into();
        let inputs = vec![
            input("repo", "repo", "c-repo"),
            passed,
            step_pin,
            api_pin,
            config_pin,
            trigger,
            twice,
            elsewhere,
        ];
        let names: Vec<&str> = to_check(&inputs).iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["repo", "s", "t", "other-scope"]);
        assert!(to_check(&[]).is_empty());
    }

    fn check(status: BuildStatus, finished_at: Option<i64>) -> Build {
        Build {
            id: 1,
            team: "main".into(),
            status,
            plan: serde_json::Value::Null,
            worker: None,
            exit_status: None,
            error: None,
            created_at: 0,
            started_at: None,
            finished_at,
            pipeline: None,
            job: None,
            build_number: None,
            name: "1".into(),
            rerun_of: None,
            waiting: None,
            log_reaped_at: None,
            log: "database".into(),
            created_by: None,
            aborted_by: None,
            concourse: Default::default(),
        }
    }

    /// A check finished at or after the build's creation is done, whether
    /// it succeeded or not (as Concourse's last check end time); one
    /// running is waited for; none, or one finished before, is needed.
    #[test]
    fn a_check_finished_since_the_build_was_created_is_done_whatever_its_outcome() {
        assert_eq!(check_state(100, None), CheckState::Needed);
        for status in [BuildStatus::Pending, BuildStatus::Started] {
            assert_eq!(
                check_state(100, Some(&check(status, None))),
                CheckState::Running
            );
        }
        for status in [
            BuildStatus::Succeeded,
            BuildStatus::Failed,
            BuildStatus::Errored,
            BuildStatus::Aborted,
        ] {
            assert_eq!(
                check_state(100, Some(&check(status, Some(100)))),
                CheckState::Done
            );
            assert_eq!(
                check_state(100, Some(&check(status, Some(150)))),
                CheckState::Done
            );
            assert_eq!(
                check_state(100, Some(&check(status, Some(99)))),
                CheckState::Needed
            );
        }
    }

    #[test]
    fn the_reason_names_the_resources_checked() {
        assert_eq!(waiting_for(&["m".into()]), "for checks of resource \"m\"");
        assert_eq!(
            waiting_for(&["m".into(), "n".into()]),
            "for checks of resources \"m\", \"n\""
        );
    }
}
