//! `gantry bench s3`: one artifact of `--size` bytes uploaded to and
//! downloaded from a web node keeping its artifacts on S3-compatible object
//! storage (s3s-fs's store on loopback, the `s3_test_server` example in
//! its own process), against
//! the same upload and download on a web node keeping them in a directory,
//! in the same run.
//!
//! Each round starts a web node in this process (SQLite in a temporary
//! directory) with its store, then uploads a tar stream of one file of
//! incompressible bytes, generated as it is sent (never whole in memory),
//! through the HTTP API, and downloads it back plain, checking its
//! SHA-256 against the one sent. A thread watches this process's resident
//! memory meanwhile: `*_rss_growth_mib` is its peak minus its size just
//! before the upload. This process holds the web node and the HTTP client
//! feeding it (its share is small and the same in both rounds); the S3
//! server is another process. The object storage round runs first, so it
//! does not reuse memory the directory round's allocations left.
//! Throughputs are bytes of the tar stream per second, in MB (10^6 bytes).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use futures::StreamExt as _;
use sha2::{Digest as _, Sha256};

use crate::bench::stream::rss::{rss_bytes, PeakWatch};
use crate::bench::stream::tree::Rng;
use crate::config::{S3Config, WebConfig};
use gantry_agent_client::AgentConnector;
use gantry_artifacts::{IN_FLIGHT, PART};

/// Options of the benchmark.
pub struct S3Bench {
    /// Bytes of the file in the artifact.
    pub size: u64,
    /// The S3 server's binary (the `s3_test_server` example).
    pub server: PathBuf,
}

/// The S3 server to start: `given`, else the `s3_test_server` example
/// beside this binary (`target/{debug,release}/examples/`).
pub fn server_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .context("finding this binary")?
            .with_file_name("examples")
            .join("s3_test_server"),
    };
    if !path.is_file() {
        bail!(
            "bench s3 needs its S3 server and {} is not a file: build it (cargo build --release --example s3_test_server) or pass --s3-server PATH (GANTRY_S3_SERVER)",
            path.display()
        );
    }
    Ok(path)
}

/// The bucket and prefix of the object storage round.
const BUCKET: &str = "gantry-bench";
/// The credentials the benchmark's server takes.
const ACCESS_KEY: &str = "gantry-bench";
/// The secret of [`ACCESS_KEY`].
const SECRET_KEY: &str = "gantry-bench-secret";
/// Bytes of each chunk of the generated upload.
const CHUNK: usize = 256 * 1024;
/// The seed of the generated file.
const SEED: u64 = 0x5333_6761_6e74;

/// What one round measured.
struct Round {
    /// The upload, from its first byte sent to the answer.
    upload: Duration,
    /// The download, from the request to its last byte.
    download: Duration,
    /// Peak resident memory during both minus before, in bytes.
    rss_growth: u64,
}

/// The S3 server's process, killed when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: S3Bench) -> anyhow::Result<()> {
    if opts.size == 0 {
        bail!("--size must be more than 0");
    }
    let tmp = tempfile::Builder::new()
        .prefix("gantry-bench-s3-")
        .tempdir()
        .context("creating a temporary directory")?;
    let base = tmp.path().to_path_buf();
    let tar_len = tar_len(opts.size);
    let want = digest(opts.size).await?;
    let (server, endpoint) = start_server(&opts.server, &base).await?;
    let s3 = WebConfig {
        artifacts: Some(format!("s3://{BUCKET}/artifacts")),
        s3: S3Config {
            endpoint: Some(endpoint),
            region: Some("us-east-1".into()),
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(SECRET_KEY.into()),
            ..S3Config::default()
        },
        ..web_config(&base.join("web-s3"))?
    };
    let s3_round = round(&s3, opts.size, &want).await.context("the S3 round")?;
    drop(server);
    let file = web_config(&base.join("web-file"))?;
    let file_round = round(&file, opts.size, &want)
        .await
        .context("the directory round")?;
    print(tar_len, &s3_round, &file_round);
    Ok(())
}

/// A web node on loopback with its data under `dir`.
fn web_config(dir: &Path) -> anyhow::Result<WebConfig> {
    Ok(WebConfig {
        listen: "127.0.0.1:0".parse().context("loopback address")?,
        data_dir: dir.to_path_buf(),
        // The bench calls the API without a token.
        open_api: true,
        ..WebConfig::default()
    })
}

/// Starts the S3 server `binary` on a free loopback port serving `base/s3`
/// (with the bucket), waiting until it accepts connections; its endpoint.
async fn start_server(binary: &Path, base: &Path) -> anyhow::Result<(Server, String)> {
    let root = base.join("s3");
    std::fs::create_dir_all(root.join(BUCKET)).context("creating the bucket's directory")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port")?
        .port();
    let child = std::process::Command::new(binary)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(&root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("the S3 test server did not listen on port {port} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((server, format!("http://127.0.0.1:{port}")))
}

/// Bytes of the tar stream of one file of `size` bytes.
fn tar_len(size: u64) -> u64 {
    512 + size.div_ceil(512) * 512 + 1024
}

/// The tar stream of one file `data` of `size` bytes of random bytes,
/// generated as it is read.
fn tar_stream(size: u64) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    let mut header = tar::Header::new_gnu();
    header.set_path("data").expect("a short path");
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    let head = Bytes::copy_from_slice(header.as_bytes());
    let mut rng = Rng(SEED);
    let mut left = size;
    let body = futures::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = left.min(CHUNK as u64) as usize;
        let mut chunk = vec![0u8; n];
        rng.fill_random(&mut chunk);
        left -= n as u64;
        std::task::Poll::Ready(Some(Bytes::from(chunk)))
    });
    let pad = (size.div_ceil(512) * 512 - size) as usize + 1024;
    futures::stream::once(async move { head })
        .chain(body)
        .chain(futures::stream::once(
            async move { Bytes::from(vec![0u8; pad]) },
        ))
        .map(Ok)
}

/// The SHA-256 of the generated tar stream (not timed).
async fn digest(size: u64) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    let mut s = std::pin::pin!(tar_stream(size));
    while let Some(chunk) = s.next().await {
        hasher.update(&chunk?);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// One round: a web node with `cfg`'s store, the upload and the download.
async fn round(cfg: &WebConfig, size: u64, want: &str) -> anyhow::Result<Round> {
    let web = crate::compose::start_web(cfg, Arc::new(AgentConnector::new()))
        .await
        .context("starting the web node")?;
    let handle = web.server.handle();
    actix_rt::spawn(web.server);
    let url = format!("http://{}", web.addr);
    let result = measure(&url, size, want).await;
    handle.stop(true).await;
    web.engine.shutdown().await;
    result
}

/// Uploads and downloads through the web node at `url`, watching memory.
async fn measure(url: &str, size: u64, want: &str) -> anyhow::Result<Round> {
    let http = reqwest::Client::new();
    let before = rss_bytes()?;
    let watch = PeakWatch::start()?;
    let start = Instant::now();
    let resp = http
        .post(format!("{url}/api/v1/teams/main/artifacts"))
        .body(reqwest::Body::wrap_stream(tar_stream(size)))
        .send()
        .await
        .context("uploading")?;
    let status = resp.status();
    let kept: serde_json::Value = resp.json().await.context("reading the upload's answer")?;
    if !status.is_success() {
        bail!("the upload was refused ({status}): {kept}");
    }
    let upload = start.elapsed();
    let id = kept["id"]
        .as_str()
        .context("no id in the upload's answer")?;
    let start = Instant::now();
    let resp = http
        .get(format!("{url}/api/v1/teams/main/artifacts/{id}"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .context("downloading")?;
    let mut hasher = Sha256::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        hasher.update(&chunk.context("reading the download")?);
    }
    let download = start.elapsed();
    let peak = watch.stop()?;
    let got = format!("{:x}", hasher.finalize());
    if got != want {
        bail!("the download differs from the upload: sha256 {got} instead of {want}");
    }
    Ok(Round {
        upload,
        download,
        rss_growth: peak.saturating_sub(before),
    })
}

/// Prints the figures.
fn print(tar_len: u64, s3: &Round, file: &Round) {
    let mb_s = |d: Duration| tar_len as f64 / 1e6 / d.as_secs_f64().max(1e-9);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let (s3_up, file_up) = (mb_s(s3.upload), mb_s(file.upload));
    let (s3_down, file_down) = (mb_s(s3.download), mb_s(file.download));
    println!("size_bytes: {tar_len}");
    println!("s3_server: s3s-fs");
    println!("s3_part_mib: {}", PART >> 20);
    println!("s3_parts_in_flight: {IN_FLIGHT}");
    println!("s3_upload_s: {:.3}", s3.upload.as_secs_f64());
    println!("file_upload_s: {:.3}", file.upload.as_secs_f64());
    println!("s3_download_s: {:.3}", s3.download.as_secs_f64());
    println!("file_download_s: {:.3}", file.download.as_secs_f64());
    println!("s3_upload_mb_s: {s3_up:.1}");
    println!("file_upload_mb_s: {file_up:.1}");
    println!("s3_upload_ratio: {:.3}", s3_up / file_up.max(1e-9));
    println!("s3_download_mb_s: {s3_down:.1}");
    println!("file_download_mb_s: {file_down:.1}");
    println!("s3_download_ratio: {:.3}", s3_down / file_down.max(1e-9));
    println!("s3_rss_growth_mib: {:.1}", mib(s3.rss_growth));
    println!("file_rss_growth_mib: {:.1}", mib(file.rss_growth));
    println!("verified: true");
}
