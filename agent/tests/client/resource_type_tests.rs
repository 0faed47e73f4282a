//! The base resource types through the agent: advertised in the
//! registration, mounted read-only at `/opt/resource` in a runc container on
//! the default image (the host's `/opt` still visible beside it), run with a
//! request on stdin; a type the worker does not offer is refused by name.

use bytes::Bytes;
use gantry_wire::runtime::{ByteStream, Container, OutputStream, ProcessIo, Worker};
use gantry_wire::spec::{MountSpec, ProcessSpec, RootfsSpec, VolumeSpec, VolumeStrategy};
use tokio::sync::mpsc;

use super::test_support::{
    can_run_isolated, config, container_spec, process, run, uuid, worker, RuncCleanup, RUNC,
};
use gantry_agent::start_worker;

/// Runs `path` in `container` with `stdin`; its stdout, stderr and status.
async fn run_with_stdin(
    container: &dyn Container,
    id: &str,
    path: &str,
    stdin: &str,
) -> (String, String, i32) {
    let (tx, mut rx) = mpsc::channel(16);
    let body = Bytes::from(stdin.to_string());
    let stdin: ByteStream = Box::pin(futures::stream::once(async move { Ok(body) }));
    let spec = ProcessSpec {
        id: id.into(),
        path: path.into(),
        args: vec![],
        dir: None,
        env: vec![],
        user: None,
        tty: None,
        input: None,
    };
    let io = ProcessIo {
        stdin: Some(stdin),
        output: tx,
    };
    let process = container.run(spec, io).await.unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    while let Some(chunk) = rx.recv().await {
        let text = String::from_utf8_lossy(&chunk.data);
        match chunk.stream {
            OutputStream::Stdout => out.push_str(&text),
            OutputStream::Stderr => err.push_str(&text),
        }
    }
    (out, err, process.wait().await.unwrap())
}

/// Runs git on the host in `dir`.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[actix_rt::test]
async fn runc_containers_mount_a_resource_type_and_run_its_check() {
    if !can_run_isolated(&[RUNC, "/usr/bin/jq", "/usr/bin/git"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), "runc")).await.unwrap();
    assert_eq!(
        agent.registration().resource_types,
        ["docker-image", "git", "mock", "registry-image", "time"]
    );
    let worker = worker(&agent);
    let (vh, ch) = (uuid(), uuid());
    let _cleanup = RuncCleanup {
        work_dir: work.path().canonicalize().unwrap(),
        handles: vec![ch.clone()],
    };

    // A bare repository with two commits, in a volume.
    let spec = VolumeSpec {
        handle: vh.clone(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    };
    worker.create_volume(&spec).await.unwrap();
    let data = agent.state().volumes.get(&vh).unwrap().data_dir();
    git(&data, &["init", "-q", "--bare", "-b", "main", "repo.git"]);
    let scratch = tempfile::tempdir().unwrap();
    git(scratch.path(), &["init", "-q", "-b", "main", "w"]);
    let w = scratch.path().join("w");
    git(&w, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&w, &["commit", "-q", "--allow-empty", "-m", "two"]);
    git(
        &w,
        &[
            "push",
            "-q",
            data.join("repo.git").to_str().unwrap(),
            "main",
        ],
    );
    let head = git(&w, &["rev-parse", "HEAD"]);
    let first = git(&w, &["rev-parse", "HEAD~1"]);

    let mounts = vec![MountSpec {
        volume: vh.clone(),
        path: "/tmp/build/repo".into(),
        readonly: true,
    }];
    let mut spec = container_spec(&ch, RootfsSpec::Default, mounts);
    spec.resource_type = Some("git".into());
    let host_had_resource = std::path::Path::new("/opt/resource").exists();
    let container = worker.find_or_create_container(&spec).await.unwrap();

    let request = r#"{"source":{"uri":"/tmp/build/repo/repo.git"},"version":null}"#;
    let (out, err, status) =
        run_with_stdin(&*container, "c1", "/opt/resource/check", request).await;
    assert_eq!(status, 0, "stderr: {err}");
    let versions: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(versions, serde_json::json!([{ "ref": head }]));

    let request = format!(
        r#"{{"source":{{"uri":"file:///tmp/build/repo/repo.git"}},"version":{{"ref":"{first}"}}}}"#
    );
    let (out, err, status) =
        run_with_stdin(&*container, "c2", "/opt/resource/check", &request).await;
    assert_eq!(status, 0, "stderr: {err}");
    let versions: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        versions,
        serde_json::json!([{ "ref": first }, { "ref": head }])
    );

    // The scripts are read-only; the host's /opt entries are still there
    // and nothing was created in the host's /opt.
    let mut host_opt: Vec<String> = std::fs::read_dir("/opt")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "resource")
        .collect();
    host_opt.push("resource".into());
    host_opt.sort();
    let script = "ls -A /opt; touch /opt/resource/x 2>/dev/null && echo writable; true";
    let (out, status) = run(&*container, Some(process("ls", script, None)), "ls").await;
    assert_eq!(status.unwrap(), 0);
    let listed: String = out
        .iter()
        .filter(|(s, _)| *s == OutputStream::Stdout)
        .map(|(_, t)| t.as_str())
        .collect();
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort();
    assert_eq!(listed, host_opt, "output: {out:?}");
    assert_eq!(
        std::path::Path::new("/opt/resource").exists(),
        host_had_resource
    );

    // A type this worker does not offer is refused, naming it.
    let mut unknown = container_spec(&uuid(), RootfsSpec::Default, vec![]);
    unknown.resource_type = Some("s3".into());
    let err = worker
        .find_or_create_container(&unknown)
        .await
        .err()
        .expect("an unknown resource type is refused")
        .to_string();
    assert!(
        err.contains("\"s3\"") && err.contains("git, mock, time"),
        "{err}"
    );

    worker.destroy_container(&ch).await.unwrap();
    agent.stop().await;
}

#[actix_rt::test]
async fn the_local_backend_offers_no_resource_types_and_refuses_them() {
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), "local")).await.unwrap();
    assert!(agent.registration().resource_types.is_empty());
    let mut spec = container_spec(&uuid(), RootfsSpec::Default, vec![]);
    spec.resource_type = Some("mock".into());
    let err = worker(&agent)
        .find_or_create_container(&spec)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("\"mock\"") && err.contains("none"), "{err}");
    agent.stop().await;
}

#[actix_rt::test]
async fn bwrap_containers_mount_a_resource_type_too() {
    if !can_run_isolated(&["/usr/bin/bwrap", "/usr/bin/jq"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), "bwrap")).await.unwrap();
    assert!(agent
        .registration()
        .resource_types
        .contains(&"mock".to_string()));
    let worker = worker(&agent);
    let ch = uuid();
    let mut spec = container_spec(&ch, RootfsSpec::Default, vec![]);
    spec.resource_type = Some("mock".into());
    let container = worker.find_or_create_container(&spec).await.unwrap();
    let request = r#"{"source":{"initial_version":"v1"}}"#;
    let (out, err, status) =
        run_with_stdin(&*container, "c1", "/opt/resource/check", request).await;
    assert_eq!(status, 0, "stderr: {err}");
    assert_eq!(out.trim(), r#"[{"version":"v1"}]"#);
    worker.destroy_container(&ch).await.unwrap();
    agent.stop().await;
}
