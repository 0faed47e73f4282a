//! `gantry bench image-pull`: pulling a registry image onto runc workers,
//! against `skopeo copy` plus `umoci unpack` of the same image in the same
//! run.
//!
//! Set-up: a real web node and two runc worker agents in this process
//! (the same rig as the other runc benchmarks), and Debian's
//! `docker-registry` on loopback over TLS with a CA made for the run. An
//! image of `--size` bytes in `--layers` gzip layers (files of generated,
//! half-compressible contents) is written as an OCI layout and pushed with
//! skopeo.
//!
//! Figures:
//! - `cold_pull_s`: worker 0, empty blob cache, an empty volume made the
//!   image's root filesystem (`Volume::pull_image`: manifest, config and
//!   layers fetched, checked and applied);
//! - `skopeo_umoci_s`: `skopeo copy docker://... oci:DIR` then `umoci
//!   unpack` of it, the same work done by the usual tools; `cold_ratio` is
//!   the first over the second;
//! - `warm_start_ms`: a task (`echo started`) in a container on the pulled image,
//!   created, run and waited for (median of `--tasks`), with
//!   `warm_start_ratio` to raw `runc run` of the same process (median);
//! - `second_worker_pull_s`: worker 1 pulls the same image with worker 0 as
//!   its peer (signed blob URLs, as the engine gives them), and
//!   `second_worker_ratio` to the cold pull.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::{HandleKind, HandleOwner};
use gantry_wire::native::PullImage;
use gantry_wire::runtime::{ProcessIo, Worker, WorkerConnector};
use gantry_wire::spec::{ContainerSpec, Encoding, RootfsSpec, VolumeSpec, VolumeStrategy};
use gantry_wire::state::HandleState;
use gantry_wire::stream_url::{StreamGrant, BLOBS_PATH};
use sha2::{Digest, Sha256};

use super::rig::{process_spec, RawRunc, Rig};

/// Options of the benchmark.
pub struct ImagePullBench {
    /// Bytes of layer contents (before compression).
    pub size: u64,
    /// Layers the contents are split into.
    pub layers: usize,
    /// Warm starts timed.
    pub tasks: usize,
}

/// A registry on loopback over TLS, stopped when dropped.
struct LocalRegistry {
    child: std::process::Child,
    host: String,
    ca_pem: String,
    cert_dir: PathBuf,
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a set-up command, failing with its stderr.
fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl LocalRegistry {
    /// Starts `docker-registry` with its files under `dir`.
    fn start(dir: &Path) -> anyhow::Result<Self> {
        for tool in ["docker-registry", "skopeo", "umoci", "openssl"] {
            if gantry_agent::find_executable(tool).is_none() {
                bail!("{tool} is not installed (apt-get install docker-registry skopeo umoci openssl)");
            }
        }
        std::fs::create_dir_all(dir)?;
        let p = |name: &str| dir.join(name).display().to_string();
        run(Command::new("openssl").args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=gantry-bench-ca",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.crt"),
        ]))?;
        run(Command::new("openssl").args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
        ]))?;
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
        run(Command::new("openssl").args([
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &p("ext.cnf"),
            "-out",
            &p("server.crt"),
        ]))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        std::fs::write(
            dir.join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {}\n    key: {}\n",
                p("storage"),
                p("server.crt"),
                p("server.key")
            ),
        )?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting docker-registry")?;
        let host = format!("127.0.0.1:{port}");
        let cert_dir = dir.join("certs.d");
        std::fs::create_dir_all(&cert_dir)?;
        std::fs::copy(dir.join("ca.crt"), cert_dir.join("ca.crt"))?;
        let registry = LocalRegistry {
            child,
            ca_pem: std::fs::read_to_string(dir.join("ca.crt"))?,
            host,
            cert_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&registry.host).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "the registry did not listen on {} within 30 s",
                    registry.host
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(registry)
    }
}

/// Generated file contents: bytes from a 16-symbol alphabet (about half
/// compressible, as binaries and text in images are).
fn contents(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for i in 0..8 {
            out.push(b'a' + ((x >> (i * 4)) & 0xf) as u8);
        }
    }
    out.truncate(len);
    out
}

fn sha(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

/// Writes an OCI layout at `out`: `layers` gzip layers of files (1 MiB
/// each) totalling `size` bytes, the first also holding busybox-static as
/// `/bin/busybox` and `/bin/echo` (what the warm starts run).
fn write_image(out: &Path, size: u64, layers: usize) -> anyhow::Result<()> {
    use std::io::Write;
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .find(|p| Path::new(p).exists())
        .context("busybox-static is not installed (apt-get install busybox-static)")?;
    let busybox = std::fs::read(busybox)?;
    let blobs = out.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let per_layer = (size / layers as u64).max(1);
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in 0..layers {
        let mut tar = tar::Builder::new(Vec::new());
        if l == 0 {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            h.set_mode(0o755);
            h.set_mtime(1_700_000_000);
            tar.append_data(&mut h, "bin/", std::io::empty())?;
            let mut h = tar::Header::new_gnu();
            h.set_size(busybox.len() as u64);
            h.set_mode(0o755);
            h.set_mtime(1_700_000_000);
            tar.append_data(&mut h, "bin/busybox", busybox.as_slice())?;
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            h.set_mode(0o777);
            h.set_mtime(1_700_000_000);
            tar.append_link(&mut h, "bin/echo", "busybox")?;
        }
        let mut written = 0u64;
        let mut n = 0u64;
        while written < per_layer {
            let len = (per_layer - written).min(1 << 20) as usize;
            let data = contents(len, (l as u64) << 32 | n);
            let mut h = tar::Header::new_gnu();
            h.set_size(len as u64);
            h.set_mode(0o644);
            h.set_mtime(1_700_000_000);
            tar.append_data(&mut h, format!("layer{l}/file{n}"), data.as_slice())?;
            written += len as u64;
            n += 1;
        }
        let tar = tar.into_inner()?;
        diff_ids.push(format!("sha256:{}", sha(&tar)));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar)?;
        let gz = gz.finish()?;
        std::fs::write(blobs.join(sha(&gz)), &gz)?;
        descs.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": format!("sha256:{}", sha(&gz)),
            "size": gz.len(),
        }));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": gantry_agent::host_arch(),
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))?;
    std::fs::write(blobs.join(sha(&config)), &config)?;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{}", sha(&config)), "size": config.len()},
        "layers": descs,
    }))?;
    std::fs::write(blobs.join(sha(&manifest)), &manifest)?;
    std::fs::write(
        out.join("index.json"),
        serde_json::json!({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", sha(&manifest)), "size": manifest.len()}]})
        .to_string(),
    )?;
    std::fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    Ok(())
}

/// Who the benchmark's rows belong to.
const OWNER: HandleOwner<'static> = HandleOwner {
    team: "main",
    build: None,
    step: Some("bench"),
};

/// An empty volume on `worker`, made the image's root filesystem (its row
/// recorded first, as a step does, so the worker's sweeper keeps it); the
/// seconds it took.
async fn pull(
    rig: &Rig,
    worker: &Arc<dyn Worker>,
    pull: &PullImage,
) -> anyhow::Result<(String, f64)> {
    let handle = uuid::Uuid::new_v4().to_string();
    rig.engine
        .record_handle(HandleKind::Volume, &handle, worker.name(), OWNER)
        .await?;
    let spec = VolumeSpec {
        handle: handle.clone(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    };
    let start = Instant::now();
    let volume = worker.create_volume(&spec).await?;
    let done = volume.pull_image(pull).await?;
    let secs = start.elapsed().as_secs_f64();
    rig.engine
        .set_handle_state(HandleKind::Volume, &handle, HandleState::Created)
        .await?;
    if !done.unpacked {
        bail!("worker {} found the image already unpacked", worker.name());
    }
    Ok((handle, secs))
}

/// One task (`echo started`) in a new container on the image volume `image`,
/// created, run and waited for; the time it took.
async fn warm_start(rig: &Rig, worker: &Arc<dyn Worker>, image: &str) -> anyhow::Result<Duration> {
    let handle = uuid::Uuid::new_v4().to_string();
    rig.engine
        .record_handle(HandleKind::Container, &handle, worker.name(), OWNER)
        .await?;
    let spec = ContainerSpec {
        rootfs: RootfsSpec::Volume {
            handle: image.to_string(),
        },
        ..super::rig::container_spec(&handle)
    };
    let start = Instant::now();
    let container = worker.find_or_create_container(&spec).await?;
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let process = container
        .run(
            process_spec(&["/bin/echo", "started"]),
            ProcessIo {
                stdin: None,
                output: tx,
            },
        )
        .await?;
    let status = process.wait().await?;
    let took = start.elapsed();
    worker.destroy_container(&handle).await?;
    rig.engine
        .forget_handle(HandleKind::Container, &handle)
        .await?;
    if status != 0 {
        bail!("the task on the pulled image exited with {status}");
    }
    Ok(took)
}

fn median(mut all: Vec<f64>) -> f64 {
    all.sort_by(|a, b| a.total_cmp(b));
    all[all.len() / 2]
}

/// Runs the benchmark and prints its figures.
pub async fn bench(opts: ImagePullBench) -> anyhow::Result<()> {
    if opts.layers == 0 || opts.tasks == 0 {
        bail!("--layers and --tasks must be at least 1");
    }
    let runc = super::rig::require_runc("bench image-pull")?;
    let mut rig = Rig::start(runc, "bench-image-pull", 2).await?;
    let result = measure(&rig, &opts).await;
    rig.stop().await;
    result
}

async fn measure(rig: &Rig, opts: &ImagePullBench) -> anyhow::Result<()> {
    let dir = rig.base.join("image-pull");
    let registry = LocalRegistry::start(&dir.join("registry"))?;
    let layout = dir.join("layout");
    write_image(&layout, opts.size, opts.layers)?;
    run(Command::new("skopeo").args([
        "copy",
        "--dest-cert-dir",
        &registry.cert_dir.display().to_string(),
        &format!("oci:{}", layout.display()),
        &format!("docker://{}/bench:1", registry.host),
    ]))?;
    let compressed: u64 = std::fs::read_dir(layout.join("blobs/sha256"))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("image_bytes: {}", opts.size);
    println!("image_compressed_bytes: {compressed}");
    println!("image_layers: {}", opts.layers);

    let source = serde_json::json!({
        "repository": format!("{}/bench", registry.host),
        "tag": "1",
        "ca_certs": [registry.ca_pem],
    });
    let connector = gantry_agent_client::AgentConnector::new();
    let workers: Vec<Arc<dyn Worker>> = (0..2)
        .map(|i| connector.connect(rig.agent(i).registration()))
        .collect();
    let check = workers[0]
        .run_native(
            "registry-image",
            &gantry_wire::native::NativeRun {
                script: "check".into(),
                request: serde_json::json!({"source": source}),
                dir: None,
                mounts: vec![],
            },
        )
        .await?;
    let digest = check
        .answer
        .as_ref()
        .and_then(|a| a[0]["digest"].as_str())
        .map(str::to_string)
        .with_context(|| format!("check answered no digest: {:?}", check.failure))?;
    let request = PullImage {
        resource_type: "registry-image".into(),
        source: source.clone(),
        digest,
        peers: vec![],
    };

    // The usual tools first (their pull warms nothing of Gantry's), then Gantry.
    let oci = dir.join("skopeo-oci");
    let bundle = dir.join("umoci-bundle");
    let start = Instant::now();
    run(Command::new("skopeo").args([
        "copy",
        "--src-cert-dir",
        &registry.cert_dir.display().to_string(),
        &format!("docker://{}/bench:1", registry.host),
        &format!("oci:{}:1", oci.display()),
    ]))?;
    run(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:1", oci.display()),
        &bundle.display().to_string(),
    ]))?;
    let skopeo_umoci = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&bundle);
    let _ = std::fs::remove_dir_all(&oci);

    let (image, cold) = pull(rig, &workers[0], &request).await?;
    println!("cold_pull_s: {cold:.3}");
    println!("skopeo_umoci_s: {skopeo_umoci:.3}");
    println!("cold_ratio: {:.3}", cold / skopeo_umoci);

    let raw = RawRunc::prepare_async(rig, &["echo", "started"]).await?;
    let mut gantry_ms = Vec::new();
    let mut raw_ms = Vec::new();
    for _ in 0..opts.tasks {
        gantry_ms.push(warm_start(rig, &workers[0], &image).await?.as_secs_f64() * 1000.0);
        raw_ms.push(raw.sample_async().await?.exited.as_secs_f64() * 1000.0);
    }
    let (warm, raw_warm) = (median(gantry_ms), median(raw_ms));
    println!("warm_start_ms: {warm:.1}");
    println!("raw_runc_run_ms: {raw_warm:.1}");
    println!("warm_start_ratio: {:.3}", warm / raw_warm);

    let holder = rig.agent(0).registration();
    let grant = StreamGrant {
        worker: holder.name.clone(),
        volume: image,
        path: BLOBS_PATH.into(),
        encoding: Encoding::Raw,
        expires_ms: gantry_actors::api::now_ms() + 600_000,
    };
    let with_peer = PullImage {
        peers: vec![grant.blob_url(&holder.agent_url, &holder.stream_key)],
        ..request
    };
    let (_, second) = pull(rig, &workers[1], &with_peer).await?;
    let peers = rig.agent(1).state().native.counts().2;
    if peers == 0 {
        bail!("the second worker took no blob from its peer");
    }
    println!("second_worker_pull_s: {second:.3}");
    println!("second_worker_blobs_from_peer: {peers}");
    println!("second_worker_ratio: {:.3}", second / cold);
    Ok(())
}
