//! The resolution rules on a real (SQLite) database: newest first,
//! disabled versions skipped, `passed` with the consistency rule across
//! inputs that share an upstream job, `every` in order, and why an input
//! cannot be satisfied.

use serde_json::json;

use super::*;
use crate::db::{test_db, Direction};
use crate::triggers::inputs::Pin;
use gantry_wire::state::BuildStatus;

fn input(name: &str, config: &str, passed: &[&str]) -> JobInput {
    JobInput {
        name: name.into(),
        resource: name.into(),
        passed: passed.iter().map(|s| s.to_string()).collect(),
        trigger: true,
        every: false,
        pin: None,
        scope: "*".into(),
        config: config.into(),
    }
}

const AT: JobAt<'static> = JobAt {
    team: "main",
    pipeline: "p",
    job: "down",
};

/// A finished build of job `job` that used `versions` (resource, version).
async fn build(db: &Db, job: &str, status: BuildStatus, versions: &[(&str, &str)]) -> i64 {
    let id = db
        .builds()
        .create_build("main", &json!({}), "n")
        .await
        .unwrap();
    db.gc().set_build_job(id, "p", job).await.unwrap();
    for (resource, v) in versions {
        db.versions()
            .record_build_version(id, Direction::In, resource, resource, &json!({ "v": v }))
            .await
            .unwrap();
    }
    db.builds()
        .finish_build(id, status, Some(0), None)
        .await
        .unwrap();
    id
}

fn v(s: &str) -> String {
    json!({ "v": s }).to_string()
}

async fn resolved(db: &Db, inputs: &[JobInput]) -> Resolution {
    resolve(db, AT, 1, inputs).await.unwrap()
}

#[tokio::test]
async fn inputs_sharing_an_upstream_job_take_versions_from_the_same_build_of_it() {
    let (db, _dir) = test_db().await;
    for (config, names) in [("cx", ["x1", "x2"]), ("cy", ["y1", "y2"])] {
        let rows: Vec<_> = names
            .iter()
            .map(|n| (json!({ "v": n }), json!([])))
            .collect();
        db.versions()
            .save_versions("*", config, &rows)
            .await
            .unwrap();
    }
    // x2 and y2 are the newest, but no build of `up` had both; the newest
    // build of `up` (by upstream build, as Concourse) had x1 and y2.
    build(
        &db,
        "up",
        BuildStatus::Succeeded,
        &[("x", "x1"), ("y", "y1")],
    )
    .await;
    build(
        &db,
        "up",
        BuildStatus::Succeeded,
        &[("x", "x2"), ("y", "y1")],
    )
    .await;
    build(
        &db,
        "up",
        BuildStatus::Succeeded,
        &[("x", "x1"), ("y", "y2")],
    )
    .await;
    build(&db, "up", BuildStatus::Failed, &[("x", "x2"), ("y", "y2")]).await;
    let inputs = [input("x", "cx", &["up"]), input("y", "cy", &["up"])];
    let Resolution::Resolved(chosen) = resolved(&db, &inputs).await else {
        panic!("unsatisfied")
    };
    assert_eq!(
        (chosen["x"].clone(), chosen["y"].clone()),
        (v("x1"), v("y2"))
    );
    // With y held to y1, x2 (a newer build than x1's with y1).
    let mut held = inputs.clone();
    held[1].pin = Some(Pin::Api(v("y1")));
    held.swap(0, 1);
    let Resolution::Resolved(chosen) = resolved(&db, &held).await else {
        panic!("unsatisfied")
    };
    assert_eq!(
        (chosen["x"].clone(), chosen["y"].clone()),
        (v("x2"), v("y1"))
    );

    // Without the shared job, each takes its newest.
    let free = [input("x", "cx", &[]), input("y", "cy", &[])];
    let Resolution::Resolved(chosen) = resolved(&db, &free).await else {
        panic!("unsatisfied")
    };
    assert_eq!(
        (chosen["x"].clone(), chosen["y"].clone()),
        (v("x2"), v("y2"))
    );

    // x2 disabled: still x1 with y2, which one build of `up` had.
    db.pipelines()
        .set_version_disabled(1, "x", &v("x2"), true)
        .await
        .unwrap();
    let Resolution::Resolved(chosen) = resolved(&db, &inputs).await else {
        panic!("unsatisfied")
    };
    assert_eq!(
        (chosen["x"].clone(), chosen["y"].clone()),
        (v("x1"), v("y2"))
    );

    // A pin holds its input, and the other follows it.
    let mut pinned = inputs.clone();
    pinned[1].pin = Some(Pin::Api(v("y1")));
    let Resolution::Resolved(chosen) = resolved(&db, &pinned).await else {
        panic!("unsatisfied")
    };
    assert_eq!(
        (chosen["x"].clone(), chosen["y"].clone()),
        (v("x1"), v("y1"))
    );
}

#[tokio::test]
async fn every_goes_on_from_the_last_version_used_and_unsatisfied_inputs_say_why() {
    let (db, _dir) = test_db().await;
    let rows: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| (json!({ "v": n }), json!([])))
        .collect();
    db.versions().save_versions("*", "cz", &rows).await.unwrap();
    let mut every = input("z", "cz", &[]);
    every.every = true;
    let next = |chosen: Resolution| match chosen {
        Resolution::Resolved(c) => c["z"].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(next(resolved(&db, &[every.clone()]).await), v("a"));
    build(&db, "down", BuildStatus::Succeeded, &[("z", "a")]).await;
    assert_eq!(next(resolved(&db, &[every.clone()]).await), v("b"));
    build(&db, "down", BuildStatus::Failed, &[("z", "b")]).await;
    build(&db, "down", BuildStatus::Succeeded, &[("z", "c")]).await;
    // Nothing newer: the last one used, so no new build differs from it.
    assert_eq!(next(resolved(&db, &[every]).await), v("c"));

    let passed = input("z", "cz", &["nobody"]);
    match resolved(&db, &[passed]).await {
        Resolution::Unsatisfied(why) => assert_eq!(
            why,
            [(
                "z".to_string(),
                "no version of \"z\" has gone through a succeeded build of \"nobody\"".to_string()
            )]
        ),
        other => panic!("{other:?}"),
    }
    let fresh = input("w", "never-checked", &[]);
    match resolved(&db, &[fresh]).await {
        Resolution::Unsatisfied(why) => {
            assert!(
                why[0].1.contains("has been found by a check yet"),
                "{why:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn passed_takes_the_newest_upstream_builds_outputs_before_its_inputs() {
    let (db, _dir) = test_db().await;
    let rows: Vec<_> = ["1", "2", "3"]
        .iter()
        .map(|n| (json!({ "v": n }), json!([])))
        .collect();
    db.versions().save_versions("*", "cm", &rows).await.unwrap();
    // An older build had 3; the newest got 2 and put 1.
    build(&db, "up", BuildStatus::Succeeded, &[("m", "3")]).await;
    let newest = build(&db, "up", BuildStatus::Succeeded, &[("m", "2")]).await;
    db.versions()
        .record_build_version(newest, Direction::Out, "push", "m", &json!({ "v": "1" }))
        .await
        .unwrap();
    let chosen = |r: Resolution| match r {
        Resolution::Resolved(c) => c["m"].clone(),
        other => panic!("{other:?}"),
    };
    let down = input("m", "cm", &["up"]);
    assert_eq!(
        chosen(resolved(&db, std::slice::from_ref(&down)).await),
        v("1")
    );
    // The put's version disabled: the same build's input.
    db.pipelines()
        .set_version_disabled(1, "m", &v("1"), true)
        .await
        .unwrap();
    assert_eq!(
        chosen(resolved(&db, std::slice::from_ref(&down)).await),
        v("2")
    );
    // Many newer builds with one version: read past them to the others.
    db.pipelines()
        .set_version_disabled(1, "m", &v("2"), true)
        .await
        .unwrap();
    for _ in 0..(PAGE + 5) {
        build(&db, "up", BuildStatus::Succeeded, &[("m", "2")]).await;
    }
    assert_eq!(chosen(resolved(&db, &[down]).await), v("3"));
}
