//! End to end: OpenTelemetry traces across processes. A web node (its
//! endpoint in `[telemetry]`) and two worker processes (theirs in
//! `OTEL_EXPORTER_OTLP_ENDPOINT`) export to a real OTLP/HTTP receiver
//! (`common/otlp.rs`, decoding the protocol's protobuf). A two-step job
//! whose second step gets the first's output peer-to-peer is one trace:
//!
//! ```text
//! build                                   web node
//! ├─ step make                            web node
//! │  ├─ placement                         web node (strategy, worker, candidates)
//! │  ├─ container start ─ POST /containers ...          worker a
//! │  └─ process                           web node
//! └─ step check                           web node
//!    ├─ placement                         web node
//!    ├─ stream data (artifact ...)        web node (the step that needed it)
//!    │  └─ PUT /volumes/{handle}/stream-from            worker b
//!    │     └─ GET /p2p/volumes/{handle}/stream-out      worker a
//!    ├─ container start ...
//!    └─ process
//! ```
//!
//! The trace id is in the build's `started` event, in `gantry run`'s
//! output and in the workers' log lines. A third worker without an
//! endpoint runs a step of a traced build and sends nothing.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::otlp::{ReceivedSpan, Receiver};
use common::*;

const PASS_ON: &str = r#"
jobs:
- name: pass-on
  plan:
  - task: make
    tags: [a]
    config:
      platform: linux
      outputs: [{name: data}]
      run:
        path: sh
        args: [-ec, 'echo hello > data/x']
  - task: check
    tags: [b]
    config:
      platform: linux
      inputs: [{name: data}]
      run:
        path: sh
        args: [-ec, 'test "$(cat data/x)" = hello; echo checked']
- name: on-c
  plan:
  - task: alone
    tags: [c]
    config:
      platform: linux
      run:
        path: sh
        args: [-ec, 'echo alone']
"#;

/// The batch processor's delay in the exporting processes (the standard
/// variable), so spans arrive within a fraction of a second.
const BATCH_DELAY: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

/// The one span of `spans` named `name`.
fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span {name:?} in {:#?}", names(spans));
    found[0]
}

/// Each span's name, sender and parent, for messages.
fn names(spans: &[ReceivedSpan]) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} [{}] {} <- {}",
                s.name,
                s.instance(),
                s.span_id,
                s.parent_id
            )
        })
        .collect()
}

/// Runs job `job` and answers its build id and the trace `gantry run` told.
fn run(url: &str, dir: &Path, job: &str) -> (i64, String) {
    let out = gantry_run(url, dir, &["-p", "pipeline.yml", "-j", job]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let id = run_build_text(&stderr).expect("build id announced");
    let trace = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("build {id}: trace ")))
        .unwrap_or_else(|| panic!("the trace is told: {stderr}"))
        .trim()
        .to_string();
    (id, trace)
}

#[test]
fn a_two_step_job_with_a_p2p_stream_is_one_trace_across_the_web_node_and_its_workers() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let config = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.url);
    let mut web = web_command(dir, &db, &config, 0);
    web.env(BATCH_DELAY.0, BATCH_DELAY.1);
    let web = Server::start(web, "API on ", dir.join("web.log"));
    let url = &web.url;
    let mut workers = Vec::new();
    for name in ["a", "b", "c"] {
        let mut extra = worker_backend().to_vec();
        extra.extend(["--tag", name]);
        let mut cmd = worker_command(dir, url, name, &extra);
        // Workers a and b export; c has no endpoint.
        if name != "c" {
            cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
                .env(BATCH_DELAY.0, BATCH_DELAY.1);
        }
        workers.push(Server::spawn(cmd, dir.join(format!("{name}.log"))));
    }
    wait_running(url, 3);
    write(&dir.join("pipeline.yml"), PASS_ON);

    let (id, trace) = run(url, dir, "pass-on");
    assert_eq!(trace.len(), 32, "a W3C trace id: {trace}");
    // The trace is in the build's events: its `started` status.
    let started: Vec<_> = nodes::events(url, id)
        .into_iter()
        .filter(|e| e["type"] == "status" && e["status"] == "started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["trace_id"], trace.as_str(), "{started:?}");
    let build_span = started[0]["span_id"].as_str().expect("span_id").to_string();

    // Every span of the build reaches the receiver: the web node's and
    // the workers' (their batches go out within the delay).
    let stream_from = "PUT /volumes/{handle}/stream-from";
    let stream_out = "GET /p2p/volumes/{handle}/stream-out";
    let spans = wait_for("the build's spans", Duration::from_secs(60), || {
        let spans = receiver.trace(&trace);
        let has = |name: &str| spans.iter().any(|s| s.name == name);
        let steps_done = spans.iter().filter(|s| s.name == "process").count() == 2;
        (has("build") && has(stream_from) && has(stream_out) && steps_done).then_some(spans)
    });

    // One build span, the root, as its event says.
    let build = one(&spans, "build");
    assert_eq!(build.parent_id, "", "the build span is the root");
    assert_eq!(build.span_id, build_span);
    assert_eq!(build.service(), "gantry-web");
    assert_eq!(build.attr("build.id"), Some(id.to_string().as_str()));
    assert_eq!(build.attr("build.job"), Some("pass-on"));

    // Two step spans, children of the build.
    let make = one(&spans, "step make");
    let check = one(&spans, "step check");
    for step in [make, check] {
        assert_eq!(step.parent_id, build.span_id, "{}", step.name);
    }

    // A placement span per step, under its step, with the decision.
    let placements: Vec<_> = spans.iter().filter(|s| s.name == "placement").collect();
    assert_eq!(placements.len(), 2, "{:#?}", names(&spans));
    for (step, worker) in [(make, "a"), (check, "b")] {
        let placed = placements
            .iter()
            .find(|p| p.parent_id == step.span_id)
            .unwrap_or_else(|| panic!("a placement under {}: {:#?}", step.name, names(&spans)));
        assert_eq!(placed.attr("placement.worker"), Some(worker));
        // Tagged work: one worker carries each tag.
        assert_eq!(placed.attr("placement.candidates"), Some("1"));
        assert!(
            placed
                .attr("placement.strategies")
                .is_some_and(|s| s.contains("fewest-build-containers")),
            "{:?}",
            placed.attributes
        );
    }
    let check_placement = placements
        .iter()
        .find(|p| p.parent_id == check.span_id)
        .unwrap();
    for key in ["placement.chain", "placement.inputs", "placement.waited"] {
        assert!(
            check_placement.attr(key).is_some(),
            "{key}: {:?}",
            check_placement.attributes
        );
    }
    // The input it finds by name in the build counts: the with-inputs
    // chain (volume locality) places it.
    assert_eq!(check_placement.attr("placement.chain"), Some("with_inputs"));
    assert_eq!(check_placement.attr("placement.inputs"), Some("1"));

    // One stream span, under the step that needed the input, p2p a -> b.
    let streams: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("stream data"))
        .collect();
    assert_eq!(streams.len(), 1, "{:#?}", names(&spans));
    let stream = streams[0];
    assert_eq!(
        stream.parent_id, check.span_id,
        "the stream's parent is step check"
    );
    assert_eq!(stream.attr("stream.from"), Some("a"));
    assert_eq!(stream.attr("stream.to"), Some("b"));
    assert_eq!(stream.attr("stream.path"), Some("p2p"));
    assert!(
        stream
            .attr("stream.bytes")
            .and_then(|b| b.parse::<u64>().ok())
            .is_some_and(|b| b > 0),
        "{:?}",
        stream.attributes
    );

    // The workers' spans join the trace: b pulls under the stream span,
    // and a serves b's pull under b's span (worker to worker).
    let pull = one(&spans, stream_from);
    assert_eq!((pull.service(), pull.instance()), ("gantry-worker", "b"));
    assert_eq!(pull.parent_id, stream.span_id);
    let serve = one(&spans, stream_out);
    assert_eq!((serve.service(), serve.instance()), ("gantry-worker", "a"));
    assert_eq!(serve.parent_id, pull.span_id);

    // Each step's process ran on its worker, under its step; each worker
    // served the step's requests inside the trace.
    for (step, worker) in [(make, "a"), (check, "b")] {
        let process = spans
            .iter()
            .find(|s| s.name == "process" && s.parent_id == step.span_id)
            .unwrap_or_else(|| panic!("a process under {}", step.name));
        assert_eq!(process.attr("worker"), Some(worker));
        assert_eq!(process.attr("process.exit_status"), Some("0"));
        let served = spans
            .iter()
            .filter(|s| s.instance() == worker && s.name == "POST /containers")
            .count();
        assert!(
            served >= 1,
            "worker {worker} made the step's container in the trace"
        );
    }
    // Every span the workers sent belongs to this trace (they only trace
    // requests that carry one).
    for span in receiver.spans() {
        if span.service() == "gantry-worker" {
            assert_eq!(span.trace_id, trace, "{span:?}");
        }
    }
    // The trace id is in the workers' log lines.
    assert!(
        workers[1].log_text().contains(&format!("trace_id={trace}")),
        "worker b's log names the trace"
    );

    // Worker c has no endpoint: it runs a step of a traced build (the web
    // node sends it the trace context) and exports nothing.
    let (_, other) = run(url, dir, "on-c");
    assert_ne!(other, trace);
    let alone = wait_for(
        "the web node's spans of the build on c",
        Duration::from_secs(60),
        || {
            let spans = receiver.trace(&other);
            spans.iter().any(|s| s.name == "build").then_some(spans)
        },
    );
    let process = one(&alone, "process");
    assert_eq!(process.attr("worker"), Some("c"));
    assert!(
        alone.iter().all(|s| s.service() == "gantry-web"),
        "{:#?}",
        names(&alone)
    );
    assert!(
        receiver.spans().iter().all(|s| s.instance() != "c"),
        "nothing from worker c"
    );
    let log = workers[2].log_text();
    assert!(!log.contains("exporting traces"), "{log}");
    assert!(!log.contains("trace_id="), "{log}");
    assert!(receiver.requests() > 0);
}

#[test]
fn a_build_taken_over_by_a_restarted_web_node_stays_in_its_trace() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let config = format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.url);
    let port = free_port();
    let web_on = |log: &str| {
        let mut web = web_command(dir, &db, &config, port);
        web.env(BATCH_DELAY.0, BATCH_DELAY.1);
        Server::start(web, "API on ", dir.join(log))
    };
    let mut web = web_on("web1.log");
    let _worker = start_worker(dir, &web.url, "w", worker_backend());
    wait_running(&web.url, 1);
    write(
        &dir.join("task.yml"),
        "platform: linux\nrun:\n  path: sh\n  args: [-c, 'i=1; while [ $i -le 40 ]; do echo line $i; i=$((i+1)); sleep 0.25; done']\n",
    );
    let task = dir.join("task.yml");
    let mut exec = spawn_execute(&web.url, dir, "first", &["-c", task.to_str().unwrap()]);
    wait_for("line 2", Duration::from_secs(30), || {
        std::fs::read_to_string(dir.join("first.out"))
            .ok()?
            .contains("line 2")
            .then_some(())
    });
    let build = announced_build(&dir.join("first.err")).unwrap();
    let trace = wait_for("the trace told", Duration::from_secs(10), || {
        let told = std::fs::read_to_string(dir.join("first.err")).ok()?;
        let prefix = format!("build {build}: trace ");
        told.lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|t| t.trim().to_string()))
    });
    web.kill();
    wait_child(&mut exec, Duration::from_secs(20));
    let out = std::fs::read_to_string(dir.join("first.out")).unwrap_or_default();
    assert!(
        !out.contains("line 40"),
        "killed before the build ended: {out}"
    );

    let web = web_on("web2.log");
    let out = client(&web.url, &["watch", "-b", &build.to_string()]);
    assert!(out.status.success(), "{}", web.log_text());
    assert!(
        web.log_text().contains("resuming a build"),
        "{}",
        web.log_text()
    );
    // The build's started event tells the trace and the first build span.
    let started: Vec<_> = nodes::events(&web.url, build)
        .into_iter()
        .filter(|e| e["type"] == "status" && e["status"] == "started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["trace_id"], trace.as_str());
    let first_span = started[0]["span_id"].as_str().expect("span_id").to_string();
    // The node that took the build over made its build span a child of
    // the first one's (which died with its node, unsent): one trace.
    let id = build.to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let resumed = loop {
        let spans = receiver.spans();
        if let Some(s) = spans
            .iter()
            .find(|s| s.name == "build" && s.attr("build.id") == Some(id.as_str()))
        {
            break s.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no build span of the resumed build: {:#?}\n{}",
            names(&spans),
            web.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(resumed.trace_id, trace, "{resumed:?}");
    assert_eq!(resumed.parent_id, first_span);
    assert_ne!(resumed.span_id, first_span);
    assert_eq!(resumed.attr("build.id"), Some(build.to_string().as_str()));
}
