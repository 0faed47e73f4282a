//! The `kubernetes` runtime against a scripted API server (`kube_mock/`:
//! real HTTP and websockets, a fake kubelet running each exec for real):
//! the pod spec a container becomes, the exec a process becomes, volumes
//! streamed in and out through tar and outliving their pods, a pod that
//! cannot start, and what a sweep lists and destroys.

use crate::kube_mock;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use gantry_kubernetes::{connect_cluster, KubeWorker, KubernetesConfig};
use gantry_wire::runtime::{ByteStream, OutputStream, ProcessIo, ProcessSignal, Worker};
use gantry_wire::spec::{
    ContainerSpec, Encoding, MountSpec, ProcessSpec, ResourceLimits, RootfsSpec, VolumeSpec,
    VolumeStrategy, WindowSize,
};
use kube_mock::KubeMock;
use tokio::sync::mpsc;

struct Rig {
    mock: KubeMock,
    worker: KubeWorker,
    _dir: tempfile::TempDir,
}

async fn rig(extra: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mock = KubeMock::start();
    let kubeconfig = dir.path().join("kubeconfig");
    mock.write_kubeconfig(&kubeconfig, "ci");
    let cfg: KubernetesConfig = toml::from_str(&format!(
        "name = \"k8s\"\nkubeconfig = \"{}\"\nnamespace = \"ci\"\ndefault_image = \"busybox:1.36\"\nstart_timeout_secs = 2\n{extra}",
        kubeconfig.display()
    ))
    .unwrap();
    let client = connect_cluster(&cfg).await.expect("the mock is reachable");
    let worker = KubeWorker::new(cfg, client, dir.path().join("staging"));
    Rig {
        mock,
        worker,
        _dir: dir,
    }
}

/// A tar stream of `files`.
fn tar_stream(files: &[(&str, &[u8])]) -> ByteStream {
    let bytes = Bytes::from(gantry_files::testing::tar_of(files));
    Box::pin(futures::stream::iter([Ok(bytes)]))
}

async fn collect(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

fn files_of(tar_bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut a = tar::Archive::new(tar_bytes);
    let mut out = BTreeMap::new();
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type().is_file() {
            let name = e
                .path()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("./")
                .to_string();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            out.insert(name, data);
        }
    }
    out
}

async fn volume(w: &KubeWorker, handle: &str) {
    w.create_volume(&VolumeSpec {
        handle: handle.into(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    })
    .await
    .unwrap();
}

fn container(handle: &str, mounts: Vec<MountSpec>) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        rootfs: RootfsSpec::Default,
        mounts,
        env: vec!["GREETING=hello".into()],
        limits: ResourceLimits {
            memory: Some(128 << 20),
            cpu: Some(1024),
            pids: None,
        },
        hermetic: false,
        properties: BTreeMap::from([
            ("build".into(), "7".into()),
            ("step".into(), "unit".into()),
            ("team".into(), "main".into()),
        ]),
        resource_type: None,
        privileged: false,
    }
}

fn process(id: &str, script: &str) -> ProcessSpec {
    ProcessSpec {
        id: id.into(),
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        dir: Some("/tmp/build/w".into()),
        env: vec!["EXTRA=1".into()],
        user: None,
        tty: None,
        input: None,
    }
}

/// Runs `script` in the container; answers its exit code, stdout and stderr.
async fn run(
    c: &Arc<dyn gantry_wire::runtime::Container>,
    id: &str,
    script: &str,
) -> (i32, String, String) {
    let (tx, mut rx) = mpsc::channel(64);
    let p = c
        .run(
            process(id, script),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await
        .unwrap();
    let code = p.wait().await.unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    while let Some(chunk) = rx.recv().await {
        let text = String::from_utf8_lossy(&chunk.data).into_owned();
        match chunk.stream {
            OutputStream::Stdout => out.push_str(&text),
            OutputStream::Stderr => err.push_str(&text),
        }
    }
    (code, out, err)
}

#[tokio::test]
async fn a_container_is_a_pod_with_its_image_limits_labels_and_mounts() {
    let r = rig("").await;
    volume(&r.worker, "in").await;
    let v = r.worker.lookup_volume("in").await.unwrap().unwrap();
    v.stream_in(".", Encoding::Raw, tar_stream(&[("hello.txt", b"hi\n")]))
        .await
        .unwrap();
    volume(&r.worker, "out").await;
    let spec = container(
        "c1",
        vec![
            MountSpec {
                volume: "in".into(),
                path: "/tmp/build/w/in".into(),
                readonly: true,
            },
            MountSpec {
                volume: "out".into(),
                path: "/tmp/build/w/out".into(),
                readonly: false,
            },
        ],
    );
    let c = r.worker.find_or_create_container(&spec).await.unwrap();
    let pods = r.mock.created_pods();
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!(pod["metadata"]["name"], "gantry-c1");
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["gantry.dev/worker"], "k8s");
    assert_eq!(labels["gantry.dev/build"], "7");
    assert_eq!(labels["gantry.dev/step"], "unit");
    assert_eq!(labels["gantry.dev/team"], "main");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "gantry");
    let main = &pod["spec"]["containers"][0];
    assert_eq!(main["name"], "main");
    assert_eq!(main["image"], "busybox:1.36");
    assert_eq!(main["command"][0], "/bin/sh");
    assert_eq!(main["env"][0]["name"], "GREETING");
    assert_eq!(main["resources"]["limits"]["memory"], "134217728");
    assert_eq!(main["resources"]["requests"]["cpu"], "1000m");
    let mounts: Vec<(String, bool)> = main["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap().to_string(),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert!(
        mounts.contains(&("/tmp/build/w/in".into(), true)),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&("/tmp/build/w/out".into(), false)),
        "{mounts:?}"
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");

    // A process is an exec of the wrapped command with its streams.
    let (code, out, err) = run(
        &c,
        "p1",
        "cat in/hello.txt; echo \"$GREETING $EXTRA\"; pwd; echo oops >&2; echo made > out/f.txt; exit 3",
    )
    .await;
    assert_eq!(code, 3);
    assert_eq!(out, "hi\nhello 1\n/tmp/build/w\n");
    assert_eq!(err, "oops\n");
    let exec = r
        .mock
        .execs()
        .into_iter()
        .find(|e| e.command.iter().any(|a| a.contains("oops")))
        .unwrap();
    assert_eq!(exec.pod, "gantry-c1");
    assert_eq!(exec.container, "main");
    assert!(exec.stdout && exec.stderr && !exec.stdin && !exec.tty);
    assert_eq!(
        &exec.command[exec.command.len() - 3..exec.command.len() - 1],
        ["sh", "-c"]
    );
    assert!(
        exec.command.contains(&"env".to_string()) && exec.command.contains(&"EXTRA=1".to_string())
    );

    // The read-only input cannot be written; the output can be read back
    // through tar, as a whole and as one file.
    let (code, _, _) = run(&c, "p2", "echo x > in/new.txt").await;
    assert_ne!(code, 0);
    let outv = r.worker.lookup_volume("out").await.unwrap().unwrap();
    let files = files_of(&collect(outv.stream_out(".", Encoding::Raw).await.unwrap()).await);
    assert_eq!(files["f.txt"], b"made\n");
    let one = collect(outv.stream_file_out("f.txt").await.unwrap()).await;
    assert_eq!(one, b"made\n");
    assert!(matches!(
        outv.stream_file_out("missing.txt").await,
        Err(gantry_wire::error::RuntimeError::NotFound { .. })
    ));
    let zstd = collect(outv.stream_out(".", Encoding::Zstd).await.unwrap()).await;
    let plain = zstd::decode_all(&zstd[..]).unwrap();
    assert_eq!(files_of(&plain)["f.txt"], b"made\n");
    // Streams from another worker are relayed: the pod does not pull.
    assert!(matches!(
        outv.stream_in_from("http://x", ".", Encoding::Zstd).await,
        Err(gantry_wire::error::RuntimeError::PeerUnreachable { .. })
    ));

    // Destroying the pod keeps the output it held: it is copied back first.
    r.worker.destroy_container("c1").await.unwrap();
    assert_eq!(r.mock.deleted_pods(), ["gantry-c1"]);
    let one = collect(outv.stream_file_out("f.txt").await.unwrap()).await;
    assert_eq!(one, b"made\n");
    // ... and a new pod mounting it sees it.
    let c2 = r
        .worker
        .find_or_create_container(&container(
            "c2",
            vec![MountSpec {
                volume: "out".into(),
                path: "/tmp/build/w/prev".into(),
                readonly: false,
            }],
        ))
        .await
        .unwrap();
    let (code, out, _) = run(&c2, "p3", "cat prev/f.txt").await;
    assert_eq!((code, out.as_str()), (0, "made\n"));
}

#[tokio::test]
async fn signals_and_terminal_resizes_reach_the_process() {
    let r = rig("").await;
    let c = r
        .worker
        .find_or_create_container(&container("c1", vec![]))
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let p = c
        .run(
            process(
                "long",
                "trap 'echo got-term; exit 143' TERM; echo ready; while true; do sleep 0.1; done",
            ),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await
        .unwrap();
    let first = rx.recv().await.unwrap();
    assert_eq!(&first.data[..], b"ready\n");
    p.signal(ProcessSignal::Terminate).await.unwrap();
    assert_eq!(p.wait().await.unwrap(), 143);

    // A TTY: stdin in, the size set at start, then changed.
    let (tx, mut rx) = mpsc::channel(64);
    let (in_tx, in_rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    let mut spec = process(
        "tty",
        "read line; stty size; echo \"got $line\"; read again; stty size",
    );
    spec.tty = Some(WindowSize {
        columns: 100,
        rows: 30,
    });
    let stdin = gantry_wire::runtime::channel_stream(in_rx);
    let p = c
        .run(
            spec,
            ProcessIo {
                stdin: Some(stdin),
                output: tx,
            },
        )
        .await
        .unwrap();
    // Frames of the exec's channels may be sent in any order: type once
    // the size has arrived.
    let resized = |n: usize| {
        let mock = &r.mock;
        async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let seen = mock
                    .execs()
                    .into_iter()
                    .find(|e| e.tty)
                    .map_or(0, |e| e.resizes.len());
                if seen >= n {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no resize reached the pod"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    };
    resized(1).await;
    in_tx.send(Ok(Bytes::from_static(b"one\n"))).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("got one") {
        let chunk = rx.recv().await.expect("output before the end");
        seen.push_str(&String::from_utf8_lossy(&chunk.data));
    }
    assert!(seen.contains("30 100"), "{seen:?}");
    p.set_tty(WindowSize {
        columns: 120,
        rows: 40,
    })
    .await
    .unwrap();
    resized(2).await;
    in_tx.send(Ok(Bytes::from_static(b"two\n"))).await.unwrap();
    while !seen.contains("40 120") {
        let chunk = rx.recv().await.expect("the new size printed");
        seen.push_str(&String::from_utf8_lossy(&chunk.data));
    }
    assert_eq!(p.wait().await.unwrap(), 0);
    let rec = r.mock.execs().into_iter().find(|e| e.tty).unwrap();
    assert!(rec.stdin && !rec.stderr);
    assert_eq!(rec.resizes, [(100, 30), (120, 40)]);
}

#[tokio::test]
async fn a_pod_that_cannot_start_is_an_error_naming_its_reason() {
    let r = rig("").await;
    r.mock.fail_image(
        "busybox:1.36",
        "ErrImagePull",
        "rpc error: busybox:1.36 not found",
    );
    let err = r
        .worker
        .find_or_create_container(&container("bad", vec![]))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(
            "pod gantry-bad cannot start: ErrImagePull: rpc error: busybox:1.36 not found"
        ),
        "{err}"
    );
    assert!(r.mock.pods().is_empty(), "the pod is deleted");

    let r = rig("").await;
    r.mock.unschedulable_image(
        "busybox:1.36",
        "0/3 nodes are available: 3 Insufficient memory.",
    );
    let err = r
        .worker
        .find_or_create_container(&container("big", vec![]))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("did not start within 2 s: Unschedulable: 0/3 nodes are available"),
        "{err}"
    );

    // What a pod cannot do is refused before anything is created.
    let mut spec = container("pids", vec![]);
    spec.limits.pids = Some(10);
    let err = r
        .worker
        .find_or_create_container(&spec)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("pids"), "{err}");
}

#[tokio::test]
async fn a_sweep_lists_pods_by_label_and_destroys_exactly_what_it_is_told() {
    let r = rig("").await;
    for h in ["a", "b", "c"] {
        r.worker
            .find_or_create_container(&container(h, vec![]))
            .await
            .unwrap();
    }
    volume(&r.worker, "v1").await;
    let handles = r.worker.list_handles().await.unwrap();
    assert_eq!(handles.containers, ["a", "b", "c"]);
    assert_eq!(handles.volumes, ["v1"]);
    assert!(r
        .mock
        .pod_lists()
        .iter()
        .any(|(ns, sel)| ns == "ci" && sel.as_deref() == Some("gantry.dev/worker=k8s")));
    r.worker.destroy_container("b").await.unwrap();
    r.worker.destroy_volume("v1").await.unwrap();
    assert_eq!(r.mock.deleted_pods(), ["gantry-b"]);
    let handles = r.worker.list_handles().await.unwrap();
    assert_eq!(handles.containers, ["a", "c"]);
    assert!(handles.volumes.is_empty());
    // Destroying what is gone is not an error.
    r.worker.destroy_container("b").await.unwrap();
    r.worker.destroy_volume("v1").await.unwrap();

    // A second web node (or a restarted one) finds the volumes living in
    // pods from their annotation.
    volume(&r.worker, "kept").await;
    r.worker
        .find_or_create_container(&container(
            "d",
            vec![MountSpec {
                volume: "kept".into(),
                path: "/tmp/build/w/k".into(),
                readonly: false,
            }],
        ))
        .await
        .unwrap();
    let cfg = r.worker.config().clone();
    let client = connect_cluster(&cfg).await.unwrap();
    let fresh = KubeWorker::new(cfg, client, r._dir.path().join("staging"));
    let handles = fresh.list_handles().await.unwrap();
    assert_eq!(handles.volumes, ["kept"]);
    assert_eq!(handles.containers, ["a", "c", "d"]);
}
