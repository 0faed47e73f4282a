//! End to end: Concourse's four roles. Every operation of the served
//! OpenAPI document is called by a team's owner, member, pipeline-operator
//! and viewer tokens, the admin, another team's member and no one, against
//! one real web node; each answer must be what the action map says
//! (Concourse's `atc/api/accessor/role_action_map.go`): allowed (any
//! answer but 401 and 403), refused for the role (403 with a JSON error
//! naming the role needed), hidden (another team's thing: 404) or
//! unauthenticated (401). A second node whose `[web.rbac]` gives the
//! hijacks to pipeline-operator must answer the same matrix but for
//! exactly those rows.

use crate::common;

use std::collections::BTreeMap;

use common::*;

const ADMIN: &str = "adm1n";

/// What an operation needs, as this test states it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Needs {
    /// Anyone, with or without a token.
    Open,
    /// A key of its own (the workers' registration key, a webhook token):
    /// no caller here holds it.
    Key,
    /// The admin only.
    Admin,
    /// A team role (0 viewer, 1 pipeline-operator, 2 member, 3 owner);
    /// `true` when the path names the team's thing (another team's member
    /// is answered 404), `false` for a listing (it is answered its own
    /// team's things).
    Role(u8, bool),
}

const VIEWER: u8 = 0;
const OPERATOR: u8 = 1;
const MEMBER: u8 = 2;
const OWNER: u8 = 3;

/// The expected action map.
fn expected() -> BTreeMap<&'static str, Needs> {
    use Needs::*;
    let mut m = BTreeMap::new();
    for op in [
        "dashboard",
        "dashboardLogin",
        "dashboardBuild",
        "dashboardWorkers",
        "dashboardQueue",
        "dashboardCollector",
        "dashboardPipeline",
        "dashboardJob",
        "dashboardResource",
        "dashboardPipelinesScript",
        "dashboardLogScript",
        "dashboardFeedWorker",
        "dashboardScript",
        "dashboardStyle",
        "healthz",
        "readyz",
        "metrics",
        "openapi",
        "info",
        "jwks",
        "openidConfiguration",
        "signIn",
        "skyToken",
        "flySuccess",
        "skyLogin",
        "skyLocalSignIn",
        "oidcSignIn",
        "oidcCallback",
        "githubSignIn",
        "githubCallback",
        "downloadCLI",
    ] {
        m.insert(op, Open);
    }
    for op in [
        "registerWorker",
        "workerHeartbeat",
        "beginSweep",
        "reportSweep",
        "checkResourceWebhook",
    ] {
        m.insert(op, Key);
    }
    for op in [
        "landWorker",
        "retireWorker",
        "pruneWorker",
        "pruneWorkerByName",
        "listActiveUsersSince",
    ] {
        m.insert(op, Admin);
    }
    for op in [
        "listWorkers",
        "listWorkerJobs",
        "listBackgroundJobs",
        "listWebNodes",
        "queue",
        "listBuilds",
        "listContainers",
        "listVolumes",
        "listTeams",
        "listAllPipelines",
        "listAllJobs",
        "listAllResources",
        "dashboardEvents",
    ] {
        m.insert(op, Role(VIEWER, false));
    }
    for op in [
        "getBuild",
        "listTeamContainers",
        "getContainer",
        "listTeamVolumes",
        "getBuildPlan",
        "getBuildPreparation",
        "listTeamBuilds",
        "getResourceVersion",
        "listBuildsWithVersionAsInput",
        "listBuildsWithVersionAsOutput",
        "buildEvents",
        "buildLog",
        "getBuildResources",
        "listPipelines",
        "getPipeline",
        "getConfig",
        "pipelineBadge",
        "jobBadge",
        "getJobBuild",
        "getResource",
        "getTeam",
        "listResourceTypes",
        "listPipelineBuilds",
        "listPipelineJobs",
        "getPipelineJob",
        "listJobInputs",
        "listJobBuilds",
        "listResources",
        "listResourceVersions",
        "listResourceTypeVersions",
        "pipelineFeed",
    ] {
        m.insert(op, Role(VIEWER, true));
    }
    for op in [
        "abortBuild",
        "triggerJob",
        "rerunJobBuild",
        "pauseJob",
        "unpauseJob",
        "pausePipeline",
        "unpausePipeline",
        "checkResource",
        "checkResourceType",
        "pinResourceVersion",
        "setPinCommentOnResource",
        "unpinResource",
        "enableResourceVersion",
        "disableResourceVersion",
        "clearTaskCache",
        "deleteTaskCache",
        "clearResourceCache",
    ] {
        m.insert(op, Role(OPERATOR, true));
    }
    for op in [
        "setPipeline",
        "saveConfig",
        "destroyPipeline",
        "renamePipeline",
        "orderPipelines",
        "archivePipeline",
        "exposePipeline",
        "hidePipeline",
        "createBuild",
        "uploadArtifact",
        "downloadArtifact",
        "hijackBuild",
        "hijackContainer",
        "listSecrets",
        "setTeamSecret",
        "destroyTeamSecret",
        "setPipelineSecret",
        "destroyPipelineSecret",
    ] {
        m.insert(op, Role(MEMBER, true));
    }
    for op in ["setTeam", "destroyTeam", "createToken", "revokeToken"] {
        m.insert(op, Role(OWNER, true));
    }
    m.insert("listTokens", Role(OWNER, false));
    m.insert("listAudit", Role(OWNER, false));
    m.insert("removeTeamRole", Role(OWNER, true));
    m.insert("signOut", Role(VIEWER, false));
    m.insert("whoAmI", Role(VIEWER, false));
    m
}

/// A caller of the matrix.
#[derive(Debug, Clone)]
struct Caller {
    name: &'static str,
    token: Option<String>,
    /// Its role in team red, if any.
    role: Option<u8>,
    admin: bool,
}

/// What a call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Allowed,
    /// 403 for the role.
    Refused,
    /// 404 for another team's thing.
    Hidden,
    /// 401.
    Unauthenticated,
}

const PIPELINE: &str = "resource_types:\n- name: rt\n  type: mock\n  check_every: never\n  source: {}\n\
resources:\n- name: r\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
jobs:\n- name: j\n  plan:\n  - get: r\n  - task: t\n    config: {platform: linux, run: {path: echo, args: [hi]}}\n";

fn client_as(url: &str, token: &str, args: &[&str]) -> String {
    let out = gantry()
        .env("GANTRY_TOKEN", token)
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Team red (a pipeline, a build, a spare token) and blue, and the callers.
fn set_up(dir: &std::path::Path, url: &str) -> (Vec<Caller>, BTreeMap<&'static str, String>) {
    client_as(url, ADMIN, &["set-team", "red"]);
    client_as(url, ADMIN, &["set-team", "blue"]);
    let file = dir.join("p.yml");
    write(&file, PIPELINE);
    for team in ["red", "blue"] {
        client_as(
            url,
            ADMIN,
            &[
                "set-pipeline",
                "--team",
                team,
                "-p",
                "p",
                "-c",
                file.to_str().unwrap(),
            ],
        );
    }
    let token = |team: &str, role: &str| {
        client_as(
            url,
            ADMIN,
            &["token", "create", "--team", team, "--role", role],
        )
    };
    let callers = vec![
        Caller {
            name: "no one",
            token: None,
            role: None,
            admin: false,
        },
        Caller {
            name: "blue member",
            token: Some(token("blue", "member")),
            role: None,
            admin: false,
        },
        Caller {
            name: "viewer",
            token: Some(token("red", "viewer")),
            role: Some(VIEWER),
            admin: false,
        },
        Caller {
            name: "pipeline-operator",
            token: Some(token("red", "pipeline-operator")),
            role: Some(OPERATOR),
            admin: false,
        },
        Caller {
            name: "member",
            token: Some(token("red", "member")),
            role: Some(MEMBER),
            admin: false,
        },
        Caller {
            name: "owner",
            token: Some(token("red", "owner")),
            role: Some(OWNER),
            admin: false,
        },
        Caller {
            name: "admin",
            token: Some(ADMIN.to_string()),
            role: None,
            admin: true,
        },
    ];
    // A build of red's job (no worker: it stays pending, so the team
    // cannot be destroyed under the matrix), and a token to revoke.
    let http = reqwest::blocking::Client::new();
    let build: serde_json::Value = http
        .post(format!("{url}/api/v1/teams/red/pipelines/p/jobs/j/builds"))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let spare: serde_json::Value = http
        .post(format!("{url}/api/v1/teams/red/tokens"))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"description": "to revoke"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let params = BTreeMap::from([
        ("team", "red".to_string()),
        ("pipeline", "p".to_string()),
        ("job", "j".to_string()),
        ("resource", "r".to_string()),
        ("resource_type", "rt".to_string()),
        ("build", build["id"].to_string()),
        ("handle", "no-such-handle".to_string()),
        ("name", "no-such-name".to_string()),
        ("token", spare["id"].as_str().unwrap().to_string()),
        ("artifact", "1".to_string()),
    ]);
    assert!(build["id"].as_i64().is_some(), "{build}");
    (callers, params)
}

/// Every operation of the served document: (operationId, method, path).
fn operations(url: &str) -> Vec<(String, String, String)> {
    let doc: serde_json::Value = reqwest::blocking::get(format!("{url}/api/v1/openapi.json"))
        .unwrap()
        .json()
        .unwrap();
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops.push((
                op["operationId"].as_str().unwrap().to_string(),
                method.to_uppercase(),
                path.clone(),
            ));
        }
    }
    // The destroying operations last, so the others find what they name,
    // and the team's own destruction the very last.
    // Exposing the pipeline is undone at once by hiding it: every other
    // row reads a pipeline only its team may read.
    ops.sort_by_key(|(id, _, _)| {
        let last = match id.as_str() {
            "destroyTeam" => 2,
            _ if id.starts_with("destroy") || id.starts_with("revoke") => 1,
            _ => 0,
        };
        let (name, then) = match id.as_str() {
            "exposePipeline" => ("hidePipeline", 0),
            other => (other, 1),
        };
        (last, name.to_string(), then)
    });
    ops
}

/// The path with its parameters filled in for team red.
fn fill(path: &str, op: &str, params: &BTreeMap<&str, String>) -> String {
    let id = match op {
        "revokeToken" => &params["token"],
        "downloadArtifact" => &params["artifact"],
        _ => &params["build"],
    };
    let name = if op.contains("Secret") {
        "s"
    } else {
        &params["name"]
    };
    path.replace("{team}", &params["team"])
        .replace("{pipeline}", &params["pipeline"])
        .replace("{job}", &params["job"])
        .replace("{resource}", &params["resource"])
        .replace("{resource_type}", &params["resource_type"])
        .replace("{build}", &params["build"])
        .replace("{handle}", &params["handle"])
        .replace("{name}", name)
        .replace("{id}", id)
}

/// Calls every operation as every caller: (operationId, caller) → outcome.
fn matrix(
    url: &str,
    callers: &[Caller],
    params: &BTreeMap<&str, String>,
) -> BTreeMap<(String, String), (Outcome, u16)> {
    let http = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    let mut seen = BTreeMap::new();
    for (op, method, path) in operations(url) {
        for caller in callers {
            let mut target = format!("{url}{}", fill(&path, &op, params));
            if op == "checkResourceWebhook" {
                target.push_str("?webhook_token=not-the-resources");
            }
            let mut req = http
                .request(method.parse().unwrap(), &target)
                .header("content-type", "application/json");
            if method != "GET" {
                req = req.body("{}");
            }
            if let Some(token) = &caller.token {
                req = req.bearer_auth(token);
            }
            let answer = req.send().unwrap();
            let status = answer.status().as_u16();
            let outcome = match status {
                401 => Outcome::Unauthenticated,
                403 => {
                    // Only a refusal's body is read: an allowed event
                    // stream would not end.
                    let body = answer.text().unwrap_or_default();
                    let error: serde_json::Value =
                        serde_json::from_str(&body).unwrap_or_else(|_| {
                            panic!("{op} as {}: 403 not JSON: {body}", caller.name)
                        });
                    assert!(error["error"].is_string(), "{op}: {body}");
                    Outcome::Refused
                }
                404 if caller.name == "blue member" => Outcome::Hidden,
                // Allowed must mean handled: a server error is no answer.
                s => {
                    assert!(s < 500, "{method} {target} as {}: {s}", caller.name);
                    Outcome::Allowed
                }
            };
            seen.insert((op.clone(), caller.name.to_string()), (outcome, status));
        }
    }
    seen
}

/// What the map says `caller` gets for `needs`.
fn want(needs: Needs, caller: &Caller) -> Vec<Outcome> {
    use Outcome::*;
    match (needs, caller.token.is_some()) {
        // A page naming another team's pipeline is not found for its
        // token (the page itself holds no data).
        (Needs::Open, _) if caller.token.is_some() && caller.role.is_none() && !caller.admin => {
            vec![Allowed, Hidden]
        }
        (Needs::Open, _) => vec![Allowed],
        (_, false) => vec![Unauthenticated],
        (Needs::Key, _) => vec![Unauthenticated, Refused, Hidden],
        (Needs::Admin, _) if caller.admin => vec![Allowed],
        (Needs::Admin, _) => vec![Refused],
        (Needs::Role(..), _) if caller.admin => vec![Allowed],
        // Another team's member: below its role, refused; otherwise its
        // own team's listing, or red's thing hidden.
        (Needs::Role(need, _), _) if caller.role.is_none() && need > MEMBER => vec![Refused],
        (Needs::Role(_, false), _) if caller.role.is_none() => vec![Allowed, Hidden],
        (Needs::Role(_, true), _) if caller.role.is_none() => vec![Hidden],
        (Needs::Role(need, _), _) => match caller.role {
            Some(r) if r >= need => vec![Allowed],
            _ => vec![Refused],
        },
    }
}

fn start(dir: &std::path::Path, db: &TestDb, rbac: &str) -> Server {
    start_web(
        dir,
        db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n{rbac}"),
    )
}

#[test]
fn every_route_answers_each_role_as_the_action_map_says_and_rbac_moves_one_row() {
    let expected = expected();
    let mut observed = Vec::new();
    for (kind, rbac) in [
        (DbKind::Sqlite, ""),
        (
            DbKind::Postgres,
            "[web.rbac]\npipeline-operator = [\"hijackBuild\", \"hijackContainer\"]\n",
        ),
    ] {
        let db = TestDb::new(kind);
        let dir = tempfile::tempdir().unwrap();
        let web = start(dir.path(), &db, rbac);
        let (callers, params) = set_up(dir.path(), &web.url);
        let seen = matrix(&web.url, &callers, &params);
        // Every operation of the document is in the expected map, and the
        // other way round.
        let ops: std::collections::BTreeSet<&str> =
            seen.keys().map(|(op, _)| op.as_str()).collect();
        let listed: std::collections::BTreeSet<&str> = expected.keys().copied().collect();
        assert_eq!(ops, listed, "the document's operations and this test's map");
        observed.push((callers, seen));
    }
    let (callers, default) = &observed[0];
    let mut wrong = Vec::new();
    for ((op, caller), (outcome, status)) in default {
        let c = callers.iter().find(|c| c.name == caller).unwrap();
        let allowed = want(expected[op.as_str()], c);
        if !allowed.contains(outcome) {
            wrong.push(format!(
                "{op} as {caller}: {outcome:?} ({status}), want {allowed:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // `[web.rbac]` changed exactly the pipeline-operator's hijacks.
    let moved = &observed[1].1;
    let changed: Vec<String> = default
        .iter()
        .filter(|(k, (v, _))| moved.get(*k).map(|m| m.0) != Some(*v))
        .map(|((op, caller), (v, _))| {
            format!(
                "{op} as {caller}: {v:?} -> {:?}",
                moved[&(op.clone(), caller.clone())].0
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            "hijackBuild as pipeline-operator: Refused -> Allowed",
            "hijackContainer as pipeline-operator: Refused -> Allowed",
        ],
        "{changed:#?}"
    );
}

#[test]
fn a_role_below_the_operation_is_refused_with_the_role_it_needs() {
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let web = start(dir.path(), &db, "");
    let url = &web.url;
    let (callers, _) = set_up(dir.path(), url);
    let viewer = callers.iter().find(|c| c.name == "viewer").unwrap();
    let owner = callers.iter().find(|c| c.name == "owner").unwrap();
    let out = gantry()
        .env("GANTRY_TOKEN", viewer.token.as_deref().unwrap())
        .args(["--url", url, "trigger-job", "--team", "red", "-j", "p/j"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(
        line.contains("triggerJob needs the role pipeline-operator") && line.contains("viewer"),
        "{line}"
    );
    // An owner makes tokens for its own team, with a role, and lists them.
    let made = client_as(
        url,
        owner.token.as_deref().unwrap(),
        &["token", "create", "--team", "red", "--role", "viewer"],
    );
    assert!(made.starts_with("gtk_"), "{made}");
    let listed = client_as(url, owner.token.as_deref().unwrap(), &["tokens", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let roles: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["team"], "red", "{t}");
            t["role"].as_str().unwrap()
        })
        .collect();
    assert!(
        roles.contains(&"owner") && roles.contains(&"viewer"),
        "{roles:?}"
    );
    // ... but not for another team, nor a new team.
    let out = gantry()
        .env("GANTRY_TOKEN", owner.token.as_deref().unwrap())
        .args(["--url", url, "token", "create", "--team", "blue"])
        .output()
        .unwrap();
    assert!(
        one_error_line(&out).contains("404"),
        "{}",
        one_error_line(&out)
    );
    let out = gantry()
        .env("GANTRY_TOKEN", owner.token.as_deref().unwrap())
        .args(["--url", url, "set-team", "green"])
        .output()
        .unwrap();
    assert!(
        one_error_line(&out).contains("admin"),
        "{}",
        one_error_line(&out)
    );
    // A bad role is refused by the CLI with one line.
    let out = gantry()
        .env("GANTRY_TOKEN", ADMIN)
        .args([
            "--url", url, "token", "create", "--team", "red", "--role", "boss",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("pipeline-operator"));
}

#[test]
fn a_bad_rbac_table_stops_the_node_naming_the_action() {
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let out = web_command(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n[web.rbac]\nviewer = [\"fly\"]\n"),
        0,
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown action \"fly\""), "{err}");
}

/// `trigger-job`'s build id, from its output.
fn triggered_id(out: &str) -> i64 {
    out.split("(build ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no build id in {out:?}"))
}

#[test]
fn the_audit_log_lists_who_set_unpaused_checked_pinned_triggered_and_aborted_in_order() {
    if !runc_runs_here() {
        return;
    }
    let db = TestDb::new(DbKind::Sqlite);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let web = start(dir, &db, "");
    let url = &web.url;
    let _worker = start_worker(dir, url, "w", worker_backend());
    wait_for(
        "a running worker",
        std::time::Duration::from_secs(60),
        || {
            let out = gantry()
                .env("GANTRY_TOKEN", ADMIN)
                .args(["--url", url, "workers", "--json"])
                .output()
                .ok()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            v.as_array()?
                .iter()
                .any(|w| w["state"] == "running")
                .then_some(())
        },
    );
    let (callers, _) = set_up(dir, url);
    let token_of = |name: &str| {
        callers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.token.clone())
            .unwrap()
    };
    let (member, operator, owner, viewer) = (
        token_of("member"),
        token_of("pipeline-operator"),
        token_of("owner"),
        token_of("viewer"),
    );
    let id_of = |token: &str| format!("token:{}", &token[4..20]);
    let slow = dir.join("slow.yml");
    write(
        &slow,
        "resources:\n- name: r\n  type: mock\n  check_every: never\n  source: {initial_version: v0}\n\
         jobs:\n- name: j\n  plan:\n  - get: r\n  - task: t\n    config: {platform: linux, run: {path: sleep, args: ['300']}}\n",
    );
    let red = ["--team", "red"];
    let run = |token: &str, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(red);
        client_as(url, token, &all)
    };
    run(
        &member,
        &["set-pipeline", "-p", "s", "-c", slow.to_str().unwrap()],
    );
    run(&operator, &["unpause-pipeline", "-p", "s"]);
    run(
        &operator,
        &["check-resource", "-r", "s/r", "--from", "version:v1"],
    );
    run(
        &operator,
        &["pin-resource", "-r", "s/r", "-v", "version:v1"],
    );
    // The version pinned, by its id (fly's `pin-resource -v` finds it).
    let versions: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!(
            "{url}/api/v1/teams/red/pipelines/s/resources/r/versions?filter=version:v1"
        ))
        .bearer_auth(&viewer)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let pinned = versions[0]["id"].as_i64().expect("a version id");
    let build = triggered_id(&run(&operator, &["trigger-job", "-j", "s/j"]));
    client_as(url, &owner, &["abort-build", "-b", &build.to_string()]);
    // The build says who made it and who aborted it.
    let made: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}"))
        .bearer_auth(&viewer)
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(made["created_by"], id_of(&operator), "{made}");
    assert_eq!(made["aborted_by"], id_of(&owner), "{made}");

    let log: serde_json::Value =
        serde_json::from_str(&client_as(url, &owner, &["audit", "--json"])).unwrap();
    let entries = log.as_array().unwrap();
    assert!(entries.iter().all(|e| e["team"] == "red"), "{log:#}");
    assert!(
        entries
            .windows(2)
            .all(|w| w[0]["id"].as_i64() < w[1]["id"].as_i64()),
        "oldest first: {log:#}"
    );
    // After the admin's team and tokens, the session in order.
    let session: Vec<(String, String, String)> = entries
        .iter()
        .filter(|e| e["actor"] != "admin")
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_string(),
                e["action"].as_str().unwrap().to_string(),
                e["target"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        (
            id_of(&member),
            "setPipeline",
            "/api/v1/teams/red/pipelines/s".to_string(),
        ),
        (
            id_of(&operator),
            "unpausePipeline",
            "/api/v1/teams/red/pipelines/s/unpause".into(),
        ),
        (
            id_of(&operator),
            "checkResource",
            "/api/v1/teams/red/pipelines/s/resources/r/check".into(),
        ),
        (
            id_of(&operator),
            "pinResourceVersion",
            format!("/api/v1/teams/red/pipelines/s/resources/r/versions/{pinned}/pin"),
        ),
        (
            id_of(&operator),
            "triggerJob",
            "/api/v1/teams/red/pipelines/s/jobs/j/builds".into(),
        ),
        (
            id_of(&owner),
            "abortBuild",
            format!("/api/v1/builds/{build}/abort"),
        ),
    ];
    let want: Vec<(String, String, String)> = want
        .into_iter()
        .map(|(a, b, c)| (a, b.to_string(), c))
        .collect();
    assert_eq!(session, want, "{log:#}");
    let admin_actions: Vec<&str> = entries
        .iter()
        .filter(|e| e["actor"] == "admin")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(admin_actions[0], "setTeam", "{admin_actions:?}");
    assert!(admin_actions.contains(&"createToken"), "{admin_actions:?}");
    // The admin sees every team's; a viewer cannot read it.
    let all: serde_json::Value =
        serde_json::from_str(&client_as(url, ADMIN, &["audit", "--json"])).unwrap();
    assert!(
        all.as_array().unwrap().iter().any(|e| e["team"] == "blue"),
        "{all:#}"
    );
    let out = gantry()
        .env("GANTRY_TOKEN", &viewer)
        .args(["--url", url, "audit"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        one_error_line(&out).contains("403"),
        "{}",
        one_error_line(&out)
    );
}
