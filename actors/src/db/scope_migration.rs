//! Tests of migration 0024: the global history `*`, once shared by every
//! team, becomes each team's own (see `crate::resources::scope`).

use serde_json::json;

use super::{Db, ResourceRow};

/// The migration's statements (one file, shared by both dialects),
/// comments left out.
fn statements() -> Vec<String> {
    let sql = include_str!("../../../migrations/0024_team_scopes.sql");
    let text: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn row(name: &str, config: &str) -> ResourceRow {
    ResourceRow {
        name: name.into(),
        scope: "*".into(),
        config: config.into(),
        check_every_ms: Some(60_000),
        pinned: None,
    }
}

/// Two teams' pipelines kept `cfg` (and team a's type image `img`) in
/// `*`, with a check build of team a as the last check: after the
/// migration each team has its own copy, in the same order, and only a's
/// history names a's check build.
async fn global_histories_become_each_teams_own(db: &Db) {
    let (a, _) = db
        .pipelines()
        .set_pipeline(
            "a",
            "pa",
            ("jobs: []", "{}"),
            None,
            &[],
            (&[row("r", "cfg")], &[row("t", "img")]),
        )
        .await
        .unwrap();
    let (b, _) = db
        .pipelines()
        .set_pipeline(
            "b",
            "pb",
            ("jobs: []", "{}"),
            None,
            &[],
            (&[row("same", "cfg")], &[]),
        )
        .await
        .unwrap();
    let versions = [
        (json!({"v": "1"}), json!([])),
        (json!({"v": "2"}), json!([])),
    ];
    db.versions()
        .save_versions("*", "cfg", &versions)
        .await
        .unwrap();
    db.versions()
        .save_versions("*", "img", &versions[..1])
        .await
        .unwrap();
    let check = db
        .builds()
        .create_build("a", &json!({}), "n")
        .await
        .unwrap();
    db.pipelines()
        .record_check_build("*", "cfg", check)
        .await
        .unwrap();

    for statement in statements() {
        sqlx::query(&statement)
            .execute(db.pool())
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    let scopes = |rows: Vec<ResourceRow>| rows.into_iter().map(|r| r.scope).collect::<Vec<_>>();
    assert_eq!(
        scopes(db.pipelines().pipeline_resources(a.id).await.unwrap()),
        ["team:a"]
    );
    assert_eq!(
        scopes(db.pipelines().pipeline_resource_types(a.id).await.unwrap()),
        ["team:a"]
    );
    assert_eq!(
        scopes(db.pipelines().pipeline_resources(b.id).await.unwrap()),
        ["team:b"]
    );
    let newest = |v: Vec<super::resources::VersionRow>| {
        v.into_iter()
            .map(|r| (r.version["v"].as_str().unwrap().to_string(), r.check_order))
            .collect::<Vec<_>>()
    };
    for team in ["team:a", "team:b"] {
        assert_eq!(
            newest(db.versions().newest(team, "cfg", 10).await.unwrap()),
            [("2".to_string(), 2), ("1".to_string(), 1)],
            "{team}"
        );
    }
    assert_eq!(
        db.versions()
            .newest("team:a", "img", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(db
        .versions()
        .newest("team:b", "img", 10)
        .await
        .unwrap()
        .is_empty());
    assert!(db
        .versions()
        .newest("*", "cfg", 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        db.pipelines().last_check("team:a", "cfg").await.unwrap(),
        Some(check)
    );
    assert_eq!(
        db.pipelines().last_check("team:b", "cfg").await.unwrap(),
        None
    );
    assert_eq!(db.pipelines().last_check("*", "cfg").await.unwrap(), None);
    // What a team is shown is its own check build only.
    assert_eq!(
        db.pipelines()
            .team_last_check("team:a", "cfg", "a")
            .await
            .unwrap(),
        Some(check)
    );
    assert_eq!(
        db.pipelines()
            .team_last_check("team:a", "cfg", "b")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn on_sqlite_global_histories_become_each_teams_own() {
    let (db, _dir) = super::test_db().await;
    global_histories_become_each_teams_own(&db).await;
}

#[tokio::test]
async fn on_postgres_global_histories_become_each_teams_own() {
    let pg = super::test_pg::PgDb::new().await;
    global_histories_become_each_teams_own(&pg.db).await;
    pg.drop().await;
}
