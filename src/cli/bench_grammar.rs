//! The grammar of `gantry bench`: every benchmark and its flags (clap's
//! derive), and `run`, which starts the one asked for (in `crate::bench`).

use clap::Subcommand;

/// The benchmarks.
#[cfg(feature = "bench")]
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Placement throughput and decision latency of the Scheduler actor.
    Placement {
        /// Simulated workers.
        #[arg(long, default_value_t = 1000)]
        workers: usize,
        /// Steps placed per strategy chain.
        #[arg(long, default_value_t = 100_000)]
        steps: usize,
        /// Placements in flight at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Database URL (default: SQLite in a temporary directory).
        #[arg(long)]
        database_url: Option<String>,
        /// Web nodes sharing the database: 2 also runs each chain on two
        /// engines sharing a PostgreSQL database, with the ratio to one node.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
    },
    /// Stored pipelines scheduled by a real engine: one new version fanned
    /// out to `--pipelines` single-job pipelines, and one round of a
    /// pipeline of `--chain-jobs` jobs in `passed` chains as its history
    /// grows from `--versions` to `--more-versions` versions per resource.
    Scheduling {
        /// Single-job pipelines sharing one resource.
        #[arg(long, default_value_t = 4000)]
        pipelines: usize,
        /// Jobs of the chained pipeline.
        #[arg(long, default_value_t = 500)]
        chain_jobs: usize,
        /// Resources (one chain each) of the chained pipeline.
        #[arg(long, default_value_t = 10)]
        chains: usize,
        /// Versions per resource for the first chained rounds.
        #[arg(long, default_value_t = 10_000)]
        versions: usize,
        /// Versions per resource for the second.
        #[arg(long, default_value_t = 100_000)]
        more_versions: usize,
        /// Database URL (default: SQLite in a temporary directory).
        #[arg(long)]
        database_url: Option<String>,
    },
    /// How late a follower on another web node sees a build's events (two
    /// engines sharing a PostgreSQL database), against a follower on the
    /// build's own node.
    Follow {
        /// Events stored.
        #[arg(long, default_value_t = 1000)]
        events: usize,
        /// Milliseconds between two events.
        #[arg(long, default_value_t = 5)]
        interval_ms: u64,
        /// The PostgreSQL database the nodes share (postgres://...).
        #[arg(long)]
        database_url: String,
    },
    /// A build's log of SIZE stored as a task's output is, with followers
    /// reading it live, then moved to the artifact store, against writing
    /// the same bytes to a file.
    Logs {
        /// Bytes printed (e.g. 1GiB, 64MiB).
        #[arg(long, default_value = "1GiB", value_parser = crate::bench::stream::parse_size)]
        size: u64,
        /// Followers reading the log live.
        #[arg(long, default_value_t = 10)]
        followers: usize,
        /// Database URL (default: SQLite in a temporary directory).
        #[arg(long)]
        database_url: Option<String>,
        /// Ended builds with small logs reaped afterwards, timing a
        /// concurrent writer (0: none).
        #[arg(long, default_value_t = 100_000)]
        reap_builds: usize,
    },
    /// A build's page over a huge log in headless Chromium: the tail's
    /// first paint, the tab's memory jumping to the start and back, and the
    /// raw download, against a one-line build's page (needs root, runc,
    /// chromium).
    Ui {
        /// Lines the huge build prints, 100 bytes each (2000000: 200 MB).
        #[arg(long, default_value_t = 2_000_000)]
        lines: u64,
        /// The Chromium binary (default: `chromium` on the PATH).
        #[arg(long)]
        chromium: Option<std::path::PathBuf>,
    },
    /// Time from the web node's request to a trivial task running on one
    /// runc worker, against `runc run` of the same bundle (needs root).
    ContainerStart {
        /// Sequential tasks timed in each series.
        #[arg(long, default_value_t = 200)]
        tasks: usize,
        /// Untimed runs of each series first.
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// The worker's backend: runc, or crun (then raw `crun run` is
        /// measured too).
        #[arg(long, default_value = "runc")]
        backend: String,
    },
    /// Pulling a registry image onto runc workers (cold, then a second
    /// worker from its peer) and starting a task on it, against `skopeo
    /// copy` plus `umoci unpack` and raw `runc run` (needs root, Debian's
    /// docker-registry, skopeo and umoci).
    ImagePull {
        /// Bytes of layer contents (e.g. 300MiB).
        #[arg(long, default_value = "300MiB", value_parser = crate::bench::stream::parse_size)]
        size: u64,
        /// Layers the contents are split into.
        #[arg(long, default_value_t = 5)]
        layers: usize,
        /// Warm task starts timed (medians).
        #[arg(long, default_value_t = 10)]
        tasks: usize,
    },
    /// Build throughput and latency of one-task jobs (`echo hi`) on a web
    /// node with runc workers, against `runc run` of the same process
    /// (needs root).
    Builds {
        /// Builds submitted as fast as the engine takes them.
        #[arg(long, default_value_t = 100)]
        builds: usize,
        /// Runc workers.
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// Builds run one at a time afterwards (single-build latency).
        #[arg(long, default_value_t = 10)]
        sequential: usize,
    },
    /// A volume of mixed files moved worker to worker (two `local` worker
    /// processes) peer to peer and relayed through the web node, against
    /// `tar -c | zstd -1 -T0 | zstd -d | tar -x`.
    Stream {
        /// Bytes of file contents moved (e.g. 1GiB, 16MiB).
        #[arg(long, default_value = "1GiB", value_parser = crate::bench::stream::parse_size)]
        size: u64,
        /// Runs of each transfer, in a rotating order (figures are medians).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// CPU time of refusing YAML `--depth` levels deep, against a set-pipeline.
    DeepYaml {
        /// Levels of `[` (100,000: 200 KB).
        #[arg(long, default_value_t = 100_000)]
        depth: usize,
    },
    /// A web node under a burst of anonymous sign-ins with random names:
    /// `/healthz` and a real user's sign-in during it against the node
    /// idle, and the node's memory.
    SignIns {
        /// Anonymous sign-ins in the burst.
        #[arg(long, default_value_t = 500)]
        requests: usize,
        /// How many at once.
        #[arg(long, default_value_t = 50)]
        concurrency: usize,
        /// Loopback source addresses the burst comes from (127.0.1.1 on).
        #[arg(long, default_value_t = 25)]
        addresses: usize,
    },
    /// Builds reading their vars from the credential manager as they
    /// start (through its cache), against the same job planned with its
    /// vars given statically.
    Secrets {
        /// Builds started.
        #[arg(long, default_value_t = 1000)]
        builds: usize,
        /// Vars each build reads.
        #[arg(long, default_value_t = 20)]
        vars: usize,
    },
    /// GC sweep reports of one worker with many handles, reconciled on
    /// SQLite and PostgreSQL, against only loading its rows.
    Gc {
        /// Rows of the worker (half containers, half volumes).
        #[arg(long, default_value_t = 100_000)]
        handles: usize,
        /// Reports timed per database.
        #[arg(long, default_value_t = 5)]
        reports: usize,
        /// PostgreSQL server on which a fresh database is created and dropped.
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
        postgres_url: String,
    },
    /// One artifact uploaded to and downloaded from a web node keeping
    /// artifacts on S3-compatible object storage (s3s-fs's store on
    /// loopback, the `s3_test_server` example), with its memory watched, against the same on a web node
    /// keeping them in a directory.
    S3 {
        /// Bytes of the artifact's file (e.g. 1GiB, 64MiB).
        #[arg(long, default_value = "1GiB", value_parser = crate::bench::stream::parse_size)]
        size: u64,
        /// The S3 server to start (`cargo build --release --example
        /// s3_test_server`); default: `examples/s3_test_server` beside
        /// this binary.
        #[arg(long, env = "GANTRY_S3_SERVER")]
        s3_server: Option<std::path::PathBuf>,
    },
}

/// Runs one benchmark, printing its figures.
pub fn run(which: BenchCommand) -> anyhow::Result<()> {
    match which {
        BenchCommand::Placement {
            workers,
            steps,
            concurrency,
            database_url,
            nodes,
        } => actix_web::rt::System::new().block_on(crate::bench::placement::bench(
            crate::bench::placement::PlacementBench {
                workers,
                steps,
                concurrency,
                database_url,
                nodes,
            },
        ))?,
        BenchCommand::Scheduling {
            pipelines,
            chain_jobs,
            chains,
            versions,
            more_versions,
            database_url,
        } => actix_web::rt::System::new().block_on(crate::bench::scheduling::bench(
            crate::bench::scheduling::SchedulingBench {
                pipelines,
                chain_jobs,
                chains,
                versions,
                more_versions,
                database_url,
            },
        ))?,
        BenchCommand::Follow {
            events,
            interval_ms,
            database_url,
        } => actix_web::rt::System::new().block_on(crate::bench::follow::bench(
            crate::bench::follow::FollowBench {
                events,
                interval: std::time::Duration::from_millis(interval_ms),
                database_url,
            },
        ))?,
        BenchCommand::Logs {
            size,
            followers,
            database_url,
            reap_builds,
        } => actix_web::rt::System::new().block_on(crate::bench::logs::bench(
            crate::bench::logs::LogsBench {
                size,
                followers,
                database_url,
                reap_builds,
            },
        ))?,
        BenchCommand::ContainerStart {
            tasks,
            warmup,
            backend,
        } => actix_web::rt::System::new().block_on(crate::bench::container_start::bench(
            crate::bench::container_start::ContainerStartBench {
                tasks,
                warmup,
                backend,
            },
        ))?,
        BenchCommand::ImagePull {
            size,
            layers,
            tasks,
        } => actix_web::rt::System::new().block_on(crate::bench::image_pull::bench(
            crate::bench::image_pull::ImagePullBench {
                size,
                layers,
                tasks,
            },
        ))?,
        BenchCommand::Builds {
            builds,
            workers,
            sequential,
        } => actix_web::rt::System::new().block_on(crate::bench::builds::bench(
            crate::bench::builds::BuildsBench {
                builds,
                workers,
                sequential,
            },
        ))?,
        BenchCommand::Ui { lines, chromium } => actix_web::rt::System::new().block_on(
            crate::bench::ui::bench(crate::bench::ui::UiBench { lines, chromium }),
        )?,
        BenchCommand::Stream { size, rounds } => actix_web::rt::System::new().block_on(
            crate::bench::stream::bench(crate::bench::stream::StreamBench { size, rounds }),
        )?,
        BenchCommand::S3 { size, s3_server } => {
            let server = crate::bench::s3::server_binary(s3_server)?;
            actix_web::rt::System::new().block_on(crate::bench::s3::bench(
                crate::bench::s3::S3Bench { size, server },
            ))?
        }
        BenchCommand::DeepYaml { depth } => {
            actix_web::rt::System::new().block_on(crate::bench::deep_yaml::bench(depth))?
        }
        BenchCommand::SignIns {
            requests,
            concurrency,
            addresses,
        } => actix_web::rt::System::new().block_on(crate::bench::sign_ins::bench(
            crate::bench::sign_ins::SignInsBench {
                requests,
                concurrency,
                addresses,
            },
        ))?,
        BenchCommand::Secrets { builds, vars } => {
            actix_web::rt::System::new().block_on(crate::bench::secrets::bench(builds, vars))?
        }
        BenchCommand::Gc {
            handles,
            reports,
            postgres_url,
        } => actix_web::rt::System::new().block_on(crate::bench::gc::bench(
            crate::bench::gc::GcBench {
                handles,
                reports,
                postgres_url,
            },
        ))?,
    }
    Ok(())
}
