//! Images end to end in the agent: an OCI image layout tar built here from
//! busybox-static (two gzip layers, the second with whiteouts) is imported
//! into a volume of a real agent (in process, runc and bwrap backends)
//! through the runtime interface's `Volume::import_image`; two containers
//! then run from it (`RootfsSpec::Volume`), each over its own overlay, and
//! the image is unpacked once and never changed.

use std::path::Path;

use gantry_wire::runtime::{ByteStream, Container, OutputStream, ProcessIo, Worker};
use gantry_wire::spec::{
    ContainerSpec, Encoding, ProcessSpec, ResourceLimits, RootfsSpec, VolumeSpec, VolumeStrategy,
};
use tokio::sync::mpsc;

use super::test_support::{can_run_isolated, test_config};
use gantry_agent::start_worker;
use gantry_agent::testing::oci_layout;
use gantry_agent_client::AgentConnector;
use gantry_files::testing::{entry, tar_of};
use gantry_wire::agent_api::Health;

/// The busybox-static binary the image is built from.
const BUSYBOX: &str = "/usr/bin/busybox";

/// Layer 1: busybox with absolute symlinks for its applets, `/etc` and the
/// usual mount points. Layer 2: replaces `/etc/motd` and deletes `/etc/old`
/// and the contents of `/opt` through whiteouts.
fn busybox_layers() -> Vec<Vec<u8>> {
    let busybox = std::fs::read(BUSYBOX).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for dir in ["bin/", "etc/", "opt/", "proc/", "dev/", "sys/", "tmp/"] {
        entry(&mut b, dir, tar::EntryType::Directory, "", b"", 0o755);
    }
    entry(
        &mut b,
        "bin/busybox",
        tar::EntryType::Regular,
        "",
        &busybox,
        0o755,
    );
    for applet in ["sh", "cat", "ls", "id"] {
        let link = format!("bin/{applet}");
        entry(
            &mut b,
            &link,
            tar::EntryType::Symlink,
            "/bin/busybox",
            b"",
            0o777,
        );
    }
    let passwd = b"root:x:0:0::/root:/bin/sh\nbuilder:x:1000:1000::/tmp:/bin/sh\n";
    entry(
        &mut b,
        "etc/passwd",
        tar::EntryType::Regular,
        "",
        passwd,
        0o644,
    );
    entry(
        &mut b,
        "etc/motd",
        tar::EntryType::Regular,
        "",
        b"v1\n",
        0o644,
    );
    entry(
        &mut b,
        "etc/old",
        tar::EntryType::Regular,
        "",
        b"old\n",
        0o644,
    );
    entry(&mut b, "opt/x", tar::EntryType::Regular, "", b"x\n", 0o644);
    let lower = b.into_inner().unwrap();
    let upper = tar_of(&[
        ("etc/", b""),
        ("etc/.wh.old", b""),
        ("etc/motd", b"v2\n"),
        ("opt/", b""),
        ("opt/.wh..wh..opq", b""),
    ]);
    vec![lower, upper]
}

/// A byte stream of `bytes`, in chunks.
fn stream(bytes: Vec<u8>) -> ByteStream {
    let chunks: Vec<std::io::Result<bytes::Bytes>> = bytes
        .chunks(64 * 1024)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

/// Runs `script` with busybox's `sh` as `user`; returns stdout, stderr and
/// the exit status.
async fn run(container: &dyn Container, id: &str, script: &str) -> (String, String, i32) {
    let (tx, mut rx) = mpsc::channel(16);
    let spec = ProcessSpec {
        id: id.into(),
        path: "sh".into(),
        args: vec!["-c".into(), script.into()],
        dir: None,
        env: vec![],
        user: None,
        tty: None,
        input: None,
    };
    let io = ProcessIo {
        stdin: None,
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

/// The agent's `/health`.
async fn health(url: &str) -> Health {
    reqwest::get(format!("{url}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Unmounts the test's overlays if it fails half-way.
struct Unmount(Vec<std::path::PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = gantry_agent::unmount(p);
        }
    }
}

/// The whole round trip on one backend.
async fn two_containers_share_one_unpacked_image(backend: &str) {
    let work = tempfile::tempdir().unwrap();
    let cfg = test_config(&format!("images-{backend}"), work.path(), backend);
    let agent = start_worker(cfg).await.unwrap();
    assert_eq!(agent.registration().backend, backend);
    let worker = AgentConnector::new().worker(agent.registration());
    let image = uuid::Uuid::new_v4().to_string();
    let handles: Vec<String> = (0..2).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let work_dir = work.path().canonicalize().unwrap();
    let _unmount = Unmount(
        handles
            .iter()
            .map(|h| work_dir.join("containers").join(h).join("rootfs"))
            .collect(),
    );

    let volume = worker
        .create_volume(&VolumeSpec {
            handle: image.clone(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: Default::default(),
        })
        .await
        .unwrap();
    let layout = oci_layout(&busybox_layers(), true);
    let upload = zstd::encode_all(&layout[..], 3).unwrap();
    assert_eq!(health(agent.agent_url()).await.images_unpacked, 0);
    volume
        .import_image(Encoding::Zstd, stream(upload.clone()))
        .await
        .unwrap();
    assert_eq!(health(agent.agent_url()).await.images_unpacked, 1);
    let data = work_dir.join("volumes").join(&image).join("data");
    assert_eq!(
        std::fs::read_link(data.join("bin/sh")).unwrap(),
        Path::new("/bin/busybox")
    );

    for (i, handle) in handles.iter().enumerate() {
        let spec = ContainerSpec {
            handle: handle.clone(),
            rootfs: RootfsSpec::Volume {
                handle: image.clone(),
            },
            mounts: vec![],
            env: vec![],
            limits: ResourceLimits::default(),
            hermetic: true,
            properties: Default::default(),
            resource_type: None,
            privileged: false,
        };
        let container = worker.find_or_create_container(&spec).await.unwrap();
        let (out, err, status) = run(
            &*container,
            "p",
            "cat /etc/motd; ls /etc /opt; echo mine > /written; cat /written; id -u",
        )
        .await;
        assert_eq!(status, 0, "container {i}: {err}");
        assert_eq!(
            out, "v2\n/etc:\nmotd\npasswd\n\n/opt:\nmine\n0\n",
            "container {i}"
        );
        // The image volume is never written to.
        assert!(!data.join("written").exists());
    }
    // Importing again does not unpack again.
    volume
        .import_image(Encoding::Zstd, stream(upload))
        .await
        .unwrap();
    assert_eq!(health(agent.agent_url()).await.images_unpacked, 1);

    for handle in &handles {
        worker.destroy_container(handle).await.unwrap();
        let rootfs = work_dir.join("containers").join(handle).join("rootfs");
        assert!(!gantry_agent::is_mountpoint(&rootfs));
    }
    worker.destroy_volume(&image).await.unwrap();
    let left = worker.list_handles().await.unwrap();
    assert!(left.containers.is_empty() && left.volumes.is_empty());
    agent.stop().await;
}

/// Whether isolated backends can run here: root, busybox and the backend.
fn available(binary: &str) -> bool {
    can_run_isolated(&[BUSYBOX, binary])
}

#[actix_rt::test]
async fn an_oci_image_is_unpacked_once_and_shared_by_runc_containers() {
    if available("/usr/sbin/runc") {
        two_containers_share_one_unpacked_image("runc").await;
    }
}

#[actix_rt::test]
async fn an_oci_image_is_unpacked_once_and_shared_by_bwrap_containers() {
    if available("/usr/bin/bwrap") {
        two_containers_share_one_unpacked_image("bwrap").await;
    }
}

#[actix_rt::test]
async fn a_bad_image_is_a_clear_error_and_leaves_the_volume_empty() {
    let work = tempfile::tempdir().unwrap();
    let cfg = test_config("images-bad", work.path(), "local");
    let agent = start_worker(cfg).await.unwrap();
    let worker = AgentConnector::new().worker(agent.registration());
    let volume = worker
        .create_volume(&VolumeSpec {
            handle: "img".into(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: Default::default(),
        })
        .await
        .unwrap();
    // An OCI layout whose manifest names a blob that is not there.
    let mut b = tar::Builder::new(Vec::new());
    entry(
        &mut b,
        "oci-layout",
        tar::EntryType::Regular,
        "",
        b"{}",
        0o644,
    );
    let index = format!(
        r#"{{"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":1}}]}}"#,
        "a".repeat(64)
    );
    entry(
        &mut b,
        "index.json",
        tar::EntryType::Regular,
        "",
        index.as_bytes(),
        0o644,
    );
    let err = volume
        .import_image(Encoding::Raw, stream(b.into_inner().unwrap()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing from the archive"), "{err}");
    let data = work.path().join("volumes/img/data");
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    // The volume can take a good image afterwards.
    let rootfs = tar_of(&[("etc/", b""), ("etc/hostname", b"box\n")]);
    volume
        .import_image(Encoding::Raw, stream(rootfs))
        .await
        .unwrap();
    assert_eq!(std::fs::read(data.join("etc/hostname")).unwrap(), b"box\n");
    assert_eq!(health(agent.agent_url()).await.images_unpacked, 1);
    // A volume with other contents is not an image volume.
    let other = worker
        .create_volume(&VolumeSpec {
            handle: "full".into(),
            strategy: VolumeStrategy::Empty,
            privileged: false,
            properties: Default::default(),
        })
        .await
        .unwrap();
    other
        .stream_in("", Encoding::Raw, stream(tar_of(&[("f", b"x")])))
        .await
        .unwrap();
    let err = other
        .import_image(Encoding::Raw, stream(tar_of(&[("g", b"y")])))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not empty"), "{err}");
    agent.stop().await;
}
