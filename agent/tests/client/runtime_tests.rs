//! The agent through the runtime interface (`gantry-agent-client` over its
//! HTTP API): processes run in containers mounting volumes, output replayed
//! on attach and after a restart, volumes streamed in and out, errors typed;
//! with runc, isolation, images left unchanged and limits in the kernel.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{ByteStream, OutputStream, ProcessIo, ProcessSignal, Volume, Worker};
use gantry_wire::spec::{
    Encoding, MountSpec, ResourceLimits, RootfsSpec, VolumeSpec, VolumeStrategy,
};
use tokio::sync::mpsc;

use super::test_support::{
    can_run_isolated, config, container_spec, process, run, uuid, worker, RuncCleanup, RUNC,
};
use gantry_agent::start_worker;
use gantry_agent_client::AgentConnector;
use gantry_files::tarball;

/// An empty volume's spec.
fn volume_spec(handle: &str) -> VolumeSpec {
    VolumeSpec {
        handle: handle.into(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    }
}

/// Reads a whole byte stream.
async fn read_all(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

/// A directory to stream in: `f` and `sub/g`.
fn source_dir() -> tempfile::TempDir {
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), "hello\n").unwrap();
    std::fs::create_dir(src.path().join("sub")).unwrap();
    std::fs::write(src.path().join("sub/g"), "nested").unwrap();
    src
}

/// Streams [`source_dir`] into the root of `volume`.
async fn fill_from_source_dir(volume: &dyn Volume) {
    let src = source_dir();
    volume
        .stream_in(
            "",
            Encoding::Zstd,
            tarball::pack_dir(src.path().into(), Encoding::Zstd),
        )
        .await
        .unwrap();
}

#[actix_rt::test]
async fn local_agent_runs_processes_and_streams_volumes_through_the_client() {
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), "local")).await.unwrap();
    let worker = worker(&agent);
    assert!(agent.agent_url().starts_with("http://127.0.0.1:"));
    assert!(!agent.agent_url().ends_with(":0"));

    // A volume, filled from a tar stream.
    let (vh, ch) = (uuid(), uuid());
    let volume = worker.create_volume(&volume_spec(&vh)).await.unwrap();
    worker.create_volume(&volume_spec(&vh)).await.unwrap();
    fill_from_source_dir(&*volume).await;

    // A container mounting it; the process runs in the mounted directory.
    let mounts = vec![MountSpec {
        volume: vh.clone(),
        path: "/tmp/build/in".into(),
        readonly: false,
    }];
    let spec = container_spec(&ch, RootfsSpec::Default, mounts);
    let container = worker.find_or_create_container(&spec).await.unwrap();
    let script =
        "cat f; sleep 0.1; echo err >&2; sleep 0.1; echo \"$GREETING\"; echo made > out; exit 3";
    let (out, status) = run(
        &*container,
        Some(process("p1", script, Some("/tmp/build/in"))),
        "p1",
    )
    .await;
    assert_eq!(status.unwrap(), 3);
    let expected = vec![
        (OutputStream::Stdout, "hello\n".to_string()),
        (OutputStream::Stderr, "err\n".to_string()),
        (OutputStream::Stdout, "hi\n".to_string()),
    ];
    assert_eq!(out, expected);

    // Attaching again replays the same output and exit status.
    let (again, status) = run(&*container, None, "p1").await;
    assert_eq!((again, status.unwrap()), (expected.clone(), 3));

    // What the process wrote is in the volume; the volume streams out whole.
    let file = read_all(volume.stream_file_out("out").await.unwrap()).await;
    assert_eq!(file, b"made\n");
    let copy = tempfile::tempdir().unwrap();
    let tar = volume.stream_out("", Encoding::Gzip).await.unwrap();
    tarball::unpack(tar, Encoding::Gzip, copy.path().into(), Default::default())
        .await
        .unwrap();
    assert_eq!(std::fs::read(copy.path().join("f")).unwrap(), b"hello\n");
    assert_eq!(std::fs::read(copy.path().join("sub/g")).unwrap(), b"nested");
    assert_eq!(std::fs::read(copy.path().join("out")).unwrap(), b"made\n");

    // Errors come back typed.
    let garbage: ByteStream = Box::pin(futures::stream::iter([Ok(Bytes::from_static(
        b"this is not a tar stream at all, not even close.",
    ))]));
    match volume.stream_in("x", Encoding::Raw, garbage).await {
        Err(RuntimeError::Worker { status: 400, .. }) => {}
        other => panic!("garbage tar: {other:?}"),
    }
    match worker
        .find_or_create_container(&container_spec(
            &ch,
            RootfsSpec::Raw {
                path: "/nonexistent".into(),
            },
            vec![],
        ))
        .await
    {
        Err(RuntimeError::Worker { status: 409, .. }) => {}
        other => panic!("conflicting spec: {:?}", other.err()),
    }
    match worker
        .find_or_create_container(&container_spec(
            &uuid(),
            RootfsSpec::Raw {
                path: "/nonexistent/img".into(),
            },
            vec![],
        ))
        .await
    {
        Err(RuntimeError::Worker {
            status: 400,
            message,
            ..
        }) => assert!(message.contains("/nonexistent/img")),
        other => panic!("missing rootfs: {:?}", other.err()),
    }
    assert!(worker.lookup_container("nope").await.unwrap().is_none());
    assert!(worker.lookup_volume(&vh).await.unwrap().is_some());
    match container
        .attach(
            "nope",
            ProcessIo {
                stdin: None,
                output: mpsc::channel(1).0,
            },
        )
        .await
    {
        Err(RuntimeError::NotFound {
            kind: "process", ..
        }) => {}
        other => panic!("unknown process: {:?}", other.err()),
    }
    let mut stranger = agent.registration().clone();
    stranger.agent_token = "wrong".into();
    match AgentConnector::new().worker(&stranger).list_handles().await {
        Err(RuntimeError::Worker { status: 401, .. }) => {}
        other => panic!("wrong token: {other:?}"),
    }

    // A restarted agent still knows its volumes, containers and exits.
    agent.stop().await;
    let agent = start_worker(config(work.path(), "local")).await.unwrap();
    let worker = self::worker(&agent);
    let handles = worker.list_handles().await.unwrap();
    assert_eq!(
        (handles.containers, handles.volumes),
        (vec![ch.clone()], vec![vh.clone()])
    );
    let container = worker.lookup_container(&ch).await.unwrap().unwrap();
    let (again, status) = run(&*container, None, "p1").await;
    assert_eq!((again, status.unwrap()), (expected, 3));

    worker.destroy_container(&ch).await.unwrap();
    worker.destroy_container(&ch).await.unwrap();
    worker.destroy_volume(&vh).await.unwrap();
    let handles = worker.list_handles().await.unwrap();
    assert!(handles.containers.is_empty() && handles.volumes.is_empty());
    assert!(!work.path().join("containers").join(&ch).exists());
    agent.stop().await;
}

#[actix_rt::test]
async fn runc_agent_isolates_processes_and_keeps_images_unchanged() {
    if !can_run_isolated(&[RUNC]) {
        return;
    }
    isolates_processes_and_keeps_images_unchanged("runc").await;
}

#[actix_rt::test]
async fn crun_agent_isolates_processes_and_keeps_images_unchanged() {
    if !can_run_isolated(&[RUNC, "/usr/bin/crun"]) {
        return;
    }
    isolates_processes_and_keeps_images_unchanged("crun").await;
}

/// A raw image: busybox as `/bin/sh`, and the users `root` and
/// `builder` (1000).
fn busybox_image() -> tempfile::TempDir {
    let image = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(image.path().join("bin")).unwrap();
    std::fs::copy("/usr/bin/busybox", image.path().join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", image.path().join("bin/sh")).unwrap();
    std::fs::create_dir_all(image.path().join("etc")).unwrap();
    std::fs::write(
        image.path().join("etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nbuilder:x:1000:1000::/tmp:/bin/sh\n",
    )
    .unwrap();
    image
}

/// The isolation, exec, users, overlays and limits of an OCI runtime
/// backend (`runc` or `crun`: the same bundle, the same commands).
async fn isolates_processes_and_keeps_images_unchanged(backend: &str) {
    let work = tempfile::tempdir().unwrap();
    let agent = start_worker(config(work.path(), backend)).await.unwrap();
    assert_eq!(agent.registration().backend, backend);
    let worker = worker(&agent);

    let (vh, ch, rh) = (uuid(), uuid(), uuid());
    let _cleanup = RuncCleanup {
        work_dir: work.path().canonicalize().unwrap(),
        handles: vec![ch.clone(), rh.clone()],
    };
    let volume = worker.create_volume(&volume_spec(&vh)).await.unwrap();
    fill_from_source_dir(&*volume).await;
    let mounts = vec![MountSpec {
        volume: vh.clone(),
        path: "/tmp/build/in".into(),
        readonly: false,
    }];
    let container = worker
        .find_or_create_container(&container_spec(&ch, RootfsSpec::Default, mounts))
        .await
        .unwrap();

    // The first process is the container's init and sees only its own pid namespace.
    let script = "cat /tmp/build/in/f; sleep 0.1; echo err >&2; sleep 0.1; \
                  ls /proc | grep -c '^[0-9]'; echo made > out; exit 3";
    let (out, status) = run(
        &*container,
        Some(process("p1", script, Some("/tmp/build/in"))),
        "p1",
    )
    .await;
    assert_eq!(status.unwrap(), 3, "output: {out:?}");
    assert_eq!(out[0], (OutputStream::Stdout, "hello\n".to_string()));
    assert_eq!(out[1], (OutputStream::Stderr, "err\n".to_string()));
    let procs: u32 = out[2].1.trim().parse().unwrap();
    assert!(procs < 5, "{procs} processes visible in /proc");
    let file = read_all(volume.stream_file_out("out").await.unwrap()).await;
    assert_eq!(file, b"made\n");

    // While an init runs, more processes join it with runc exec.
    let (tx, _rx) = mpsc::channel(4);
    let init = container
        .run(
            process("init", "exec sleep 60", None),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await
        .unwrap();
    let (out, status) = run(
        &*container,
        Some(process(
            "p2",
            "echo joined; ls /proc | grep -c '^[0-9]'",
            None,
        )),
        "p2",
    )
    .await;
    assert_eq!(status.unwrap(), 0, "output: {out:?}");
    assert_eq!(out[0].1.lines().next(), Some("joined"));
    init.signal(ProcessSignal::Kill).await.unwrap();
    assert_eq!(init.wait().await.unwrap(), 137);

    // A raw image is never changed: each container writes to its own overlay.
    let image = busybox_image();
    let raw = RootfsSpec::Raw {
        path: image.path().display().to_string(),
    };
    let mut limited = container_spec(&rh, raw, vec![]);
    limited.limits = ResourceLimits {
        memory: Some(256 << 20),
        cpu: Some(512),
        pids: Some(64),
    };
    let boxed = worker.find_or_create_container(&limited).await.unwrap();
    let (out, status) = run(
        &*boxed,
        Some(process("w", "echo x > /written && cat /written", None)),
        "w",
    )
    .await;
    assert_eq!(
        (out, status.unwrap()),
        (vec![(OutputStream::Stdout, "x\n".to_string())], 0)
    );
    assert!(!image.path().join("written").exists());
    let mut as_builder = process("u", "/bin/busybox id -u", None);
    as_builder.user = Some("builder".into());
    let (out, status) = run(&*boxed, Some(as_builder), "u").await;
    assert_eq!(
        (out, status.unwrap()),
        (vec![(OutputStream::Stdout, "1000\n".to_string())], 0)
    );

    // Limits reach the kernel (checked where cgroup v1 shows them).
    let pids_max = Path::new("/sys/fs/cgroup/pids/gantry")
        .join(&rh)
        .join("pids.max");
    if Path::new("/sys/fs/cgroup/pids/gantry").exists() {
        let (tx, _rx) = mpsc::channel(4);
        let sleeper = boxed
            .run(
                process("s", "exec /bin/busybox sleep 60", None),
                ProcessIo {
                    stdin: None,
                    output: tx,
                },
            )
            .await
            .unwrap();
        // runc creates the cgroup, then writes its limits: wait for them.
        let read = || std::fs::read_to_string(&pids_max).unwrap_or_default();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while read().trim() != "64" && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(read().trim(), "64", "pids limit of the container");
        sleeper.signal(ProcessSignal::Kill).await.unwrap();
        assert_eq!(sleeper.wait().await.unwrap(), 137);
    }

    worker.destroy_container(&rh).await.unwrap();
    worker.destroy_container(&ch).await.unwrap();
    worker.destroy_volume(&vh).await.unwrap();
    let handles = worker.list_handles().await.unwrap();
    assert!(handles.containers.is_empty() && handles.volumes.is_empty());
    assert!(!gantry_agent::is_mountpoint(
        &work
            .path()
            .canonicalize()
            .unwrap()
            .join("containers")
            .join(&rh)
            .join("rootfs")
    ));
    assert!(image.path().join("bin/busybox").exists());
    agent.stop().await;
}
