use std::time::{Duration, Instant};

use gantry_actors::api::{Build, GcStatsSnapshot};
use gantry_wire::state::BuildStatus;
use serde_json::json;

use super::*;

fn snapshot(builds: Vec<BuildEntry>) -> Snapshot {
    Snapshot {
        viewer: "admin".into(),
        workers: vec![],
        builds,
        containers: vec![],
        volumes: vec![],
        handles_cut: false,
        gc: GcState {
            containers: BTreeMap::new(),
            volumes: BTreeMap::new(),
            missing_containers: 0,
            missing_volumes: 0,
            volume_stores: vec![],
            rules: vec![],
            sweeps: GcStatsSnapshot::default(),
        },
        web_nodes: vec![],
        queue: vec![],
        pipelines: vec![],
    }
}

/// The frame `changes` sends for `s` (serialised as the shared snapshots are).
fn frame(changes: &mut Changes, s: &Snapshot, now: Instant, now_ms: i64) -> Option<String> {
    changes.frame_json(&serde_json::to_string(s).unwrap(), now, now_ms)
}

fn row(id: i64, plan: serde_json::Value, finished_at: Option<i64>) -> Build {
    Build {
        id,
        team: "main".into(),
        status: BuildStatus::Succeeded,
        plan,
        worker: Some("w".into()),
        exit_status: Some(0),
        error: None,
        created_at: 1_000,
        started_at: None,
        finished_at,
        pipeline: None,
        job: None,
        build_number: None,
        name: id.to_string(),
        rerun_of: None,
        waiting: None,
        log_reaped_at: None,
        log: "database".into(),
        created_by: None,
        aborted_by: None,
        concourse: Default::default(),
    }
}

#[test]
fn a_plan_is_labelled_by_its_job_check_or_task() {
    assert_eq!(
        job_label(&json!({"pipeline": "...", "pipeline_name": "ci", "job": "test"})),
        "ci/test"
    );
    assert_eq!(
        job_label(&json!({"pipeline": "...", "job": "test"})),
        "main/test"
    );
    assert_eq!(
        job_label(&json!({"pipeline": "...", "check": "repo"})),
        "check repo"
    );
    assert_eq!(job_label(&json!({"config": {}})), "one-off task");
}

#[test]
fn a_finished_build_has_a_duration_and_drops_its_plan_text() {
    let done = BuildEntry::of(row(1, json!({"job": "j", "pipeline": "big"}), Some(4_500)));
    assert_eq!(done.duration_ms, Some(3_500));
    assert_eq!(done.job, "main/j");
    let text = serde_json::to_string(&done).unwrap();
    assert!(!text.contains("big"), "{text}");
    assert_eq!(BuildEntry::of(row(2, json!({}), None)).duration_ms, None);
}

#[test]
fn the_feed_sends_a_snapshot_only_when_it_changed() {
    let t0 = Instant::now();
    let mut changes = Changes::default();
    let first = frame(&mut changes, &snapshot(vec![]), t0, 7).unwrap();
    assert!(first.starts_with("data: {\"now\":7,\"fleet\":{"), "{first}");
    assert!(first.ends_with("}\n\n"));
    let data: serde_json::Value = serde_json::from_str(&first["data: ".len()..]).unwrap();
    assert_eq!(data["fleet"]["viewer"], "admin");
    // The same fleet a second later: nothing (the time alone is no change).
    assert_eq!(frame(&mut changes, &snapshot(vec![]), t0, 8), None);
    let one = BuildEntry::of(row(1, json!({}), None));
    let next = frame(&mut changes, &snapshot(vec![one.clone()]), t0, 9).unwrap();
    assert!(next.contains("\"id\":1"), "{next}");
    assert_eq!(frame(&mut changes, &snapshot(vec![one]), t0, 10), None);
}

#[test]
fn a_quiet_feed_sends_keep_alives_and_a_problem_once() {
    let t0 = Instant::now();
    let mut changes = Changes::default();
    frame(&mut changes, &snapshot(vec![]), t0, 0).unwrap();
    assert_eq!(changes.keep_alive(t0 + Duration::from_secs(1)), None);
    let later = t0 + KEEP_ALIVE;
    assert_eq!(
        changes.keep_alive(later).as_deref(),
        Some(": keep-alive\n\n")
    );
    assert_eq!(changes.keep_alive(later + Duration::from_secs(1)), None);
    let p = changes.problem("database down", later).unwrap();
    assert_eq!(p, "event: problem\ndata: {\"error\":\"database down\"}\n\n");
    assert_eq!(changes.problem("database down", later), None);
    // Once snapshots come again, the same problem is told again.
    assert_eq!(frame(&mut changes, &snapshot(vec![]), later, 1), None);
    assert!(changes.problem("database down", later).is_some());
}

#[test]
fn a_pipeline_at_a_glance_is_its_worst_ended_newest_build_and_whether_one_runs() {
    let view = || PipelineView {
        id: 1,
        name: "p".into(),
        team: "main".into(),
        team_name: "main".into(),
        paused: false,
        archived: false,
        public: false,
        instance_vars: None,
        config_version: 1,
        config: None,
    };
    use BuildStatus::*;
    let of = |newest: &[Option<BuildStatus>]| {
        let e = PipelineEntry::of(view(), newest);
        (e.status, e.running)
    };
    assert_eq!(of(&[]), (None, false));
    assert_eq!(of(&[None, None]), (None, false));
    assert_eq!(
        of(&[Some(Succeeded), Some(Started)]),
        (Some("succeeded"), true)
    );
    assert_eq!(
        of(&[Some(Succeeded), Some(Aborted), Some(Failed), Some(Errored)]),
        (Some("failed"), false)
    );
    assert_eq!(of(&[Some(Pending), Some(Errored)]), (Some("errored"), true));
}
