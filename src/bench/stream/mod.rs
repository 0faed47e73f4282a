//! `gantry bench stream`: a volume moved worker to worker through Gantry,
//! peer to peer and relayed through the web node, against
//! `tar -c | zstd -1 -T0 | zstd -d | tar -x` between the same directories,
//! in the same run.
//!
//! Set-up ([`fleet`]): a web node in this process and two `gantry worker`
//! processes (`local` backend) registered with it, reached through the
//! engine's own clients. A tree of `--size` bytes of mixed files
//! ([`tree`]: text, random bytes, many small files, a few large ones) is
//! generated and streamed into a volume on the first worker (not timed).
//! Then `--rounds` times, in a rotating order, each run into a fresh
//! directory after a `sync` so that no run pays for the previous one's
//! writeback (copies are kept until the end: see [`verify`]):
//! - `baseline`: the shell pipeline from that volume's directory into a
//!   fresh directory beside the workers';
//! - `p2p`: one `StreamTransfer` of the engine set to `p2p`: the web node
//!   signs a URL of the source volume and has the destination agent pull
//!   it into a fresh volume on the second worker (bytes go agent to agent);
//! - `relay`: one `StreamTransfer` set to `relay`: the source volume
//!   streamed out to the web node and into a fresh volume (bytes pass
//!   through this process), while a thread
//!   watches this process's resident memory; `relay_rss_growth_mib` is its
//!   peak minus its size just before.
//!
//! Every copy is checked against the generated tree ([`tree::digest`]:
//! paths, kinds, modes, sizes, contents); a wrong one fails the benchmark.
//! Figures are the medians of the rounds; throughputs are bytes of file
//! contents per second, in MB (10^6 bytes).

mod fleet;
mod p2p;
pub mod rss;
pub(crate) mod tree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::{HandleKind, HandleOwner, StreamMode};
use gantry_wire::runtime::Volume;
use gantry_wire::spec::{Encoding, VolumeSpec, VolumeStrategy};
use gantry_wire::state::HandleState;

use fleet::{Fleet, FleetWorker};
use tree::TreeDigest;

/// Options of the benchmark.
pub struct StreamBench {
    /// Bytes of file contents in the generated tree.
    pub size: u64,
    /// Runs of each transfer (figures are medians).
    pub rounds: usize,
}

/// The workers' names (`-0`, `-1` appended).
const WORKER: &str = "bench-stream";
/// The seed of the generated tree.
const SEED: u64 = 0x6761_6e74_7279;
/// The baseline, as printed.
const BASELINE: &str = "tar -c | zstd -1 -T0 | zstd -d | tar -x";
/// The encoding of Gantry's transfers.
const ENCODING: Encoding = Encoding::Zstd;

/// Parses a size: a number of bytes, optionally followed by `KiB`, `MiB`,
/// `GiB` (or `K`, `M`, `G`: powers of 1024) or `KB`, `MB`, `GB` (powers of
/// 1000).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 1GiB, 16MiB, 4096)"))?;
    let mul: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}; use B, KiB, MiB, GiB, KB, MB or GB"
            ))
        }
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// What was measured.
struct Measured {
    /// The generated tree.
    tree: TreeDigest,
    /// The shell pipeline, each round.
    baseline: Vec<Duration>,
    /// Peer to peer, each round.
    p2p: Vec<Duration>,
    /// Encoded bytes the destination pulled peer to peer.
    p2p_bytes: u64,
    /// Through the web node, each round.
    relay: Vec<Duration>,
    /// Encoded bytes that passed through the web node.
    relay_bytes: u64,
    /// Peak resident memory during a relay minus before it (the most of
    /// every round).
    relay_rss_growth: u64,
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: StreamBench) -> anyhow::Result<()> {
    if opts.size == 0 || opts.rounds == 0 {
        bail!("--size and --rounds must be more than 0");
    }
    require_tools()?;
    let tmp = tempfile::Builder::new()
        .prefix("gantry-bench-stream-")
        .tempdir()
        .context("creating a temporary directory")?;
    let base = tmp
        .path()
        .canonicalize()
        .context("resolving the temporary directory")?;
    let run = async {
        let source = base.join("tree");
        let size = opts.size;
        let gen_dir = source.clone();
        let tree = blocking(move || {
            tree::generate(&gen_dir, size, SEED).context("generating the tree")?;
            tree::digest(&gen_dir).context("hashing the generated tree")
        })
        .await?;
        let mut fleet = Fleet::start(&base, WORKER, 2).await?;
        let result = measure(&fleet, &base, &source, tree, opts.rounds).await;
        fleet.stop().await;
        result
    };
    let measured = tokio::select! {
        r = run => r?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    };
    print(&measured);
    Ok(())
}

/// Checks the baseline's tools are installed.
fn require_tools() -> anyhow::Result<()> {
    for tool in ["bash", "tar", "zstd"] {
        gantry_agent::find_executable(tool).with_context(|| {
            format!(
                "bench stream needs {tool} for its baseline; install it (apt-get install {tool})"
            )
        })?;
    }
    Ok(())
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .context("a blocking task panicked")?
}

/// Flushes every dirty page to disk, so that no timed run pays for the
/// writeback of an earlier one.
async fn sync() -> anyhow::Result<()> {
    blocking(|| {
        // SAFETY: sync has no preconditions and cannot fail.
        unsafe { libc::sync() };
        Ok(())
    })
    .await
}

/// Checks the tree at `dir` is the generated one. (It stays until the end:
/// ext4 skips the inodes of files deleted in the last minutes when it
/// allocates new ones, at a cost for every file created, so removing a copy
/// would slow down the runs after it.)
async fn verify(what: &str, dir: PathBuf, want: &TreeDigest) -> anyhow::Result<()> {
    let what = what.to_string();
    let want = want.clone();
    blocking(move || {
        let got = tree::digest(&dir).with_context(|| format!("hashing the {what} copy"))?;
        if got != want {
            bail!(
                "the {what} copy differs from the source: {} files, {} bytes, sha256 {} \
                 instead of {} files, {} bytes, sha256 {}",
                got.files,
                got.bytes,
                got.sha256,
                want.files,
                want.bytes,
                want.sha256
            );
        }
        Ok(())
    })
    .await
}

/// Creates an empty volume `handle` on `worker` as the engine's steps do:
/// its row first (`creating`), then the volume, then the row `created`, so
/// the workers' GC sweeps (at their default interval) see a volume they
/// know and keep it. The row belongs to no build (`bench-stream`), which
/// the Collector leaves alone.
async fn create_volume(
    engine: &gantry_actors::Engine,
    worker: &FleetWorker,
    handle: &str,
) -> anyhow::Result<Arc<dyn Volume>> {
    let owner = HandleOwner {
        team: "main",
        build: None,
        step: Some("bench-stream"),
    };
    let name = &worker.registration.name;
    engine
        .record_handle(HandleKind::Volume, handle, name, owner)
        .await?;
    let spec = VolumeSpec {
        handle: handle.into(),
        strategy: VolumeStrategy::Empty,
        privileged: false,
        properties: Default::default(),
    };
    let volume = worker.client.create_volume(&spec).await?;
    engine
        .set_handle_state(HandleKind::Volume, handle, HandleState::Created)
        .await?;
    Ok(volume)
}

/// The directory of volume `handle`'s contents on `worker`.
fn volume_dir(worker: &FleetWorker, handle: &str) -> PathBuf {
    worker.volumes.join(handle).join("data")
}

/// Fills the source volume, then times the baseline, p2p and the relay.
async fn measure(
    fleet: &Fleet,
    base: &Path,
    source: &Path,
    tree: TreeDigest,
    rounds: usize,
) -> anyhow::Result<Measured> {
    let [src_worker, dst_worker] = &fleet.workers[..] else {
        bail!("the benchmark needs two workers");
    };

    // The source volume, filled through Gantry (not timed) and checked.
    let src = create_volume(&fleet.engine, src_worker, "bench-source").await?;
    let body = gantry_files::tarball::pack_dir(source.to_path_buf(), ENCODING);
    src.stream_in(".", ENCODING, body)
        .await
        .context("filling the source volume")?;
    let src_dir = volume_dir(src_worker, src.handle());
    let check = tree::digest(&src_dir).context("hashing the source volume")?;
    if check != tree {
        bail!("the source volume differs from the generated tree");
    }

    let engine = &fleet.engine;
    let p2p = p2p::streams_in(engine, StreamMode::P2p, ENCODING);
    let relay = p2p::streams_in(engine, StreamMode::Relay, ENCODING);
    let dst_name = dst_worker.registration.name.clone();
    let mut m = Measured {
        tree,
        baseline: vec![],
        p2p: vec![],
        p2p_bytes: 0,
        relay: vec![],
        relay_bytes: 0,
        relay_rss_growth: 0,
    };
    // Each round in another order, so that none always runs first.
    for round in 0..rounds {
        for k in 0..3 {
            match (round + k) % 3 {
                0 => m
                    .baseline
                    .push(time_baseline(base, &src_dir, round, &m.tree).await?),
                1 => {
                    let dst =
                        create_volume(&fleet.engine, dst_worker, &format!("bench-p2p-{round}"))
                            .await?;
                    sync().await?;
                    let start = Instant::now();
                    m.p2p_bytes =
                        p2p::transfer(&p2p, src_worker, src.handle(), &dst_name, dst.clone())
                            .await
                            .context("streaming peer to peer")?;
                    m.p2p.push(start.elapsed());
                    verify("p2p", volume_dir(dst_worker, dst.handle()), &m.tree).await?;
                }
                _ => {
                    let dst =
                        create_volume(&fleet.engine, dst_worker, &format!("bench-relay-{round}"))
                            .await?;
                    sync().await?;
                    let before = rss::rss_bytes()?;
                    let watch = rss::PeakWatch::start()?;
                    let start = Instant::now();
                    let relayed =
                        p2p::transfer(&relay, src_worker, src.handle(), &dst_name, dst.clone())
                            .await;
                    let took = start.elapsed();
                    let peak = watch.stop()?;
                    m.relay_bytes = relayed.context("relaying through the web node")?;
                    m.relay.push(took);
                    m.relay_rss_growth = m.relay_rss_growth.max(peak.saturating_sub(before));
                    verify("relay", volume_dir(dst_worker, dst.handle()), &m.tree).await?;
                }
            }
        }
    }
    Ok(m)
}

/// One run of the baseline from `src_dir` into a fresh directory, timed.
async fn time_baseline(
    base: &Path,
    src_dir: &Path,
    round: usize,
    tree: &TreeDigest,
) -> anyhow::Result<Duration> {
    let out = base.join(format!("baseline-{round}"));
    std::fs::create_dir(&out).context("creating the baseline's destination")?;
    sync().await?;
    let start = Instant::now();
    baseline(src_dir, &out).await?;
    let took = start.elapsed();
    verify("baseline", out, tree).await?;
    Ok(took)
}

/// The shell pipeline from `src` into `dst`.
async fn baseline(src: &Path, dst: &Path) -> anyhow::Result<()> {
    let script = r#"set -eo pipefail
tar -C "$1" -cf - . | zstd -1 -T0 -q -c | zstd -d -q -c | tar -C "$2" -xf -"#;
    let out = tokio::process::Command::new("bash")
        .args(["-c", script, "baseline"])
        .arg(src)
        .arg(dst)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("running the baseline pipeline")?;
    if !out.status.success() {
        bail!(
            "the baseline pipeline failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// MB (10^6 bytes) per second.
fn mb_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / 1e6 / took.as_secs_f64().max(1e-9)
}

/// The median of `all` (the upper one of an even count).
fn median(all: &[Duration]) -> Duration {
    let mut sorted = all.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// Prints every figure as `name: value`.
fn print(m: &Measured) {
    let bytes = m.tree.bytes;
    let (baseline_t, p2p_t, relay_t) = (median(&m.baseline), median(&m.p2p), median(&m.relay));
    let baseline = mb_s(bytes, baseline_t);
    let p2p = mb_s(bytes, p2p_t);
    let relay = mb_s(bytes, relay_t);
    let list = |all: &[Duration]| {
        let s: Vec<String> = all
            .iter()
            .map(|d| format!("{:.3}", d.as_secs_f64()))
            .collect();
        s.join(" ")
    };
    println!("size_bytes: {bytes}");
    println!("files: {}", m.tree.files);
    println!("workers: 2");
    println!("backend: local");
    println!("rounds: {}", m.baseline.len());
    println!("encoding: {}", ENCODING.as_str());
    println!("zstd_level: {}", gantry_files::tarball::ZSTD_LEVEL);
    println!("baseline: {BASELINE}");
    println!("baseline_runs_s: {}", list(&m.baseline));
    println!("p2p_runs_s: {}", list(&m.p2p));
    println!("relay_runs_s: {}", list(&m.relay));
    println!("baseline_s: {:.3}", baseline_t.as_secs_f64());
    println!("p2p_s: {:.3}", p2p_t.as_secs_f64());
    println!("relay_s: {:.3}", relay_t.as_secs_f64());
    println!("p2p_encoded_bytes: {}", m.p2p_bytes);
    println!("relay_encoded_bytes: {}", m.relay_bytes);
    println!("baseline_mb_s: {baseline:.1}");
    println!("p2p_mb_s: {p2p:.1}");
    println!("relay_mb_s: {relay:.1}");
    println!("p2p_ratio: {:.3}", p2p / baseline.max(1e-9));
    println!("relay_ratio: {:.3}", relay / baseline.max(1e-9));
    println!(
        "relay_rss_growth_mib: {:.1}",
        m.relay_rss_growth as f64 / (1 << 20) as f64
    );
    println!("verified: true");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10 MiB"), Ok(10 << 20));
        for bad in ["", "GiB", "1TiB", "1.5GiB", "-1", "99999999999999GiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
