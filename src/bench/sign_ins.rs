//! `gantry bench sign-ins`: a web node (this binary, SQLite in a temporary
//! directory, one local user) under a burst of anonymous sign-ins with
//! random user names, from many loopback addresses, against the same node
//! idle, in the same run:
//! - `healthz_p99_idle_ms`, `healthz_p99_burst_ms`, `healthz_p99_ratio`:
//!   `/healthz` answered while idle and during the burst;
//! - `user_sign_in_idle_ms`, `user_sign_in_burst_ms` (the slowest),
//!   `user_sign_in_ratio`: the real user's right password, from an
//!   address of its own;
//! - `rss_idle_mib`, `rss_peak_mib`, `rss_after_mib`: the node's memory
//!   (`VmRSS`, `VmHWM`);
//! - `burst_401`, `burst_429`, `burst_503`: how the burst was answered
//!   (checked and wrong, throttled, refused by the full pool).

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// What the benchmark is asked.
#[derive(Debug, Clone)]
pub struct SignInsBench {
    /// Anonymous sign-ins in the burst.
    pub requests: usize,
    /// How many at once.
    pub concurrency: usize,
    /// Source addresses (127.0.1.1 on) the burst comes from.
    pub addresses: usize,
}

/// The node under test, killed when dropped.
struct Node {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `gantry web` with the user `bench` (password `bench pw`), a
/// member of team main.
async fn start_node() -> anyhow::Result<Node> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let hash = crate::web::people::hash_password("bench pw").map_err(anyhow::Error::msg)?;
    let config = dir.path().join("web.toml");
    std::fs::write(
        &config,
        format!("[web]\nadmin_token = \"bench-admin\"\n[web.users]\nbench = \"{hash}\"\n"),
    )?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "web",
            "--listen",
            "127.0.0.1:0",
            "--registration-key",
            "bench",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("web"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("web.log"))?)
        .spawn()
        .context("starting gantry web")?;
    let stdout = child.stdout.take().context("the node's stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(i) = line.find("API on ") {
                let _ = tx.send(line[i + "API on ".len()..].trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .context("the node did not say where it listens")?;
    let node = Node {
        child,
        url,
        _dir: dir,
    };
    let set = reqwest::Client::new()
        .put(format!("{}/api/v1/teams/main", node.url))
        .bearer_auth("bench-admin")
        .json(&serde_json::json!({"roles": [{"kind": "user", "name": "bench", "role": "member"}]}))
        .send()
        .await?;
    anyhow::ensure!(set.status().is_success(), "set-team: {}", set.status());
    Ok(node)
}

/// A field of `/proc/PID/status` in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(&format!("{field}:")))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A client whose requests come from `from`.
fn client_from(from: IpAddr) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(from)
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Signs in as `user`: the status and how long it took.
async fn sign_in(
    client: &reqwest::Client,
    url: &str,
    user: &str,
    password: &str,
) -> (u16, Duration) {
    let started = Instant::now();
    let status = client
        .post(format!("{url}/api/v1/sessions"))
        .json(&serde_json::json!({"username": user, "password": password}))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16());
    (status, started.elapsed())
}

/// `/healthz` latencies (ms), polled until `until` says stop, at least
/// `min` times.
async fn healthz(url: &str, min: usize, until: impl Fn() -> bool) -> Vec<f64> {
    let client = reqwest::Client::new();
    let mut took = vec![];
    while took.len() < min || !until() {
        let started = Instant::now();
        let _ = client.get(format!("{url}/healthz")).send().await;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took.sort_by(f64::total_cmp);
    took
}

/// Runs the benchmark and prints its figures as `name: value` lines.
pub async fn bench(opts: SignInsBench) -> anyhow::Result<()> {
    anyhow::ensure!(
        opts.requests >= 1 && opts.concurrency >= 1 && (1..=250).contains(&opts.addresses),
        "--requests and --concurrency must be at least 1, --addresses 1 to 250"
    );
    let node = start_node().await?;
    let url = node.url.clone();
    let pid = node.child.id();
    let user = client_from("127.0.0.2".parse()?)?;

    // Idle: the baselines.
    let idle_health = healthz(&url, 200, || true).await;
    let mut idle_user = Duration::ZERO;
    for _ in 0..3 {
        let (status, took) = sign_in(&user, &url, "bench", "bench pw").await;
        anyhow::ensure!(status == 201, "the user's sign-in answered {status}");
        idle_user = idle_user.max(took);
    }
    let rss_idle = status_mib(pid, "VmRSS");

    // The burst, with /healthz and the user alongside.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..opts.concurrency {
        let from: IpAddr = format!("127.0.1.{}", w % opts.addresses + 1).parse()?;
        let (client, url, next) = (client_from(from)?, url.clone(), next.clone());
        let total = opts.requests;
        workers.spawn(async move {
            let mut statuses = BTreeMap::<u16, usize>::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < total {
                let name = format!("u{}", rand::random::<u64>());
                *statuses
                    .entry(sign_in(&client, &url, &name, "x").await.0)
                    .or_default() += 1;
            }
            statuses
        });
    }
    let over = || done.load(std::sync::atomic::Ordering::SeqCst);
    let burst_user = async {
        let (mut slowest, mut refused) = (Duration::ZERO, 0);
        loop {
            let (status, took) = sign_in(&user, &url, "bench", "bench pw").await;
            refused += usize::from(status != 201);
            slowest = slowest.max(took);
            if over() {
                return (slowest, refused);
            }
        }
    };
    let burst = async {
        let mut statuses = BTreeMap::<u16, usize>::new();
        while let Some(finished) = workers.join_next().await {
            for (s, n) in finished? {
                *statuses.entry(s).or_default() += n;
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        anyhow::Ok(statuses)
    };
    let (statuses, burst_health, (burst_user, user_refused)) =
        tokio::join!(burst, healthz(&url, 20, over), burst_user);
    let statuses = statuses?;
    let rss_peak = status_mib(pid, "VmHWM");
    let rss_after = status_mib(pid, "VmRSS");

    let p99 = |v: &[f64]| crate::bench::follow::quantile(v, 0.99);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("requests: {}", opts.requests);
    println!("concurrency: {}", opts.concurrency);
    println!("addresses: {}", opts.addresses);
    for code in [401, 429, 503] {
        println!(
            "burst_{code}: {}",
            statuses.get(&code).copied().unwrap_or(0)
        );
    }
    let other: usize = statuses
        .iter()
        .filter(|(s, _)| ![401, 429, 503].contains(*s))
        .map(|(_, n)| n)
        .sum();
    println!("burst_other: {other}");
    println!("healthz_p99_idle_ms: {:.3}", p99(&idle_health));
    println!("healthz_p99_burst_ms: {:.3}", p99(&burst_health));
    println!(
        "healthz_p99_ratio: {:.2}",
        p99(&burst_health) / p99(&idle_health).max(f64::EPSILON)
    );
    println!("user_sign_in_idle_ms: {:.3}", ms(idle_user));
    println!("user_sign_in_burst_ms: {:.3}", ms(burst_user));
    println!(
        "user_sign_in_ratio: {:.2}",
        ms(burst_user) / ms(idle_user).max(f64::EPSILON)
    );
    println!("user_sign_ins_refused: {user_refused}");
    println!("rss_idle_mib: {rss_idle:.1}");
    println!("rss_peak_mib: {rss_peak:.1}");
    println!("rss_after_mib: {rss_after:.1}");
    Ok(())
}
