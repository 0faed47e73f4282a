//! End to end: a build's events as `fly watch` reads them. The request
//! go-concourse sends (`GET /api/v1/builds/N/events`, no `Accept`, an empty
//! `Last-Event-ID` at first: go-sse's), the server-sent events parsed as
//! go-sse parses them, each event decoded strictly into Concourse's event
//! types (`atc/event/events.go`: every field the Go struct always sends,
//! with its JSON type; a type or major version fly does not know fails the
//! test, as it fails fly) and rendered as `fly/eventstream/render.go`
//! renders them (colour off, as on a pipe). The lines are `gantry watch`'s
//! for the same build, the status last; `origin.id` is the step's node in
//! Gantry's plan; `Last-Event-ID` resumes after an event; a stream opened
//! while the build runs gets its lines live, then `end`.

use crate::common;

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use common::*;

const PIPELINE: &str = "\
resources:
- name: r
  type: mock
  source: {initial_version: v1, metadata: [{name: commit, value: abc}]}
jobs:
- name: j
  plan:
  - get: r
  - task: t
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo first line; echo second line; exit 3']}
- name: live
  plan:
  - task: slow
    config:
      platform: linux
      run: {path: sh, args: [-c, 'echo one; sleep 3; echo two']}
";

/// `event.Origin` (both fields `omitempty`).
#[derive(Debug, Deserialize)]
struct Origin {
    #[serde(default)]
    id: String,
    #[serde(default)]
    source: String,
}

/// `atc.MetadataField`.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct MetadataField {
    name: String,
    value: String,
}

/// `event.TaskConfig` (the shadow of a task's config).
#[derive(Debug, Deserialize)]
struct TaskConfig {
    run: TaskRun,
}

/// `event.TaskRunConfig`.
#[derive(Debug, Deserialize)]
struct TaskRun {
    path: String,
    args: Option<Vec<String>>,
}

/// The Concourse events, as fly's parser table knows them.
#[derive(Debug)]
#[allow(dead_code)]
enum Event {
    Log {
        time: i64,
        origin: Origin,
        payload: String,
    },
    Status {
        status: String,
        time: i64,
    },
    WaitingForWorker {
        time: i64,
        origin: Origin,
    },
    SelectedWorker {
        time: i64,
        origin: Origin,
        worker: String,
    },
    StreamingVolume {
        time: i64,
        volume: String,
        source_worker: String,
    },
    InitializeTask {
        time: i64,
        origin: Origin,
    },
    StartTask {
        time: i64,
        config: TaskConfig,
    },
    FinishTask {
        time: i64,
        exit_status: i32,
        origin: Origin,
    },
    Initialize {
        origin: Origin,
    },
    Start {
        origin: Origin,
    },
    Finish {
        origin: Origin,
        time: i64,
        succeeded: bool,
    },
    FinishGet {
        origin: Origin,
        exit_status: i32,
        version: BTreeMap<String, String>,
        metadata: Vec<MetadataField>,
    },
    FinishPut {
        origin: Origin,
        exit_status: i32,
        version: BTreeMap<String, String>,
    },
    Error {
        message: String,
        origin: Origin,
        time: i64,
    },
    ImageGet {
        time: i64,
        origin: Origin,
        plan: Value,
    },
}

/// `event.Envelope`.
#[derive(Debug, Deserialize)]
struct Envelope {
    data: Value,
    event: String,
    version: String,
    event_id: String,
}

/// Decodes `data` as `T`: every field it names present, with its type.
fn strict<T: serde::de::DeserializeOwned>(data: &Value, what: &str) -> T {
    serde_json::from_value(data.clone()).unwrap_or_else(|e| panic!("{what} {data}: {e}"))
}

/// fly's `ParseEvent`: the type, and a version of the same major as one it
/// registers (`EventVersion.IsCompatibleWith`).
fn decode(env: &Envelope) -> Event {
    #[derive(Deserialize)]
    struct Log {
        time: i64,
        origin: Origin,
        payload: String,
    }
    #[derive(Deserialize)]
    struct Status {
        status: String,
        time: i64,
    }
    #[derive(Deserialize)]
    struct Timed {
        time: i64,
        origin: Origin,
    }
    #[derive(Deserialize)]
    struct Selected {
        time: i64,
        origin: Origin,
        selected_worker: String,
    }
    #[derive(Deserialize)]
    struct Streaming {
        time: i64,
        #[allow(dead_code)]
        origin: Origin,
        volume: String,
        source_worker: String,
        #[allow(dead_code)]
        dest_worker: String,
    }
    #[derive(Deserialize)]
    struct Task {
        time: i64,
        origin: Origin,
        config: TaskConfig,
    }
    #[derive(Deserialize)]
    struct FinishTask {
        time: i64,
        exit_status: i32,
        origin: Origin,
    }
    #[derive(Deserialize)]
    struct Step {
        origin: Origin,
        #[serde(default)]
        #[allow(dead_code)]
        time: i64,
    }
    #[derive(Deserialize)]
    struct Finish {
        origin: Origin,
        time: i64,
        succeeded: bool,
    }
    #[derive(Deserialize)]
    struct FinishResource {
        origin: Origin,
        #[allow(dead_code)]
        time: i64,
        exit_status: i32,
        version: BTreeMap<String, String>,
        #[serde(default)]
        metadata: Vec<MetadataField>,
    }
    #[derive(Deserialize)]
    struct Error {
        message: String,
        origin: Origin,
        time: i64,
    }
    #[derive(Deserialize)]
    struct Image {
        time: i64,
        origin: Origin,
        plan: Value,
    }
    let major = env.version.split('.').next().unwrap_or_default();
    let d = &env.data;
    let what = format!("{} {}", env.event, env.version);
    match (env.event.as_str(), major) {
        ("log", "5") => {
            let e: Log = strict(d, &what);
            Event::Log {
                time: e.time,
                origin: e.origin,
                payload: e.payload,
            }
        }
        ("status", "1") => {
            let e: Status = strict(d, &what);
            Event::Status {
                status: e.status,
                time: e.time,
            }
        }
        ("waiting-for-worker", "1") => {
            let e: Timed = strict(d, &what);
            Event::WaitingForWorker {
                time: e.time,
                origin: e.origin,
            }
        }
        ("selected-worker", "1") => {
            let e: Selected = strict(d, &what);
            Event::SelectedWorker {
                time: e.time,
                origin: e.origin,
                worker: e.selected_worker,
            }
        }
        ("streaming-volume", "1") => {
            let e: Streaming = strict(d, &what);
            Event::StreamingVolume {
                time: e.time,
                volume: e.volume,
                source_worker: e.source_worker,
            }
        }
        ("initialize-task", "4") => {
            let e: Task = strict(d, &what);
            Event::InitializeTask {
                time: e.time,
                origin: e.origin,
            }
        }
        ("start-task", "5") => {
            let e: Task = strict(d, &what);
            Event::StartTask {
                time: e.time,
                config: e.config,
            }
        }
        ("finish-task", "4") => {
            let e: FinishTask = strict(d, &what);
            Event::FinishTask {
                time: e.time,
                exit_status: e.exit_status,
                origin: e.origin,
            }
        }
        ("initialize-get", "2") | ("initialize-put", "2") => Event::Initialize {
            origin: strict::<Step>(d, &what).origin,
        },
        ("start-get", "1") | ("start-put", "1") => Event::Start {
            origin: strict::<Step>(d, &what).origin,
        },
        ("initialize", "1") => Event::Initialize {
            origin: strict::<Step>(d, &what).origin,
        },
        ("start", "1") => Event::Start {
            origin: strict::<Step>(d, &what).origin,
        },
        ("finish", "1") => {
            let e: Finish = strict(d, &what);
            Event::Finish {
                origin: e.origin,
                time: e.time,
                succeeded: e.succeeded,
            }
        }
        ("finish-get", "5") => {
            let e: FinishResource = strict(d, &what);
            Event::FinishGet {
                origin: e.origin,
                exit_status: e.exit_status,
                version: e.version,
                metadata: e.metadata,
            }
        }
        ("finish-put", "5") => {
            let e: FinishResource = strict(d, &what);
            Event::FinishPut {
                origin: e.origin,
                exit_status: e.exit_status,
                version: e.version,
            }
        }
        ("error", "4") => {
            let e: Error = strict(d, &what);
            Event::Error {
                message: e.message,
                origin: e.origin,
                time: e.time,
            }
        }
        ("image-get", "1") => {
            let e: Image = strict(d, &what);
            Event::ImageGet {
                time: e.time,
                origin: e.origin,
                plan: e.plan,
            }
        }
        _ => panic!("fly knows no event {what}: {d}"),
    }
}

/// One server-sent event, as go-sse reads it.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: String,
    name: String,
    data: String,
}

/// Reads server-sent events from `body` until `end`, calling `each` on
/// each as it arrives.
fn read_sse(body: impl std::io::Read, mut each: impl FnMut(&Sse)) -> Vec<Sse> {
    let mut events = Vec::new();
    let mut current = Sse {
        id: String::new(),
        name: String::new(),
        data: String::new(),
    };
    let mut data: Vec<String> = Vec::new();
    for line in std::io::BufReader::new(body).lines() {
        let line = line.expect("reading the event stream");
        if line.is_empty() {
            current.data = data.join("\n");
            data.clear();
            each(&current);
            let ended = current.name == "end";
            events.push(current.clone());
            if ended {
                break;
            }
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_string();
        match field {
            "id" => current.id = value,
            "event" => current.name = value,
            "data" => data.push(value),
            other => panic!("unexpected field {other:?} in {line:?}"),
        }
    }
    events
}

/// The build's events as go-concourse asks for them (after `last`).
fn open(url: &str, build: i64, last: &str) -> reqwest::blocking::Response {
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("Last-Event-ID", last)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert_eq!(kind, "text/event-stream; charset=utf-8");
    assert_eq!(resp.headers()["x-atc-stream-version"], "2.0");
    resp
}

/// The events' envelopes, decoded (the `end` left out, checked last).
fn envelopes(events: &[Sse]) -> Vec<(Envelope, Event)> {
    let (end, events) = events.split_last().expect("an end event");
    assert_eq!(end.name, "end", "{end:?}");
    events
        .iter()
        .map(|e| {
            assert_eq!(e.name, "event", "{e:?}");
            let env: Envelope = serde_json::from_str(&e.data).unwrap();
            assert_eq!(env.event_id, e.id);
            let event = decode(&env);
            (env, event)
        })
        .collect()
}

/// `fly/eventstream/render.go`'s `Render` (no timestamps, colour off): the
/// text and the exit status.
fn render(events: &[(Envelope, Event)]) -> (String, i32) {
    let mut out = String::new();
    let mut exit = 0;
    for (_, e) in events {
        match e {
            Event::Log { payload, .. } => out.push_str(payload),
            Event::WaitingForWorker { .. } => out.push_str(
                "\x1b[1mno suitable workers found, waiting for worker...\x1b[0m\n",
            ),
            Event::SelectedWorker { worker, .. } => {
                out.push_str(&format!("\x1b[1mselected worker:\x1b[0m {worker}\n"))
            }
            Event::StreamingVolume {
                volume,
                source_worker,
                ..
            } => out.push_str(&format!(
                "\x1b[1mstreaming volume\x1b[0m {volume} \x1b[1mfrom worker\x1b[0m {source_worker}\n"
            )),
            Event::InitializeTask { .. } => out.push_str("\x1b[1minitializing\x1b[0m\n"),
            Event::StartTask { config, .. } => {
                let mut argv = vec![config.run.path.clone()];
                argv.extend(config.run.args.clone().unwrap_or_default());
                out.push_str(&format!("\x1b[1mrunning {}\x1b[0m\n", argv.join(" ")));
            }
            Event::FinishTask { exit_status, .. } => exit = *exit_status,
            Event::Error { message, .. } => out.push_str(&format!("{message}\n")),
            Event::Status { status, .. } => {
                let code = match status.as_str() {
                    "started" => continue,
                    "succeeded" => 0,
                    "failed" => 1,
                    "errored" => 2,
                    "aborted" => 3,
                    other => panic!("fly: unknown status: {other}"),
                };
                if exit == 0 {
                    exit = code;
                }
                out.push_str(&format!("{status}\n"));
                return (out, exit);
            }
            _ => {}
        }
    }
    panic!("the stream ended before a final status:\n{out}")
}

/// Gantry's own NDJSON events of `build` (its `plan` event names the nodes).
fn gantry_events(url: &str, build: i64) -> Vec<Value> {
    reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("accept", "application/x-ndjson")
        .send()
        .unwrap()
        .text()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].take())
        .collect()
}

#[test]
fn fly_watch_reads_a_builds_events_as_gantry_watch_tells_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir.path(), &db);
    let url = server.url.as_str();
    write(&dir.path().join("pipeline.yml"), PIPELINE);

    // A finished build: a get, then a task that prints two lines and fails.
    let out = gantry_run(url, dir.path(), &["-p", "pipeline.yml", "-j", "j"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let build = run_build_text(&String::from_utf8_lossy(&out.stderr)).expect("a build id");

    let events = read_sse(open(url, build, ""), |_| {});
    let decoded = envelopes(&events);
    let ids: Vec<String> = (0..=decoded.len()).map(|n| n.to_string()).collect();
    let sent: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(sent, ids, "ids count the events from 0, `end` last");
    let (text, exit) = render(&decoded);

    // `gantry watch` of the same build, stdout and stderr in one pipe.
    let told_at = dir.path().join("watch.out");
    let file = std::fs::File::create(&told_at).unwrap();
    let watched = gantry()
        .args(["--url", url, "watch", "--build", &build.to_string()])
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .unwrap();
    let told = std::fs::read_to_string(&told_at).unwrap();
    assert_eq!(watched.code(), Some(3), "{told}");
    assert_eq!(exit, 3, "fly exits with the task's status:\n{text}");

    // The same output lines, in order; fly's own lines are bold, Gantry's
    // name the step or the worker; fly's status last.
    let fly_lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("\x1b[1m")).collect();
    let gantry_lines: Vec<&str> = told
        .lines()
        .filter(|l| {
            ![
                "step ",
                "running on worker ",
                "waiting for a worker: ",
                "build ",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    let (status, output) = fly_lines.split_last().unwrap();
    assert_eq!(*status, "failed", "{text}");
    assert_eq!(
        output,
        gantry_lines.as_slice(),
        "fly:\n{text}\ngantry:\n{told}"
    );
    assert!(output.ends_with(&["first line", "second line"]), "{text}");
    let worker = told
        .lines()
        .find_map(|l| l.strip_prefix("running on worker "))
        .expect("gantry watch names the worker");
    assert!(
        text.contains(&format!("\x1b[1mselected worker:\x1b[0m {worker}\n")),
        "{text}"
    );
    let task_start = format!(
        "\x1b[1minitializing\x1b[0m\n\x1b[1mselected worker:\x1b[0m {worker}\n\
         \x1b[1mrunning sh -c echo first line; echo second line; exit 3\x1b[0m\nfirst line\n"
    );
    assert!(
        text.contains(&task_start),
        "fly tells the task starting, then its output:\n{text}"
    );
    // Each step's events name its node in Gantry's plan.
    let plan = gantry_events(url, build)
        .into_iter()
        .find(|e| e["type"] == "plan")
        .expect("a plan event");
    let node_of = |step: &str| -> String {
        fn find(node: &Value, step: &str) -> Option<String> {
            if node["step"] == step {
                return node["id"].as_str().map(str::to_string);
            }
            node["children"]
                .as_array()?
                .iter()
                .find_map(|c| find(c, step))
        }
        find(&plan["tree"], step).unwrap_or_else(|| panic!("{step} in {plan}"))
    };
    let (get_node, task_node) = (node_of("r"), node_of("t"));
    assert_ne!(get_node, task_node);
    let mut finished = Vec::new();
    for (env, e) in &decoded {
        match e {
            Event::Log {
                origin, payload, ..
            } if payload.contains("line") => {
                assert_eq!(
                    (origin.id.as_str(), origin.source.as_str()),
                    (task_node.as_str(), "stdout")
                );
            }
            Event::FinishGet {
                origin,
                exit_status,
                version,
                metadata,
            } => {
                assert_eq!(origin.id, get_node);
                assert_eq!(*exit_status, 0);
                assert_eq!(
                    version.get("version").map(String::as_str),
                    Some("v1"),
                    "{version:?}"
                );
                assert_eq!(metadata.len(), 1, "{metadata:?}");
                finished.push("get");
            }
            Event::FinishTask {
                origin,
                exit_status,
                time,
            } => {
                assert_eq!((origin.id.as_str(), *exit_status), (task_node.as_str(), 3));
                // Unix seconds, not milliseconds.
                assert!(*time > 1_600_000_000 && *time < 4_000_000_000, "{time}");
                finished.push("task");
            }
            Event::Status { time, .. } => {
                assert!(*time < 4_000_000_000, "{} {time}", env.event)
            }
            _ => {}
        }
    }
    assert_eq!(finished, ["get", "task"]);

    // Reconnecting after event K (go-sse sends the last id read): the
    // events after it, the same ids, `end` last.
    let k = events.len() / 2;
    let rest = read_sse(open(url, build, &events[k].id), |_| {});
    assert_eq!(rest, events[k + 1..].to_vec());
    let bad = reqwest::blocking::Client::new()
        .get(format!("{url}/api/v1/builds/{build}/events"))
        .header("Last-Event-ID", "nope")
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);

    // A stream opened while a build runs: its first line while the build
    // still runs, then the rest live, then `end`.
    let mut child = spawn_run(
        url,
        dir.path(),
        "live",
        &["-p", "pipeline.yml", "-j", "live"],
    );
    let err = dir.path().join("live.err");
    let live = wait_for("the live build's id", Duration::from_secs(60), || {
        run_build(&err)
    });
    let status_of = |id: i64| -> String {
        let b: Value = reqwest::blocking::get(format!("{url}/api/v1/builds/{id}"))
            .unwrap()
            .json()
            .unwrap();
        b["status"].as_str().unwrap().to_string()
    };
    let started = Instant::now();
    let mut running_at_first_line = None;
    let events = read_sse(open(url, live, ""), |e| {
        if running_at_first_line.is_none() && e.data.contains("\"payload\":\"one\\n\"") {
            running_at_first_line = Some(status_of(live));
        }
    });
    assert!(started.elapsed() < Duration::from_secs(120));
    assert_eq!(running_at_first_line.as_deref(), Some("started"));
    let decoded = envelopes(&events);
    let (text, exit) = render(&decoded);
    assert_eq!(exit, 0, "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("\x1b[1m")).collect();
    assert_eq!(lines, ["one", "two", "succeeded"], "{text}");
    assert!(wait_child(&mut child, Duration::from_secs(60)).success());
}
